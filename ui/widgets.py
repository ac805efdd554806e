"""Small widget behaviours shared by the panels.

The settings column scrolls; a spin box or combo box under the mouse must not eat the wheel
while the user scrolls past it (it silently changed the cache threshold and saved it). Such
widgets take the wheel only once focused (clicked or tabbed to); otherwise the wheel goes on to
the scroll area.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QAbstractSpinBox, QComboBox, QDoubleSpinBox, QWidget


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


__all__ = ["FpsSpinBox", "WheelGuard", "guard_wheel"]
