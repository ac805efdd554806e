"""The preview widget: the latest processed frame, scaled to fit, under a metrics overlay.

The overlay is painted on this widget only; the frames that reach the virtual camera never carry it
(the widget receives its own copy of each frame and never writes into it). Besides the metrics it
says what a streamer must know at a glance: the preset in use, a swap that is off, and what the
privacy guard does (drawn in amber while it hides a face).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QRect, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QImage, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from livefuse.metrics import MetricsSnapshot

NOT_STARTED = "No preview yet: choose a source face and an input, then Start"
# after a Stop the last frame is not left up: a still swapped face reads as a frozen stream
STOPPED = "Stopped: press Start (Space) to start again"


def frame_to_qimage(frame: np.ndarray) -> QImage:
    """A QImage that owns its pixels, from a ``(H, W, 3) uint8 BGR`` frame.

    ``QImage(buffer, ...)`` only wraps the buffer; ``.copy()`` detaches it, so the worker may reuse
    or free the array afterwards.

    Raises:
        ValueError: ``frame`` is not ``(H, W, 3) uint8``.
    """
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 frame, got {frame.shape} {frame.dtype}")
    arr = np.ascontiguousarray(frame)
    h, w = arr.shape[:2]
    return QImage(arr.data, w, h, 3 * w, QImage.Format.Format_BGR888).copy()


@dataclass(frozen=True)
class OverlayInfo:
    """What the overlay shows besides the metrics: the precision actually in use (``fp16``,
    ``fp32 (fallback)``, ``classic``), the input's name, the active preset (``""``: none;
    ``modified``: a setting changed since) and whether faces are swapped."""

    precision: str = "-"
    source: str = ""
    preset: str = ""
    modified: bool = False
    swap: bool = True


SWAP_OFF = "swap OFF: faces pass as they are"
GUARD_ALERT = QColor(255, 196, 0)  # the guard line while it hides a face


def overlay_lines(snap: MetricsSnapshot | None, info: OverlayInfo) -> list[str]:
    """The overlay text: fps, latency p50/p95 (ms), VRAM (MiB), cache hit rate, precision; the
    privacy guard's state while it is on (:meth:`livefuse.guard.GuardState.line`); the preset
    and a swap that is off."""
    lines = _metric_lines(snap, info)
    if snap is not None and snap.guard.mode != "off":
        lines.append(snap.guard.line())
    if info.preset:
        lines.append(f"preset {info.preset}" + (" (changed)" if info.modified else ""))
    if not info.swap:
        lines.append(SWAP_OFF)
    return lines


def _metric_lines(snap: MetricsSnapshot | None, info: OverlayInfo) -> list[str]:
    if snap is None:
        return ["waiting for frames", f"precision {info.precision}"]
    lat = ("latency -" if snap.latency_p50_ms is None else
           f"latency p50 {snap.latency_p50_ms:.0f} ms  p95 {snap.latency_p95_ms or 0:.0f} ms")
    if snap.vram_process_mib is not None:
        vram = f"VRAM {snap.vram_process_mib:.0f} MiB"
    elif snap.vram_allocated_mib is not None:
        vram = f"VRAM {snap.vram_allocated_mib:.0f} MiB (torch)"
    else:
        vram = "VRAM - (no GPU)"
    lookups = snap.cache_hits + snap.cache_misses + snap.cache_forced_refreshes
    cache = f"cache hits {snap.cache_hits / lookups:.0%}" if lookups else "cache -"
    drops = sum(snap.dropped.values())
    return [
        f"{snap.output_fps:.1f} fps  (in {snap.input_fps:.1f}, dropped {drops})",
        lat,
        vram + ("" if snap.rss_mib is None else f"  RSS {snap.rss_mib:.0f} MiB"),
        cache,
        f"precision {info.precision}",
    ]


class PreviewWidget(QWidget):
    """Draws the latest frame (aspect kept, letterboxed) and the metrics overlay.

    Attributes:
        frames_shown: how many frames were handed to :meth:`set_frame` (for tests and the status).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumSize(320, 240)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self._image: QImage | None = None
        self._snap: MetricsSnapshot | None = None
        self._info = OverlayInfo()
        self._mirror = False
        self._overlay = True
        self._idle_text = NOT_STARTED
        self.frames_shown = 0
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setPointSize(10)
        font.setStyleHint(QFont.StyleHint.Monospace)
        self._font = font

    # -- inputs (GUI thread) -------------------------------------------------------------------
    def set_image(self, image: QImage) -> None:
        """Show ``image`` (already a detached copy) at the next paint."""
        self._image = image
        self.frames_shown += 1
        self.update()

    def set_frame(self, frame: np.ndarray) -> None:
        """Show a ``(H, W, 3) uint8 BGR`` frame; the pixels are copied."""
        self.set_image(frame_to_qimage(frame))

    def set_metrics(self, snap: MetricsSnapshot | None, info: OverlayInfo | None = None) -> None:
        self._snap = snap
        if info is not None:
            self._info = info
        self.update()

    def clear(self, text: str = NOT_STARTED) -> None:
        """Drop the frame and the metrics; ``text`` is shown in their place."""
        self._image = None
        self._snap = None
        self._idle_text = text
        self.update()

    @property
    def idle_text(self) -> str:
        """What is shown while there is no frame."""
        return self._idle_text

    @property
    def mirror(self) -> bool:
        return self._mirror

    def set_mirror(self, on: bool) -> None:
        """Flip the preview horizontally (what users expect of a selfie view); sinks unaffected."""
        self._mirror = bool(on)
        self.update()

    def set_overlay_visible(self, on: bool) -> None:
        self._overlay = bool(on)
        self.update()

    @property
    def image(self) -> QImage | None:
        return self._image

    def lines(self) -> list[str]:
        """The overlay text currently shown."""
        return overlay_lines(self._snap, self._info)

    # -- painting ------------------------------------------------------------------------------
    def target_rect(self) -> QRect:
        """Where the frame is drawn: scaled to fit the widget, aspect ratio kept, centred."""
        if self._image is None or self._image.isNull():
            return QRect()
        iw, ih = self._image.width(), self._image.height()
        scale = min(self.width() / iw, self.height() / ih)
        w, h = max(1, int(iw * scale)), max(1, int(ih * scale))
        return QRect((self.width() - w) // 2, (self.height() - h) // 2, w, h)

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(24, 24, 24))
        if self._image is not None:
            p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
            img = self._image.flipped(Qt.Orientation.Horizontal) if self._mirror else self._image
            p.drawImage(self.target_rect(), img)
        else:
            p.setPen(QColor(160, 160, 160))
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self._idle_text)
        if self._overlay:
            self._paint_overlay(p)
        p.end()

    def _paint_overlay(self, p: QPainter) -> None:
        lines = self.lines()
        p.setFont(self._font)
        fm = p.fontMetrics()
        pad = 6
        width = max(fm.horizontalAdvance(s) for s in lines) + 2 * pad
        height = fm.height() * len(lines) + 2 * pad
        box = QRectF(8, 8, min(width, self.width() - 16), height)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(0, 0, 0, 170))
        p.drawRoundedRect(box, 4, 4)
        y = box.top() + pad + fm.ascent()
        guard = self._snap.guard if self._snap is not None else None
        for s in lines:
            alert = s == SWAP_OFF or (guard is not None and guard.active and
                                      s == guard.line())
            p.setPen(GUARD_ALERT if alert else QColor(235, 235, 235))
            p.drawText(int(box.left() + pad), int(y), s)
            y += fm.height()


__all__ = ["SWAP_OFF", "OverlayInfo", "PreviewWidget", "frame_to_qimage", "overlay_lines"]
