"""Which input each output of a batch folder was made from, so that resuming never takes one
input's output for another's.

Two inputs of one batch that would share an output name are refused (``clip.webm`` and
``clip.avi`` both become ``clip.mkv``), and the message says to give them in separate batches.
Given so into the same folder, the second batch found ``clip.mkv`` there and skipped its input as
done: its output was the other input's, exit 0 (a new user's trial). Each finished output is now
recorded with its input in a hidden file of the output folder (:data:`RECORD`, JSON lines,
appended, so a batch of thousands of items writes a line per item and a line torn by a crash is
only that line lost), and an output recorded from another input is a failure of the item, not a
skip. An output recorded from its input as it was before it changed is made again.

An input is the same when its resolved path is, or when its name, size and modification time
are (the season's folder moved or renamed since). A file at an output's path that the record
does not list as made there (:func:`made_here`: the user's own file of that name, a copy) is a
failure of the item, left as it is, not a skip; so is a recorded output whose size changed since
(:func:`output_changed`). An output recorded from its input under another face photo or other
settings (:func:`made_otherwise`) is made again.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

RECORD = ".livefuse-outputs.jsonl"
"""The record's file name, in the batch's output folder (hidden: a folder walk leaves it out)."""


def _entry(output_dir: Path, output: Path, source: Path) -> dict[str, Any] | None:
    try:
        st = source.stat()
        rel = output.absolute().relative_to(output_dir.absolute())
    except (OSError, ValueError):
        return None
    return {"output": rel.as_posix(), "input": str(source.resolve()), "name": source.name,
            "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def record(output_dir: Path, output: Path, source: Path, job: str | None = None,
           failed: str | None = None) -> None:
    """Append that ``output`` (under ``output_dir``) was made from ``source``, under the batch's
    ``job`` key (:func:`livefuse.batch.worker.job_key`: the face photo and settings); called by
    the batch's collecting thread once the output is in place. Nothing is recorded when the
    input is gone or the output lies outside ``output_dir``; a record that cannot be written
    costs the check, not the output.

    ``failed``: instead, that ``source`` failed under ``job`` for a reason of its own (no face
    was swapped), with the failure line's message: :func:`failed_before`."""
    entry = _entry(output_dir, output, source)
    if entry is None:
        return
    if job is not None:
        entry["job"] = job
    if failed is not None:
        entry["failed"] = failed
    else:  # what :func:`output_changed` compares with
        with contextlib.suppress(OSError):
            entry["output_size"] = output.stat().st_size
    line = json.dumps(entry, ensure_ascii=False) + "\n"
    try:
        with open(output_dir / RECORD, "a", encoding="utf-8") as fh:
            fh.write(line)
    except OSError:
        pass


def recorded(output_dir: Path) -> dict[str, dict[str, Any]]:
    """The record of ``output_dir``: per output (relative POSIX path) the last entry written,
    ``{"input": resolved path, "name", "size", "mtime_ns", "job"}``, with ``"failed"`` when it
    is a failure's (:func:`failed_before`); empty when there is none."""
    return dict(_all_entries(output_dir))


def outputs(output_dir: Path) -> set[str]:
    """The outputs (relative POSIX paths) the record of ``output_dir`` says a batch made: not
    those it lists only as failed (:func:`failed_before`), whose path may hold anything."""
    return {rel for rel, entry in _all_entries(output_dir) if "failed" not in entry}


