"""Fetch, verify and import model files.

A download streams into ``<file>.part`` (resumed with an HTTP ``Range`` request when a part is
already there), is checked for its exact size and SHA-256, and only then renamed over the final
name, so a truncated, empty or HTML-error-page ``.onnx`` never reaches onnxruntime.

A row that belongs to a release pack (``pack="buffalo_l"``) comes from the pack's own archive
first: the zip is downloaded the same way (resumable, size and SHA-256 checked), every member
the catalog wants is unpacked and checked against its row (:mod:`livefuse.models.archive`), and
the zip is deleted. The row's own URLs (third-party mirrors) are tried only when that fails.

Hashing a 500 MB file takes seconds, so digests are cached in ``.livefuse-verified.json`` beside
the models, keyed by file size and mtime (ns): a file that changes is hashed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import requests
from tqdm import tqdm

from livefuse.errors import LivefuseError
from livefuse.imaging import atomic_write_bytes
from livefuse.models import catalog
from livefuse.models.archive import install_members
from livefuse.models.catalog import ModelSpec, PackSpec, models_dir

Status = Literal["present", "missing", "corrupt", "unverified"]

CACHE_NAME = ".livefuse-verified.json"
_CHUNK = 1 << 20
# Small network reads: on a cut connection urllib3 drops the read in progress, so at most this
# much is fetched again on resume.
_NET_CHUNK = 1 << 16


class ModelDownloadError(LivefuseError):
    """A model file could not be downloaded (no network, HTTP error, timeout, cut connection)."""

    def __init__(self, filename: str, problem: str) -> None:
        self.filename = filename
        self.problem = problem
        super().__init__(
            f"cannot download model '{filename}': {problem}. If you have the file, install it "
            f"with: livefuse models import PATH"
        )


class ModelMissingError(LivefuseError):
    """A model the engine needs is not in the models folder."""

    def __init__(self, spec: ModelSpec, directory: Path,
                 also: tuple[ModelSpec, ...] = ()) -> None:
        """``also``: other models missing for the same job, named in the same message."""
        self.spec, self.also = spec, also
        specs = (spec, *also)
        files = ", ".join(f"'{s.filename}'" for s in specs)
        verb = "is" if len(specs) == 1 else "are"
        super().__init__(
            f"model{'s' if len(specs) > 1 else ''} {files} {verb} not in {directory}: run "
            f"`livefuse models fetch {' '.join(s.name for s in specs)}`, or `livefuse models "
            f"import PATH` for each file you have")


class ModelVerifyError(LivefuseError):
    """A model file has the wrong size or SHA-256 (truncated, corrupt, an HTML page, ...)."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"model file '{path}' failed verification: {problem}")


class Artifact(Protocol):
    """What a download needs of a catalog row: a :class:`ModelSpec` or a :class:`PackSpec`."""

    @property
    def name(self) -> str: ...
    @property
    def filename(self) -> str: ...
    @property
    def urls(self) -> tuple[str, ...]: ...
    @property
    def size(self) -> int: ...
    @property
    def sha256(self) -> str | None: ...


OnUrl = Callable[[str, str], None]
"""``(file name, url)``: called once per URL, before its first request (``models fetch``)."""


