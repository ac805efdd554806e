"""The batch planner: inputs → items (one output each) → work units. No Ray here.

Inputs are files, folders (their files; with ``recursive`` their subfolders too) and glob
patterns, images and videos mixed. Each item's output mirrors its input's name under the output
folder: a file (or a glob match) lands at ``DIR/name``; a folder's files keep their path below
that folder (``clips/a/b.mp4`` given as ``clips`` → ``DIR/a/b.mp4``). A video whose suffix the
encoder cannot write (``.avi``, ``.webm``) becomes ``.mkv``.

A long video is cut into chunks at keyframes that open a closed GOP (no frame after the keyframe
in decode order is shown before it), so each chunk decodes on its own and the chunks join by
stream copy with every frame and timestamp in place. A keyframe followed by leading pictures
(an open GOP) is never a cut.
"""

from __future__ import annotations

import bisect
import fnmatch
import glob
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Literal, NamedTuple

import av

from livefuse.batch.made_from import (
    RECORD,
    changed_input,
    failed_before,
    last_failed,
    made_here,
    made_otherwise,
    other_input,
    output_changed,
    recorded,
)
from livefuse.batch.made_from import outputs as made_outputs
from livefuse.errors import LivefuseError, VideoError
from livefuse.imaging import atomic_write_bytes, is_image_path
from livefuse.io.codecs import open_video
from livefuse.io.paths import PART_INFIX, ProtectedOutputError, check_replaceable, part_paths
from livefuse.io.video import (
    OUTPUT_VIDEO_SUFFIXES,
    Span,
    check_audio_fits,
    is_video_path,
    media_types,
)
from livefuse.names import IMAGE_PART_TAIL, temp_prefix

ItemKind = Literal["image", "video"]
WARMUP_S = 1.0
"""Seconds of frames before a chunk that its worker processes (and does not write) first, so
tracking, the chosen face and landmark smoothing enter the chunk as they would in one run over
the whole video (the One-Euro filter's still-face time constant is 0.32 s)."""
MIN_CHUNK_S = 10.0
MAX_CHUNK_S = 120.0
MIN_CHUNKS_TO_CUT = 1.5
"""A video is cut when it is at least this many chunks long: :func:`chunk_spans` then makes two
or more (its length over the nearest whole number of chunk lengths), each at least 3/4 of one."""
CHUNK_DIR = ".livefuse-chunks"
"""Hidden folder under the output folder that holds a chunked video's parts until the join."""


@dataclass(frozen=True)
class Item:
    """One input and its output.

    Attributes:
        input: the image or video to swap into.
        output: where its result goes.
        kind: ``image`` or ``video``.
        frames: frames expected (1 for an image; a video's declared count, 0 when unknown).
        seconds: a video's declared duration (0 when unknown or an image).
    """

    input: Path
    output: Path
    kind: ItemKind
    frames: int = 1
    seconds: float = 0.0

    @property
    def key(self) -> str:
        """A name for the item's chunk folder: its output path relative to nothing, flattened."""
        return str(self.output).replace(os.sep, "_").lstrip("_")


@dataclass(frozen=True)
class Unit:
    """One piece of work: one output file.

    Attributes:
        item: the item it belongs to.
        output: the file the unit writes (the item's output, or a chunk file).
        span: the chunk, or ``None`` for a whole image or video.
        chunk: chunk number (0 for a whole item), ``chunks`` how many the item has.
        frames: frames it writes (expected).
    """

    item: Item
    output: Path
    span: Span | None = None
    chunk: int = 0
    chunks: int = 1
    frames: int = 1

    @property
    def label(self) -> str:
        where = f" (chunk {self.chunk + 1}/{self.chunks})" if self.chunks > 1 else ""
        return f"{self.item.input}{where}"


