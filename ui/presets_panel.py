"""The presets panel: the saved presets as a numbered list, with save, rename and delete.

A preset is a source face (the photo and the chosen face) with the engine, cache, mask, enhancer
and privacy-guard settings (:mod:`livefuse.presets`). The list shows them in
``Session.presets.names()`` order, numbered 1..9: Ctrl+1..9 switch to them while the window has
focus, as does a double-click or Enter on an item. The panel only shows and asks; the main window
does the work on the session's control thread and hands the presets back in
(:meth:`PresetsPanel.set_presets`, read on the thread pool: they are files).

Names are checked here as the store checks them (:func:`livefuse.presets.check_name`), so a bad
name is refused in the dialog, before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from livefuse.presets import Preset, PresetError, check_name

SHORTCUT_PRESETS = 9
"""Presets 1..9 have a shortcut (Ctrl+1..9)."""
HINT = ("Ctrl+1…9 switch to preset 1…9 while this window has focus (double-click or Enter "
        "too); the stream keeps running")
EMPTY = "No presets yet: choose a source photo and settings, then Save…"
SAVE_TIP = ("Save the current source photo, chosen face and settings (engine, target faces, "
            "masks, enhancer, cache, privacy guard) as a preset")
NO_SOURCE = "Choose a source face photo first."
NAME_ROLE = Qt.ItemDataRole.UserRole


def item_text(number: int, name: str, active: bool = False, modified: bool = False,
              error: str = "") -> str:
    """A list row: ``"2  Gaming"``, its number only for presets 1..9; ``(active)`` or
    ``(active, changed)`` for the preset in use; ``(cannot be read)`` for a broken file."""
    head = f"{number}  " if number <= SHORTCUT_PRESETS else "    "
    tail = " (cannot be read)" if error else \
        (" (active, changed)" if modified else " (active)") if active else ""
    return f"{head}{name}{tail}"


def _tooltip(item: Preset | PresetError) -> str:
    if isinstance(item, PresetError):
        return item.problem
    e = item.engine
    face = "" if item.source.face_index is None else f", face {item.source.face_index}"
    return (f"{item.source.path}{face}\nengine {e.engine}, swap {e.face_selector}, "
            f"privacy guard {item.guard.mode}, cache {'on' if item.cache.enabled else 'off'}"
            + (f", enhancer {e.enhancer}" if e.enhancer else ""))


class PresetsPanel(QWidget):
    """The preset list and its buttons (GUI thread).

    Signals:
        switch_requested(str): switch to this preset.
        save_requested(str, bool): save the current source face and settings under this name;
            the bool: replace a preset of that name (the user confirmed).
        rename_requested(str, str): old name, new name.
        delete_requested(str): delete this preset (the user confirmed).
    """

    switch_requested = Signal(str)
    save_requested = Signal(str, bool)
    rename_requested = Signal(str, str)
    delete_requested = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._items: list[Preset | PresetError] = []
        self._active: str | None = None
        self._modified = False
        self.list = QListWidget()
        self.list.setMinimumHeight(72)
        self.list.setMaximumHeight(120)
        self.list.setWordWrap(True)  # a long name or the empty list's line wraps
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.itemActivated.connect(self._activated)
        self.list.currentRowChanged.connect(lambda _: self._sync_buttons())
        self.save_button = QPushButton("Save…")
        self.save_button.clicked.connect(self.ask_save)
        self.rename_button = QPushButton("Rename…")
        self.rename_button.clicked.connect(self.ask_rename)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(self.ask_delete)
        self.hint = QLabel(HINT)
        self.hint.setWordWrap(True)
        self.hint.setStyleSheet("color: palette(mid)")
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.message.hide()
        buttons = QHBoxLayout()
        for b in (self.save_button, self.rename_button, self.delete_button):
            buttons.addWidget(b)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.list)
        lay.addLayout(buttons)
        lay.addWidget(self.hint)
        lay.addWidget(self.message)
        self.set_presets([])
        self.set_can_save(False)

    # -- what the window hands in --------------------------------------------------------------
    def set_presets(self, items: Sequence[Preset | PresetError]) -> None:
        """Show these presets (``PresetStore.list()``: ``names()`` order; an unreadable one as
        its error), keeping the selection."""
        selected = self.selected
        self._items = list(items)
        self.list.blockSignals(True)
        try:
            self.list.clear()
            for item in self._items:
                row = QListWidgetItem(self.list)
                row.setData(NAME_ROLE, item.name)
                row.setToolTip(_tooltip(item))
            if not self._items:
                row = QListWidgetItem(EMPTY, self.list)
                row.setFlags(Qt.ItemFlag.NoItemFlags)
            names = self.names()
            if selected in names:
                self.list.setCurrentRow(names.index(selected))
        finally:
            self.list.blockSignals(False)
        self._restyle()

    def set_active(self, name: str | None, modified: bool = False) -> None:
        """Mark the preset in use (``Session.active_preset``), and whether a setting or the
        source face changed since it was switched to or saved."""
        if (name, modified) != (self._active, self._modified):
            self._active, self._modified = name, modified
            self._restyle()

    def set_can_save(self, on: bool) -> None:
        """Whether there is a source face to save (the window says when one is chosen)."""
        self.save_button.setEnabled(on)
        self.save_button.setToolTip(SAVE_TIP if on else f"{NO_SOURCE} {SAVE_TIP}")

    def set_message(self, text: str, ok: bool = True) -> None:
        """A line under the list: a switch under way, or why a preset was refused."""
        self.message.setText(text)
        self.message.setStyleSheet("" if ok else "color: #c0392b")
        self.message.setVisible(bool(text))

    # -- reading -------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """The presets' names, in the order shown (and numbered)."""
        return [item.name for item in self._items]

    def name_at(self, number: int) -> str | None:
        """The preset numbered ``number`` (1-based, as shown), or ``None``."""
        names = self.names()
        return names[number - 1] if 1 <= number <= len(names) else None

    @property
    def selected(self) -> str | None:
        row = self.list.currentRow()
        names = self.names()
        return names[row] if 0 <= row < len(names) else None

    @property
    def active(self) -> str | None:
        return self._active

    def _restyle(self) -> None:
        for i, item in enumerate(self._items):
            row = self.list.item(i)
            active = self._active is not None and item.name.casefold() == self._active.casefold()
            error = item.problem if isinstance(item, PresetError) else ""
            row.setText(item_text(i + 1, item.name, active, self._modified, error))
            font = QFont(row.font())
            font.setBold(active)
            font.setItalic(bool(error))
            row.setFont(font)
        self._sync_buttons()

    def _sync_buttons(self) -> None:
        chosen = self.selected is not None
        self.rename_button.setEnabled(chosen)
        self.delete_button.setEnabled(chosen)

    def _activated(self, row: QListWidgetItem) -> None:
        name = row.data(NAME_ROLE)
        if name:
            self.switch_requested.emit(str(name))

    # -- asking the user -----------------------------------------------------------------------
    def _ask_name(self, title: str, label: str, text: str) -> str | None:
        """A preset name typed in a dialog, checked; ``None`` when cancelled. A bad name is
        said in the dialog, which asks again."""
        while True:
            name, ok = QInputDialog.getText(self, title, label, QLineEdit.EchoMode.Normal, text)
            if not ok:
                return None
            try:
                return check_name(name)
            except PresetError as exc:
                label, text = f"{exc.problem}\n\nName:", name

    def _taken(self, name: str, but: str | None = None) -> str | None:
        for other in self.names():
            if other.casefold() == name.casefold() and (but is None or
                                                        other.casefold() != but.casefold()):
                return other
        return None

    def ask_save(self) -> None:
        """Ask for a name (the active preset's by default) and confirm replacing one."""
        if not self.save_button.isEnabled():  # Ctrl+Shift+S before a source face
            self.set_message(NO_SOURCE, ok=False)
            return
        name = self._ask_name("Save preset", "Save the current source face and settings "
                              "as:", self._active or self.selected or "")
        if name is None:
            return
        taken = self._taken(name)
        if taken is not None and QMessageBox.question(
                self, "Save preset", f"Replace the preset '{taken}'?") \
                != QMessageBox.StandardButton.Yes:
            return
        self.save_requested.emit(name, taken is not None)

    def ask_rename(self) -> None:
        old = self.selected
        if old is None:
            return
        new = self._ask_name("Rename preset", f"New name for '{old}':", old)
        if new is None or new == old:
            return
        taken = self._taken(new, but=old)
        if taken is not None:
            self.set_message(f"A preset called '{taken}' exists already: '{old}' keeps its "
                             "name.", ok=False)
            return
        self.rename_requested.emit(old, new)

    def ask_delete(self) -> None:
        name = self.selected
        if name is None:
            return
        if QMessageBox.question(self, "Delete preset", f"Delete the preset '{name}'? (Its "
                                "photo is kept.)") == QMessageBox.StandardButton.Yes:
            self.delete_requested.emit(name)


__all__ = ["HINT", "NO_SOURCE", "SHORTCUT_PRESETS", "PresetsPanel", "item_text"]