def _all_entries(output_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    try:
        text = (output_dir / RECORD).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:  # a line torn by a crash
            continue
        if isinstance(entry, dict) and isinstance(entry.get("output"), str):
            found.append((entry["output"], entry))
    return found


def _entry_of(record_of: dict[str, dict[str, Any]], output_dir: Path,
              output: Path) -> dict[str, Any] | None:
    """The last entry recorded for ``output``; ``None`` when there is none or it lies outside
    ``output_dir``."""
    try:
        rel = output.absolute().relative_to(output_dir.absolute()).as_posix()
    except ValueError:
        return None
    return record_of.get(rel)


def other_input(record_of: dict[str, dict[str, Any]], output_dir: Path, output: Path,
                source: Path) -> str | None:
    """The input ``output`` was recorded from when that is not ``source``, else ``None`` (the
    same input, or no record)."""
    entry = _entry_of(record_of, output_dir, output)
    if entry is None or _same_input(entry, source):
        return None
    return str(entry.get("input") or "another input")


def _same_input(entry: dict[str, Any], source: Path) -> bool:
    """Whether the record ``entry`` is of ``source``: its resolved path, or its name, size and
    modification time (moved or renamed with its folder since); one that cannot be read is
    taken as the same (nothing to tell them apart by)."""
    if entry.get("input") == str(source.resolve()):
        return True
    try:
        st = source.stat()
    except OSError:
        return True
    return (entry.get("name"), entry.get("size"), entry.get("mtime_ns")) == \
        (source.name, st.st_size, st.st_mtime_ns)


def made_here(record_of: dict[str, dict[str, Any]], output_dir: Path, output: Path) -> bool:
    """Whether the record says a batch made ``output``: its last entry is not a failure's. A
    file there with no such entry is no batch's (the user's own file of that name, a copy, a
    ``run`` output): a new user's trial had one skipped as done, exit 0, and with the output
    folder inside a walked input folder, ``--overwrite`` then replaced the user's originals
    there."""
    entry = _entry_of(record_of, output_dir, output)
    return entry is not None and "failed" not in entry


def output_changed(record_of: dict[str, dict[str, Any]], output_dir: Path, output: Path
                   ) -> tuple[int, int] | None:
    """``(bytes when made, bytes now)`` when ``output`` is no longer the size its batch
    recorded making it (cut by a full disk or a copy, or edited since); ``None`` when it is,
    or when its entry is older than the output sizes in the record."""
    entry = _entry_of(record_of, output_dir, output)
    made = entry.get("output_size") if entry is not None else None
    try:
        now = output.stat().st_size
    except OSError:
        return None
    if not isinstance(made, int) or made == now:
        return None
    return made, now


def last_failed(record_of: dict[str, dict[str, Any]], output_dir: Path, output: Path) -> bool:
    """Whether the last entry recorded for ``output`` is a failure's: whatever file is there is
    not the output of the input as it was then, and a plan does not skip the item for it (a
    review: a photo replaced by one with no face failed, then a rerun with another setting
    passed the old photo's swap as done, exit 0)."""
    entry = _entry_of(record_of, output_dir, output)
    return entry is not None and isinstance(entry.get("failed"), str)


def failed_before(record_of: dict[str, dict[str, Any]], output_dir: Path, output: Path,
                  source: Path, job: str | None, video: bool = True) -> str | None:
    """The message of a failure an earlier run recorded for ``output`` from ``source`` as it is
    now (path, size and modification time) under the same livefuse version and the same
    settings of ``job`` that decide the pixels (:data:`PIXEL_PARTS`; a photo's, for a photo
    that is not a ``video``), else ``None``. Only the input's own failures are recorded (no
    face swapped: the same input and settings fail the same way), so a rerun of a season skips
    them instead of decoding an hour of a BRB screen again (a new user's trial); another
    setting, a changed file or ``--overwrite`` tries again. A later success's entry, appended
    after, replaces the failure's."""
    from livefuse.batch.worker import job_changes, photo_parts

    entry = _entry_of(record_of, output_dir, output)
    try:
        st = source.stat()
    except OSError:
        return None
    if job is None or entry is None or not isinstance(entry.get("job"), str) or \
            not isinstance(entry.get("failed"), str):
        return None
    if entry.get("input") != str(source.resolve()) or \
            (entry.get("size"), entry.get("mtime_ns")) != (st.st_size, st.st_mtime_ns):
        return None
    before = entry["job"]
    # part by part: a key that gained a part since (an upgrade) still matches on the others;
    # a key not of that form matches only itself
    parts = (*(PIXEL_PARTS if video else photo_parts(before, job)), "version")
    if before != job and ("version=" not in before or "version=" not in job or
                          job_changes(before, job, parts)):
        return None
    return str(entry["failed"])


def changed_input(record_of: dict[str, dict[str, Any]], output_dir: Path, output: Path,
                  source: Path) -> bool:
    """Whether ``output`` was recorded from ``source`` (the same path) as it was before it
    changed (another size or modification time): its output shows the old picture, and a
    rerun makes it again instead of passing it as done (a new user's trial: a photo replaced
    in the input folder kept its old output, exit 0). No record: ``False``."""
    entry = _entry_of(record_of, output_dir, output)
    try:
        st = source.stat()
    except OSError:
        return False
    if entry is None or entry.get("input") != str(source.resolve()):
        return False
    return (entry.get("size"), entry.get("mtime_ns")) != (st.st_size, st.st_mtime_ns)


PIXEL_PARTS = ("settings", "engine", "photos", "encoding", "video")
"""The parts of a job key that change an output's pixels (``engine`` and ``video`` for a record
from before their successors, :data:`livefuse.batch.worker.SUPERSEDED`): another livefuse
version or chunk length does not make a season's finished outputs again."""


def made_otherwise(record_of: dict[str, dict[str, Any]], output_dir: Path, output: Path,
                   source: Path, job: str | None, video: bool = True) -> list[str]:
    """What of the face photo and settings (:data:`PIXEL_PARTS`, in words; the video options
    only for a ``video``) differs between the job ``output`` was recorded under, from this same
    ``source``, and ``job``; empty when none does, or when either is not known (no record, an
    older one, another input). A rerun with
    another face photo into the same folder skipped the finished outputs as done: they kept the
    old face, exit 0, while the interrupted video's chunks were made again with the new one (a
    new user's trial)."""
    from livefuse.batch.worker import job_changes, photo_parts

    entry = _entry_of(record_of, output_dir, output)
    if job is None or entry is None or not isinstance(entry.get("job"), str) or \
            not _same_input(entry, source):
        return []
    return job_changes(entry["job"], job,
                       PIXEL_PARTS if video else photo_parts(entry["job"], job))


__all__ = ["PIXEL_PARTS", "RECORD", "changed_input", "failed_before", "last_failed",
           "made_otherwise", "other_input", "outputs", "record", "recorded"]