@dataclass
class Plan:
    """What a batch will do.

    Attributes:
        items: to process, in input order.
        skipped: items whose output exists (resumed; ``overwrite`` processes them again).
        problems: ``(input, message)`` for inputs that cannot be items (unknown type, a glob
            matching nothing, a missing file); they count as failures.
        left_out: files in the output folder left out of a folder or pattern that walks into it
            (this batch's outputs, see :func:`expand`).
    """

    items: list[Item] = field(default_factory=list)
    skipped: list[Item] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    left_out: int = 0
    """Files in the output folder that a folder or pattern walking into it left out."""
    below: list[tuple[str, int]] = field(default_factory=list)
    """``(folder, images and videos in its subfolders)`` for folders given without
    ``recursive``: said, as a hint."""
    not_media: list[Path] = field(default_factory=list)
    """Files a folder or pattern holds that are neither images nor videos (an OBS FLV before
    it was one, an audio-only recording, notes): said, so that none is left out unsaid."""
    hidden: list[Path] = field(default_factory=list)
    """Images and videos a folder walk left out for a hidden name (:class:`Expanded`)."""
    earlier_outputs: list[tuple[Path, int]] = field(default_factory=list)
    """Earlier batches' output folders a walk left out, with their images and videos
    (:class:`Expanded`)."""
    linked: list[Path] = field(default_factory=list)
    """Symbolic links to folders a walk did not follow (:class:`Expanded`): said."""
    changed: list[Item] = field(default_factory=list)
    """Items whose output exists but was made from the input as it was before it changed
    (:func:`~livefuse.batch.made_from.changed_input`): processed again, and said."""
    remade: dict[Item, list[str]] = field(default_factory=dict)
    """Items whose output exists but was made with another face photo or other settings, with
    what differs (:func:`~livefuse.batch.made_from.made_otherwise`): processed again, and
    said."""
    earlier_incomplete: dict[Item, str] = field(default_factory=dict)
    """Skipped items whose output an earlier run wrote from an input that ended early, with
    why (:func:`incomplete_marker`): a rerun says so again instead of passing them as done."""
    failed_before: dict[Item, str] = field(default_factory=dict)
    """Items an earlier run of this job failed on for a reason of their own (no face swapped),
    their input unchanged since, with that failure's message
    (:func:`~livefuse.batch.made_from.failed_before`): not run again, listed as failed."""


def incomplete_marker(output: Path) -> Path:
    """The hidden file beside ``output`` that says its input ended early (its first line says
    how, its second the input's size and modification time as JSON): written when such an
    output is kept, removed when the item is done in full."""
    tail = "livefuse-incomplete"  # cut to fit: an output named up to 255 bytes has one too
    return output.with_name(temp_prefix(output, len(tail)) + tail)


def input_stamp(path: Path) -> dict[str, int]:
    """``{"size": bytes, "mtime_ns": ns}`` of a file: a changed input (a cut download replaced
    by the whole one, a recording still being written) has another.

    Raises:
        OSError: the file cannot be read.
    """
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def write_incomplete_marker(output: Path, why: str, stamp: dict[str, int] | None) -> None:
    """Write ``output``'s :func:`incomplete_marker`: ``why`` and the input's stamp as it was
    when the run read it."""
    text = why.replace("\n", " ") + "\n" + json.dumps(stamp)
    atomic_write_bytes(incomplete_marker(output), text.encode("utf-8"))


def _earlier_incomplete(item: Item) -> tuple[str, bool] | None:
    """``(why, input changed since)`` for an output kept from an input that ended early, or
    ``None`` for an output done in full."""
    try:
        why, _, stamp = incomplete_marker(item.output).read_text(encoding="utf-8").partition("\n")
    except OSError:
        return None
    try:
        recorded = json.loads(stamp) if stamp.strip() else None
        changed = recorded is not None and recorded != input_stamp(item.input)
    except (ValueError, OSError):
        changed = False
    return why.strip() or "input ended early", changed


def _output_name(rel: Path) -> Path:
    if is_video_path(rel) and rel.suffix.lower() not in OUTPUT_VIDEO_SUFFIXES:
        return rel.with_suffix(".mkv")
    return rel


def _media(path: Path) -> bool:
    return is_image_path(path) or is_video_path(path)


def _is_ours(path: Path) -> bool:
    # a batch's own temp files and chunk folder in an input tree (the output folder inside it),
    # and hidden files and folders, which a pattern's ** leaves out too (`in` --recursive and
    # 'in/**/*.mp4' take the same files)
    return any(part.startswith(".") for part in path.parts) or CHUNK_DIR in path.parts


def _once(paths: list[Path]) -> list[Path]:
    """``paths`` without the later ones that are the same file: glob's ``**`` follows symbolic
    links, and a link to a folder above (``season/a/up -> ..``) made one photo 41 items (a
    review); the shortest path, first in sorted order, is kept."""
    seen: set[Path] = set()
    kept = []
    for p in sorted(paths, key=lambda q: (len(q.parts), q)):
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            kept.append(p)
    return sorted(kept)


