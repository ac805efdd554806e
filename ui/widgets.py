"""Small widget behaviours shared by the panels.

The settings column scrolls; a spin box or combo box under the mouse must not eat the wheel
while the user scrolls past it (it silently changed the cache threshold and saved it). Such
widgets take the wheel only once focused (clicked or tabbed to); otherwise the wheel goes on to
the scroll area.

A one-line status never runs off the window's edge: :class:`ElidedLabel` shortens it with "…"
where it must and keeps the whole text in its tooltip (the window's log keeps every line too).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QMouseEvent, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QDoubleSpinBox,
    QLabel,
    QSizePolicy,
    QWidget,
)


class WheelGuard(QObject):
    """Event filter: a wheel event on an unfocused widget is passed on to its parent."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Wheel and isinstance(watched, QWidget) \
                and not watched.hasFocus():
            # Ignored + filtered: QApplication then offers the event to the parent widgets,
            # up to the scroll area's viewport, which scrolls.
            event.ignore()
            return True
        return False


def guard_wheel(root: QWidget, guard: WheelGuard) -> int:
    """Make every spin box and combo box under ``root`` take the wheel only when focused (and
    take focus only by click or Tab, never by the wheel). Returns how many were guarded."""
    boxes = [*root.findChildren(QAbstractSpinBox), *root.findChildren(QComboBox)]
    for box in boxes:
        box.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        box.installEventFilter(guard)
    return len(boxes)


class FpsSpinBox(QDoubleSpinBox):
    """A frame rate: any value the config allows (29.97 included), shown without trailing
    zeros ("30 fps", "29.97 fps")."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDecimals(2)
        self.setSuffix(" fps")

    def textFromValue(self, value: float) -> str:
        return f"{value:g}"


class ElidedLabel(QLabel):
    """One line of text that fits its width: shortened with "…" when it must be, the whole text
    always in the tooltip. It never asks for more width than it gets (a long message cannot
    widen the window or push the status bar's other widgets away).

    Signals:
        clicked(): the label was clicked (the window opens its log).
    """

    clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(1)

    def full_text(self) -> str:
        return self._full

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._elide()

    def is_elided(self) -> bool:
        return self.text() != " ".join(self._full.split())

    def _elide(self) -> None:
        one_line = " ".join(self._full.split())
        self.setText(self.fontMetrics().elidedText(one_line, Qt.TextElideMode.ElideRight,
                                                   max(self.contentsRect().width(), 1)))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self.clicked.emit()
        super().mousePressEvent(event)


__all__ = ["ElidedLabel", "FpsSpinBox", "WheelGuard", "guard_wheel"]
