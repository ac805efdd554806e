"""Video in, video out, audio kept: decode with PyAV, process each frame, encode H.264, and copy
every audio stream's packets untouched.

The output is written to a temp file beside the destination and renamed at the end, so an
interrupted run never leaves a half-written file under the final name and never touches the input.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from livefuse.errors import VideoError
from livefuse.types import Frame

VIDEO_SUFFIXES = frozenset({".mp4", ".mkv", ".mov", ".avi", ".webm", ".m4v"})
OUTPUT_VIDEO_SUFFIXES = VIDEO_SUFFIXES - {".avi", ".webm"}
"""Containers :func:`transcode` writes (H.264 plus the input's audio)."""
DEFAULT_CRF = 18  # x264's "visually lossless" range (17-18) per the x264 / FFmpeg H.264 guide


@dataclass(frozen=True)
class VideoInfo:
    """What a video file holds.

    Attributes:
        width, height: px of the first video stream.
        rate: frame rate as an exact rational (e.g. ``30000/1001``).
        frames: frame count from the container, ``0`` when unknown.
        audio_streams: number of audio streams.
    """

    width: int
    height: int
    rate: Fraction
    frames: int
    audio_streams: int


@dataclass
class TranscodeResult:
    """Counts and notes from :func:`transcode`."""

    frames: int = 0
    size: tuple[int, int] = (0, 0)
    rate: Fraction = Fraction(0)
    audio_streams_copied: int = 0
    notes: list[str] = field(default_factory=list)
    span: Fraction | None = None
    """Seconds from the first frame's timestamp to the last one's (``None`` without them)."""

    @property
    def measured_rate(self) -> Fraction | None:
        """Frames per second between the first and the last timestamp: a variable-rate clip's
        real average, where the container's nominal ``rate`` can say anything (Matroska: 30)."""
        if self.span is None or self.span <= 0 or self.frames < 2:
            return None
        return (self.frames - 1) / self.span


def is_video_path(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


def _open_input(path: Path) -> Any:
    if not path.exists():
        raise VideoError(path, "file not found")
    if path.stat().st_size == 0:
        raise VideoError(path, "file is empty (0 bytes)")
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise VideoError(path, f"cannot open: {exc}") from exc
    if not container.streams.video:
        container.close()
        raise VideoError(path, "has no video stream")
    return container


def probe(path: str | os.PathLike[str]) -> VideoInfo:
    """Read a video's size, exact frame rate, frame count and audio stream count.

    Raises:
        VideoError: missing, empty, undecodable or without a video stream.
    """
    p = Path(path)
    with _open_input(p) as c:
        vs = c.streams.video[0]
        rate = vs.average_rate or vs.guessed_rate or Fraction(30)
        return VideoInfo(vs.codec_context.width, vs.codec_context.height, Fraction(rate),
                         int(vs.frames or 0), len(c.streams.audio))


def _even(n: int) -> int:
    return n + (n & 1)


def transcode(src: str | os.PathLike[str], dst: str | os.PathLike[str],
              process: Callable[[Frame, int], Frame],
              on_frame: Callable[[int], None] | None = None, crf: int = DEFAULT_CRF,
              keep: Callable[[], bool] | None = None) -> TranscodeResult:
    """Run ``process`` on every frame of ``src`` and write ``dst`` (H.264 + the original audio).

    Args:
        src: input video.
        dst: output path; the container follows its suffix (``.mp4``, ``.mkv``, ``.mov``).
        process: ``(frame (H, W, 3) uint8 BGR, index) -> frame`` of the same size.
        on_frame: called after each frame with the count so far (progress bars).
        crf: x264 constant rate factor.
        keep: asked once at the end; ``False`` discards the output (``dst`` is left untouched).

    Frame timing is kept: each output frame carries its input frame's timestamp, in the input
    stream's own time base (so variable-frame-rate phone clips keep every frame where it was),
    and the declared rate is the input's exact rational. An odd width or height (which yuv420p
    cannot hold) is padded by one replicated pixel row/column; the note says so.

    Raises:
        VideoError: unreadable input, ``dst`` equal to ``src``, an unsupported output suffix, or an
            audio codec the output container cannot hold (the message suggests ``.mkv``).
    """
    s, d = Path(src), Path(dst)
    if d.suffix.lower() not in OUTPUT_VIDEO_SUFFIXES:
        raise VideoError(d, f"unsupported output suffix '{d.suffix}': use .mp4, .mkv or .mov")
    if d.exists() and s.exists() and d.resolve() == s.resolve():
        raise VideoError(d, "output would overwrite the input; choose another output path")
    result = TranscodeResult()
    inp = _open_input(s)
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = d.with_name(f".{d.stem}.livefuse-part{d.suffix}")
    try:
        with inp, av.open(str(tmp), "w") as out:
            vin = inp.streams.video[0]
            vin.thread_type = "AUTO"
            rate = Fraction(vin.average_rate or vin.guessed_rate or Fraction(30))
            w, h = vin.codec_context.width, vin.codec_context.height
            ow, oh = _even(w), _even(h)
            if (ow, oh) != (w, h):
                result.notes.append(
                    f"input is {w}x{h}; H.264 4:2:0 needs even sizes, so the output is {ow}x{oh} "
                    "(one edge pixel row/column repeated)")
            # The input's own time base, not 1/rate: a variable-rate clip (phones) has frames
            # closer together than 1/average-rate, which would round onto one tick and be
            # refused by the muxer ("non monotonically increasing dts").
            tb = Fraction(vin.time_base) if vin.time_base else 1 / rate
            vout = out.add_stream("libx264", rate=rate, time_base=tb)
            vout.width, vout.height, vout.pix_fmt = ow, oh, "yuv420p"
            vout.options = {"crf": str(crf), "preset": "veryfast"}
            audio_map: dict[int, Any] = {}
            for a in inp.streams.audio:
                audio_map[a.index] = out.add_stream_from_template(a)
            result.rate, result.size = rate, (ow, oh)
            result.audio_streams_copied = len(audio_map)

            step = max(1, round(1 / (rate * tb)))  # one nominal frame period, in ticks
            last_pts: int | None = None
            first_pts: int | None = None
            nudged = 0

            def encode(img: Frame, pts: int | None) -> None:
                nonlocal last_pts, first_pts, nudged
                if img.shape[:2] != (h, w) or img.dtype != np.uint8:
                    raise VideoError(s, f"frame {result.frames}: processing returned shape "
                                        f"{img.shape} {img.dtype}, expected ({h}, {w}, 3) uint8")
                if (ow, oh) != (w, h):
                    img = np.asarray(cv2.copyMakeBorder(img, 0, oh - h, 0, ow - w,
                                                        cv2.BORDER_REPLICATE), dtype=np.uint8)
                if pts is None:  # some demuxers (raw streams) give none: continue the cadence
                    pts = 0 if last_pts is None else last_pts + step
                elif last_pts is not None and pts <= last_pts:
                    # a broken input repeats a timestamp; the encoder would refuse it
                    pts, nudged = last_pts + 1, nudged + 1
                last_pts = pts
                if first_pts is None:
                    first_pts = pts
                vf = av.VideoFrame.from_ndarray(img, format="bgr24")
                vf.pts, vf.time_base = pts, tb
                for pkt in vout.encode(vf):
                    out.mux(pkt)

            try:
                for packet in inp.demux(vin, *inp.streams.audio):
                    if packet.stream.type == "video":
                        for frame in packet.decode():
                            img = frame.to_ndarray(format="bgr24")
                            encode(process(img, result.frames), frame.pts)
                            result.frames += 1
                            if on_frame is not None:
                                on_frame(result.frames)
                    elif packet.dts is not None:  # a None dts is the demuxer's flush marker
                        packet.stream = audio_map[packet.stream.index]
                        out.mux(packet)
                for pkt in vout.encode(None):
                    out.mux(pkt)
            except av.error.FFmpegError as exc:
                hint = " (an audio codec the container cannot hold? try a .mkv output)" \
                    if audio_map else ""
                raise VideoError(s, f"processing failed after {result.frames} frames: "
                                    f"{exc}{hint}") from exc
        if result.frames == 0:
            raise VideoError(s, "no video frame could be decoded")
        if first_pts is not None and last_pts is not None:
            result.span = (last_pts - first_pts) * tb
        if nudged:
            result.notes.append(f"{nudged} frame(s) repeated an earlier timestamp; each was "
                                "moved one tick later")
        if keep is None or keep():
            os.replace(tmp, d)
        else:
            tmp.unlink(missing_ok=True)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return result


def read_frames(path: str | os.PathLike[str]) -> list[Frame]:
    """Decode every frame of a (short) video as ``(H, W, 3) uint8 BGR``; for tests and tools."""
    with _open_input(Path(path)) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]