def _pattern_matches(raw: str) -> list[Path]:
    """The files and folders glob pattern ``raw`` matches, as :func:`glob.glob` names them,
    except that ``**`` does not follow symbolic links to folders, as a ``--recursive`` walk
    does not: glob's ``**`` followed them, and two links to folders above made it run for ten
    minutes while its memory grew to 4 GB (a new user's trial). Names starting with a dot
    are matched only by a pattern part that starts with one, as glob matches them."""
    pattern = Path(raw)
    fixed = _fixed_part(pattern)
    rest = pattern.parts[len(fixed.parts):]
    if rest[-1] == "**":  # glob's `in/**` is every file and folder below; pathlib's, folders
        rest = (*rest, "*")
    dotted = [q for q in rest if q.startswith(".")]
    found = []
    for m in (fixed if fixed.parts else Path()).glob(str(Path(*rest))):
        below = m.relative_to(fixed).parts if fixed.parts else m.parts
        if all(not q.startswith(".") or any(fnmatch.fnmatchcase(q, d) for d in dotted)
               for q in below):
            found.append(m)
    return found


def _bracket_hint(pattern: Path) -> str:
    """A hint when a folder in ``pattern`` has ``[`` in its name, which a pattern reads as a
    set of characters: ``'rec [old]/*.mp4'`` matched nothing, with no word why (a new user's
    trial)."""
    named = [q for q in (pattern, *pattern.parents) if "[" in q.name and q.exists()]
    if not named:
        return ""
    return (f" ('[' in '{named[-1]}' starts a set of characters in a pattern: write "
            f"'{glob.escape(str(named[-1]))}' for the name itself)")


def _linked_folders(folder: Path, pattern: str) -> list[Path]:
    """Symbolic links to folders that a walk of ``folder`` by ``pattern`` (``*``, ``**/*``)
    met and did not follow (their images and videos are left out: said, not silent)."""
    return sorted(f for f in folder.glob(pattern) if f.is_symlink() and f.is_dir()
                  and not _is_ours(f.relative_to(folder)))


def _walk_root(raw: str) -> Path:
    """The folder a folder input or a pattern walks (a pattern's part before its first magic)."""
    p = Path(raw)
    if p.is_dir() or not glob.has_magic(raw):
        return p.resolve()
    return _fixed_part(p).resolve()  # Path() for a pattern with no fixed part: the cwd


def _fixed_part(pattern: Path) -> Path:
    """A pattern's part before its first magic component (``in/**/*.mp4``: ``in``)."""
    return Path(*itertools.takewhile(lambda q: not glob.has_magic(q), pattern.parts))


def _below(match: Path, fixed: Path) -> Path:
    """``match``'s path below ``fixed`` (a pattern's part before its first magic; empty: the
    match as it is, relative to the working folder)."""
    try:
        return match.relative_to(fixed)
    except ValueError:  # pragma: no cover  (glob's matches start with the pattern's own text)
        return Path(match.name)


class Expanded(NamedTuple):
    """What :func:`expand` found.

    Attributes:
        found: ``(path, name under the output folder)`` pairs.
        problems: ``(input as given, message)`` for inputs that give no file.
        left_out: files a walk left out as this batch's own outputs.
        not_media: files a folder or pattern holds that are neither images nor videos (hidden
            ones not counted).
        below: ``(folder as given, count)``: images and videos in the subfolders of a folder
            walked without ``recursive``.
        hidden: images and videos a folder walk left out for a name (of theirs or of a folder
            above them) starting with a dot, livefuse's own part files not counted.
        earlier: ``(folder, files)``: output folders of earlier batches (they hold
            :data:`~livefuse.batch.made_from.RECORD`) that a folder walk or a pattern met below
            its start, and how many of the outputs recorded there it left out.
        linked: symbolic links to folders that a ``--recursive`` walk or a pattern's ``**``
            met and did not follow.
    """

    found: list[tuple[Path, Path]]
    problems: list[tuple[str, str]]
    left_out: int
    not_media: list[Path]
    below: list[tuple[str, int]]
    hidden: list[Path]
    earlier: list[tuple[Path, int]]
    linked: list[Path]


