"""Finished chunks of a long video kept across an interrupted batch, and reused by the next run.

A season's stream is hours long; a Ctrl-C, a SIGTERM or a crash at 90 % used to cost all of it.
Each chunked video's chunk folder (:func:`livefuse.batch.plan.chunk_dir`) now holds a manifest,
``chunks.json``, next to its chunk files: the input's size and modification time, the job key,
the chunks' spans, and the chunks finished so far (frames written, faces swapped). The next run
with the same job key on the same input takes the spans from it (so the cuts fall where they
fell) and processes only the chunks not finished; the join is the same stream copy as always.

Any mismatch (another input file, other settings, an unreadable or foreign manifest) discards
the folder, and the video runs from the start; a chunk file gone, of another size or with other
bytes (its BLAKE2b digest) is processed again. Called
from the batch's driver thread only (results arrive there), so the manifest has one writer.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from livefuse.batch.plan import Item, Unit, chunk_dir, chunk_name, input_stamp
from livefuse.imaging import atomic_write_bytes
from livefuse.io.video import Span

MANIFEST = "chunks.json"
UNREADABLE = "their list of chunks cannot be read"
FORMAT = 3  # 2: each done chunk's digest; 3: a span's seek is the keyframe's dts (None: no seek)


@dataclass(frozen=True)
class DoneChunk:
    """A chunk an earlier run finished: its file's size in bytes and BLAKE2b digest (hex; a
    truncated, replaced or damaged file is not reused), frames written, faces found and swapped
    (the join refuses a video where no face was swapped in any chunk)."""

    size: int
    digest: str
    frames: int
    faces_found: int
    faces_swapped: int


@dataclass(frozen=True)
class KeptChunks:
    """An item's chunk folder as an earlier run left it: the spans it cut, and the chunks done
    (by chunk number)."""

    spans: tuple[Span, ...]
    done: Mapping[int, DoneChunk]


def _manifest(item: Item) -> Path:
    return chunk_dir(item) / MANIFEST


def _read(item: Item, job: str) -> dict[str, Any] | None:
    return _read_why(item, job)[0]


def _read_why(item: Item, job: str) -> tuple[dict[str, Any] | None, str]:
    """The manifest if it is ``job``'s on this very input, else ``None`` and why not."""
    try:
        data = json.loads(_manifest(item).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, UNREADABLE
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None, "their list of chunks is of another livefuse version"
    from livefuse.batch.worker import job_changes, same_job

    same = same_job(str(data.get("job")), job)
    if same is None:
        return None, "they were made by a livefuse that recorded their settings otherwise"
    if not same:
        changed = job_changes(str(data.get("job")), job)
        return None, ("they were made with other settings: " + (
            ", ".join(changed) if changed else "face photo, engine, video options or "
            "--chunk-seconds") + " changed since")
    try:
        stamp = input_stamp(item.input)
    except OSError:
        return None, "the input cannot be read"
    if data.get("input") != stamp:
        return None, "the input changed since (its size or modification time)"
    return data, ""


def _write(item: Item, data: dict[str, Any]) -> None:
    atomic_write_bytes(_manifest(item), json.dumps(data, indent=1).encode("utf-8"))


@dataclass(frozen=True)
class Loaded:
    """What :func:`load` found in an item's chunk folder.

    Attributes:
        kept: the chunks reused, or ``None``.
        note: a sentence for the summary when finished chunks were found and some or all are
            not reused (why: other settings, a changed input, a changed chunk file), else ``""``.
    """

    kept: KeptChunks | None
    note: str = ""


def load(item: Item, job: str) -> Loaded:
    """The chunks an earlier run of ``job`` on this very input finished. Files in the folder
    that the manifest does not list as done (a chunk cut off mid-write) are removed; a folder
    that cannot be reused is removed whole, and the note says why.

    Args:
        item: the video.
        job: the job key (:func:`livefuse.batch.worker.job_key`): engine settings, photos and
            encoder; chunks made under another key are never mixed in.
    """
    folder = chunk_dir(item)
    if not folder.is_dir():
        return Loaded(None)
    data, why = _read_why(item, job)
    kept: KeptChunks | None = None
    listed = changed = 0
    if data is not None:
        try:
            spans = tuple(Span(**s) for s in data["spans"])
            listed_done = {int(k): DoneChunk(**v) for k, v in data["done"].items()}
            done = {k: d for k, d in listed_done.items() if 0 <= k < len(spans)
                    and _size(folder / chunk_name(k)) == d.size
                    and _digest(folder / chunk_name(k)) == d.digest}
            listed, changed = len(listed_done), len(listed_done) - len(done)
            if len(spans) >= 2 and done:
                kept = KeptChunks(spans, done)
        except (KeyError, TypeError, ValueError, AttributeError):
            why = UNREADABLE
    if changed:
        why = (f"chunks an earlier run finished that changed or went missing since: {changed} "
               f"of {listed}")
    if kept is None:
        if not _listed_done(item) and not (why == UNREADABLE and _chunk_files(folder)):
            why = ""  # nothing was recorded as finished: nothing is lost to say
        shutil.rmtree(folder, ignore_errors=True)
        if not why:
            return Loaded(None)
        return Loaded(None, f"'{item.input}': the chunks an earlier run finished are not used: "
                            f"{why}; the video runs from the start")
    names = {MANIFEST, *(chunk_name(k) for k in kept.done)}
    for p in folder.iterdir():
        if p.name not in names:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    assert data is not None
    if len(kept.done) != len(data["done"]):  # the manifest lists only what is reused
        _write(item, {**data, "done": {str(k): asdict(d) for k, d in kept.done.items()}})
    note = (f"'{item.input}': {why}; those are processed again" if changed else "")
    return Loaded(kept, note)


def _chunk_files(folder: Path) -> bool:
    return any(p.name.startswith("chunk-") for p in folder.iterdir())


def _listed_done(item: Item) -> int:
    """How many chunks the manifest lists as done, whatever job or input it is for (0 when it
    cannot be read)."""
    try:
        done = json.loads(_manifest(item).read_text(encoding="utf-8"))["done"]
        return len(done) if isinstance(done, dict) else 0
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _digest(path: Path) -> str:
    """BLAKE2b of the file (hex): about 1 GB/s, so a 1080p hour's chunks cost seconds."""
    try:
        with path.open("rb") as f:
            return hashlib.file_digest(f, "blake2b").hexdigest()
    except OSError:
        return ""


def start(item: Item, job: str, spans: Sequence[Span]) -> None:
    """Record a freshly cut video's spans, nothing done yet (before any chunk is dispatched)."""
    _write(item, {"format": FORMAT, "job": job, "input": input_stamp(item.input),
                  "spans": [asdict(s) for s in spans], "done": {}})


def finished(unit: Unit, frames: int, faces_found: int, faces_swapped: int, job: str) -> None:
    """Record chunk ``unit`` as finished (its file is complete). A manifest that is gone or no
    longer this job's is left alone: the chunk then simply is not reused."""
    data = _read(unit.item, job)
    if data is None:
        return
    done = dict(data.get("done", {}))
    done[str(unit.chunk)] = asdict(DoneChunk(_size(unit.output), _digest(unit.output), frames,
                                             faces_found, faces_swapped))
    _write(unit.item, {**data, "done": done})


def kept(item: Item, job: str) -> tuple[int, int]:
    """``(chunks finished, chunks)`` of ``item`` that a rerun of ``job`` would find (``(0, 0)``:
    no manifest of this job and input)."""
    data = _read(item, job)
    if data is None:
        return 0, 0
    return len(data.get("done", {})), len(data.get("spans", []))


__all__ = ["MANIFEST", "DoneChunk", "KeptChunks", "finished", "kept", "load", "start"]