def sha256_file(path: Path) -> str:
    """Lower-case hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _looks_like_html(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(512).lstrip().lower()
    return head.startswith((b"<!doctype", b"<html", b"<?xml", b"<head", b"{\"error"))


def file_problem(path: Path, spec: Artifact, digest: str | None = None) -> str | None:
    """Why ``path`` is not ``spec``'s file, or ``None`` when size and SHA-256 match.

    With ``spec.sha256 is None`` only the size is checked. ``digest`` may pass a known hash.
    """
    size = path.stat().st_size
    if size != spec.size:
        what = "an HTML page, not a model" if size and _looks_like_html(path) else (
            "empty" if size == 0 else "too small: a cut-off download, or another file"
            if size < spec.size else "too large: another file")
        return f"size {size:,} B, expected {spec.size:,} B ({what})"
    if spec.sha256 is None:
        return None
    got = digest or sha256_file(path)
    if got != spec.sha256:
        return f"SHA-256 {got}, expected {spec.sha256}"
    return None


def _load_cache(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / CACHE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _record(path: Path, digest: str) -> None:
    """Remember ``path``'s digest under its current size and mtime."""
    st = path.stat()
    cache = _load_cache(path.parent)
    cache[path.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    # a read-only models folder still verifies; it just re-hashes next time
    with contextlib.suppress(OSError):
        atomic_write_bytes(path.parent / CACHE_NAME, json.dumps(cache, indent=1).encode())


def _cached_digest(path: Path) -> str:
    """SHA-256 of ``path``, reusing the cache entry when size and mtime are unchanged."""
    st = path.stat()
    entry = _load_cache(path.parent).get(path.name)
    if (isinstance(entry, dict) and entry.get("size") == st.st_size
            and entry.get("mtime_ns") == st.st_mtime_ns and isinstance(entry.get("sha256"), str)):
        return str(entry["sha256"])
    digest = sha256_file(path)
    _record(path, digest)
    return digest


def status(spec: ModelSpec, directory: Path | None = None) -> Status:
    """``present`` (size and SHA-256 match), ``missing``, ``corrupt`` (size or hash differ) or
    ``unverified`` (right size, but the catalog has no published hash to check against)."""
    path = (directory if directory is not None else models_dir()) / spec.filename
    if not path.is_file():
        return "missing"
    if path.stat().st_size != spec.size:
        return "corrupt"
    if spec.sha256 is None:
        return "unverified"
    return "present" if _cached_digest(path) == spec.sha256 else "corrupt"


def require(spec: ModelSpec, directory: Path | None = None) -> Path:
    """Path of ``spec``'s file, checked (size and SHA-256, cached) before any runtime loads it.

    Raises:
        ModelMissingError: the file is not there.
        ModelVerifyError: the file is truncated, empty, an HTML page or otherwise not the file.
    """
    directory = directory if directory is not None else models_dir()
    path = directory / spec.filename
    state = status(spec, directory)
    if state == "missing":
        raise ModelMissingError(spec, directory)
    if state == "corrupt":
        problem = file_problem(path, spec, _cached_digest(path)) or "size or SHA-256 differ"
        raise ModelVerifyError(path, f"{problem}; delete it and run `livefuse models fetch "
                               f"{spec.name}`")
    return path


def status_text(state: Status) -> str:
    """Human wording of a :data:`Status` for tables."""
    return "unverified (no published hash)" if state == "unverified" else state


class _HttpStatusError(Exception):
    def __init__(self, message: str, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


def _fetch_once(session: requests.Session, url: str, part: Path, art: Artifact,
                timeout: float, progress: bool) -> None:
    """One request: append to ``part`` from its current size (or restart when Range is ignored)."""
    have = part.stat().st_size if part.exists() else 0
    if have >= art.size:
        # A part as long as the file (or longer) cannot be resumed; start over.
        part.unlink()
        have = 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with session.get(url, headers=headers, stream=True, timeout=timeout) as resp:
        if resp.status_code == 416:
            part.unlink(missing_ok=True)
            raise _HttpStatusError("HTTP 416 (range not satisfiable); restarting")
        if resp.status_code >= 400:
            # 4xx will not change on retry (try the next mirror); 5xx may.
            raise _HttpStatusError(f"HTTP {resp.status_code} {resp.reason or ''}".strip(),
                                   retry=resp.status_code >= 500)
        if have and resp.status_code != 206:
            have = 0  # the server ignored Range and sends the whole file: restart the part
        elif have and not resp.headers.get("Content-Range", f"bytes {have}-").startswith(
                f"bytes {have}-"):
            part.unlink(missing_ok=True)  # a range other than the one asked for: start over
            raise _HttpStatusError("server answered a different byte range; restarting")
        written = have
        with part.open("ab" if have else "wb") as fh, tqdm(
            total=art.size, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
            # disable=None: no bar when stderr is not a terminal
            desc=art.filename, disable=None if progress else True, leave=False,
        ) as bar:
            for block in resp.iter_content(_NET_CHUNK):
                written += len(block)
                if written > art.size:
                    raise _HttpStatusError(
                        f"server sent more than the expected {art.size:,} B (wrong file?)")
                fh.write(block)
                bar.update(len(block))


class _Failures:
    """Why each URL failed, each URL once (in the order tried), with its request count."""

    def __init__(self) -> None:
        self._by_url: dict[str, tuple[str, int]] = {}
        self.bad_file: ModelVerifyError | None = None  # a complete download that was wrong

    def add(self, url: str, reason: str) -> None:
        _, n = self._by_url.get(url, ("", 0))
        self._by_url[url] = (reason, n + 1)

    def __len__(self) -> int:
        return len(self._by_url)

    def text(self) -> str:
        return "; ".join(f"{url}: {reason}" + (f" ({n} attempts)" if n > 1 else "")
                         for url, (reason, n) in self._by_url.items())


def _fetch_verified(art: Artifact, dest: Path, sess: requests.Session, failures: _Failures, *,
                    timeout: float, attempts: int, progress: bool,
                    on_url: OnUrl | None) -> Path | None:
    """Download ``art`` to ``dest`` from its URLs in order; ``dest`` when a verified copy was
    installed, ``None`` when every URL failed (the reasons are in ``failures``)."""
    part = dest.with_name(dest.name + ".part")
    for url in art.urls:
        if on_url is not None:
            on_url(art.filename, url)
        for _ in range(max(1, attempts)):
            try:
                _fetch_once(sess, url, part, art, timeout, progress)
            except (requests.RequestException, _HttpStatusError, OSError) as exc:
                failures.add(url, _reason(exc))
                if isinstance(exc, _HttpStatusError) and not exc.retry:
                    break
                continue
            if part.exists() and part.stat().st_size == art.size:
                try:
                    return _finish(part, dest, art)
                except ModelVerifyError as exc:  # a wrong file: the next URL may be right
                    failures.add(url, exc.problem)
                    failures.bad_file = exc
                    break
            failures.add(url, "connection closed early")
    return None


def _install_pack(pack: PackSpec, directory: Path, sess: requests.Session, failures: _Failures,
                  **fetch: Any) -> None:
    """Fetch ``pack``'s zip, unpack and verify every member not yet present, delete the zip.

    Failures are recorded in ``failures`` (the zip's URL, or ``<zip>/<member>``); members that
    verified are installed even when another did not.
    """
    members = [catalog.get_spec(name) for name in pack.members]
    wanted = [m for m in members if status(m, directory) != "present"]
    if not wanted:
        return
    archive = directory / pack.filename
    if not (archive.is_file() and file_problem(archive, pack) is None):
        got = _fetch_verified(pack, archive, sess, failures, **fetch)
        if got is None:
            return
    try:
        for result in install_members(archive, wanted, directory):
            if result.path is not None and result.sha256 is not None:
                _record(result.path, result.sha256)
            else:
                failures.add(f"{pack.filename}/{result.spec.filename}",
                             result.problem or "not installed")
    finally:
        archive.unlink(missing_ok=True)  # its members are installed or cannot be had from it


def download(spec: ModelSpec, directory: Path | None = None, *, timeout: float = 30.0,
             attempts: int = 3, progress: bool = True,
             session: requests.Session | None = None, on_url: OnUrl | None = None) -> Path:
    """Download ``spec`` into the models folder, resuming a ``.part`` file, and verify it.

    A row of a pack (``spec.pack``) is taken from the pack's archive first, which installs the
    pack's other rows too; the row's own URLs are the fallback. Each URL gets up to
    ``attempts`` requests; each one resumes from the bytes already on disk.

    Args:
        timeout: seconds to wait for a connection or for the next bytes of the body.
        on_url: ``(file name, url)`` once per URL, before its first request.

    Returns:
        The verified file's path (returned at once when a verified copy is already there).

    Raises:
        ModelDownloadError: every source failed; names the file, each URL once with its
            reason, and the ``import`` alternative.
        ModelVerifyError: a complete download had the wrong size or SHA-256 and no other source
            worked; the part file is deleted.
    """
    directory = directory if directory is not None else models_dir()
    dest = directory / spec.filename
    if status(spec, directory) in ("present", "unverified"):
        return dest
    directory.mkdir(parents=True, exist_ok=True)
    own_session = session is None
    sess = session or requests.Session()
    failures = _Failures()
    fetch: dict[str, Any] = {"timeout": timeout, "attempts": attempts, "progress": progress,
                             "on_url": on_url}
    try:
        if spec.pack is not None:
            _install_pack(catalog.get_pack(spec.pack), directory, sess, failures, **fetch)
            if status(spec, directory) == "present":
                return dest
        got = _fetch_verified(spec, dest, sess, failures, **fetch)
        if got is not None:
            return got
    finally:
        if own_session:
            sess.close()
    if failures.bad_file is not None:
        if len(failures) == 1:
            raise failures.bad_file
        raise ModelVerifyError(dest, f"no source gave the right file: {failures.text()}")
    raise ModelDownloadError(spec.filename, failures.text() or "no URL in the catalog")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "connection cut mid-download (run the command again to resume)"
    if isinstance(exc, requests.ConnectionError):
        text = str(exc)
        if "Read timed out" in text:
            return "timed out"
        if "refused" in text.lower():
            return "connection refused (no network or server down)"
        return "connection failed or was cut"
    if isinstance(exc, requests.RequestException):
        return type(exc).__name__
    return str(exc)


def _finish(part: Path, dest: Path, art: Artifact) -> Path:
    digest = sha256_file(part)
    problem = file_problem(part, art, digest)
    if problem is not None:
        part.unlink(missing_ok=True)
        raise ModelVerifyError(dest, f"{problem}; deleted the downloaded part, nothing installed")
    os.replace(part, dest)
    _record(dest, digest)  # so that `status` need not hash the file again
    return dest


def import_model(path: str | Path, spec: ModelSpec, directory: Path | None = None,
                 copy: Callable[[Path, Path], Any] = shutil.copyfile) -> Path:
    """Copy a user's model file into the models folder after verifying it.

    The source is never modified; the copy goes to a temporary name and is renamed into place.

    Raises:
        ModelVerifyError: the file is missing or has the wrong size or SHA-256.
    """
    src = Path(path).expanduser()
    if not src.is_file():
        raise ModelVerifyError(src, "no such file")
    digest = sha256_file(src) if src.stat().st_size == spec.size else None
    problem = file_problem(src, spec, digest)
    if problem is not None:
        raise ModelVerifyError(src, f"{problem}; it is not {spec.filename} ({spec.name})")
    directory = directory if directory is not None else models_dir()
    dest = directory / spec.filename
    if dest.exists() and dest.resolve() == src.resolve():
        return dest
    directory.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.import.part")
    try:
        copy(src, tmp)
        if tmp.stat().st_size != spec.size:
            raise ModelVerifyError(tmp, "copy is incomplete (disk full?)")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    if digest is not None:
        _record(dest, digest)
    return dest


def import_pack(path: str | Path, pack: PackSpec, directory: Path | None = None) -> list[Path]:
    """Install every member of a pack's zip the user already has (e.g. ``buffalo_l.zip`` from
    ``~/.insightface``), after checking the zip's size and SHA-256 and each member's.

    The zip is only read, never moved or deleted.

    Returns:
        The installed files (members already present and verified are listed too).

    Raises:
        ModelVerifyError: the zip is missing or not the pack's, or a member does not match its
            catalog row (verified members are installed all the same).
    """
    src = Path(path).expanduser()
    if not src.is_file():
        raise ModelVerifyError(src, "no such file")
    problem = file_problem(src, pack)
    if problem is not None:
        raise ModelVerifyError(src, f"{problem}; it is not {pack.filename} ({pack.name})")
    directory = directory if directory is not None else models_dir()
    members = [catalog.get_spec(name) for name in pack.members]
    wanted = [m for m in members if status(m, directory) != "present"]
    bad = []
    for result in install_members(src, wanted, directory):
        if result.path is not None and result.sha256 is not None:
            _record(result.path, result.sha256)
        else:
            bad.append(result.problem or result.spec.filename)
    if bad:
        raise ModelVerifyError(src, "; ".join(bad))
    return [directory / m.filename for m in members]
