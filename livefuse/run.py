"""`livefuse run`: swap a source face into an image or a video file, and summarise what happened."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from tqdm import tqdm

from livefuse.batch.lock import batch_writing
from livefuse.engine import Engine
from livefuse.errors import FaceIndexError, LivefuseError, NothingSwappedError, VideoError
from livefuse.imaging import (
    ALPHA_SUFFIXES,
    IMAGE_SUFFIXES,
    check_image,
    flatten_onto_black,
    is_image_path,
    keep_straight_colour,
    load_image,
    save_image,
    swap_colour,
)
from livefuse.io.paths import check_output, other_writer
from livefuse.io.pipeline import ChainStats
from livefuse.io.video import (
    OUTPUT_VIDEO_SUFFIXES,
    Processed,
    Span,
    VideoOptions,
    is_video_path,
    media_types,
    probe,
    transcode,
)
from livefuse.types import Frame, FramePacket, SkippedFace, StagedFrame

FINDABLE_FACE_PX = 32
"""About the smallest face width (px) the detectors find: CenterFace's wide scan (the classic
engine, docs/CLASSIC.md) reaches about 32 px; SCRFD finds smaller ones."""


@dataclass
class RunSummary:
    """What a run did. ``seconds`` is wall time of the frame loop (decode + swap + encode)."""

    target: Path
    output: Path
    frames: int = 0
    faces_found: int = 0
    faces_swapped: int = 0
    frames_without_face: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    incomplete: str | None = None
    """The input ended early or was damaged (``input ended early: 55 of 150 frames``): the
    output holds what was decoded, and the CLI exits with
    :data:`~livefuse.errors.EXIT_INCOMPLETE`."""
    stats: ChainStats | None = None
    """Busy seconds per pipeline stage (videos)."""
    bad_packets: int = 0
    failures: tuple[Fraction, ...] = ()
    """Video packets skipped as undecodable, and where (see
    :attr:`~livefuse.io.video.TranscodeResult.failures`)."""
    input_notes: tuple[str, ...] = ()
    """Notes on this target's content, also in ``notes`` (an odd size padded, timestamps moved,
    transparency flattened): ``batch`` names them per item, where its other notes (encoder,
    audio) would repeat for every item."""
    skipped: tuple[str, ...] = ()
    """Why faces found were not swapped: one line per face (still images), or per reason with
    how many faces in how many frames (videos)."""

    @property
    def fps(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        out = [
            f"target:              {self.target}",
            f"output:              {self.output}",
            f"frames:              {self.frames}",
            f"faces found:         {self.faces_found}",
            f"faces swapped:       {self.faces_swapped}",
            f"frames with no face: {self.frames_without_face}",
            f"time:                {self.seconds:.2f} s ({self.fps:.1f} fps)",
        ]
        out += [f"skipped: {n}" for n in self.skipped]
        out += [f"note: {n}" for n in self.notes]
        return out


def run_image(engine: Engine, target: Path, output: Path) -> RunSummary:
    """Swap onto a still image. A target's alpha channel is kept on output (PNG/WebP/TIFF),
    and with it the target's own straight colour outside the swapped faces.

    Raises:
        ImageLoadError: unreadable target. FaceIndexError: target index out of range.
        NothingSwappedError: no face was swapped.
    """
    img = load_image(target)
    t0 = time.perf_counter()
    work = swap_colour(img)  # straight colour where it shows: see swap_colour
    try:
        packet = engine.process_image(work)
    except FaceIndexError as exc:
        if exc.path is not None:
            raise
        # named as the source index's error is ("6 faces found" said where)
        raise FaceIndexError(exc.index, exc.count, target) from None
    assert packet.output is not None
    summary = RunSummary(target=target, output=output, frames=1, faces_found=packet.found,
                         faces_swapped=packet.swapped,
                         frames_without_face=int(packet.found == 0),
                         skipped=tuple(skipped_lines(packet)))
    summary.seconds = time.perf_counter() - t0
    if packet.swapped == 0 and packet.found == 0:
        raise NothingSwappedError(f"no face was swapped in '{target}': no face found (a face "
                                  f"must be visible, not turned far away, and about "
                                  f"{FINDABLE_FACE_PX} px wide or more)")
    if packet.swapped == 0:
        raise NothingSwappedError(f"no face was swapped in '{target}': of the {packet.found} "
                                  "face(s) found, " + "; ".join(summary.skipped))
    out = packet.output
    summary.input_notes = img.notes
    summary.notes += img.notes
    if img.alpha is not None:
        out = keep_straight_colour(out, img, work)
        if output.suffix.lower() not in ALPHA_SUFFIXES:
            out = flatten_onto_black(out, img.alpha)
            if (img.alpha < 255).any():
                lost = (f"the target's transparency cannot be kept in {output.suffix}: it "
                        "is flattened onto black (.png, .webp or .tif keep it)",)
                summary.input_notes += lost
                summary.notes += lost
    save_image(output, out, img.alpha)
    return summary


def _where(face: SkippedFace) -> str:
    b = face.bbox
    turned = f", found turned by {face.angle} degrees" if face.angle else ""
    return (f"the face at x={(b[0] + b[2]) / 2:.0f}, y={(b[1] + b[3]) / 2:.0f} "
            f"({b[2] - b[0]:.0f} px wide{turned})")


def skipped_lines(packet: FramePacket) -> list[str]:
    """Lines for the user: each face of ``packet`` found and not swapped, and each detection not
    counted as a face (a turned duplicate or a misfit), with why."""
    out = [f"{_where(f)}: {f.reason}" for f in packet.skipped]
    out += [f"a detection ignored, {_where(f)[4:]}, score {f.score:.2f}: {f.reason}"
            for f in packet.dropped]
    return out


class EngineProcessor:
    """The Engine as :func:`~livefuse.io.video.transcode` runs it: ``stage`` on the staging
    thread (the GPU path's upload), ``process`` on the processing thread, counting faces into
    ``summary`` and why faces were skipped (:meth:`skipped_lines`). Each frame is smoothed by
    its own timestamp (its pts), not a nominal one, so a variable-frame-rate clip's landmarks
    move in real seconds."""

    def __init__(self, engine: Engine, summary: RunSummary) -> None:
        self.engine, self.summary = engine, summary
        self._skips: Counter[str] = Counter()
        self._skip_frames: Counter[str] = Counter()
        self._example: dict[str, str] = {}

    def stage(self, frame: Frame) -> StagedFrame:
        return self.engine.stage(frame)

    def warm(self, staged: StagedFrame, index: int, t_s: float) -> None:
        # a chunk's warm-up frame: tracked, not swapped, and not counted (it is not written)
        self.engine.track(staged, index=index, t_capture_ns=round(t_s * 1e9))

    def process(self, staged: StagedFrame, index: int, t_s: float,
                following: StagedFrame | None = None) -> Processed:
        packet = self.engine.process(staged, index=index, t_capture_ns=round(t_s * 1e9),
                                     in_place=True, ahead=following)
        self.summary.faces_found += packet.found
        self.summary.faces_swapped += packet.swapped
        self.summary.frames_without_face += int(packet.found == 0)
        kinds = set()
        for face in packet.skipped:
            # "too small to swap (14 px wide)" and "(15 px wide)" are one reason over a video
            kind = face.reason.split(" (", 1)[0]
            self._skips[kind] += 1
            self._example.setdefault(kind, face.reason)
            kinds.add(kind)
        self._skip_frames.update(kinds)
        assert packet.output is not None
        return Processed(packet.output, packet.regions)

    def skipped_lines(self) -> list[str]:
        """One line per reason faces were found and not swapped, most frequent first: how many
        faces in how many frames, and the reason as first met (``3 faces in 3 frames: not
        selected (face selector 'one')``)."""
        return [f"{n} face{'s' if n != 1 else ''} in {self._skip_frames[k]} frame"
                f"{'s' if self._skip_frames[k] != 1 else ''}: {self._example[k]}"
                for k, n in self._skips.most_common()]


def run_video(engine: Engine, target: Path, output: Path, progress: bool = True,
              video: VideoOptions | None = None, span: Span | None = None,
              on_frame: Callable[[int], None] | None = None,
              cancel: threading.Event | None = None) -> RunSummary:
    """Swap onto every frame of a video, keeping its audio streams and frame rate.

    Decode, upload, swap, convert and encode run on their own threads (``video.pipelined``,
    the default); the output is the one the serial loop writes.

    Args:
        video: encoder, decoder and threading (:class:`~livefuse.io.video.VideoOptions`).
        span: only this keyframe-aligned chunk, video only (``livefuse batch``); a chunk without
            a face is not an error there (the whole video is judged after the join).
        on_frame: called with the frames written so far (from the encoding thread).
        cancel: set from another thread to stop (raises
            :class:`~livefuse.io.pipeline.Cancelled`; no part file is left).

    Raises:
        VideoError: unreadable input or unwritable output.
        NothingSwappedError: no face was swapped in any frame (the output is not kept).
    """
    info = probe(target)
    summary = RunSummary(target=target, output=output)
    engine.reset_tracking()
    # disable=None: no bar when stderr is not a terminal (a log file got its \r lines)
    bar = tqdm(total=info.frames or None, unit="frame", disable=None if progress else True,
               desc=target.name, leave=False)

    def count(n: int) -> None:
        bar.update(1)
        if on_frame is not None:
            on_frame(n)

    processor = EngineProcessor(engine, summary)
    t0 = time.perf_counter()
    try:
        result = transcode(target, output, on_frame=count, options=video, span=span,
                           processor=processor,
                           keep=lambda: span is not None or summary.faces_swapped > 0,
                           cancel=cancel)
    finally:
        bar.close()
        engine.reset_tracking()
    summary.seconds = time.perf_counter() - t0
    summary.frames = result.frames
    summary.incomplete = result.incomplete
    summary.bad_packets, summary.failures = result.bad_packets, result.failures
    summary.skipped = tuple(processor.skipped_lines())
    notes = list(result.notes)
    summary.input_notes = tuple(result.notes)
    if span is None:
        n = result.audio_streams_copied
        copied = "no audio stream" if n == 0 else f"{n} audio stream{'s' if n > 1 else ''} copied"
        kept = "every frame keeps its timestamp"
        if result.time_base_written is not None:  # MPEG-TS's 1/90000 s into Matroska
            kept += f" to the nearest {_tick(result.time_base_written)} (the output's time base)"
        notes.append(f"{copied}; {rate_text(result.rate, result.measured_rate)}; {kept}")
    notes.append(f"video: encode {result.encoder}; {result.decoder}")
    if result.incomplete:
        notes.append(f"{result.incomplete}; the output holds the frames that were decoded")
    summary.notes = tuple(notes)
    summary.stats = result.stats
    if summary.faces_swapped == 0 and span is None:
        why = f"; the faces found: {'; '.join(summary.skipped[:3])}" if summary.skipped else \
            "; no face was found"
        raise NothingSwappedError(
            f"no face was swapped in any of the {result.frames} frames of '{target}'{why}; "
            "no output was kept")
    return summary


VFR_TOLERANCE = 0.02
"""A clip whose timestamps give a rate this far (relative) from the container's is variable-rate."""


def rate_text(rate: Fraction, measured: Fraction | None = None) -> str:
    """A frame rate for people: ``frame rate 30000/1001 (29.97 fps)`` for a standard rate,
    ``average frame rate 9.69 fps`` for a container's average of a variable-rate clip
    (640000/66053 said nothing), and the rate the timestamps give when the container's nominal
    rate is off by more than :data:`VFR_TOLERANCE` (a Matroska VFR clip says 30)."""
    if measured is not None and rate and abs(float(measured) / float(rate) - 1) > VFR_TOLERANCE:
        return f"variable frame rate, {float(measured):.3g} fps on average"
    fps = float(rate)
    if rate.denominator in (1, 1001):
        exact = f"{rate.numerator}/{rate.denominator} " if rate.denominator > 1 else ""
        return f"frame rate {exact}({fps:.4g} fps)" if exact else f"frame rate {fps:g} fps"
    return f"average frame rate {fps:.3g} fps"


def check_output_path(output: Path, inputs: dict[str, Path | None],
                      replacing: bool = True) -> None:
    """Refuse an output path that is a folder or one of the inputs (the rule of
    :func:`livefuse.io.paths.check_output`: ``./``, ``..``, symlinks and hard links included),
    or an existing write-protected file.

    Args:
        inputs: role (``target``, ``source``, ``reference``) -> path.
        replacing: an existing output will be replaced (``batch`` checks that per item).

    Raises:
        LivefuseError: a folder; OutputIsInputError: naming the input the output would
            overwrite; ProtectedOutputError: a write-protected output.
    """
    if output.is_dir():
        raise LivefuseError(f"output '{output}' is a folder; give a file name")
    folder = next((p for p in output.absolute().parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise LivefuseError(f"output '{output}': '{folder}' is a file, not a folder")
    # now, not after the engine is built and the first frame is done (as `batch` refuses
    # its --output-dir)
    if folder is not None and not os.access(folder, os.W_OK | os.X_OK):
        raise LivefuseError(f"output '{output}': cannot write in '{folder}' (read-only or no "
                            "permission)")
    check_output(output, inputs, replacing=replacing)


def run(engine: Engine, target: Path, output: Path, progress: bool = True,
        other_inputs: dict[str, Path | None] | None = None,
        video: VideoOptions | None = None) -> RunSummary:
    """Dispatch on the target's suffix. The output is never one of the inputs.

    Args:
        other_inputs: further input files (``source``, ``reference``) the output must not be.
        video: how videos are decoded and encoded.

    Raises:
        LivefuseError: unknown suffixes, an output that is an input, or any input problem.
    """
    check_run_paths(target, output, other_inputs)
    if is_image_path(target):
        return run_image(engine, target, output)
    return run_video(engine, target, output, progress, video)


def check_target_opens(target: Path) -> None:
    """Open the target as :func:`run` will, without processing it: a video's container and
    streams, an image's header. ``livefuse run`` calls it before building the engine, so a
    damaged or mislabelled file is the first line the user reads, not a line after the
    engine's.

    Raises:
        VideoError: the video cannot be opened or has no video stream.
        ImageLoadError: the image is empty or not an image.
    """
    if is_video_path(target):
        probe(target)
    else:
        check_image(target, "target")


def check_video_input(path: Path) -> None:
    """A file standing in for the camera (``live --video``, the app's video input), checked
    before any work: it exists and opens as :func:`run` would open it as a target (a still
    image is a still source). Called on the command's thread or the app's control thread.

    Raises:
        VideoError: missing, not a file, or a video that cannot be opened.
        ImageLoadError: an image that cannot be read.
    """
    if not path.is_file():
        raise VideoError(path, "file not found" if not path.exists() else "is not a file")
    check_target_opens(path)


def _tick(tb: Fraction) -> str:
    """A time base as a reader says it: ``1 ms``, ``1/600 s``."""
    return "1 ms" if tb == Fraction(1, 1000) else f"{tb} s"


def check_run_paths(target: Path, output: Path,
                    other_inputs: dict[str, Path | None] | None = None) -> None:
    """Everything about the paths that can be refused before any work: an output that is an
    input, an input that does not exist (``target`` or one of ``other_inputs``), a folder, an
    unknown target type, an output suffix that cannot hold the target's kind (an image output
    for a video, ``.xyz``).

    Raises:
        LivefuseError: naming the path and the problem.
    """
    inputs = {"target": target, **(other_inputs or {})}
    check_output_path(output, inputs)
    writer = other_writer(output)
    if writer is not None:  # both would finish, and the later rename would win unsaid
        raise LivefuseError(f"output '{output}': another livefuse process (pid {writer}) is "
                            "writing it now; give another output name")
    busy = batch_writing(output)
    if busy is not None:
        raise LivefuseError(f"output '{output}': a livefuse batch is writing into '{busy}' now "
                            "and would replace it; write elsewhere or after the batch")
    if target.is_dir():
        raise LivefuseError(f"target '{target}' is a folder; give an image or a video file")
    if is_image_path(target):
        if not is_image_path(output):
            raise LivefuseError(f"target '{target}' is an image, so the output '{output}' must be "
                                f"an image livefuse writes: {', '.join(sorted(IMAGE_SUFFIXES))}")
    elif is_video_path(target):
        if output.suffix.lower() not in OUTPUT_VIDEO_SUFFIXES:
            raise LivefuseError(f"target '{target}' is a video, so the output '{output}' must be "
                                f"{', '.join(sorted(OUTPUT_VIDEO_SUFFIXES))}")
    else:
        raise LivefuseError(f"target '{target}': unknown file type '{target.suffix}' "
                            f"({media_types()})")
    for name, path in inputs.items():
        if path is not None and not path.exists():
            raise LivefuseError(f"{name} '{path}': file not found")