def expand(inputs: Sequence[str], recursive: bool = False, outputs: Path | None = None
           ) -> Expanded:
    """Files named by ``inputs`` (:class:`Expanded`).

    A folder gives its images and videos (sorted; below it too with ``recursive``); a pattern
    with ``*``, ``?`` or ``[`` is expanded (``**``: any depth, ``recursive`` or not), each
    match named by its path below the pattern's part before the first magic, as a folder's
    files are named by their path below it; a file is taken as it is (by its name),
    and one that is neither an image nor a video is a problem. A folder or pattern that walks
    into the output folder ``outputs`` (which lies inside it) leaves the files there out: they
    are this batch's outputs, not inputs; so does one that meets the outputs an earlier batch
    recorded in a folder below its start (a batch into ``season/out`` run again into
    ``season/out2`` swapped ``season/out`` a second time, exit 0: a new user's trial). A file or
    folder named itself is always taken.
    """
    found: list[tuple[Path, Path]] = []
    problems: list[tuple[str, str]] = []
    other: list[Path] = []
    below: list[tuple[str, int]] = []
    hidden: list[Path] = []
    earlier_dirs: dict[Path, int] = {}
    linked: list[Path] = []
    left_out = 0
    out_root = outputs.resolve() if outputs is not None else None
    records: dict[Path, set[str]] = {}

    def earlier_output(f: Path, root: Path, given: Path) -> Path | None:
        """The outermost folder below ``root`` (resolved) whose batch record lists ``f`` as one
        of its outputs: only those files, not the originals a folder may also hold (a batch
        into a folder of photos). The folders are taken as walked from ``given`` (the folder
        or pattern part as given) too, so that an output folder reached through a symbolic
        link below it counts (resolved, it lies outside)."""
        for folder, top in ((f.parent.resolve(), root), (f.parent.absolute(), given)):
            for d in reversed((folder, *folder.parents)):
                if top not in d.parents:
                    continue
                if d not in records:
                    records[d] = made_outputs(d) if (d / RECORD).is_file() else set()
                if records[d] and (folder / f.name).relative_to(d).as_posix() in records[d]:
                    return d
        return None

    def given_root(raw: str) -> Path:
        p = Path(raw)
        return (p if p.is_dir() or not glob.has_magic(raw) else _fixed_part(p)).absolute()

    def walked(raw: str, files: list[Path]) -> list[Path]:
        nonlocal left_out
        root = _walk_root(raw)
        if out_root is not None and root != out_root and root in out_root.parents:
            # only what a batch recorded making there: a file of the user's own in that
            # folder is an input (taken as output, it was skipped as done, exit 0, and
            # --overwrite replaced it: a new user's trial)
            made = made_outputs(out_root)
            kept = [f for f in files if out_root not in f.resolve().parents
                    or f.resolve().relative_to(out_root).as_posix() not in made]
            left_out += len(files) - len(kept)
            files = kept
        kept = []
        for f in files:
            folder = earlier_output(f, root, given_root(raw))
            if folder is None:
                kept.append(f)
            elif _media(f):
                earlier_dirs[folder] = earlier_dirs.get(folder, 0) + 1
        return kept

    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            pattern = "**/*" if recursive else "*"
            walk = [f for f in p.glob(pattern) if f.is_file()]
            if recursive:
                linked += _linked_folders(p, "**/*")
            every = walked(raw, sorted(f for f in walk if not _is_ours(f.relative_to(p))))
            # said, not taken: a new user's trial found '.take2.jpg' left out without a word
            hidden += sorted(f for f in walk if _is_ours(f.relative_to(p)) and _media(f)
                             and CHUNK_DIR not in f.relative_to(p).parts
                             and PART_INFIX not in f.name  # nor this batch's outputs
                             and (out_root is None or out_root not in f.resolve().parents))
            files = [f for f in every if _media(f)]
            other += [f for f in every if not _media(f)]
            # counted, not walked: files of the output folder are no hint (nor left out twice)
            deeper = 0 if recursive else sum(
                1 for f in p.glob("*/**/*") if f.is_file() and _media(f)
                and not _is_ours(f.relative_to(p))
                and (out_root is None or out_root not in f.resolve().parents)
                and earlier_output(f, _walk_root(raw), given_root(raw)) is None)
            if not files:
                problems.append((raw, "folder holds no image or video"
                                 + ("" if recursive else " (subfolders need --recursive)")))
            elif deeper:  # a season folder's week folders, left out without a word
                below.append((raw, deeper))
            found += [(f, f.relative_to(p)) for f in files]
        elif p.is_file():
            if _media(p):
                found.append((p, Path(p.name)))
            else:
                problems.append((raw, f"unknown file type '{p.suffix}' ({media_types()})"))
        elif glob.has_magic(raw):
            # `**` asks for every depth whatever --recursive says: Python's glob otherwise
            # reads it as `*`, and a new user's 'in/**/*.mp4' left in/b/c/deep.mp4 out, exit 0
            if "**" in p.parts:  # the links its ** met, whatever its last part matches
                reach = Path(*p.parts[:p.parts.index("**") + 1], "*")
                linked += [m for m in _pattern_matches(str(reach))
                           if m.is_symlink() and m.is_dir()]
            matches = _once(sorted(_pattern_matches(raw)))
            every = walked(raw, [m for m in matches if m.is_file()])
            files = [f for f in every if _media(f)]
            other += [f for f in every if not _media(f)]
            if not files:
                problems.append((raw, "no image or video matches this pattern"
                                 + _bracket_hint(p)))
            # mirrored below the pattern's fixed part, as a folder's files are below it:
            # `in/**/*.mp4` and `in` --recursive write the same outputs (`in/*/clip.mp4` no
            # longer puts every clip.mp4 on one name)
            found += [(f, _below(f, _fixed_part(p))) for f in files]
        else:
            problems.append((raw, "file not found"))
    return Expanded(found, problems, left_out, other, below, hidden, sorted(earlier_dirs.items()),
                    sorted(set(linked)))


