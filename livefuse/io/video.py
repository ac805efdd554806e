"""Video in, video out, audio kept: decode with PyAV, process each frame, encode (H.264 by
default), and copy every audio stream's packets untouched.

:func:`transcode` runs as a pipeline (design.md §8): decode ‖ stage/upload ‖ process ‖ convert ‖
encode, each on its own thread with bounded queues between them (:mod:`livefuse.io.pipeline`).
The threads change when work happens, never what is written: the encoder gets the frames the
serial loop (``pipelined=False``) gives it, and packets reach the muxer in the same order. (The
video bytes may still differ: libx264 in PyAV's wheel now and then encodes the same frames a
little differently when the machine is busy.)

The output is written to a temp file beside the destination and renamed at the end, so an
interrupted run never leaves a half-written file under the final name and never touches the input.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol

import av
import cv2
import numpy as np
from av.video.reformatter import Interpolation

from livefuse.errors import VideoError
from livefuse.io.codecs import (
    DEFAULT_CRF,
    EncoderChoice,
    OpenedVideo,
    choose_encoder,
    open_video,
    plain_av_error,
)
from livefuse.io.folders import missing_folders, remove_empty
from livefuse.io.niced import open_niced
from livefuse.io.paths import part_path
from livefuse.io.pipeline import ChainStats, Passthrough, Stage, run_chain
from livefuse.io.streams import (
    copy_container_tags,
    copy_stream,
    copy_tags,
    display_matrix,
    dropped_streams_note,
)
from livefuse.types import Frame

# OBS records FLV or MPEG-TS where MKV is not chosen; camcorders write AVCHD's .m2ts/.mts
VIDEO_SUFFIXES = frozenset({".mp4", ".mkv", ".mov", ".avi", ".webm", ".m4v", ".flv", ".ts",
                            ".m2ts", ".mts"})
OUTPUT_VIDEO_SUFFIXES = frozenset({".mp4", ".mkv", ".mov", ".m4v"})


def media_types() -> str:
    """The input types ``run`` and ``batch`` accept, for messages: ``images: ...; videos: ...``
    (one list, so that no command names fewer than it takes)."""
    from livefuse.imaging import IMAGE_SUFFIXES

    return (f"images: {' '.join(sorted(IMAGE_SUFFIXES))}; "
            f"videos: {' '.join(sorted(VIDEO_SUFFIXES))}")
"""Containers :func:`transcode` writes (the encoded video plus the input's audio)."""

EARLY_END_TOLERANCE = 0.005
"""An input whose decoded frames fall short of the frame count its container declares by more
than this fraction (and more than one frame) "ended early"."""


@dataclass(frozen=True)
class VideoInfo:
    """What a video file holds.

    Attributes:
        width, height: px of the first video stream.
        rate: frame rate as an exact rational (e.g. ``30000/1001``).
        frames: frame count from the container, ``0`` when unknown.
        audio_streams: number of audio streams.
        duration: seconds the container declares for the video stream, ``None`` when unknown.
        start: the video stream's first timestamp (s, the container's timeline), ``None`` when
            it declares none.
    """

    width: int
    height: int
    rate: Fraction
    frames: int
    audio_streams: int
    duration: Fraction | None = None
    start: Fraction | None = None


@dataclass(frozen=True)
class Span:
    """A keyframe-aligned chunk of a video (``livefuse batch``), in the video stream's ticks.

    Frames with ``start <= pts < end`` are written; those from ``warm_from`` to ``start`` are
    processed first and not written, so tracking and landmark smoothing enter the chunk as they
    would in a run over the whole video. Decoding starts at the keyframe ``seek``.

    Attributes:
        seek: decode timestamp (dts) of the keyframe decoding starts at (at or before
            ``warm_from``): at or before that keyframe whether the demuxer seeks by dts
            (MPEG-TS) or by pts (MP4, Matroska); ``None``: from the file's start, no seek.
        warm_from: pts of the first frame processed.
        start: pts of the chunk's first written frame (a keyframe that opens a closed GOP).
        end: pts of the next chunk's first frame; ``None`` for the last chunk.
        origin: pts of the video's first frame (timestamps for smoothing count from it).
        first_index: index of the frame at ``warm_from`` in the whole video.
    """

    seek: int | None
    warm_from: int
    start: int
    end: int | None
    origin: int
    first_index: int


@dataclass(frozen=True)
class VideoOptions:
    """How a video file is decoded and encoded.

    Attributes:
        encoder: ``--video-encoder`` (see :data:`livefuse.config.VIDEO_ENCODER_CHOICES`).
        decoder: ``--video-decoder``: ``auto``, ``cpu`` or ``nvdec``.
        crf: quality, on x264's CRF scale (other encoders are mapped onto it).
        pipelined: decode, stage, process, convert and encode on their own threads.
        depth: bounded queue size between two stages.
        threads: threads of the CPU decoder and of a software encoder each; 0 leaves FFmpeg's
            choice (one per core, x264 one and a half). A batch worker sets them from its CPU
            share (:func:`livefuse.batch.worker.codec_threads`): four workers each with
            FFmpeg's choice ran 160 codec threads on 16 cores.
    """

    encoder: str = "auto"
    decoder: str = "auto"
    crf: int = DEFAULT_CRF
    pipelined: bool = True
    depth: int = 4
    threads: int = 0


@dataclass
class TranscodeResult:
    """Counts and notes from :func:`transcode`."""

    frames: int = 0  # 0: a chunk wholly inside a damaged stretch, which writes no file
    size: tuple[int, int] = (0, 0)
    rate: Fraction = Fraction(0)
    audio_streams_copied: int = 0
    notes: list[str] = field(default_factory=list)
    span: Fraction | None = None
    """Seconds from the first frame's timestamp to the last one's (``None`` without them)."""
    encoder: str = ""
    """The encoder used and why (``libx264 (auto; h264_nvenc does not open here)``)."""
    decoder: str = ""
    """How the video was decoded (``decode: CPU (NVDEC unavailable: ...)``)."""
    incomplete: str | None = None
    """Why the input gave fewer frames than it declares (``input ended early: 55 of 150
    frames``), or ``None``; the output then holds the frames that were decoded."""
    stats: ChainStats = field(default_factory=ChainStats)
    time_base_written: Fraction | None = None
    """The output's video time base when it is coarser than the input's (Matroska counts in
    1/1000 s): each frame's timestamp is then rounded to it; ``None`` when every one is kept
    exactly."""
    bad_packets: int = 0
    """Video packets that could not be decoded and were skipped."""
    failures: tuple[Fraction, ...] = ()
    """For each of them, the timestamp (s, the input's timeline) of the last frame written
    before it: a chunked batch's join tells a damaged stretch from a paused picture by them."""

    @property
    def measured_rate(self) -> Fraction | None:
        """Frames per second between the first and the last timestamp: a variable-rate clip's
        real average, where the container's nominal ``rate`` can say anything (Matroska: 30)."""
        if self.span is None or self.span <= 0 or self.frames < 2:
            return None
        return (self.frames - 1) / self.span


Region = tuple[int, int, int, int]
"""``(x0, y0, x1, y1)`` px of a frame, end-exclusive."""


@dataclass(frozen=True)
class Processed:
    """A processed frame and where it differs from its input.

    Attributes:
        frame: ``(H, W, 3) uint8 BGR``.
        regions: every part of ``frame`` that processing changed; outside them the output video
            keeps the decoded input's own YUV samples (no colour round trip, and only the faces
            are converted back). ``None``: anything may have changed.
    """

    frame: Frame
    regions: Sequence[Region] | None = None


class FrameProcessor(Protocol):
    """What :func:`transcode` runs on each frame, split so the two halves overlap.

    ``stage`` runs on the staging thread (the GPU path uploads the frame there), ``process`` on
    the processing thread; each is called in frame order, one frame at a time.
    """

    def stage(self, frame: Frame) -> Any: ...

    def process(self, staged: Any, index: int, t_s: float,
                following: Any = None) -> Frame | Processed:
        """``staged`` -> the output frame ``(H, W, 3) uint8 BGR`` (may be the input array), or
        the same with the regions it changed (:class:`Processed`); ``t_s``: the frame's own
        timestamp in seconds from the video's first frame. ``following``: on a pipelined
        job, the next frame's ``stage`` value when the processing thread already holds it
        (``None`` otherwise), which ``process`` may start on (the engine queues its
        detection); it is the value of the next call."""
        ...

    def warm(self, staged: Any, index: int, t_s: float) -> None:
        """A frame of a chunk's warm-up (:attr:`Span.warm_from` up to ``Span.start``): it is
        not written, so only what carries into the next frames has to run."""
        ...


class _FunctionProcessor:
    def __init__(self, fn: Callable[[Frame, int], Frame]) -> None:
        self.fn = fn

    def stage(self, frame: Frame) -> Frame:
        return frame

    def process(self, staged: Frame, index: int, t_s: float, following: Any = None) -> Frame:
        return self.fn(staged, index)  # a plain function has nothing to start early

    def warm(self, staged: Frame, index: int, t_s: float) -> None:
        self.fn(staged, index)  # a plain function may keep state from frame to frame


def is_video_path(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


def _declared_duration(container: Any, vs: Any) -> Fraction | None:
    """The video's declared duration (s) from its first timestamp: the stream's own, else the
    container's less the time before the video starts (a Matroska file declares only the
    whole file's, and a video that starts after its audio counted that gap as missing frames:
    "input ended early", exit 3, on a whole file)."""
    if vs.duration and vs.time_base:
        return Fraction(vs.duration) * Fraction(vs.time_base)
    if container.duration:
        whole = Fraction(container.duration, av.time_base)
        if vs.start_time is not None and vs.time_base and container.start_time is not None:
            late = Fraction(vs.start_time) * Fraction(vs.time_base) - \
                Fraction(container.start_time, av.time_base)
            whole -= max(late, Fraction(0))
        return whole
    return None


def probe(path: str | os.PathLike[str]) -> VideoInfo:
    """Read a video's size, exact frame rate, frame count and audio stream count.

    Raises:
        VideoError: missing, empty, undecodable or without a video stream.
    """
    opened = open_video(Path(path), "cpu")
    with opened.container as c:
        vs = c.streams.video[0]
        rate = vs.average_rate or vs.guessed_rate or Fraction(30)
        start = None if vs.start_time is None or not vs.time_base else \
            Fraction(vs.start_time) * Fraction(vs.time_base)
        return VideoInfo(vs.codec_context.width, vs.codec_context.height, Fraction(rate),
                         int(vs.frames or 0), len(c.streams.audio), _declared_duration(c, vs),
                         start)


def muxer_options(path: Path, time_base: Fraction) -> dict[str, str]:
    """Container options that keep every timestamp exact: an MP4/MOV edit list (which places a
    track that starts after 0) counts in the movie's timescale, 1/1000 s by default, which would
    move a 30000/1001 clip's frames by up to half a millisecond; the stream's own is used."""
    if path.suffix.lower() in (".mp4", ".mov", ".m4v") and 0 < time_base.denominator < 2**31:
        return {"movie_timescale": str(time_base.denominator)}
    return {}


def _even(n: int) -> int:
    return n + (n & 1)


_KEPT_FORMATS = frozenset({"yuv420p", "yuvj420p"})
"""Decoded pixel formats whose samples the encoder (yuv420p) takes as they are (yuvj420p is the
same layout in full range)."""

_TO_YUV = Interpolation.AREA | Interpolation.ACCURATE_RND
"""BGR -> 4:2:0 with each chroma sample the mean of its 2x2 pixels, rounded: the round trip
from the decoded samples and back is off by 0.98 luma levels on average instead of swscale's
default 1.44, and by 0.04 chroma levels instead of 0.23 (astronaut, 640x480); it costs twice the
default's time, which is paid on the face regions only (whole frames only as a fallback)."""


@dataclass(frozen=True)
class _Colour:
    """A decoded frame's colour description (FFmpeg's AVColorSpace, AVColorRange,
    AVColorPrimaries and AVColorTransferCharacteristic codes)."""

    space: int
    range: int
    primaries: int
    trc: int

    @staticmethod
    def of(frame: Any) -> _Colour:
        return _Colour(int(frame.colorspace), int(frame.color_range),
                       int(frame.color_primaries), int(frame.color_trc))

    def to_yuv(self, frame: Any, threads: int | None = None) -> Any:
        """``frame`` (bgr24) as yuv420p in this description: the exact inverse of the
        conversion PyAV made to give the frame as BGR (it follows the decoded frame's matrix and
        range), so an unchanged pixel comes back as it was decoded and a 709 video is not
        shifted. The primaries and transfer are only tagged: the BGR samples are the input's
        own code values, and asked to convert to them FFmpeg's scaler (8.x) took the BGR for
        sRGB and mapped it into PQ or HLG (a new user's trial: an HDR10 clip came out with its
        whites grey, luma p99 229 -> 141, exit 0)."""
        out = frame.reformat(format="yuv420p", dst_colorspace=self.space,
                             dst_color_range=self.range or None, interpolation=_TO_YUV,
                             threads=threads)
        out.color_primaries, out.color_trc = self.primaries, self.trc
        return out


@dataclass(eq=False)
class _Item:
    """One frame on its way through the chain."""

    index: int
    pts: int
    t_s: float
    img: Any  # the decoded frame, then the staged frame, then the output frame
    write: bool = True
    out: Any = None  # the av.VideoFrame for the encoder
    colour: _Colour | None = None
    yuv: Any = None  # the decoded av.VideoFrame (yuv420p), when the output can reuse its samples


class _Decoder:
    """The chain's source: demuxes video (and, for a whole file, audio) packets and decodes the
    video, giving each frame its output timestamp. Input errors end the stream (the frames before
    them are kept); :meth:`incomplete` says whether the input ended early."""

    def __init__(self, opened: OpenedVideo, src: Path, span: Span | None, decoder: str,
                 threads: int = 0) -> None:
        self.opened, self.src, self.span, self.decoder = opened, src, span, decoder
        inp = opened.container
        self.vin = inp.streams.video[0]
        if opened.decoder == "CPU":
            self.vin.thread_type = "AUTO"
            if threads:
                self.vin.codec_context.thread_count = threads
        self.rate = Fraction(self.vin.average_rate or self.vin.guessed_rate or Fraction(30))
        # The input's own time base, not 1/rate: a variable-rate clip (phones) has frames
        # closer together than 1/average-rate, which would round onto one tick and be
        # refused by the muxer ("non monotonically increasing dts").
        self.tb = Fraction(self.vin.time_base) if self.vin.time_base else 1 / self.rate
        self.step = max(1, round(1 / (self.rate * self.tb)))  # one nominal frame period, ticks
        self.decoded = 0
        self.written = 0
        self.nudged = 0
        self.bad_packets = 0
        self.error: str | None = None  # what stopped decoding, or the last bad packet's
        self._error_at = 0  # frames decoded when the last packet failed
        self._skipped: str | None = None  # that packet's error, worded as a part skipped
        self._failed_after: set[int | None] = set()  # the last written pts before each one
        self.holes = 0  # steps between written frames long enough to be a hole (gap_reason)
        self._hole_ticks = max(GAP_MIN_S, GAP_MIN_FRAMES / self.rate) / self.tb
        self.first_pts: int | None = None
        self.last_pts: int | None = None
        self.gap = (0, 0)  # the longest step between two written frames, and where (ticks)
        self.sound: list[tuple[Fraction, Fraction]] = []  # each audio packet's span (s)
        self.paused: str | None = None  # a gap its sound goes on through (:func:`paused_note`)
        self.keep_yuv = False  # set by the encoder when its frames can start from the input's
        if opened.decoder == "CPU":
            open_niced(self.vin.codec_context)

    def _packets(self) -> Iterator[Any]:
        inp = self.opened.container
        if self.span is not None:
            if self.span.seek is not None:
                inp.seek(self.span.seek, stream=self.vin, backward=True, any_frame=False)
            return iter(inp.demux(self.vin))
        return iter(inp.demux(self.vin, *inp.streams.audio))

    def _frames(self, packet: Any) -> list[Any]:
        try:
            return list(packet.decode())
        except av.error.FFmpegError as exc:
            if self.decoded == 0 and self.opened.decoder == "NVDEC":
                raise _NvdecRefused(plain_av_error(exc)) from exc
            self.bad_packets += 1
            self._failed_after.add(self.last_pts)
            self.error, self._error_at = self._stopped_by(exc), self.decoded
            self._skipped = "damaged data" if isinstance(exc, av.error.InvalidDataError) \
                else plain_av_error(exc)
            return []

    def _stopped_by(self, exc: BaseException) -> str:
        """What stopped decoding, in words: after frames were decoded, "no readable video data
        ... or it is not a video" contradicted the frames in hand (a new user's trial)."""
        if self.decoded > 0 and isinstance(exc, av.error.InvalidDataError):
            return CUT_OFF
        return plain_av_error(exc)

    def __iter__(self) -> Iterator[Any]:
        packets = self._packets()
        origin = self.span.origin if self.span is not None else None
        index = self.span.first_index if self.span is not None else 0
        while True:
            try:
                packet = next(packets)
            except StopIteration:
                return
            except av.error.FFmpegError as exc:  # the demuxer gave up: the input ends here
                self.error = self._stopped_by(exc)
                return
            if packet.stream.type != "video":
                if packet.dts is not None:  # a None dts is the demuxer's flush marker
                    if packet.pts is not None and packet.time_base:
                        t0 = Fraction(packet.pts) * Fraction(packet.time_base)
                        self.sound.append(
                            (t0, t0 + Fraction(packet.duration or 0) * Fraction(packet.time_base)))
                    yield Passthrough(packet)
                continue
            for frame in self._frames(packet):
                pts = frame.pts
                span = self.span
                if span is not None and pts is not None:
                    if pts < span.warm_from:
                        continue
                    if span.end is not None and pts >= span.end:
                        return
                img = self._bgr(frame)
                self.decoded += 1
                write = span is None or pts is None or pts >= span.start
                pts = self._output_pts(pts) if write else pts
                if origin is None:
                    origin = pts
                t_s = float((pts - origin) * self.tb)
                yield _Item(index, pts, t_s, img, write, colour=_Colour.of(frame),
                            yuv=self._yuv(frame) if write else None)
                index += 1

    def _bgr(self, frame: Any) -> Any:
        try:
            return frame.to_ndarray(format="bgr24")
        except (av.error.FFmpegError, ValueError, TypeError) as exc:
            if self.decoded == 0 and self.opened.decoder == "NVDEC":
                # a hardware frame PyAV cannot bring back: decode this input on the CPU
                raise _NvdecRefused(str(exc)) from exc
            raise

    def _yuv(self, frame: Any) -> Any:
        """The decoded frame itself when the encoder can take its samples as they are, else
        ``None``. Not a copy: FFmpeg's decoded frames are reference-counted, the decoder writes
        each new frame into a buffer no one else holds, and the convert stage only reads this
        one (:func:`_copy_planes`)."""
        if not self.keep_yuv or frame.format.name not in _KEPT_FORMATS or \
                any(plane.line_size <= 0 for plane in frame.planes):  # bottom-up rows
            return None
        return frame

    def _output_pts(self, pts: int | None) -> int:
        """The timestamp a written frame gets: its own; a missing one continues the cadence, a
        repeated one moves one tick later (the encoder refuses both)."""
        if pts is None:  # some demuxers (raw streams) give none
            pts = 0 if self.last_pts is None else self.last_pts + self.step
        elif self.last_pts is not None and pts <= self.last_pts:
            pts, self.nudged = self.last_pts + 1, self.nudged + 1
        elif self.last_pts is not None:
            step = pts - self.last_pts
            if step > self.gap[0]:
                self.gap = (step, self.last_pts)
            if step > self._hole_ticks:
                self.holes += 1
        self.last_pts = pts
        if self.first_pts is None:
            self.first_pts = pts
        self.written += 1
        return pts

    def incomplete(self, declared: int, duration: Fraction | None) -> str | None:
        """Why the input (a whole file) gave fewer frames than it declares, or ``None``."""
        covered = None
        if self.last_pts is not None and self.first_pts is not None:
            covered = (self.last_pts - self.first_pts) * self.tb + 1 / self.rate
        start = self.first_pts or 0
        # the declared duration counts from the stream's start: frames that begin late lost
        # the file's start (a damaged first GOP was "input ended early", frames to the end)
        begins = self.vin.start_time
        lead = Fraction(0) if begins is None or self.first_pts is None else \
            max(Fraction(0), (self.first_pts - begins) * self.tb)
        # a hole's place counts from the stream's start too, as a player shows it
        gap, at = self.gap[0] * self.tb, (self.gap[1] - start) * self.tb + lead
        hole = gap_reason(gap, at, self.rate)
        # a gap where packets failed to decode is damage, whatever the sound did: zeroed
        # video data in an MP4 keeps its audio packets (a new user's damaged clip). The
        # decoder's frame threads report a failure a few frames late or early.
        near = self.gap[1] - ERROR_LAG_FRAMES * self.step, self.gap[1] + self.gap[0]
        failed = any(p is not None and near[0] <= p <= near[1] for p in self._failed_after)
        paused = hole is not None and not failed and \
            sound_goes_on(self.sound, self.gap[1] * self.tb,
                          (self.gap[1] + self.gap[0]) * self.tb)
        # frames decoded after the last bad packet: the input did not end there
        skipped = self.decoded > self._error_at and self._skipped is not None
        why = incomplete_reason(self.decoded, declared, duration, covered, self.rate,
                                None if skipped else self.error, self.bad_packets,
                                hole=None if paused else (gap, at), holes=self.holes,
                                skipped=self._skipped if skipped else None, lead=lead)
        if why is not None:
            return why
        if paused:
            self.paused = paused_note(gap, at)
            return None
        return hole


CUT_OFF = "the data after that could not be read (the file is damaged or was cut off)"
"""Why a video ended before its declared end, when the frames decoded before it were fine."""


ERROR_LAG_FRAMES = 16
"""How many frames away from a hole a decoding failure may be reported and still be its cause
(frame threads; FFmpeg runs up to 16 by default)."""

GAP_MIN_S = Fraction(1, 2)
GAP_MIN_FRAMES = 5
"""A step between two frames longer than both of these is a hole, not a variable frame rate:
phones vary between about 24 and 60 fps (2.5x), and a Matroska file with a damaged stretch
went on after the demuxer's resync with a 1.0 s jump and no error (a new user's trial)."""


def gap_reason(gap: Fraction, at: Fraction, rate: Fraction) -> str | None:
    """Why a video's frames have a hole, or ``None``.

    Args:
        gap: the longest step between two consecutive frames' timestamps (s).
        at: where it starts, from the stream's start (s; the first frame's when it declares
            none).
        rate: the stream's average frame rate (fps).
    """
    if gap <= max(GAP_MIN_S, GAP_MIN_FRAMES / rate):
        return None
    minutes, seconds = divmod(float(at), 60)
    return (f"input damaged: no frame for {float(gap):.1f} s after {int(minutes)}:"
            f"{seconds:05.2f} (a damaged stretch skipped, or a recording that paused); the "
            "output shows the frame before it that long")


AUDIO_HOLE_S = Fraction(1, 10)
"""A hole between audio packets longer than this is missing sound (AAC's packets follow each
other every 21 ms)."""


def sound_goes_on(spans: Sequence[tuple[Fraction, Fraction]], start: Fraction,
                  end: Fraction) -> bool:
    """Whether audio packets spanning ``spans`` (s, the container's timeline) run from ``start``
    to ``end`` with no hole over :data:`AUDIO_HOLE_S`. A video whose picture pauses while its
    sound goes on is a recording that paused its picture (a screen recorder over a still
    screen, variable frame rate), not a damaged stretch, which loses both (a new user's trial:
    such a clip was "input damaged", exit 3 on every rerun of its batch)."""
    at = start
    for a, b in sorted(spans):
        if b <= at:
            continue
        if a > at + AUDIO_HOLE_S:
            return False
        at = b
        if at >= end:
            return True
    return bool(spans) and at + AUDIO_HOLE_S >= end


def paused_note(gap: Fraction, at: Fraction) -> str:
    """The note for a picture that pauses ``gap`` seconds ``at`` seconds in while its sound goes
    on (:func:`sound_goes_on`): kept as it is, not a fault."""
    minutes, seconds = divmod(float(at), 60)
    return (f"the picture pauses {float(gap):.1f} s after {int(minutes)}:{seconds:05.2f} while "
            "the sound goes on (a variable-frame-rate recording); the output keeps that pause")


def incomplete_reason(decoded: int, declared: int, duration: Fraction | None,
                      covered: Fraction | None, rate: Fraction, error: str | None = None,
                      bad_packets: int = 0, hole: tuple[Fraction, Fraction] | None = None,
                      holes: int = 1, skipped: str | None = None,
                      lead: Fraction = Fraction(0)) -> str | None:
    """Why a video gave fewer frames than its container declares, or ``None``.

    Frames missing while the decoded ones reach the declared duration were lost inside the
    file, not at its end: "input damaged", naming the longest hole (a new user's trial read
    "input ended early: 245 of 300 frames" for a file whose last 3 s were in the output).
    Frames missing at the end are "input ended early", with a hole inside named beside it.

    Args:
        decoded: frames decoded. declared: the container's frame count (0 when it has none).
        duration: the video's declared duration (s).
        covered: seconds the decoded frames cover (first to last, plus one frame).
        error: the decoding error that stopped it, if any (the input ended there).
        bad_packets: packets that could not be decoded and were skipped.
        hole: the longest step between two decoded frames and where it starts (s from the
            stream's start); ``None`` when there is none to report (a picture that pauses while
            its sound goes on is not one).
        holes: how many steps are holes (:func:`gap_reason`).
        skipped: the error of packets skipped with frames decoded after them.
        lead: seconds from the stream's declared start to the first decoded frame: a first
            GOP that could not be decoded (the output starts at the first frame decoded).
    """
    missing = declared - decoded
    slack = max(Fraction(1, 2), 2 / rate)
    # each hole, with what the output shows there
    places = []
    if gap_reason(lead, Fraction(0), rate) is not None:
        places.append(f"no frame for the first {float(lead):.1f} s (a damaged stretch); the "
                      "output starts at the first frame decoded after it")
    if hole is not None and gap_reason(hole[0], hole[1], rate) is not None:
        minutes, seconds = divmod(float(hole[1]), 60)
        places.append(f"no frame for {float(hole[0]):.1f} s after {int(minutes)}:"
                      f"{seconds:05.2f}" + (f", the longest of {holes} such gaps"
                                            if holes > 1 else "")
                      + " (a damaged stretch); the output shows the frame before it that long")
    end = None if covered is None else lead + covered  # the last frame's end, from the start
    reaches = duration is not None and end is not None and duration - end <= slack
    # FFmpeg's decoder conceals what it lost with blocks of the frames before: a new user's
    # trial found the frames after a stretch garbled to the next keyframe
    blocks = "; the frames after it, up to the next keyframe, may show blocks of damage" \
        if skipped else ""
    if declared > 0 and missing > max(1, declared * EARLY_END_TOLERANCE):
        if reaches:
            if not places and skipped is None and error is None:
                # no hole and no failure: the count includes frames an edit list leaves out
                # (a lossless cut keeps the GOP before its start; a review: "input damaged",
                # exit 3, on a valid file)
                return None
            where = f": {'; '.join(places)}" if places else f" ({skipped})" if skipped else ""
            return (f"input damaged: {missing} of {declared} frames could not be "
                    f"decoded{where}{blocks}")
        # the same words whether the decoder raised at the cut or just ran out of data: which
        # one happens depends on its thread count (a review: Ray's one-CPU workers and `run`
        # worded the same cut file differently)
        why = f": {error or CUT_OFF}"
        also = f"; also {'; '.join(places)}" if places else ""
        return f"input ended early: {decoded} of {declared} frames{why}{also}"
    if declared <= 0 and duration and end is not None and not reaches:
        about = round(duration * rate)
        return (f"input ended early: {decoded} frames, {float(end):.1f} s of "
                f"{float(duration):.1f} s (about {about} frames): {error or CUT_OFF}")
    if lead and places and gap_reason(lead, Fraction(0), rate) is not None:
        # a damaged start in a container that declares no frame count (Matroska)
        return f"input damaged: {'; '.join(places)}{blocks}"
    if error is not None or skipped is not None:
        return (f"input damaged: {bad_packets or 1} part(s) could not be decoded "
                f"({error or skipped}); {decoded} frames decoded")
    return None


class _NvdecRefused(Exception):
    """NVDEC opened but refused the stream's first packet (an unsupported profile)."""


_HEVC_ENCODERS = frozenset({"libx265", "hevc_nvenc"})


class _Encoder:
    """The chain's convert stage and sink: pads, converts to the encoder's pixel format, encodes
    and muxes, copying audio packets as they come."""

    def __init__(self, out: Any, choice: EncoderChoice, dec: _Decoder, size: tuple[int, int],
                 audio_map: dict[int, Any], src: Path,
                 on_frame: Callable[[int], None] | None, threads: int = 0,
                 display: Sequence[int] | None = None) -> None:
        self.out, self.dec, self.audio_map, self.src = out, dec, audio_map, src
        self.on_frame = on_frame
        self.w, self.h = size
        self.ow, self.oh = _even(self.w), _even(self.h)
        vout = out.add_stream(choice.name, rate=dec.rate, time_base=dec.tb)
        vout.width, vout.height, vout.pix_fmt = self.ow, self.oh, "yuv420p"
        vout.options = dict(choice.options)
        if choice.frame_threads and not choice.hardware:
            vout.codec_context.thread_type = "FRAME"
        if threads and not choice.hardware:
            vout.codec_context.thread_count = threads
        src_ctx, ctx = dec.vin.codec_context, vout.codec_context
        # the output describes its colours as the input did (a 709 recording stays 709)
        ctx.colorspace, ctx.color_range = src_ctx.colorspace, src_ctx.color_range
        ctx.color_primaries, ctx.color_trc = src_ctx.color_primaries, src_ctx.color_trc
        copy_tags(dec.vin, vout)
        if ctx.name in _HEVC_ENCODERS and out.format.name in ("mp4", "mov"):
            # FFmpeg's default 'hev1' keeps the parameter sets in the stream; Apple's players
            # (QuickTime, Safari, iOS) play an HEVC MP4/MOV only when it is tagged 'hvc1'
            ctx.codec_tag = "hvc1"
        if display is not None:  # turned on screen as the input is (a phone's portrait clip)
            vout.set_display_matrix(display)
        dec.keep_yuv = (self.ow, self.oh) == (self.w, self.h)
        self.vout = vout
        self.frames = 0
        if not choice.hardware:
            open_niced(ctx)

    def convert(self, item: _Item) -> _Item:
        if not item.write:
            return item
        done = item.img
        img, regions = (done.frame, done.regions) if isinstance(done, Processed) else (done, None)
        if img.shape[:2] != (self.h, self.w) or img.dtype != np.uint8:
            raise VideoError(self.src, f"frame {item.index}: processing returned shape "
                                       f"{img.shape} {img.dtype}, expected ({self.h}, {self.w}, "
                                       "3) uint8")
        colour = item.colour or _Colour(2, 0, 2, 2)  # unspecified: swscale's BT.601 defaults
        if item.yuv is not None and regions is not None:
            vf = self._patched(item.yuv, img, regions, colour)
        else:
            if (self.ow, self.oh) != (self.w, self.h):
                img = np.asarray(cv2.copyMakeBorder(img, 0, self.oh - self.h, 0,
                                                    self.ow - self.w, cv2.BORDER_REPLICATE),
                                 dtype=np.uint8)
            vf = colour.to_yuv(av.VideoFrame.from_ndarray(img, format="bgr24"))
        vf.pts, vf.time_base = item.pts, self.dec.tb
        item.out, item.img, item.yuv = vf, None, None
        return item

    def _patched(self, decoded: Any, img: Frame, regions: Sequence[Region],
                 colour: _Colour) -> Any:
        """A copy of the ``decoded`` frame's samples with only ``regions`` of ``img`` converted
        into them (a face is a few percent of a 1080p frame; the whole-frame conversion cost
        more than the rest of the job on the CPU). Regions grow to even bounds: a 4:2:0 chroma
        sample covers 2x2 pixels."""
        h, w = self.h, self.w
        vf = av.VideoFrame(w, h, "yuv420p")
        luma, u, v = _copy_planes(decoded, vf)
        for x0, y0, x1, y1 in regions:
            x0, y0 = max(0, x0) & ~1, max(0, y0) & ~1
            x1, y1 = min(w, x1 + (x1 & 1)), min(h, y1 + (y1 & 1))
            if x1 <= x0 or y1 <= y0:
                continue
            # one thread: swscale's own threads cost more than they give on a face-sized region
            part = colour.to_yuv(av.VideoFrame.from_ndarray(
                np.ascontiguousarray(img[y0:y1, x0:x1]), format="bgr24"), threads=1)
            py, pu, pv = _plane_views(part)
            luma[y0:y1, x0:x1] = py
            u[y0 // 2:y1 // 2, x0 // 2:x1 // 2] = pu
            v[y0 // 2:y1 // 2, x0 // 2:x1 // 2] = pv
        vf.colorspace, vf.color_range = colour.space, colour.range
        vf.color_primaries, vf.color_trc = colour.primaries, colour.trc
        return vf

    def sink(self, item: Any) -> None:
        if isinstance(item, Passthrough):
            packet = item.payload
            packet.stream = self.audio_map[packet.stream.index]
            self.out.mux(packet)
            return
        if not item.write:
            return
        for pkt in self.vout.encode(item.out):
            self.out.mux(pkt)
        self.frames += 1
        if self.on_frame is not None:
            self.on_frame(self.frames)

    def flush(self) -> None:
        for pkt in self.vout.encode(None):
            self.out.mux(pkt)


def _plane_views(frame: Any) -> tuple[Any, ...]:
    """Writable ``(height, width) uint8`` numpy views of a planar 8-bit frame's planes (each
    plane's rows are ``line_size`` apart: FFmpeg pads them for alignment)."""
    views = []
    for plane in frame.planes:
        rows = np.frombuffer(plane, np.uint8, count=plane.line_size * plane.height)
        views.append(rows.reshape(plane.height, plane.line_size)[:, :plane.width])
    return tuple(views)


def _copy_planes(src: Any, dst: Any) -> tuple[Any, ...]:
    """Copy a decoded 4:2:0 frame's samples into ``dst`` (same size) and return ``dst``'s plane
    views. numpy copies without the GIL; PyAV's ``VideoFrame.from_ndarray`` held it for the whole
    frame (about 1 ms at 1080p on the H200), which stalled the engine's thread in a pipelined
    job (docs/BENCHMARKS.md §13)."""
    views = _plane_views(dst)
    for d, s in zip(views, _plane_views(src), strict=True):
        d[...] = s
    return views


def transcode(src: str | os.PathLike[str], dst: str | os.PathLike[str],
              process: Callable[[Frame, int], Frame] | None = None,
              on_frame: Callable[[int], None] | None = None, crf: int | None = None,
              keep: Callable[[], bool] | None = None, options: VideoOptions | None = None,
              span: Span | None = None, processor: FrameProcessor | None = None,
              cancel: threading.Event | None = None) -> TranscodeResult:
    """Run ``process`` on every frame of ``src`` and write ``dst`` (encoded video + the
    original audio).

    Args:
        src: input video.
        dst: output path; the container follows its suffix (``.mp4``, ``.mkv``, ``.mov``).
        process: ``(frame (H, W, 3) uint8 BGR, index) -> frame`` of the same size; or
        processor: the same split in a staging and a processing half (:class:`FrameProcessor`,
            what ``livefuse run`` gives: the GPU upload of frame n+1 overlaps the work on n).
        on_frame: called after each frame is encoded with the count so far (progress bars);
            from the encoding thread when pipelined.
        crf: quality on x264's CRF scale (overrides ``options.crf``).
        keep: asked once at the end; ``False`` discards the output (``dst`` is left untouched).
        options: encoder, decoder, threads (:class:`VideoOptions`; defaults when omitted).
        span: write only this keyframe-aligned chunk, video only (``livefuse batch`` joins the
            chunks and copies the audio once, from the input).
        cancel: set from another thread to stop (raises
            :class:`~livefuse.io.pipeline.Cancelled`; no part file is left).

    Frame timing is kept: each output frame carries its input frame's timestamp, in the input
    stream's own time base (so variable-frame-rate phone clips keep every frame where it was),
    and the declared rate is the input's exact rational. An odd width or height (which yuv420p
    cannot hold) is padded by one replicated pixel row/column; the note says so.

    An input that ends early or cannot be decoded to its end (a truncated download) is not an
    error: the frames decoded are written and :attr:`TranscodeResult.incomplete` says what was
    missing.

    Raises:
        VideoError: unreadable input, ``dst`` equal to ``src``, an unsupported output suffix, no
            frame at all, or an audio codec the output container cannot hold (the message
            suggests ``.mkv``).
        LivefuseError: a named encoder that does not open here.
    """
    s, d = Path(src), Path(dst)
    opts = options or VideoOptions()
    if crf is not None:
        opts = replace(opts, crf=crf)  # the other options as given, threads too
    if d.suffix.lower() not in OUTPUT_VIDEO_SUFFIXES:
        raise VideoError(d, f"unsupported output suffix '{d.suffix}': use .mp4, .mkv or .mov")
    if d.exists() and s.exists() and d.resolve() == s.resolve():
        raise VideoError(d, "output would overwrite the input; choose another output path")
    if processor is None:
        if process is None:
            raise TypeError("transcode needs process or processor")
        processor = _FunctionProcessor(process)
    choice = choose_encoder(opts.encoder, opts.crf)
    try:
        return _transcode(s, d, processor, on_frame, keep, opts, choice, span, opts.decoder,
                          cancel)
    except _NvdecRefused as exc:
        result = _transcode(s, d, processor, on_frame, keep, opts, choice, span, "cpu", cancel)
        result.decoder = f"decode: CPU (NVDEC refused this stream: {exc})"
        return result


def _transcode(s: Path, d: Path, processor: FrameProcessor,
               on_frame: Callable[[int], None] | None, keep: Callable[[], bool] | None,
               opts: VideoOptions, choice: EncoderChoice, span: Span | None,
               decoder: str, cancel: threading.Event | None) -> TranscodeResult:
    result = TranscodeResult(encoder=choice.note or choice.name)
    opened = open_video(s, decoder)
    result.decoder = opened.note
    if span is None and opened.container.streams.audio:
        check_audio_fits(s, d)
    made = missing_folders(d)
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = part_path(d)
    vin = opened.container.streams.video[0]
    tb = Fraction(vin.time_base) if vin.time_base else Fraction(1, 1000)
    try:
        audio_hint = " (an audio codec the container cannot hold? try a .mkv output)" \
            if opened.container.streams.audio and span is None else ""
        with opened.container as inp, _output(tmp, muxer_options(d, tb), s, d,
                                              audio_hint) as out:
            dec = _Decoder(opened, s, span, decoder, opts.threads)
            w, h = dec.vin.codec_context.width, dec.vin.codec_context.height
            audio_map: dict[int, Any] = {}
            enc = _Encoder(out, choice, dec, (w, h), audio_map, s, on_frame, opts.threads,
                           display_matrix(s))
            if span is None:  # after the video: players and editors expect it as stream 0
                for a in inp.streams.audio:
                    audio_map[a.index] = copy_stream(out, a)
                copy_container_tags(inp, out)
            dropped = dropped_streams_note(inp)
            if dropped is not None:
                result.notes.append(dropped)
            depth = _bit_depth(dec.vin.codec_context.format)
            if depth > 8:
                result.notes.append(f"input is {depth}-bit video; the output is 8-bit (the "
                                    "engine works on 8-bit pictures)")
            # a new user's trial: a 4:4:4 input lost its colour detail unsaid
            fine = _finer_chroma(dec.vin.codec_context.format)
            if fine is not None:
                result.notes.append(f"input has {fine} colour "
                                    f"({dec.vin.codec_context.format.name}); the output is "
                                    "4:2:0, colour at half resolution, as players expect")
            if (enc.ow, enc.oh) != (w, h):
                result.notes.append(
                    f"input is {w}x{h}; 4:2:0 video needs even sizes, so the output is "
                    f"{enc.ow}x{enc.oh} (one edge pixel row/column repeated)")
            result.rate, result.size = dec.rate, (enc.ow, enc.oh)
            result.audio_streams_copied = len(audio_map)
            stages = [Stage("stage", lambda it: _set(it, processor.stage(it.img)), opts.depth),
                      Stage("process", lambda it: _processed(it, processor), 2,
                            ahead=lambda it, nxt: _processed(it, processor, nxt)),
                      Stage("convert", enc.convert, opts.depth)]
            try:
                run_chain(dec, stages, enc.sink, threaded=opts.pipelined,
                          sink_depth=opts.depth, stats=result.stats, name="livefuse-video",
                          cancel=cancel)
                enc.flush()
            except av.error.FFmpegError as exc:
                raise VideoError(s, f"writing '{d}' failed after {enc.frames} frames: "
                                    f"{plain_av_error(exc)}{_hint_for(exc, audio_hint)}"
                                 ) from exc
            result.frames = enc.frames
            written = Fraction(enc.vout.time_base) if enc.vout.time_base else None
            if written is not None and dec.tb % written != 0:
                result.time_base_written = written
            result.bad_packets = dec.bad_packets
            result.failures = tuple(sorted(p * dec.tb for p in dec._failed_after
                                           if p is not None))
            if span is None:
                info_frames = int(dec.vin.frames or 0)
                result.incomplete = dec.incomplete(info_frames,
                                                   _declared_duration(inp, dec.vin))
        if result.frames == 0:
            if span is not None and dec.bad_packets:
                # a chunk wholly inside a damaged stretch: it writes no file, and the join
                # goes on past it as a whole file's run does (a review: a damaged first GOP
                # failed a chunked batch item whose run kept 192 of 240 frames)
                tmp.unlink(missing_ok=True)
                return result
            raise VideoError(s, "no video frame could be decoded" +
                             (f" ({dec.error})" if dec.error else ""))
        if dec.first_pts is not None and dec.last_pts is not None:
            result.span = (dec.last_pts - dec.first_pts) * dec.tb
        if dec.nudged:
            result.notes.append(f"{dec.nudged} frame(s) repeated an earlier timestamp; each was "
                                "moved one tick later")
        if dec.paused is not None:
            result.notes.append(dec.paused)
        if keep is None or keep():
            os.replace(tmp, d)
        else:
            tmp.unlink(missing_ok=True)
            remove_empty(made)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        remove_empty(made)
        # a full disk as the muxer closes: the output named (a new user's trial read only
        # "no space left on device"), not its part file
        if exc.filename is None or str(exc.filename) == str(tmp):
            raise OSError(exc.errno, exc.strerror or str(exc), str(d)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        remove_empty(made)
        raise
    return result


def check_audio_fits(src: Path, dst: Path) -> None:
    """Refuse, before any frame is processed, audio that ``dst``'s container cannot hold (PCM
    in an MP4): one packet of each audio stream is muxed into a scratch file of the same
    suffix, where FFmpeg refuses it as it would at the end of the real run.

    Raises:
        VideoError: naming the codec and suggesting ``.mkv``.
    """
    with av.open(str(src)) as inp, tempfile.TemporaryDirectory() as tmp:
        streams = list(inp.streams.audio)
        try:
            with av.open(str(Path(tmp) / f"probe{dst.suffix}"), "w") as out:
                copies = {a.index: out.add_stream_from_template(a) for a in streams}
                todo = set(copies)
                for packet in inp.demux(*streams):
                    if packet.dts is None or packet.stream.index not in todo:
                        continue
                    todo.discard(packet.stream.index)
                    packet.stream = copies[packet.stream.index]
                    out.mux(packet)
                    if not todo:
                        break
        # PyAV refuses some pairs itself, before FFmpeg: "'ipod' format does not support
        # 'pcm_s16le' codec" (a new user's trial: a traceback for PCM into .m4v)
        except (av.error.FFmpegError, ValueError) as exc:
            codecs = ", ".join(sorted({a.codec_context.name for a in streams}))
            raise VideoError(src, f"its audio ({codecs}) cannot be copied into a "
                                  f"{dst.suffix} file ({plain_av_error(exc)}); write a .mkv "
                                  "instead") from exc


@contextmanager
def _output(tmp: Path, options: dict[str, str], src: Path, dst: Path,
            hint: str) -> Iterator[Any]:
    """The output container, closed at the end. Closing writes the trailer and can fail (an
    audio codec MP4 cannot hold is refused there): that becomes a :class:`VideoError`; while
    another error is on its way out, a failure to close is dropped so that error is the one
    reported, not the muxer's."""
    out = av.open(str(tmp), "w", options=options)
    try:
        yield out
    except BaseException:
        with suppress(av.error.FFmpegError):
            out.close()
        raise
    try:
        out.close()
    except av.error.FFmpegError as exc:
        raise VideoError(src, f"writing '{dst}' failed: {plain_av_error(exc)}"
                              f"{_hint_for(exc, hint)}") from exc


def _hint_for(exc: Exception, hint: str) -> str:
    """``hint`` (about audio a container cannot hold) unless the error is the system's (no
    permission, no such folder, a full disk): a new user's read-only folder was answered with
    "permission denied (an audio codec the container cannot hold? ...)"."""
    return "" if isinstance(exc, OSError) else hint


def _bit_depth(fmt: Any) -> int:
    """Bits per sample of a PyAV video format (8 when unknown)."""
    if fmt is None:
        return 8
    return max((int(c.bits) for c in fmt.components), default=8)


def _finer_chroma(fmt: Any) -> str | None:
    """``4:4:4``, ``4:2:2`` or ``4:4:0`` when a PyAV video format holds its colour finer than
    4:2:0 (RGB formats count as 4:4:4), else ``None``."""
    if fmt is None:
        return None
    name = str(fmt.name)
    if "444" in name or name.startswith(("gbr", "rgb", "bgr", "argb", "abgr")):
        return "4:4:4"
    return next((f"{k[0]}:{k[1]}:{k[2]}" for k in ("422", "440") if k in name), None)


def _set(item: _Item, value: Any) -> _Item:
    item.img = value
    return item


def _processed(item: _Item, processor: FrameProcessor, following: _Item | None = None) -> _Item:
    if item.write:
        item.img = processor.process(item.img, item.index, item.t_s,
                                     None if following is None else following.img)
    else:  # a warm-up frame: nothing of it is written
        processor.warm(item.img, item.index, item.t_s)
        item.img = None
    return item


def read_frames(path: str | os.PathLike[str]) -> list[Frame]:
    """Decode every frame of a (short) video as ``(H, W, 3) uint8 BGR``; for tests and tools."""
    with open_video(Path(path), "cpu").container as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


__all__ = ["CUT_OFF", "ERROR_LAG_FRAMES", "OUTPUT_VIDEO_SUFFIXES", "VIDEO_SUFFIXES",
           "FrameProcessor",
           "Processed", "Region", "Span", "TranscodeResult", "VideoInfo", "VideoOptions",
           "check_audio_fits", "gap_reason", "incomplete_reason", "is_video_path",
           "muxer_options", "paused_note", "probe", "read_frames", "sound_goes_on", "transcode"]
