"""Install catalog files from a release zip (a :class:`~livefuse.models.catalog.PackSpec`).

Each member is streamed out of the zip into a temporary name beside its destination while its
size and SHA-256 are checked, and only then renamed into place: a member that does not match
its catalog row never appears under its final name. Members are looked up by file name (at the
zip's root or in one folder) and written under the catalog's own name, so no path from inside
the archive is ever used to write a file.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from livefuse.models.catalog import ModelSpec

_CHUNK = 1 << 20


@dataclass(frozen=True)
class MemberResult:
    """What became of one member.

    Attributes:
        spec: the catalog row.
        path: the installed file, or ``None`` when it was not installed.
        sha256: its digest (lower-case hex) when installed.
        problem: why it was not installed (one line), else ``None``.
    """

    spec: ModelSpec
    path: Path | None = None
    sha256: str | None = None
    problem: str | None = None


def _find(zf: zipfile.ZipFile, filename: str) -> zipfile.ZipInfo | str:
    """The one entry called ``filename`` (at the root or one folder down), or why there is
    none."""
    hits = [i for i in zf.infolist() if not i.is_dir()
            and PurePosixPath(i.filename).name == filename
            and len(PurePosixPath(i.filename).parts) <= 2]
    if not hits:
        return f"the archive has no {filename}"
    if len(hits) > 1:
        return f"the archive has {len(hits)} files called {filename}"
    return hits[0]


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, spec: ModelSpec,
             dest: Path) -> MemberResult:
    if info.file_size != spec.size:
        return MemberResult(spec, problem=f"{spec.filename} in the archive is "
                                          f"{info.file_size:,} B, expected {spec.size:,} B")
    tmp = dest.with_name(f".{dest.name}.unpack.part")
    digest = hashlib.sha256()
    written = 0
    try:
        with zf.open(info) as src, tmp.open("wb") as out:
            for block in iter(lambda: src.read(_CHUNK), b""):
                written += len(block)
                if written > spec.size:  # a lying header (zip bomb): stop at once
                    return MemberResult(spec, problem=f"{spec.filename} in the archive "
                                                      "inflates past its declared size")
                digest.update(block)
                out.write(block)
        got = digest.hexdigest()
        if spec.sha256 is not None and got != spec.sha256:
            return MemberResult(spec, problem=f"{spec.filename} in the archive has SHA-256 "
                                              f"{got}, expected {spec.sha256}")
        os.replace(tmp, dest)
        return MemberResult(spec, path=dest, sha256=got)
    except (OSError, zipfile.BadZipFile, EOFError) as exc:  # a CRC error is a BadZipFile
        return MemberResult(spec, problem=f"cannot unpack {spec.filename}: {exc}")
    finally:
        tmp.unlink(missing_ok=True)


def install_members(archive: Path, members: Sequence[ModelSpec],
                    directory: Path) -> list[MemberResult]:
    """Unpack ``members`` from the zip ``archive`` into ``directory``, each checked against
    its catalog row (exact size, SHA-256) before it is renamed into place.

    An existing file under a member's name is replaced only by a verified member. The archive
    itself is neither changed nor deleted here.

    Returns:
        One result per member, in order; a member that fails does not stop the others.
    """
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as exc:
        return [MemberResult(m, problem=f"{archive.name} is not a readable zip: {exc}")
                for m in members]
    directory.mkdir(parents=True, exist_ok=True)
    with zf:
        results = []
        for spec in members:
            info = _find(zf, spec.filename)
            results.append(MemberResult(spec, problem=info) if isinstance(info, str)
                           else _extract(zf, info, spec, directory / spec.filename))
        return results


__all__ = ["MemberResult", "install_members"]