def plan_items(inputs: Sequence[str], output_dir: Path, recursive: bool = False,
               overwrite: bool = False,
               other_inputs: dict[str, Path | None] | None = None,
               job: str | None = None) -> Plan:
    """Expand ``inputs`` and name each output under ``output_dir``.

    Args:
        other_inputs: further input files (``source``, ``reference``) no output may be.
        job: this batch's :func:`~livefuse.batch.worker.job_key`: an output recorded under
            another face photo or other settings is made again (``None``: not checked).

    An item whose output exists is skipped unless ``overwrite``. Videos are probed here (frame
    count and duration for the progress display); an unreadable one is still an item, so its
    error is reported with the others when its turn comes.

    Raises:
        LivefuseError: two inputs would write the same output, an output would be one of the
            inputs (``DIR`` is an input folder), or ``output_dir`` is a file.
    """
    from livefuse.run import check_output_path

    if output_dir.exists() and not output_dir.is_dir():
        raise LivefuseError(f"--output-dir '{output_dir}' is a file; give a folder")
    # the nearest folder that exists is where the outputs' folders will be made: refuse it now,
    # before the workers start, rather than fail every item on it
    base = next((p for p in (output_dir.absolute(), *output_dir.absolute().parents)
                 if p.exists()), None)
    if base is not None and not base.is_dir():
        raise LivefuseError(f"--output-dir '{output_dir}': '{base}' is a file, not a folder")
    if base is not None and not os.access(base, os.W_OK | os.X_OK):
        raise LivefuseError(f"--output-dir '{output_dir}': cannot write in '{base}' (read-only "
                            "or no permission)")
    # an output folder inside an input folder: its files are this batch's outputs, not inputs
    # (an output folder that IS an input folder is refused below, output by output)
    found, problems, left_out, not_media, below, hidden, outputs_before, linked = expand(
        inputs, recursive, output_dir)
    plan = Plan(problems=problems, left_out=left_out, not_media=not_media, below=below,
                hidden=hidden, earlier_outputs=outputs_before, linked=linked)
    seen: dict[Path, Path] = {}
    inputs_resolved = {f.resolve() for f, _ in found}
    made_from = recorded(output_dir)
    for path, rel in found:
        out = output_dir / _output_name(rel)
        key = out.resolve()
        if key in seen and seen[key].resolve() == path.resolve():
            continue  # the same file named twice (a folder and a file in it): once
        if key in seen:
            raise LivefuseError(f"'{path}' and '{seen[key]}' would both be written to '{out}'; "
                                "give them in separate batches or rename one")
        seen[key] = path
        if key == path.resolve():
            raise LivefuseError(f"output '{out}' is the input '{path}' itself (is --output-dir "
                                "an input folder?); inputs are never overwritten")
        if key in inputs_resolved:
            raise LivefuseError(f"the output of '{path}', '{out}', is also an input of this "
                                "batch (a file in the output folder that no batch recorded "
                                "making); inputs are never overwritten: give another "
                                "--output-dir")
        check_output_path(out, {"target": path, **(other_inputs or {})}, replacing=False)
        kind: ItemKind = "image" if is_image_path(path) else "video"
        frames, seconds = 1, 0.0
        if kind == "video":
            frames, seconds = _video_size(path)
        item = Item(path, out, kind, frames, seconds)
        earlier = _earlier_incomplete(item)
        changed = changed_input(made_from, output_dir, out, path)
        otherwise = made_otherwise(made_from, output_dir, out, path, job, kind == "video")
        # an output there is an earlier one's, from the input before it changed: the item
        # failed on the input as it is now (a review: it passed as done, exit 0)
        failed = None if overwrite else failed_before(made_from, output_dir, out, path, job,
                                                      kind == "video")
        # a failure recorded since whatever file is there was made: that file is not this
        # input's output as it is (the settings changed since the failure: tried again)
        stale = last_failed(made_from, output_dir, out)
        if failed is not None:
            plan.failed_before[item] = failed
        elif overwrite or not _finished_output(out) or (earlier is not None and earlier[1]) \
                or changed or otherwise or stale:
            # a cut input replaced since (the whole download, the finished recording): its
            # kept output is made again
            try:
                check_replaceable(out, hint="or give another --output-dir")
            except ProtectedOutputError as exc:  # this item fails; the others run
                plan.problems.append((str(path), str(exc)))
                continue
            if changed and not overwrite and _finished_output(out):
                plan.changed.append(item)
            elif otherwise and not overwrite and _finished_output(out):
                plan.remade[item] = otherwise
            plan.items.append(item)
        else:
            other = other_input(made_from, output_dir, out, path)
            if other is not None:  # not this input's output: skipping it would lose this one
                plan.problems.append((str(path), f"'{out}' holds the output of '{other}' (an "
                                      "earlier batch into this folder), not of this input; "
                                      "--overwrite replaces it, or give another --output-dir"))
                continue
            if not made_here(made_from, output_dir, out):
                plan.problems.append((str(path), f"'{out}' is there already, and no batch "
                                      "into this folder recorded making it (a file of that "
                                      "name, not this input's output?); left as it is: "
                                      "--overwrite replaces it, or give another --output-dir"))
                continue
            sizes = output_changed(made_from, output_dir, out)
            if sizes is not None:  # cut by a full disk or a copy, or edited: not done
                plan.problems.append((str(path), f"'{out}' changed since a batch made it "
                                      f"({sizes[0]} bytes then, {sizes[1]} now: cut short or "
                                      "edited?); left as it is: --overwrite makes it again"))
                continue
            plan.skipped.append(item)
            if earlier is not None:
                plan.earlier_incomplete[item] = earlier[0]
    return plan


