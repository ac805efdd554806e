"""Where swapped frames go: a virtual camera, a video file, a preview callback, or several.

Every sink takes ``send(frame, t_capture_ns)`` with ``(H, W, 3) uint8 BGR`` frames and is a context
manager. ``send`` never blocks the inference thread for long: the virtual camera and the preview
hand the frame to their own thread through a one-frame slot (a busy consumer drops, never queues).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import cv2
import numpy as np

from livefuse.errors import VideoError
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
        reports_sent: ``True`` while the sink reports each frame's real send time itself (the
            virtual camera's ``on_sent``); the runner then leaves the latency to it.
    """

    name = "sink"
    dropped = 0
    reports_sent = False

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
    """Frames to a virtual camera through pyvirtualcam, paced on the sink's own thread.

    The output thread sends the newest frame (RGB, letterboxed to the camera's size) once per
    camera frame period, re-sending the last one when none came, and paces itself with
    ``pyvirtualcam.Camera.sleep_until_next_frame``. A missing or busy device gives a status
    (``virtual camera missing: ...``) and the sink retries every ``retry_s``; everything else
    keeps running. :meth:`set_enabled` turns it off and on while running.

    Args:
        width, height, fps: the virtual camera's format.
        device, backend: passed to ``pyvirtualcam.Camera`` (``None``: the first that works).
        on_status: receives status lines.
        on_sent: ``(t_capture_ns, t_sent_ns)`` after each *new* frame is sent (latency).
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
        self._slot: LatestSlot[tuple[Frame, int]] = LatestSlot()
        self._enabled = threading.Event()
        self._enabled.set()
        self._stop = threading.Event()
        self._device_open = threading.Event()
        self.frames_sent = 0
        self.device_name: str | None = None
        self._thread = threading.Thread(target=self._run, name="livefuse-vcam", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:  # type: ignore[override]
        return self._slot.dropped

    @property
    def reports_sent(self) -> bool:  # type: ignore[override]
        return self.on_sent is not None and self._device_open.is_set()

    def send(self, frame: Frame, t_capture_ns: int) -> None:
        if self._enabled.is_set():
            self._slot.put((frame, t_capture_ns))

    def set_enabled(self, on: bool) -> None:
        """Turn the output off (the device is released) or on again (it is reopened)."""
        if on:
            self._enabled.set()
        else:
            self._enabled.clear()

    def _open(self) -> Any:
        import pyvirtualcam

        return pyvirtualcam.Camera(self.width, self.height, self.fps, device=self.device,
                                   backend=self.backend, fmt=pyvirtualcam.PixelFormat.RGB)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._enabled.wait(0.1):
                continue
            try:
                cam = self._open()
            except Exception as exc:  # pyvirtualcam raises RuntimeError listing each backend
                msg = " ".join(str(exc).split())
                self.on_status(f"virtual camera missing: {msg}")
                self._stop.wait(self.retry_s)
                continue
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
                cam.close()
                self.on_status("virtual camera off")

    def _serve(self, cam: Any) -> None:
        last: Frame | None = None
        period = 1.0 / self.fps
        while not self._stop.is_set() and self._enabled.is_set():
            try:
                item = self._slot.get(timeout=period)
            except SlotClosed:
                return
            if item is not None:
                frame, t_cap = item
                last = letterbox(frame, self.width, self.height)[..., ::-1]
                cam.send(np.ascontiguousarray(last))
                self.frames_sent += 1
                if self.on_sent is not None:
                    self.on_sent(t_cap, time.perf_counter_ns())
            elif last is not None:
                cam.send(np.ascontiguousarray(last))  # keep the consumer's picture alive
                self.frames_sent += 1
            else:
                continue
            cam.sleep_until_next_frame()

    def close(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._slot.close()
        self._thread.join(timeout)


class RecorderSink(Sink):
    """Frames to a video file (H.264, PyAV), written to a temp name and renamed on close.

    The frame size is taken from the first frame; timestamps follow capture times so a run with
    dropped frames plays at real speed.

    Raises:
        VideoError: unsupported suffix (use .mp4, .mkv or .mov).
    """

    name = "recorder"

    def __init__(self, path: str | os.PathLike[str], fps: float = 30.0, crf: int = 20) -> None:
        self.path = Path(path)
        if self.path.suffix.lower() not in {".mp4", ".mkv", ".mov"}:
            raise VideoError(self.path, f"unsupported recording suffix '{self.path.suffix}': "
                                        "use .mp4, .mkv or .mov")
        self.fps, self.crf = fps, crf
        self._tmp = self.path.with_name(f".{self.path.stem}.livefuse-part{self.path.suffix}")
        self._out: Any = None
        self._stream: Any = None
        self._t0: int | None = None
        self._last_pts = -1
        self._size: tuple[int, int] | None = None
        self.frames = 0
        self._lock = threading.Lock()

    def send(self, frame: Frame, t_capture_ns: int) -> None:
        import av

        with self._lock:
            h, w = frame.shape[:2]
            if self._out is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._out = av.open(str(self._tmp), "w")
                self._stream = self._out.add_stream("libx264", rate=Fraction(self.fps))
                self._size = (w + (w & 1), h + (h & 1))
                self._stream.width, self._stream.height = self._size
                self._stream.pix_fmt = "yuv420p"
                self._stream.codec_context.time_base = Fraction(1, 1000)
                self._stream.options = {"crf": str(self.crf), "preset": "veryfast"}
                self._t0 = t_capture_ns
            assert self._size is not None and self._t0 is not None
            if (w, h) != self._size:
                frame = cv2.resize(frame, self._size, interpolation=cv2.INTER_AREA
                                   ).astype(np.uint8, copy=False)
            pts = max((t_capture_ns - self._t0) // 1_000_000, self._last_pts + 1)
            self._last_pts = pts
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="bgr24")
            vf.pts, vf.time_base = pts, Fraction(1, 1000)
            for pkt in self._stream.encode(vf):
                self._out.mux(pkt)
            self.frames += 1

    def close(self) -> None:
        with self._lock:
            if self._out is None:
                return
            try:
                for pkt in self._stream.encode(None):
                    self._out.mux(pkt)
                self._out.close()
                os.replace(self._tmp, self.path)
            except BaseException:
                self._tmp.unlink(missing_ok=True)
                raise
            finally:
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


__all__ = ["CallbackSink", "PreviewSink", "RecorderSink", "Sink", "VirtualCameraSink",
           "letterbox"]
