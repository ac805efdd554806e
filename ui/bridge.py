"""Session callbacks (called on the runner's threads) turned into Qt signals for the GUI thread.

Only the latest frame crosses: a frame arriving while the GUI has not yet taken the previous one
replaces it (counted in ``dropped``). The frame is converted to a QImage that owns a copy of the
pixels on the caller's thread, so the worker may reuse its array at once.

:meth:`RunnerBridge.close` (at quit) makes every later callback a no-op that touches no Qt
object: a capture thread stuck in a driver call may report long after the window is gone.
"""

from __future__ import annotations

import threading

import numpy as np
from livefuse_ui.preview import frame_to_qimage
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage


class RunnerBridge(QObject):
    """Thread-safe hand-off from the live session to the GUI.

    Signals:
        frame_ready(): a new frame waits in :meth:`take_frame` (emitted at most once per take).
        status(str): a session/source/sink status line (``camera lost: ...``,
            ``virtual camera missing: ...``).

    Attributes:
        received: frames handed to :meth:`on_frame`; dropped: replaced before the GUI took them.
    """

    frame_ready = Signal()
    status = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        # Re-entrant: an emit from the GUI thread itself is a direct call into take_frame.
        self._lock = threading.RLock()
        self._image: QImage | None = None
        self._t_capture_ns = 0
        self._pending = False
        self._closed = False
        self.received = 0
        self.dropped = 0

    def on_frame(self, frame: np.ndarray, t_capture_ns: int) -> None:
        """Session callback (the preview sink's thread): ``frame`` is ``(H, W, 3) uint8 BGR``;
        it is copied."""
        if self._closed:
            return
        image = frame_to_qimage(frame)
        with self._lock:
            if self._closed:
                return
            self.received += 1
            if self._image is not None:
                self.dropped += 1
            self._image, self._t_capture_ns = image, t_capture_ns
            emit = not self._pending
            self._pending = True
            # Emitted under the lock so close() cannot complete between the check and the emit.
            if emit:
                self.frame_ready.emit()

    def on_status(self, text: str) -> None:
        """Session callback (any thread)."""
        with self._lock:
            if not self._closed:
                self.status.emit(text)

    def take_frame(self) -> tuple[QImage, int] | None:
        """The newest frame and its capture time (``perf_counter_ns``), or ``None`` (GUI thread)."""
        with self._lock:
            image, t = self._image, self._t_capture_ns
            self._image, self._pending = None, False
        return None if image is None else (image, t)

    def close(self) -> None:
        """Stop forwarding (GUI thread, at quit); returns once no callback is inside an emit."""
        with self._lock:
            self._closed = True
            self._image = None


__all__ = ["RunnerBridge"]