def _finished_output(out: Path) -> bool:
    """An output a run finished: outputs are renamed into place when complete, so an empty file
    there is no run's (a placeholder, a failed copy) and is made again."""
    try:
        return out.stat().st_size > 0
    except OSError:
        return False


def _video_size(path: Path) -> tuple[int, float]:
    try:
        from livefuse.io.video import probe

        info = probe(path)
    except LivefuseError:
        return 0, 0.0
    seconds = float(info.duration or 0)
    frames = info.frames or round(seconds * float(info.rate))
    return frames, seconds


@dataclass(frozen=True)
class KeyIndex:
    """A video's frame timestamps and its clean cut points, from one pass over its packets.

    Attributes:
        pts: every frame's pts, in presentation order (video stream ticks).
        cuts: pts of keyframes that open a closed GOP (where a chunk may start).
        keyframes: pts of every keyframe (where decoding may start).
        tb: the stream's time base; rate: its frame rate.
        keyframe_dts: each keyframe's decode timestamp, by its pts: where a chunk seeks to.
            MPEG-TS's demuxer seeks by dts and lands on the packet of that dts, so a seek to a
            keyframe's pts (B-frames: pts > dts) began one packet past the keyframe and lost
            its whole GOP. MP4 and Matroska seek by pts: at the keyframe's dts they start at the
            keyframe before it, a GOP more decoded and skipped, never one too few.
    """

    pts: tuple[int, ...]
    cuts: tuple[int, ...]
    keyframes: tuple[int, ...]
    tb: Fraction
    rate: Fraction
    keyframe_dts: dict[int, int] = field(default_factory=dict)


def key_index(path: Path) -> KeyIndex | None:
    """Scan ``path``'s video packets (no decoding).

    Returns:
        ``None`` when the video cannot be cut: a packet without a timestamp, no keyframe, or a
        demuxer error.
    """
    opened = open_video(path, "cpu")
    with opened.container as c:
        vs = c.streams.video[0]
        tb = Fraction(vs.time_base) if vs.time_base else None
        rate = Fraction(vs.average_rate or vs.guessed_rate or 30)
        decode_order: list[tuple[int, bool]] = []
        keyframe_dts: dict[int, int] = {}
        try:
            for pkt in c.demux(vs):
                if pkt.size == 0:
                    continue
                if pkt.pts is None:
                    return None
                decode_order.append((int(pkt.pts), bool(pkt.is_keyframe)))
                if pkt.is_keyframe:
                    keyframe_dts[int(pkt.pts)] = int(pkt.pts if pkt.dts is None else pkt.dts)
        except av.error.FFmpegError:
            return None
    if tb is None or len(decode_order) < 2 or not any(key for _, key in decode_order):
        return None  # no keyframe flagged (zeroed video data): nowhere to start a chunk
    cuts, keyframes = [], []
    shown_before = -(2**62)  # the largest pts among the packets before this one
    for k, (pts, key) in enumerate(decode_order):
        if key:
            keyframes.append(pts)
            # closed: nothing before it is shown after it, and nothing after it (up to the next
            # keyframe) is shown before it
            nxt = next((j for j in range(k + 1, len(decode_order)) if decode_order[j][1]),
                       len(decode_order))
            leading = any(p < pts for p, _ in decode_order[k + 1:nxt])
            if shown_before < pts and not leading:
                cuts.append(pts)
        shown_before = max(shown_before, pts)
    return KeyIndex(tuple(sorted(p for p, _ in decode_order)), tuple(cuts), tuple(keyframes),
                    tb, rate, keyframe_dts)


