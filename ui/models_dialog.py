"""The models dialog: every catalog model with its status, licence and size; fetch and import.

Status checks (hashing a 500 MB file takes seconds), downloads and imports run on the thread pool.
A download reports progress and can be cancelled; a cancelled download keeps its ``.part`` file,
so the next fetch resumes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import requests
from livefuse_ui.worker import run_async
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from livefuse.errors import LivefuseError
from livefuse.models import download as dl
from livefuse.models.catalog import CATALOG, INSIGHTFACE_LICENCE, ModelSpec, models_dir

COLUMNS = ("Model", "Role", "Status", "Size", "Licence")


class Cancelled(Exception):
    """The user cancelled a download."""


class ProgressSession(requests.Session):
    """A requests session that reports body bytes and stops when cancelled.

    ``livefuse.models.download.download`` takes a session; wrapping ``iter_content`` gives the GUI
    progress and cancellation without a second download implementation. :class:`Cancelled` is not
    one of the errors ``download`` retries on, so it ends the download at once.
    """

    def __init__(self, on_bytes: Callable[[int], None], cancel: threading.Event) -> None:
        super().__init__()
        self.on_bytes, self.cancel = on_bytes, cancel

    def get(self, url: str | bytes, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        if self.cancel.is_set():
            raise Cancelled
        resp = super().get(url, **kwargs)
        inner = resp.iter_content

        def iter_content(chunk_size: int | None = 1, decode_unicode: bool = False) -> Iterator[Any]:
            for block in inner(chunk_size, decode_unicode):  # type: ignore[call-overload]
                if self.cancel.is_set():
                    raise Cancelled
                self.on_bytes(len(block))
                yield block

        resp.iter_content = iter_content  # type: ignore[method-assign]
        return resp


class _Progress(QObject):
    bytes_read = Signal(int)


class ModelsDialog(QDialog):
    """Catalog rows (status present/missing/corrupt/unverified, licence, size in MiB).

    Args:
        directory: the models folder (``livefuse.models.catalog.models_dir()`` by default).
    """

    def __init__(self, directory: Path | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(820, 300)
        self.directory = directory if directory is not None else models_dir()
        self.statuses: dict[str, str] = {}
        self._cancel = threading.Event()
        self._busy = False
        self._received = 0

        self.table = QTableWidget(len(CATALOG), len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(
            len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        for row, spec in enumerate(CATALOG):
            for col, text in enumerate((spec.name, spec.role, "checking…",
                                        f"{spec.size_mib:,.1f} MiB", spec.licence)):
                self.table.setItem(row, col, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()
        self.table.selectRow(0)

        self.folder = QLabel(f"Folder: {self.directory}")
        self.note = QLabel(INSIGHTFACE_LICENCE)
        self.note.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.hide()
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.fetch_button = QPushButton("Fetch")
        self.import_button = QPushButton("Import file…")
        self.cancel_button = QPushButton("Cancel download")
        self.cancel_button.setEnabled(False)
        self.close_button = QPushButton("Close")
        self.fetch_button.clicked.connect(self.fetch_selected)
        self.import_button.clicked.connect(self.import_dialog)
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.close)

        buttons = QHBoxLayout()
        for b in (self.fetch_button, self.import_button, self.cancel_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)
        lay = QVBoxLayout(self)
        for w in (self.folder, self.table, self.note, self.progress, self.message):
            lay.addWidget(w)
        lay.addLayout(buttons)

        self._progress = _Progress(self)
        self._progress.bytes_read.connect(self._on_bytes)
        self.refresh()

    # -- status --------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-check every model's status on the thread pool."""
        directory = self.directory
        run_async(lambda: {s.name: dl.status(s, directory) for s in CATALOG}, self._show_status,
                  lambda exc: self.message.setText(f"cannot check models: {exc}"))

    def _show_status(self, statuses: dict[str, str]) -> None:
        self.statuses = dict(statuses)
        for row, spec in enumerate(CATALOG):
            state = statuses.get(spec.name, "?")
            item = self.table.item(row, 2)
            if item is not None:
                item.setText(dl.status_text(state))  # type: ignore[arg-type]

    def selected_spec(self) -> ModelSpec:
        row = max(self.table.currentRow(), 0)
        return CATALOG[row]

    # -- fetch ---------------------------------------------------------------------------------
    def fetch_selected(self) -> None:
        self.fetch(self.selected_spec())

    def fetch(self, spec: ModelSpec, session_factory: Callable[..., requests.Session] | None = None
              ) -> None:
        """Download ``spec`` on the thread pool with a progress bar; :meth:`cancel` stops it.

        ``session_factory(on_bytes, cancel_event)`` builds the HTTP session (tests pass one that
        serves bytes locally).
        """
        if self._busy:
            return
        self._set_busy(True)
        self._cancel.clear()
        part = self.directory / (spec.filename + ".part")
        self._received = 0
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.progress.show()
        self.message.setText(f"Downloading {spec.filename} ({spec.size_mib:,.1f} MiB)…")
        factory = session_factory or ProgressSession
        emit = self._progress.bytes_read.emit
        cancel, directory, total = self._cancel, self.directory, spec.size

        def job() -> Path:
            start = part.stat().st_size if part.exists() else 0
            emit(start)  # a resumed download starts where the part file ends
            session = factory(emit, cancel)
            try:
                return dl.download(spec, directory, progress=False, session=session)
            finally:
                session.close()

        self._total = total
        run_async(job, lambda p: self._fetched(spec, p), lambda exc: self._fetch_failed(spec, exc))

    def _on_bytes(self, n: int) -> None:
        self._received += n
        self.progress.setValue(int(1000 * min(self._received / max(self._total, 1), 1.0)))

    def cancel(self) -> None:
        """Stop the running download after its current block (its ``.part`` file is kept)."""
        self._cancel.set()

    def _fetched(self, spec: ModelSpec, path: Path) -> None:
        self._set_busy(False)
        self.progress.setValue(1000)
        self.message.setText(f"{spec.name}: verified and saved to {path}")
        self.refresh()

    def _fetch_failed(self, spec: ModelSpec, exc: BaseException) -> None:
        self._set_busy(False)
        self.progress.hide()
        if isinstance(exc, Cancelled):
            self.message.setText(f"{spec.name}: download cancelled (the partial file is kept; "
                                 "Fetch resumes it)")
        elif isinstance(exc, LivefuseError):
            self.message.setText(str(exc))
        else:
            self.message.setText(f"{spec.name}: {type(exc).__name__}: {exc}")
        self.refresh()

    # -- import --------------------------------------------------------------------------------
    def import_dialog(self) -> None:
        spec = self.selected_spec()
        path, _ = QFileDialog.getOpenFileName(self, f"Import {spec.filename}", "",
                                              "ONNX models (*.onnx);;All files (*)")
        if path:
            self.import_file(spec, Path(path))

    def import_file(self, spec: ModelSpec, path: Path) -> None:
        """Verify and copy a local file into the models folder, on the thread pool."""
        if self._busy:
            return
        self._set_busy(True)
        self.message.setText(f"Verifying {path.name}…")
        directory = self.directory
        run_async(lambda: dl.import_model(path, spec, directory),
                  lambda p: self._fetched(spec, p), lambda exc: self._fetch_failed(spec, exc))

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.fetch_button.setEnabled(not busy)
        self.import_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)

    @property
    def busy(self) -> bool:
        return self._busy


__all__ = ["Cancelled", "ModelsDialog", "ProgressSession"]
