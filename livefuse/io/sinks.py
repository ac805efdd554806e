"""Where swapped frames go: a virtual camera, a video file, a preview callback, or several.

Every sink takes ``send(frame, t_capture_ns)`` with ``(H, W, 3) uint8 BGR`` frames and is a context
manager. ``send`` never blocks the inference thread for long: the virtual camera and the preview
hand the frame to their own thread through a one-frame slot (a busy consumer drops, never queues).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import cv2
import numpy as np

from livefuse.errors import VideoError
from livefuse.io.paths import ProtectedOutputError, check_replaceable, other_writer, part_path
from livefuse.io.streams import copy_stream
from livefuse.slot import LatestSlot, SlotClosed
from livefuse.types import Frame


def letterbox(frame: Frame, width: int, height: int) -> Frame:
    """Fit ``frame`` into ``width x height`` keeping its aspect ratio, black bars on the sides.

    Returns:
        ``(height, width, 3) uint8`` in the channel order of ``frame``.
    """
    h, w = frame.shape[:2]
    if (w, h) == (width, height):
        return frame
    scale = min(width / w, height / h)
    nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    small = cv2.resize(frame, (nw, nh), interpolation=interp)
    out = np.zeros((height, width, 3), np.uint8)
    x, y = (width - nw) // 2, (height - nh) // 2
    out[y:y + nh, x:x + nw] = small
    return out


class Sink:
    """Base class: a context manager whose ``__exit__`` calls :meth:`close`.

    Attributes:
        name: shown in metrics and status lines.
        dropped: frames this sink really dropped (replaced before it could send them).
        unsent: frames it had nowhere to send (the virtual camera with no device open): not drops.
        reports_sent: ``True`` while the sink reports each frame's real send time itself (the
            virtual camera's ``on_sent``); the runner then leaves the latency to it.
    """

    name = "sink"
    dropped = 0
    unsent = 0
    reports_sent = False

    def watch_sent(self, fn: Callable[[int, int], None]) -> None:
        """Have ``fn(t_capture_ns, t_sent_ns)`` called at each real send of a new frame, from the
        sink's own thread; sinks whose send is the hand-off itself ignore it."""

    def send(self, frame: Frame, t_capture_ns: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def native_vcam_backend() -> str:
    """pyvirtualcam's backend for this OS: ``v4l2loopback`` on Linux, ``obs`` elsewhere."""
    return "v4l2loopback" if sys.platform.startswith("linux") else "obs"


class VirtualCameraSink(Sink):
    """Frames to a virtual camera through pyvirtualcam, on the sink's own thread.

    The output thread sends each new frame as soon as it arrives, and re-sends the last one when
    none came for 1.5 camera frame periods.
    Frames go out as BGR (``PixelFormat.BGR``, which every built-in pyvirtualcam backend takes:
    v4l2loopback, OBS on Windows and macOS, Unity Capture); a backend that refuses BGR is opened
    in RGB and each new frame is converted once with OpenCV. Each new frame is copied (or
    letterboxed, when its size differs from the camera's) once into a buffer the sink owns, and
    re-sends send that buffer: the caller's array is never read again after its frame was taken.

    A missing or busy device gives a status (``virtual camera missing: ...``) and the sink
    retries every ``retry_s``; everything else keeps running. :meth:`set_enabled` turns it off
    and on while running.

    Counters (read from any thread):
        frames_sent: every frame handed to the device, re-sends included.
        frames_new: new frames handed to the device (one ``on_sent`` call each).
        dropped: frames replaced before the output thread could send them while a device was
            open (really lost).
        unsent: frames offered while no device was open ("not sent (no device)"); they are not
            drops: there was nowhere to send them.

    Args:
        width, height, fps: the virtual camera's format.
        device, backend: passed to ``pyvirtualcam.Camera`` (``backend=None``: this OS's native
            one, see :func:`native_vcam_backend`).
        on_status: receives status lines (called on the output thread).
        on_sent: ``(t_capture_ns, t_sent_ns)`` on the output thread right after each *new* frame
            was handed to the device (both ``time.perf_counter_ns``), for the latency metric;
            re-sends do not call it.
    """

    name = "virtual camera"

    def __init__(self, width: int = 1280, height: int = 720, fps: float = 30.0,
                 device: str | None = None, backend: str | None = None,
                 on_status: Callable[[str], None] = lambda s: None,
                 on_sent: Callable[[int, int], None] | None = None, retry_s: float = 2.0) -> None:
        self.width, self.height, self.fps = width, height, fps
        # Never pyvirtualcam's "try every registered backend": a test or plugin backend
        # registered elsewhere in the process must not capture a streamer's output.
        self.device, self.retry_s = device, retry_s
        self.backend = backend or native_vcam_backend()
        self.on_status, self.on_sent = on_status, on_sent
        self._watchers: list[Callable[[int, int], None]] = []
        self._slot: LatestSlot[tuple[Frame, int]] = LatestSlot()
        self._enabled = threading.Event()
        self._enabled.set()
        self._device_open = threading.Event()
        self._stop = threading.Event()
        self.frames_sent = 0
        self.frames_new = 0
        self.unsent = 0
        self.device_name: str | None = None
        self.rgb_fallback = False
        self._thread = threading.Thread(target=self._run, name="livefuse-vcam", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:  # type: ignore[override]
        return self._slot.dropped

    @property
    def reports_sent(self) -> bool:  # type: ignore[override]
        return bool(self._watchers) and self._device_open.is_set()

    def watch_sent(self, fn: Callable[[int, int], None]) -> None:
        self._watchers.append(fn)

    @property
    def is_open(self) -> bool:
        """Whether a device is open and taking frames now."""
        return self._device_open.is_set()

    def send(self, frame: Frame, t_capture_ns: int) -> None:
        """Offer a ``(H, W, 3) uint8 BGR`` frame (inference thread; never blocks).

        The array is read on the output thread when it takes the frame, so it must not be
        written to until the next ``send``; it is never read after that.
        """
        if not self._enabled.is_set():
            return
        if not self._device_open.is_set():
            self.unsent += 1  # nowhere to send it: not a drop
            return
        self._slot.put((frame, t_capture_ns))

    def set_enabled(self, on: bool) -> None:
        """Turn the output off (the device is released) or on again (it is reopened)."""
        if on:
            self._enabled.set()
        else:
            self._enabled.clear()

    def _open(self) -> Any:
        import pyvirtualcam

        def camera(fmt: Any) -> Any:
            return pyvirtualcam.Camera(self.width, self.height, self.fps, device=self.device,
                                       backend=self.backend, fmt=fmt)

        try:
            cam = camera(pyvirtualcam.PixelFormat.BGR)
            self.rgb_fallback = False
            return cam
        except Exception as bgr_exc:
            try:
                cam = camera(pyvirtualcam.PixelFormat.RGB)
            except Exception:
                raise bgr_exc from None  # no device at all: report the first reason
        self.rgb_fallback = True
        self.on_status(f"virtual camera: backend '{self.backend}' refuses BGR; converting to RGB")
        return cam

    def _run(self) -> None:
        said = ""  # a retry that fails as the last one did says nothing new (once per change)
        while not self._stop.is_set():
            if not self._enabled.wait(0.1):
                continue
            try:
                cam = self._open()
            except Exception as exc:  # pyvirtualcam raises RuntimeError listing each backend
                msg = f"virtual camera missing: {' '.join(str(exc).split())}"
                if msg != said:
                    self.on_status(msg)
                said = msg
                self._stop.wait(self.retry_s)
                continue
            said = ""
            self.device_name = str(cam.device)
            self.on_status(f"virtual camera on: {self.device_name} {self.width}x{self.height}")
            self._device_open.set()
            try:
                self._serve(cam)
            except Exception as exc:
                self.on_status(f"virtual camera failed: {exc}")
                self._stop.wait(self.retry_s)
            finally:
                self._device_open.clear()
                self._discard_pending()
                cam.close()
                self.on_status("virtual camera off")

    def _discard_pending(self) -> None:
        # A frame waiting when the device went away is stale by the time one reopens.
        with contextlib.suppress(SlotClosed):
            self._slot.get(timeout=0)

    def _convert(self, frame: Frame, buf: Frame | None) -> Frame:
        """``frame`` in the camera's size and pixel order, in a buffer the sink owns (``buf``
        is reused when given)."""
        h, w = frame.shape[:2]
        if (w, h) != (self.width, self.height):
            frame = letterbox(frame, self.width, self.height)  # a new array: already ours
            if not self.rgb_fallback:
                return frame
        if buf is None:
            buf = np.empty((self.height, self.width, 3), np.uint8)
        if self.rgb_fallback:
            cv2.cvtColor(frame, cv2.COLOR_BGR2RGB, dst=buf)
        else:
            np.copyto(buf, frame)
        return buf

    def _serve(self, cam: Any) -> None:
        # pyvirtualcam's send copies the frame into the backend before it returns, so one
        # buffer is enough: the next new frame is converted into it.
        #
        # A new frame is sent as soon as it arrives: pacing it to the camera's frame clock
        # (sleep_until_next_frame) made it wait up to a whole period (measured on an H200 at
        # 60 fps: p95 latency 15 ms paced, 9 ms sent at once). The last frame is re-sent only
        # when no new one came for 1.5 periods, so a re-send never delays a frame that is merely
        # a little late.
        last: Frame | None = None
        period = 1.0 / self.fps
        while not self._stop.is_set() and self._enabled.is_set():
            try:
                item = self._slot.get(timeout=1.5 * period)
            except SlotClosed:
                return
            if item is not None:
                frame, t_cap = item
                last = self._convert(frame, last)
                cam.send(last)
                t_sent = time.perf_counter_ns()
                self.frames_sent += 1
                self.frames_new += 1
                for fn in (self.on_sent, *self._watchers):
                    if fn is None:
                        continue
                    try:
                        fn(t_cap, t_sent)
                    except Exception as exc:  # a metrics bug must not take the camera down
                        self.on_status(f"virtual camera: on_sent failed: {exc}")
            elif last is not None:
                cam.send(last)  # keep the consumer's picture alive
                self.frames_sent += 1

    def close(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._slot.close()
        self._thread.join(timeout)


class MediaClock(Protocol):
    """A file source's own timeline, for the recorder (:class:`livefuse.io.sources.
    VideoFileSource` has it): which media time a captured frame shows, and the file's timing."""

    path: Path

    def media_time(self, t_capture_ns: int) -> Fraction | None:
        """Seconds from the file's first frame to the frame captured at ``t_capture_ns``
        (continuing across loops), or ``None`` for a frame the source did not deliver."""
        ...

    def timing(self) -> tuple[Fraction, Fraction]:
        """``(time base, frame rate)`` of the file's video stream."""
        ...

    def pass_starts(self) -> list[Fraction]:
        """Media time at which each pass over the file began (``[0]``, more when looping)."""
        ...

    def origin(self) -> Fraction:
        """Seconds on the file's own timeline at media time 0 (its first video frame's pts):
        the file's audio is placed by it."""
        ...


RECORDER_BUFFER_BYTES = 192 * 2**20
"""Frames waiting for the recorder's encoder, in bytes (about one second of 1080p at 30 fps):
a frame beyond it replaces the oldest waiting one (counted in ``dropped``), so a slow encoder
never holds up the inference thread and never grows memory without bound."""
RECORDING_SUFFIXES = frozenset({".mp4", ".mkv", ".mov"})
"""What a recording may be written as (H.264 with its audio copied)."""
_AUDIO_IN_MP4 = frozenset({"aac", "mp3", "ac3", "eac3", "alac", "opus", "flac"})


class _AudioCopier:
    """Copies a file's audio packets into a recording, rebased so the recording starts at the
    media time ``t0``: each packet keeps its bytes and its place relative to the video."""

    def __init__(self, clock: MediaClock, out: Any, t0: Fraction) -> None:
        import av

        self.clock, self.t0 = clock, t0
        self.pass_index = 0
        self._inp = av.open(str(clock.path))
        self.streams = {a.index: copy_stream(out, a) for a in self._inp.streams.audio}
        self._packets = self._demux()
        self._next: Any = None
        self._last_pts: dict[int, int] = {}

    def _demux(self) -> Iterator[Any]:
        return (p for p in self._inp.demux(*self._inp.streams.audio) if p.dts is not None)

    def _peek(self) -> tuple[Fraction, Any] | None:
        """The next packet and its media time (across loops), or ``None`` for now."""
        import av

        while self._next is None:
            pkt = next(self._packets, None)
            if pkt is not None:
                self._next = pkt
                break
            starts = self.clock.pass_starts()
            if self.pass_index + 1 >= len(starts):
                return None  # the next pass has not begun (or never will)
            self.pass_index += 1
            self._inp.close()
            self._inp = av.open(str(self.clock.path))
            self._packets = self._demux()
        # on the video's media timeline, whose 0 is the first video frame: a file whose video
        # starts after its audio (a B-frame delay, an OBS FLV or TS) came out of sync by that
        # much when the audio kept the file's own times (a new user's trial: 67-500 ms late)
        offset = self.clock.pass_starts()[self.pass_index] - self.clock.origin()
        return offset + Fraction(self._next.pts) * Fraction(self._next.time_base), self._next

    def mux_until(self, out: Any, t: Fraction) -> None:
        """Mux every packet that starts before media time ``t``. A pass's sound that runs past
        the moment the video looped is cut there, and the next pass's starts after it."""
        while (nxt := self._peek()) is not None and nxt[0] < t:
            start, pkt = nxt
            self._next = None
            starts = self.clock.pass_starts()
            if start < self.t0 or (self.pass_index + 1 < len(starts)
                                   and start >= starts[self.pass_index + 1]):
                continue  # before the recording began, or after this pass's video ended
            pts = round((start - self.t0) / Fraction(pkt.time_base))
            if pts <= self._last_pts.get(pkt.stream.index, -1):
                continue  # the next pass's priming packet overlaps this one's tail
            self._last_pts[pkt.stream.index] = pts
            pkt.pts = pkt.dts = pts
            pkt.stream = self.streams[pkt.stream.index]
            out.mux(pkt)

    def close(self) -> None:
        self._inp.close()


RECORDING_COLORSPACE = 6
"""FFmpeg's AVCOL_SPC_SMPTE170M: the BT.601 matrix, swscale's default for BGR -> yuv420p."""
RECORDING_COLOR_RANGE = 1
"""FFmpeg's AVCOL_RANGE_MPEG: limited range (16-235), swscale's default for yuv420p."""


class RecorderSink(Sink):
    """Frames to a video file (H.264, PyAV), encoded on the sink's own thread, written to a temp
    name and renamed on close.

    ``send`` hands the frame to the recorder's thread through a buffer bounded by
    :data:`RECORDER_BUFFER_BYTES` and returns at once: x264 never runs on the inference thread.
    The frame must not be written to afterwards (the live runner never reuses one).

    The frame size is taken from the first frame (an odd width or height is padded by one
    replicated row/column, as 4:2:0 needs). A frame of another size later on is letterboxed into
    the first size, its aspect kept (black bars), and reported once through ``on_status`` and
    :attr:`notes`.

    Timing, two cases:

    * A video file input (``clock``): every frame keeps the timestamp it has in the file (the
      file's own time base, counted from the first recorded frame), the file's frame rate is
      declared, and the file's audio streams are copied alongside, packet for packet, in sync. A
      frame the live loop dropped leaves the previous one on screen a frame longer; it never
      shifts what follows, so picture and sound stay together.
    * A camera: timestamps are the capture times (ms since the first frame, time base 1/1000),
      so a run with dropped frames plays at real speed. The engine rarely delivers the requested
      ``fps``, so the file must not claim it: .mp4/.mov readers compute the average rate from the
      sample table (frames over duration; ``fps`` only sets the last frame's duration, without
      which the mov muxer's edit list cuts that frame), but Matroska writes a declared rate as the
      track's DefaultDuration, which readers report as the rate (a .mkv declared 30 fps but
      holding 24 said 30). A .mkv therefore declares none; its readers estimate the rate from the
      opening frames' timestamps.

    Args:
        path: output ``.mp4``, ``.mkv`` or ``.mov``.
        fps: the nominal rate (never declared as the file's rate, see above).
        crf: x264 constant rate factor.
        on_status: receives status lines (the first size change, an encoder failure).
        clock: the input file's timeline (a video file input), or ``None`` (a camera).

    Raises:
        VideoError: unsupported suffix (use .mp4, .mkv or .mov).
    """

    name = "recorder"

    def __init__(self, path: str | os.PathLike[str], fps: float = 30.0, crf: int = 20,
                 on_status: Callable[[str], None] = lambda s: None,
                 clock: MediaClock | None = None) -> None:
        # absolute now: the file is opened on the writer thread, and a later chdir (the app's
        # file dialogs) must not move where the recording lands
        self.path = Path(path).absolute()
        if self.path.is_dir():  # before the suffix: '.' or 'recordings/' named no file
            raise VideoError(self.path, "is a folder; give the recording a file name (.mp4, "
                                        ".mkv or .mov)", role="recording")
        if self.path.suffix.lower() not in RECORDING_SUFFIXES:
            raise VideoError(self.path, f"unsupported recording suffix '{self.path.suffix}': "
                                        "use .mp4, .mkv or .mov", role="recording")
        # the file opens at the first frame, on the writer thread: a path that cannot be
        # written is refused now, before a session runs for nothing
        # a missing folder is made with the file, as `run` makes an output's (a new user's
        # trial: `live --record new/rec.mp4` was refused where `run -o new/x.png` was not)
        folder = next((p for p in (self.path.parent.absolute(),
                                   *self.path.parent.absolute().parents) if p.exists()),
                      Path("/"))
        if not folder.is_dir():
            raise VideoError(self.path, f"folder '{folder}' is a file", role="recording")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise VideoError(self.path, f"folder '{folder}' is not writable",
                             role="recording")
        self.fps, self.crf, self.on_status, self.clock = fps, crf, on_status, clock
        try:  # its rename would replace it all the same
            check_replaceable(self.path, "recording")
        except ProtectedOutputError as exc:
            raise VideoError(self.path, "exists and is write-protected; it is not replaced: "
                                        "make it writable, or choose another name",
                             role="recording") from exc
        writer = other_writer(self.path)
        if writer is not None:  # two recordings into one file: one of them would be lost
            raise VideoError(self.path, f"another livefuse process (pid {writer}) is recording "
                                        "to it now; give this recording another name",
                             role="recording")
        self._tmp = part_path(self.path)
        self._out: Any = None
        self._stream: Any = None
        self._audio: _AudioCopier | None = None
        self._tb = Fraction(1, 1000)
        self._t0: int | None = None
        self._m0: Fraction | None = None  # media time of the first frame (file input)
        self._last: tuple[int, int] | None = None  # (pts, t_capture_ns) of the last frame
        self._first: tuple[int, int] | None = None  # (w, h) of the first frame
        self._size: tuple[int, int] | None = None  # (w, h) encoded: the first, made even
        self.frames = 0
        self.resized = 0
        self._dropped = 0
        self.notes: list[str] = []
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._queue: deque[tuple[Frame, int]] = deque()
        self._queued_bytes = 0
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="livefuse-recorder", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:  # type: ignore[override]
        return self._dropped

    def send(self, frame: Frame, t_capture_ns: int) -> None:
        """Queue one ``(H, W, 3) uint8 BGR`` frame captured at ``t_capture_ns``
        (``time.perf_counter_ns``) for encoding; returns at once (never blocks on the encoder)."""
        with self._cond:
            if self._closing or self.error is not None:
                return
            self._queue.append((frame, t_capture_ns))
            self._queued_bytes += frame.nbytes
            while self._queued_bytes > RECORDER_BUFFER_BYTES and len(self._queue) > 2:
                old, _ = self._queue.popleft()
                self._queued_bytes -= old.nbytes
                self._dropped += 1
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                frame, t_cap = self._queue.popleft()
                self._queued_bytes -= frame.nbytes
            try:
                self._encode(frame, t_cap)
            except Exception as exc:  # a full disk must not take the live session down
                with self._cond:
                    self.error = exc
                    self._queue.clear()
                    self._queued_bytes = 0
                # the file named: the app shows this line in its banner (a GUI trial read only
                # "[Errno 2] No such file or directory", in the status bar)
                self.on_status(f"recorder failed: recording '{self.path}' is not being "
                               f"written: {exc}")
                return

    def _start(self, w: int, h: int, t_capture_ns: int) -> None:
        import av

        from livefuse.io.video import muxer_options

        self.path.parent.mkdir(parents=True, exist_ok=True)
        m0 = self.clock.media_time(t_capture_ns) if self.clock is not None else None
        if m0 is not None and self.clock is not None:
            self._tb, rate = self.clock.timing()
            self._m0 = m0
        else:
            rate = Fraction(self.fps).limit_denominator(1001)
        self._out = av.open(str(self._tmp), "w", options=muxer_options(self.path, self._tb))
        self._stream = self._out.add_stream("libx264", rate=rate, time_base=self._tb)
        if self._m0 is None and self.path.suffix.lower() == ".mkv":
            # no DefaultDuration (see the class docstring); x264's CRF output is the same byte
            # for byte, it rate-controls from the timestamps
            self._stream.codec_context.framerate = Fraction(0, 1)
        self._first, self._size = (w, h), (w + (w & 1), h + (h & 1))
        self._stream.width, self._stream.height = self._size
        self._stream.pix_fmt = "yuv420p"
        # what PyAV's conversion of the BGR frames gives: BT.601 in limited range. Said in the
        # file, so that a player does not take an HD recording for BT.709 (its default for
        # untagged HD) and shift its colours
        ctx = self._stream.codec_context
        ctx.colorspace, ctx.color_range = RECORDING_COLORSPACE, RECORDING_COLOR_RANGE
        self._stream.options = {"crf": str(self.crf), "preset": "veryfast"}
        self._t0 = t_capture_ns
        if self._m0 is not None and self.clock is not None:
            self._start_audio(self.clock, self._m0)

    def _start_audio(self, clock: MediaClock, m0: Fraction) -> None:
        try:
            copier = _AudioCopier(clock, self._out, m0)
        except Exception as exc:  # an unreadable audio track costs the sound, not the video
            self._note(f"recorder: audio not copied: {exc}")
            return
        codecs = {s.codec_context.name for s in copier.streams.values()}
        if self.path.suffix.lower() != ".mkv" and not codecs <= _AUDIO_IN_MP4:
            self._note(f"recorder: audio ({', '.join(sorted(codecs))}) not copied: "
                       f"{self.path.suffix} cannot hold it; record to .mkv to keep it")
            copier.close()
            return
        self._audio = copier if copier.streams else None
        if self._audio is None:
            copier.close()

    def _note(self, note: str) -> None:
        self.notes.append(note)
        self.on_status(note)

    def _fit(self, frame: Frame) -> Frame:
        """``frame`` in the encoded size: padded when only odd, letterboxed when resized."""
        assert self._first is not None and self._size is not None
        h, w = frame.shape[:2]
        sw, sh = self._size
        if (w, h) == self._first:
            if (w, h) == (sw, sh):
                return frame
            return np.asarray(cv2.copyMakeBorder(frame, 0, sh - h, 0, sw - w,
                                                 cv2.BORDER_REPLICATE), dtype=np.uint8)
        self.resized += 1
        if self.resized == 1:
            fw, fh = self._first
            self._note(f"recorder: frames changed size from {fw}x{fh} to {w}x{h}; letterboxed "
                       f"into {sw}x{sh} (aspect kept)")
        return letterbox(frame, sw, sh)

    def _pts(self, t_capture_ns: int) -> tuple[int, Fraction | None]:
        """The frame's timestamp in the stream's time base, and its media time (file input)."""
        assert self._t0 is not None
        media = None
        if self._m0 is None or self.clock is None:  # a camera: the capture time
            pts = int(Fraction(t_capture_ns - self._t0, 10**9) / self._tb)
        elif (media := self.clock.media_time(t_capture_ns)) is not None:  # the file's own
            pts = round((media - self._m0) / self._tb)
        else:  # the file source was replaced meanwhile: carry on in real time
            assert self._last is not None
            pts = self._last[0] + round(Fraction(t_capture_ns - self._last[1], 10**9) / self._tb)
        # strictly increasing: two frames within one tick keep their order
        if self._last is not None and pts <= self._last[0]:
            pts = self._last[0] + 1
        self._last = (pts, t_capture_ns)
        return pts, media

    def _encode(self, frame: Frame, t_capture_ns: int) -> None:
        import av

        if self._out is None:
            h, w = frame.shape[:2]
            self._start(w, h, t_capture_ns)
        frame = self._fit(frame)
        pts, media = self._pts(t_capture_ns)
        if self._audio is not None and media is not None:
            self._audio.mux_until(self._out, media)
        vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="bgr24")
        vf.pts, vf.time_base = pts, self._tb
        for pkt in self._stream.encode(vf):
            self._out.mux(pkt)
        self.frames += 1

    def close(self, timeout: float = 30.0) -> None:
        """Encode what is queued, finish the file and rename it (the audio up to the end of the
        last frame).

        Raises:
            BaseException: the encoder's error (the temp file is removed).
        """
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        if self._out is None:
            if self.error is not None:
                raise self.error
            return
        try:
            if self.error is not None:
                raise self.error
            for pkt in self._stream.encode(None):
                self._out.mux(pkt)
            if self._audio is not None and self.clock is not None and \
                    self._last is not None and self._m0 is not None:
                _, rate = self.clock.timing()
                self._audio.mux_until(self._out, self._m0 + self._last[0] * self._tb + 1 / rate)
            if self._dropped:
                self._note(f"recorder: {self._dropped} frame(s) dropped: the encoder fell "
                           "behind")
            self._out.close()
            os.replace(self._tmp, self.path)
        except BaseException:
            self._tmp.unlink(missing_ok=True)
            raise
        finally:
            if self._audio is not None:
                self._audio.close()
            self._out = None


class PreviewSink(Sink):
    """Frames to a callback (a GUI preview) on the sink's own thread, latest frame only.

    While the callback is busy, newer frames replace older ones (counted in ``dropped``).
    """

    name = "preview"

    def __init__(self, callback: Callable[[Frame, int], None],
                 on_status: Callable[[str], None] = lambda s: None) -> None:
        self.callback, self.on_status = callback, on_status
        self._slot: LatestSlot[tuple[Frame, int]] = LatestSlot()
        self.delivered = 0
        self._thread = threading.Thread(target=self._run, name="livefuse-preview", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:  # type: ignore[override]
        return self._slot.dropped

    def send(self, frame: Frame, t_capture_ns: int) -> None:
        self._slot.put((frame, t_capture_ns))

    def _run(self) -> None:
        while True:
            try:
                item = self._slot.get()
            except SlotClosed:
                return
            if item is None:
                continue
            try:
                self.callback(*item)
                self.delivered += 1
            except Exception as exc:
                self.on_status(f"preview failed: {exc}")

    def close(self, timeout: float = 1.0) -> None:
        self._slot.close()
        self._thread.join(timeout)


class CallbackSink(Sink):
    """Calls ``callback(frame, t_capture_ns)`` synchronously on the inference thread (tests,
    tools)."""

    name = "callback"

    def __init__(self, callback: Callable[[Frame, int], None]) -> None:
        self.callback = callback

    def send(self, frame: Frame, t_capture_ns: int) -> None:
        self.callback(frame, t_capture_ns)


__all__ = ["RECORDER_BUFFER_BYTES", "RECORDING_SUFFIXES", "CallbackSink", "MediaClock",
           "PreviewSink", "RecorderSink", "Sink", "VirtualCameraSink", "letterbox"]