def chunk_spans(index: KeyIndex, chunk_s: float, warmup_s: float = WARMUP_S,
                detect_every: int = 1) -> list[Span]:
    """Cut a video into equal chunks of about ``chunk_s`` seconds (its length over the nearest
    whole number of them), each at the clean cut point nearest to where it should start.

    Each chunk after the first starts its processing ``warmup_s`` earlier (rounded down to a
    multiple of ``detect_every`` frames, so detection falls on the frames it falls on in one run
    over the whole video) and decoding at the keyframe before that.

    Returns:
        One span per chunk; a single span covering everything when no cut fits.
    """
    pts = index.pts
    origin = pts[0]
    cuts = sorted(c for c in index.cuts if origin < c <= pts[-1])
    # equal chunks, as many as fit: the video's length over the nearest whole number of chunk
    # lengths. Each cut goes at the clean cut nearest to its place in that even division, so
    # the cuts' errors do not add up: with a keyframe every second, 60 s in chunks of 7.5 s came
    # out as eight 7 s chunks and a 4 s one, and the worker that got the short one as its third
    # ran 540 frames while three ran 420 (docs/BENCHMARKS.md §13)
    length = pts[-1] - origin + (pts[-1] - pts[-2] if len(pts) > 1 else 1)
    count = max(1, round(length * float(index.tb) / chunk_s)) if chunk_s > 0 else 1
    starts = [origin]
    for k in range(1, count):
        target = origin + length * k / count
        # the nearest clean cut, not the first one past: with a keyframe every 8.3 s, 10 s
        # chunks cut at 8.3 s rather than at 16.7 s (a new user's 20 s clip then ran whole)
        at = bisect.bisect_left(cuts, target)
        near = [c for c in cuts[max(0, at - 1):at + 1] if c > starts[-1]]
        if near:
            starts.append(min(near, key=lambda c: (abs(c - target), c)))
    # a last chunk shorter than half a chunk joins the one before
    step = length / count
    if len(starts) > 1 and origin + length - starts[-1] < step / 2:
        starts.pop()
    position = {p: i for i, p in enumerate(pts)}
    warm = round(warmup_s * float(index.rate))
    spans = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else None
        i0 = position[start]
        w0 = max(0, (i0 - warm) // max(1, detect_every) * max(1, detect_every)) if k else 0
        warm_from = pts[w0]
        key = max((kf for kf in index.keyframes if kf <= warm_from), default=index.keyframes[0])
        # from the file's start without a seek when that is where decoding begins (the first
        # chunk): nothing a demuxer's seek could miss
        seek = None if key == index.keyframes[0] else index.keyframe_dts.get(key, key)
        spans.append(Span(seek=seek, warm_from=warm_from, start=start, end=end, origin=origin,
                          first_index=w0))
    return spans


def auto_chunk_seconds(items: Sequence[Item], workers: int) -> float:
    """``--chunk-seconds auto``: no cuts for one worker; else equal chunks, two per worker, or
    one per worker when two would be shorter than :data:`MIN_CHUNK_S`, within
    :data:`MIN_CHUNK_S` .. :data:`MAX_CHUNK_S` seconds."""
    if workers <= 1:
        return 0.0
    total = sum(i.seconds for i in items if i.kind == "video")
    # whole rounds: two chunks each when they are long enough, else one each. Six 10 s chunks
    # of a 60 s video on four workers kept two of them busy for twice as long as the others
    rounds = 2 if total / (2 * workers) >= MIN_CHUNK_S else 1
    return min(MAX_CHUNK_S, max(MIN_CHUNK_S, total / (rounds * workers)))


def most_units(items: Sequence[Item], chunk_seconds: float | None) -> int:
    """The most units ``items`` can make at ``--chunk-seconds`` (``None``: auto, whose chunks
    are at least :data:`MIN_CHUNK_S`): workers beyond it would only build an engine and idle."""
    step = MIN_CHUNK_S if chunk_seconds is None else chunk_seconds
    return sum(max(1, math.ceil(i.seconds / step))
               if i.kind == "video" and step > 0 and i.seconds >= MIN_CHUNKS_TO_CUT * step
               else 1 for i in items)


def chunk_dir(item: Item) -> Path:
    """Where an item's chunk files are kept until the join."""
    return item.output.parent / CHUNK_DIR / item.output.name


def chunk_name(k: int) -> str:
    """Chunk ``k``'s file name in its item's chunk folder."""
    return f"chunk-{k:04d}.mp4"


def plan_units(items: Sequence[Item], chunk_s: float, detect_every: int = 1,
               notes: list[str] | None = None,
               spans_for: Mapping[Item, Sequence[Span]] | None = None) -> list[Unit]:
    """Units for ``items``: one per image and per short video; a video at least
    :data:`MIN_CHUNKS_TO_CUT` chunks long (and cuttable) gets one unit per chunk, each writing
    ``chunk_dir(item)/chunk-NNNN.mp4``; a video in ``spans_for`` gets its chunks there (an
    interrupted run's cuts, :mod:`livefuse.batch.resume`), whatever ``chunk_s``.
    A video long enough to cut that stays whole gets a line in ``notes`` saying why.

    Raises:
        VideoError: (not raised here: an unreadable video stays one whole unit and fails there.)
    """
    units: list[Unit] = []
    for item in items:
        # cut when the chunks come out at least two (the nearest whole number of chunk lengths,
        # as chunk_spans divides): a 30 s video beside a 3 s clip on two workers got 16.5 s
        # chunks and, under two of them long, ran whole on one worker while the other idled
        earlier = (spans_for or {}).get(item)
        if not earlier and (item.kind == "image" or chunk_s <= 0
                            or item.seconds < MIN_CHUNKS_TO_CUT * chunk_s):
            units.append(Unit(item, item.output, frames=item.frames))
            continue
        why = ""
        try:
            # audio the output cannot hold: one whole unit, refused at once with the reason,
            # instead of every chunk's work lost at the join
            check_audio_fits(item.input, item.output)
            index = key_index(item.input)
        except VideoError as exc:
            index, why = None, str(exc)
        spans = ([] if index is None else list(earlier) if earlier
                 else chunk_spans(index, chunk_s, detect_every=detect_every))
        if len(spans) < 2:
            if notes is not None:
                if index is not None:
                    cuts = max(len(index.cuts) - 1, 0)
                    why = (f"it has {cuts} clean cut point{'s' if cuts != 1 else ''} after its "
                           f"start (keyframes that open a closed GOP) where {chunk_s:g} s "
                           "chunks need more")
                    if item.frames > 30:  # a clip of a few frames has nothing to gain
                        why += "; a re-encode with a keyframe every few seconds makes it cuttable"
                elif not why:  # a new user's 1-frame clip got "...chunks: " and no reason
                    why = ("its frames have no timestamps to cut by, or it has under two "
                           "frames")
                notes.append(f"'{item.input}' runs whole on one worker, not in "
                             f"{chunk_s:g} s chunks: {why}")
            units.append(Unit(item, item.output, frames=item.frames))
            continue
        assert index is not None
        folder = chunk_dir(item)
        for k, span in enumerate(spans):
            n = sum(1 for p in index.pts if p >= span.start and (span.end is None or p < span.end))
            units.append(Unit(item, folder / chunk_name(k), span, k, len(spans), n))
    return units


def leftovers(unit: Unit) -> list[Path]:
    """Files a unit may leave behind when its worker is stopped mid-write: the video part file,
    an image's temp files, the chunk file itself."""
    out = unit.output
    paths = part_paths(out)
    if out.parent.is_dir():
        prefix = temp_prefix(out, IMAGE_PART_TAIL)
        paths += list(out.parent.glob(f"{glob.escape(prefix)}*.part"))
    if unit.span is not None:
        paths.append(out)
    return paths


__all__ = ["CHUNK_DIR", "WARMUP_S", "Item", "KeyIndex", "Plan", "Unit", "auto_chunk_seconds",
           "chunk_dir", "chunk_name", "chunk_spans", "expand", "incomplete_marker", "input_stamp",
           "key_index", "leftovers", "plan_items", "plan_units", "write_incomplete_marker"]
