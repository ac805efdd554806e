"""`livefuse run`: swap a source face into an image or a video file, and summarise what happened."""

from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from tqdm import tqdm

from livefuse.engine import Engine
from livefuse.errors import MIN_FACE_PX, LivefuseError
from livefuse.imaging import is_image_path, load_image, save_image
from livefuse.io.video import OUTPUT_VIDEO_SUFFIXES, is_video_path, probe, transcode
from livefuse.types import Frame, FramePacket, SkippedFace


class NothingSwappedError(LivefuseError):
    """A run finished without swapping a single face; the output would be a silent no-op."""


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
    skipped: tuple[str, ...] = ()
    """One line per face found and not swapped (still images), saying why."""

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
    """Swap onto a still image. A target's alpha channel is kept on output (PNG/WebP/TIFF).

    Raises:
        ImageLoadError: unreadable target. FaceIndexError: target index out of range.
        NothingSwappedError: no face was swapped.
    """
    img = load_image(target)
    t0 = time.perf_counter()
    packet = engine.process_image(img.bgr)
    assert packet.output is not None
    summary = RunSummary(target=target, output=output, frames=1, faces_found=packet.found,
                         faces_swapped=packet.swapped,
                         frames_without_face=int(packet.found == 0),
                         skipped=tuple(skipped_lines(packet)))
    summary.seconds = time.perf_counter() - t0
    if packet.swapped == 0:
        raise NothingSwappedError(f"no face was swapped in '{target}': no face found "
                                  f"(faces need to be roughly frontal, >= {MIN_FACE_PX} px wide)")
    save_image(output, packet.output, img.alpha)
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


def run_video(engine: Engine, target: Path, output: Path, progress: bool = True) -> RunSummary:
    """Swap onto every frame of a video, keeping its audio streams and frame rate.

    Raises:
        VideoError: unreadable input or unwritable output.
        NothingSwappedError: no face was swapped in any frame (the output is not kept).
    """
    info = probe(target)
    summary = RunSummary(target=target, output=output)
    engine.reset_tracking()
    bar = tqdm(total=info.frames or None, unit="frame", disable=not progress,
               desc=target.name, leave=False)

    rate = float(info.rate) if info.rate else 30.0

    def process(frame: Frame, index: int) -> Frame:
        # the clip's own time, not the wall clock: landmark smoothing is in real seconds
        packet = engine.process(frame, index=index, t_capture_ns=round(index * 1e9 / rate),
                                in_place=True)
        summary.faces_found += packet.found
        summary.faces_swapped += packet.swapped
        summary.frames_without_face += int(packet.found == 0)
        assert packet.output is not None
        return packet.output

    t0 = time.perf_counter()
    try:
        result = transcode(target, output, process, on_frame=lambda n: bar.update(1),
                           keep=lambda: summary.faces_swapped > 0)
    finally:
        bar.close()
    summary.seconds = time.perf_counter() - t0
    summary.frames = result.frames
    notes = list(result.notes)
    notes.append(f"{result.audio_streams_copied} audio stream(s) copied; "
                 f"{rate_text(result.rate, result.measured_rate)}; every frame keeps its "
                 "timestamp")
    summary.notes = tuple(notes)
    if summary.faces_swapped == 0:
        raise NothingSwappedError(
            f"no face was swapped in any of the {result.frames} frames of '{target}'; "
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


def check_output_path(output: Path, inputs: dict[str, Path | None]) -> None:
    """Refuse an output path that is one of the inputs (symlinks and ``..`` resolved).

    Args:
        inputs: role (``target``, ``source``, ``reference``) -> path.

    Raises:
        LivefuseError: naming the input the output would overwrite.
    """
    if output.is_dir():
        raise LivefuseError(f"output '{output}' is a folder; give a file name")
    if not output.exists():
        return
    for role, path in inputs.items():
        if path is not None and path.exists() and output.resolve() == path.resolve():
            raise LivefuseError(
                f"output '{output}' is the {role} itself; inputs are never overwritten")


def run(engine: Engine, target: Path, output: Path, progress: bool = True,
        other_inputs: dict[str, Path | None] | None = None) -> RunSummary:
    """Dispatch on the target's suffix. The output is never one of the inputs.

    Args:
        other_inputs: further input files (``source``, ``reference``) the output must not be.

    Raises:
        LivefuseError: unknown suffixes, an output that is an input, or any input problem.
    """
    check_run_paths(target, output, other_inputs)
    if is_image_path(target):
        return run_image(engine, target, output)
    return run_video(engine, target, output, progress)


def check_run_paths(target: Path, output: Path,
                    other_inputs: dict[str, Path | None] | None = None) -> None:
    """Everything about ``target`` and ``output`` that can be refused before any work: an
    output that is an input, a folder, an unknown target type, an output suffix that cannot
    hold the target's kind (an image output for a video, ``.xyz``).

    Raises:
        LivefuseError: naming the path and the problem.
    """
    check_output_path(output, {"target": target, **(other_inputs or {})})
    if target.is_dir():
        raise LivefuseError(f"target '{target}' is a folder; give an image or a video file")
    if is_image_path(target):
        if not is_image_path(output):
            raise LivefuseError(f"target '{target}' is an image, so the output '{output}' must be "
                                "an image too (.png, .jpg, ...)")
    elif is_video_path(target):
        if output.suffix.lower() not in OUTPUT_VIDEO_SUFFIXES:
            raise LivefuseError(f"target '{target}' is a video, so the output '{output}' must be "
                                f"{', '.join(sorted(OUTPUT_VIDEO_SUFFIXES))}")
    else:
        raise LivefuseError(f"target '{target}': unknown file type '{target.suffix}' (images: "
                            ".jpg .png .webp .bmp .tif; videos: .mp4 .mkv .mov .avi .webm)")
