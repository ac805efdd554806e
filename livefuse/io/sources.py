"""Frame sources for the live path (camera, video file, still image, test pattern) and the
capture thread that reads them.

A source is opened, read and closed on the capture thread only, so a camera that takes seconds
to open or blocks in ``read`` never blocks the caller. :class:`Capture` reports "camera lost"
when no frame arrives for ``lost_after_s`` (reads that fail, or a read that blocks), closes and
reopens the source with back-off, and stops promptly: ``stop()`` waits at most its timeout; a
thread stuck in a driver call is a daemon and exits once the call returns. A camera is judged
by time without frames, never by their content: an OBS static scene, a black shutter frame or
an HDMI capture of a still desktop repeats the same picture, and is a working input.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import cv2
import numpy as np

from livefuse.errors import LivefuseError, VideoError
from livefuse.types import Frame

if TYPE_CHECKING:
    from livefuse.io.streams import Upright

LOST_AFTER_S = 2.0  # the bound for noticing a dead camera
BACKOFF_S = (0.5, 1.0, 2.0, 4.0)  # reopen delays; the last repeats


class SourceFailedError(LivefuseError):
    """A source gave no frame after its bounded number of open attempts (:class:`Capture`
    with ``max_open_attempts``); the message is one line for the CLI.

    Attributes:
        attempts: opens tried (failed, or opened without delivering a frame).
        problem: the last thing that went wrong, e.g. ``camera 0: cannot be opened ...``.
    """

    def __init__(self, attempts: int, problem: str) -> None:
        self.attempts, self.problem = attempts, problem
        tries = "attempt" if attempts == 1 else "attempts"
        super().__init__(f"{problem} (gave up after {attempts} {tries})")


class EndOfStream(Exception):
    """A finite source (video file without looping) has no more frames. Its message, when it
    has one, says why the input ended before its end (``input ended early: 37 of 90 frames``)."""


@dataclass(frozen=True)
class SourceInfo:
    """What a source delivers once open.

    Attributes:
        width, height: frame size in px.
        fps: frames per second (negotiated for cameras; the stream's for files).
        description: human-readable, e.g. ``camera 0 (V4L2) MJPG``.
    """

    width: int
    height: int
    fps: float
    description: str


class Source(Protocol):
    """A frame source; every method is called on the capture thread.

    ``live`` sources (cameras) pace themselves (``read`` blocks until the next frame). Other
    sources are paced by :class:`Capture` at ``info.fps``.

    ``read(out)``: ``out``, when given, is a ``(height, width, 3) uint8`` array (a pinned
    buffer the GPU path uploads without a copy, :meth:`livefuse.engine.Engine.lend`) that the
    source may write the frame into and return; a source that cannot returns its own array.
    """

    live: bool

    def open(self) -> SourceInfo: ...
    def read(self, out: Frame | None = None) -> Frame | None: ...
    def close(self) -> None: ...


def v4l2_devices(sysfs: Path = Path("/sys/class/video4linux")) -> list[tuple[str, str]]:
    """``(device, card name)`` for every V4L2 node, from ``/sys/class/video4linux/*/name``
    (Linux; empty elsewhere). Nothing is opened."""
    out = []
    if sysfs.is_dir():
        for node in sorted(sysfs.iterdir()):
            try:
                name = (node / "name").read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                continue
            out.append((f"/dev/{node.name}", name))
    return out


class CameraError(VideoError):
    """A camera cannot be opened or read; the message names the device, not a "video" file."""

    def __init__(self, device: int | str, problem: str) -> None:
        self.device = device
        self.path, self.problem = Path(str(device)), problem
        LivefuseError.__init__(self, f"camera {device}: {problem}")


_CANNOT_OPEN = "cannot be opened (missing, busy, or no permission?)"


def _missing_node(device: int | str) -> str | None:
    """On Linux, why ``device`` cannot be a camera when its device node does not exist."""
    node = Path(f"/dev/video{device}") if isinstance(device, int) or str(device).isdigit() \
        else Path(str(device))
    if sys.platform.startswith("linux") and str(node).startswith("/dev/") and not node.exists():
        return f"{node} does not exist (no camera connected, or the driver is not loaded)"
    return None


def _why_not_open(device: int | str) -> str:
    """Why OpenCV could not open ``device``: a missing Linux device node is said as such."""
    return _missing_node(device) or _CANNOT_OPEN


def _open_cv2(device: int | str) -> Any:
    """``cv2.VideoCapture``; a device path opens through V4L2 directly (by name OpenCV would
    hand it to its FFmpeg backend, which prints its own errors to the terminal)."""
    if isinstance(device, str) and device.startswith("/dev/video") and hasattr(cv2, "CAP_V4L2"):
        return cv2.VideoCapture(device, cv2.CAP_V4L2)
    return cv2.VideoCapture(device)


class CameraSource:
    """An OpenCV camera.

    Args:
        device: camera index (``0``) or device path (``/dev/video2``).
        width, height, fps: requested; the camera may negotiate others (see :meth:`open`).
        mjpg: ask for MJPG (most USB cameras reach 30 fps at 720p only in MJPG).
        capture_factory: builds the ``cv2.VideoCapture``-like object (tests pass fakes).
    """

    live = True

    def __init__(self, device: int | str = 0, width: int | None = 1280, height: int | None = 720,
                 fps: float | None = 30.0, mjpg: bool = True,
                 capture_factory: Callable[[int | str], Any] | None = None) -> None:
        self.device, self.width, self.height, self.fps, self.mjpg = device, width, height, fps, mjpg
        self._factory = capture_factory or _open_cv2
        self._cap: Any = None

    def open(self) -> SourceInfo:
        """Open and negotiate.

        Raises:
            CameraError: the camera cannot be opened.
        """
        real = self._factory is _open_cv2  # a fake (tests) says nothing about this machine
        missing = _missing_node(self.device) if real else None
        if missing is not None:  # known before OpenCV's backends try (and print) their own
            raise CameraError(self.device, missing)
        cap = self._factory(self.device)
        if cap is None or not cap.isOpened():
            if cap is not None:
                cap.release()
            raise CameraError(self.device, _why_not_open(self.device) if real else _CANNOT_OPEN)
        if self.mjpg:
            cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter.fourcc(*"MJPG"))
        if self.width and self.height:
            cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
            cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
        if self.fps:
            cap.set(cv2.CAP_PROP_FPS, self.fps)
        self._cap = cap
        w, h = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        fps = float(cap.get(cv2.CAP_PROP_FPS) or self.fps or 30.0)
        code = int(cap.get(cv2.CAP_PROP_FOURCC))
        fourcc = "".join(chr((code >> 8 * i) & 0xFF) for i in range(4)) if code > 0 else "?"
        try:
            backend = cap.getBackendName()
        except Exception:  # fakes and some backends have none
            backend = "?"
        return SourceInfo(w, h, fps, f"camera {self.device} ({backend}) {fourcc.strip()}")

    def read(self, out: Frame | None = None) -> Frame | None:
        # OpenCV decodes into ``out`` when its size and type fit, else returns a new array
        ok, frame = self._cap.read() if out is None else self._cap.read(out)
        return frame if ok and frame is not None else None

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None


class VideoFileSource:
    """A video file decoded with PyAV, paced at its own frame rate, optionally looped.

    It is also the recorder's :class:`~livefuse.io.sinks.MediaClock`: it remembers when it
    delivered each frame and that frame's own timestamp, so a recording of a file input keeps
    the file's timing (and its audio in sync) however many frames the live loop drops.

    Raises (from :meth:`open`):
        VideoError: missing, empty or undecodable file, or no video stream.
    """

    live = False

    def __init__(self, path: str | Path, loop: bool = False) -> None:
        self.path, self.loop = Path(path), loop
        self._container: Any = None
        self._frames: Any = None
        self._tb = Fraction(1, 1000)
        self._rate = Fraction(30)
        self._first_pts: int | None = None
        self._pass_pts: tuple[int, int] | None = None  # this pass's first and last frame pts
        self._lock = threading.Lock()
        self._reads: deque[tuple[int, Fraction]] = deque(maxlen=1024)
        self._passes: list[Fraction] = []
        self._last_media: Fraction | None = None
        self._closed_at: int | None = None
        self._declared = 0
        self._duration: Fraction | None = None
        self._decoded = 0  # frames of this pass
        # shows the pictures as a player does (a phone's portrait clip); read on open
        self._upright: Upright | None = None

    def open(self) -> SourceInfo:
        from livefuse.io.streams import upright
        from livefuse.io.video import probe

        info = probe(self.path)  # raises VideoError with the file's name
        if info.width <= 0 or info.height <= 0:
            raise VideoError(self.path, "no picture size: it is not a video, or it is damaged")
        self._rate = info.rate or Fraction(30)
        self._declared, self._duration = info.frames or 0, info.duration
        self._upright = upright(self.path)
        self._start_pass()
        with self._lock:
            self._closed_at = None
        w, h = (info.height, info.width) if self._upright.swaps_size else (info.width, info.height)
        return SourceInfo(w, h, float(self._rate), f"video {self.path.name}")

    def _start_pass(self) -> None:
        import av

        if self._container is not None:
            self._container.close()
        self._container = av.open(str(self.path))
        vs = self._container.streams.video[0]
        self._tb = Fraction(vs.time_base) if vs.time_base else 1 / self._rate
        self._frames = self._container.decode(vs)
        self._decoded = 0
        self._pass_pts = None
        with self._lock:
            # a new pass (a loop, or a reopen) begins one frame after the last one shown
            start = Fraction(0) if self._last_media is None else self._last_media + 1 / self._rate
            self._passes.append(start)

    def read(self, out: Frame | None = None) -> Frame | None:
        """The next frame ``(H, W, 3) uint8 BGR``, turned upright and mirrored as the file's
        display matrix asks (:class:`~livefuse.io.streams.Upright`; after a quarter turn ``H``
        and ``W`` are the stored picture's width and height); PyAV returns its
        own array: ``out`` is not used.

        Raises:
            EndOfStream: the file ended (not looping); with a message when it ended before the
                frame count or duration its container declares, or on data that cannot be
                decoded (the frames before are delivered; a damaged file is never looped over).
        """
        import av

        try:
            frame = next(self._frames)
        except StopIteration:
            early = self._early_end(None)
            if early is not None:
                raise EndOfStream(early) from None
            if not self.loop:
                raise EndOfStream from None
            self._start_pass()
            frame = next(self._frames)
        except av.error.FFmpegError as exc:
            from livefuse.io.codecs import plain_av_error

            # after frames were read, "no readable video data" contradicts them: the count
            # says it (as `run` does); a file that fails at once gets FFmpeg's reason
            raise EndOfStream(self._early_end(None) or
                              f"video '{self.path}': input damaged: {plain_av_error(exc)}"
                              ) from None
        self._decoded += 1
        img = frame.to_ndarray(format="bgr24")
        # the preview, the virtual camera and a recording show it as a player would: upright
        if self._upright is not None:
            img = np.ascontiguousarray(self._upright.apply(img))
        if frame.pts is not None:
            if self._first_pts is None:
                self._first_pts = frame.pts
            start, last = self._pass_pts or (frame.pts, frame.pts)
            self._pass_pts = (start, max(last, frame.pts))
            media = self._passes[-1] + (frame.pts - self._first_pts) * self._tb
            with self._lock:
                self._reads.append((time.perf_counter_ns(), media))
                self._last_media = media
        return img

    def _early_end(self, error: str | None) -> str | None:
        """:func:`~livefuse.io.video.incomplete_reason` for this pass, naming the file."""
        from livefuse.io.video import incomplete_reason

        # the span the frames cover: a cut Matroska file declares only its duration (a new
        # user's cut-off MKV ended with exit 0 where `run` said "input ended early")
        covered = None if self._pass_pts is None else \
            (self._pass_pts[1] - self._pass_pts[0]) * self._tb + 1 / self._rate
        why = incomplete_reason(self._decoded, self._declared, self._duration, covered,
                                self._rate, error)
        return None if why is None else f"video '{self.path}': {why}"

    def media_time(self, t_capture_ns: int) -> Fraction | None:
        """Seconds from the file's first frame to the frame captured at ``t_capture_ns`` (the
        capture thread stamps a frame right after :meth:`read` returns it), continuing across
        loops; ``None`` for a frame this source did not deliver (it was closed before)."""
        with self._lock:
            if self._closed_at is not None and t_capture_ns > self._closed_at:
                return None
            for stamp, media in reversed(self._reads):
                if stamp <= t_capture_ns:
                    return media
        return None

    def timing(self) -> tuple[Fraction, Fraction]:
        """``(time base, frame rate)`` of the video stream."""
        return self._tb, self._rate

    def pass_starts(self) -> list[Fraction]:
        """The media time each pass over the file began at."""
        with self._lock:
            return list(self._passes)

    def origin(self) -> Fraction:
        """Seconds on the file's own timeline of its first video frame (media time 0); 0
        before a frame is read."""
        return Fraction(self._first_pts or 0) * self._tb

    def close(self) -> None:
        with self._lock:
            self._closed_at = time.perf_counter_ns()
        if self._container is not None:
            self._container.close()
            self._container = None


def _fresh(frame: Frame, out: Frame | None) -> Frame:
    """A copy of ``frame``, in ``out`` when it has the same shape and dtype."""
    if out is not None and out.shape == frame.shape and out.dtype == frame.dtype:
        np.copyto(out, frame)
        return out
    return frame.copy()


class ImageSource:
    """A still image repeated at ``fps`` (each read returns a fresh copy)."""

    live = False

    def __init__(self, image: Frame, fps: float = 30.0, name: str = "image") -> None:
        self.image, self.fps, self.name = image, fps, name

    def open(self) -> SourceInfo:
        h, w = self.image.shape[:2]
        return SourceInfo(w, h, self.fps, self.name)

    def read(self, out: Frame | None = None) -> Frame | None:
        return _fresh(self.image, out)

    def close(self) -> None:
        pass


class FramesSource:
    """Frames held in memory, looped, each read a fresh copy (benchmarks, tests, demos).

    Args:
        frames: ``(H, W, 3) uint8 BGR`` frames, all one size.
        fps: the rate the capture thread paces reads at (``live=False``), or, with ``live=True``,
            a nominal rate: reads are then as fast as the consumer takes them.
    """

    def __init__(self, frames: list[Frame], fps: float = 30.0, name: str = "frames",
                 live: bool = False) -> None:
        self.frames, self.fps, self.name, self.live = frames, fps, name, live
        self._it = itertools.cycle(frames)

    def open(self) -> SourceInfo:
        h, w = self.frames[0].shape[:2]
        return SourceInfo(w, h, self.fps, self.name)

    def read(self, out: Frame | None = None) -> Frame | None:
        return _fresh(next(self._it), out)

    def close(self) -> None:
        pass


class TestPatternSource:
    """Colour bars with a moving white square and the frame number, ``(h, w, 3) uint8 BGR``."""

    __test__ = False  # not a pytest class
    live = False

    def __init__(self, width: int = 640, height: int = 480, fps: float = 30.0) -> None:
        self.width, self.height, self.fps = width, height, fps
        self._n = itertools.count()
        bars = np.array([[255, 255, 255], [0, 255, 255], [255, 255, 0], [0, 255, 0],
                         [255, 0, 255], [0, 0, 255], [255, 0, 0], [0, 0, 0]], np.uint8)
        cols = np.arange(width) * len(bars) // width
        self._base = np.ascontiguousarray(np.broadcast_to(bars[cols], (height, width, 3)))

    def open(self) -> SourceInfo:
        return SourceInfo(self.width, self.height, self.fps, "test pattern")

    def read(self, out: Frame | None = None) -> Frame | None:
        n = next(self._n)
        f = _fresh(self._base, out)
        s = max(self.height // 8, 4)
        x = (n * 4) % max(self.width - s, 1)
        f[self.height // 2 - s // 2:self.height // 2 + s // 2, x:x + s] = 255
        cv2.putText(f, str(n), (8, self.height - 12), cv2.FONT_HERSHEY_SIMPLEX, 1.0,
                    (0, 0, 0), 2)
        return f

    def close(self) -> None:
        pass


class Capture:
    """The capture thread: open the source, read, pace, detect a lost camera, reopen.

    Args:
        source: the source; used only on the capture thread.
        on_frame: ``(frame, t_capture_ns)`` for each frame (``clock``, by default
            ``time.perf_counter_ns``).
        on_status: human-readable events: ``opened: ...``, ``camera lost: ...``,
            ``source failed: ...``, ``source ended``, and once, when the attempts are used up,
            ``giving up: ...`` (the same line as :attr:`error`).
        lost_after_s: no frame for this long means "camera lost".
        max_open_attempts: opens to try before giving up, counting every open that failed or
            that delivered no fresh frame before the source was lost again; a fresh frame resets
            the count. ``None`` retries forever (the GUI, which shows the status). After giving
            up the thread ends with :attr:`failed` set and :attr:`error` holding the reason.
        backoff_s: waits (s) between attempts, the last one repeating.
        clock: ``time.perf_counter_ns``-like clock (ns) that every frame time and every "time
            without frames" is read from (tests pass a scripted one).
        buffers: gives an array of a ``(height, width, 3)`` shape for the next read to write
            into (the engine's pinned buffers, :meth:`livefuse.engine.Engine.lend`), or
            ``None``; called on the capture thread before each read.

    Call :meth:`watch` periodically from another thread (the live runner does, every frame and
    every 0.25 s): it reports a read that blocks, which the capture thread itself cannot.
    """

    def __init__(self, source: Source, on_frame: Callable[[Frame, int], None],
                 on_status: Callable[[str], None] = lambda s: None,
                 lost_after_s: float = LOST_AFTER_S, max_open_attempts: int | None = None,
                 backoff_s: Sequence[float] = BACKOFF_S,
                 clock: Callable[[], int] = time.perf_counter_ns,
                 buffers: Callable[[tuple[int, ...]], Frame | None] | None = None) -> None:
        if max_open_attempts is not None and max_open_attempts < 1:
            raise ValueError(f"max_open_attempts must be >= 1 or None, not {max_open_attempts}")
        self.source, self.on_frame, self.on_status = source, on_frame, on_status
        self.lost_after_s = lost_after_s
        self.max_open_attempts = max_open_attempts
        self.backoff_s = tuple(backoff_s) or (0.0,)
        self.clock = clock
        self.buffers = buffers
        self.info: SourceInfo | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_fresh_ns = clock()
        self._lost_reported = False
        self._lock = threading.Lock()
        self._attempts = 0  # opens since the last fresh frame
        self._problem = "no frame"
        self.ended = False
        self.incomplete: str | None = None
        """Why a file source ended before its end (see :class:`EndOfStream`), or ``None``."""
        self.frames = 0
        self.error: SourceFailedError | None = None

    @property
    def failed(self) -> bool:
        """Whether the capture gave up (see ``max_open_attempts``); :attr:`error` says why."""
        return self.error is not None

    def start(self) -> None:
        self._stop.clear()
        self._last_fresh_ns = self.clock()
        self._thread = threading.Thread(target=self._run, name="livefuse-capture", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 0.5) -> bool:
        """Ask the thread to end and wait up to ``timeout`` s.

        Returns:
            ``True`` when the thread has ended; ``False`` when it is still inside a blocking
            driver call (it is a daemon and ends as soon as that call returns).
        """
        self._stop.set()
        t = self._thread
        if t is None:
            return True
        t.join(timeout)
        return not t.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _report_lost(self, why: str) -> None:
        with self._lock:
            if self._lost_reported:
                return
            self._lost_reported = True
        self.on_status(f"camera lost: {why}")

    def watch(self) -> None:
        """Report "camera lost" when no frame came for ``lost_after_s`` (from any thread)."""
        if self._stop.is_set() or self.ended or self.failed or self._thread is None \
                or self.info is None:  # never opened: the open's own failures are reported
            return
        idle = (self.clock() - self._last_fresh_ns) / 1e9
        if idle >= self.lost_after_s:
            self._report_lost(f"no new frame for {idle:.1f} s")

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; ``True`` when stopped."""
        return self._stop.wait(seconds)

    def _backoff(self, retry: int) -> float:
        return self.backoff_s[min(retry, len(self.backoff_s) - 1)]

    def _out_of_attempts(self) -> bool:
        """Give up (once) when the attempts are used up; ``True`` when given up."""
        if self.max_open_attempts is None or self._attempts < self.max_open_attempts:
            return False
        self.error = SourceFailedError(self._attempts, self._problem)
        self.on_status(f"giving up: {self.error}")
        return True

    def _open(self) -> bool:
        """Open the source, retrying with back-off; ``False`` when stopped or given up."""
        for retry in itertools.count():
            if self._stop.is_set() or self._out_of_attempts():
                return False
            self._attempts += 1
            try:
                self.info = self.source.open()
            except Exception as exc:  # a driver can raise anything; report it and retry
                self._problem = " ".join(str(exc).split()) or type(exc).__name__
                self.on_status(f"source failed: {exc}")
                if self._out_of_attempts() or self._sleep(self._backoff(retry)):
                    return False
                continue
            self._last_fresh_ns = self.clock()
            self.on_status(f"opened: {self.info.description} {self.info.width}x"
                           f"{self.info.height} @ {self.info.fps:.3g} fps")
            return True
        return False  # pragma: no cover  (itertools.count never ends)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            try:
                self.source.close()
            except Exception as exc:
                self.on_status(f"source close failed: {exc}")

    def _loop(self) -> None:
        if not self._open():
            return
        assert self.info is not None
        period = 1.0 / self.info.fps if self.info.fps > 0 else 1 / 30
        next_due = time.perf_counter()
        reopen = 0
        while not self._stop.is_set():
            if not self.source.live:
                delay = next_due - time.perf_counter()
                if delay > 0 and self._sleep(delay):
                    return
                next_due = max(next_due + period, time.perf_counter() - period)
            out = (self.buffers((self.info.height, self.info.width, 3))
                   if self.buffers is not None else None)
            try:
                frame = self.source.read() if out is None else self.source.read(out)
            except EndOfStream as end:
                self.ended = True
                self.incomplete = str(end) or None
                self.on_status(self.incomplete or "source ended")
                return
            except Exception as exc:
                self.on_status(f"source failed: {exc}")
                frame = None
            if self._stop.is_set():
                return
            now = self.clock()
            if frame is not None:
                self._last_fresh_ns = now
                if self._lost_reported:
                    with self._lock:
                        self._lost_reported = False
                    self.on_status("camera back")
                reopen = 0
                self._attempts = 0
                self.frames += 1
                self.on_frame(frame, now)
                continue
            if (now - self._last_fresh_ns) / 1e9 < self.lost_after_s:
                if self.source.live and self._sleep(0.01):
                    return
                continue
            self._report_lost("no frame")
            self._problem = f"{self.info.description}: opened, but no frame (camera lost)"
            try:
                self.source.close()
            except Exception as exc:
                self.on_status(f"source close failed: {exc}")
            if self._out_of_attempts() or self._sleep(self._backoff(reopen)):
                return
            reopen += 1
            if not self._open():
                return


__all__ = ["BACKOFF_S", "LOST_AFTER_S", "CameraError", "CameraSource", "Capture", "EndOfStream",
           "ImageSource", "Source", "SourceFailedError", "SourceInfo", "TestPatternSource",
           "VideoFileSource"]
