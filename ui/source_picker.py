"""The source-face picker: a file dialog or drag and drop, the detected faces as thumbnails.

Loading the photo and detecting its faces run on the thread pool (dlib's HOG takes tens of ms,
a large photo more); the widget only shows the result.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from livefuse_ui.preview import frame_to_qimage
from livefuse_ui.worker import run_async
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QIcon, QImage, QPixmap
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from livefuse.errors import LivefuseError
from livefuse.imaging import IMAGE_SUFFIXES, LoadedImage, load_image
from livefuse.types import Face, Frame

THUMB_PX = 96
_MARGIN = 0.35  # share of the bbox added on each side of a thumbnail, so hair and chin show


@dataclass(frozen=True)
class SourceAnalysis:
    """The faces found in a source photo.

    Attributes:
        path: the photo.
        image: the decoded photo (handed to the engine as the source).
        faces: faces left to right (the order ``Engine.set_source``'s ``face_index`` counts in).
        thumbnails: one detached ``QImage`` per face, ``THUMB_PX`` square.
        default_index: the face the engine picks without an index (the largest).
    """

    path: Path
    image: LoadedImage
    faces: list[Face]
    thumbnails: list[QImage]
    default_index: int


_analyser_lock = threading.Lock()
_analyser: Any = None


def shared_analyser() -> Any:
    """The app's one DlibFaceAnalyser, built on first use (on a worker thread).

    Loading dlib's models takes ~1 s and holds the GIL all along (measured: a Python thread
    ticking every 5 ms stalled 0.96 s), which would freeze the GUI at every engine rebuild; so
    the picker and every live engine share this one instance. dlib's calls hold the GIL, so
    they never run concurrently.
    """
    global _analyser
    with _analyser_lock:
        if _analyser is None:
            from livefuse.faces.dlib_analyser import DlibFaceAnalyser

            _analyser = DlibFaceAnalyser()
        return _analyser


def face_thumbnail(image: Frame, face: Face, size: int = THUMB_PX) -> QImage:
    """A square ``size`` px crop around ``face.bbox`` (plus a margin), as a detached QImage."""
    import cv2

    x1, y1, x2, y2 = (float(v) for v in face.bbox)
    side = max(x2 - x1, y2 - y1) * (1 + 2 * _MARGIN)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    h, w = image.shape[:2]
    a, b = int(max(cx - side / 2, 0)), int(max(cy - side / 2, 0))
    c, d = int(min(cx + side / 2, w)), int(min(cy + side / 2, h))
    crop = image[b:max(d, b + 1), a:max(c, a + 1)]
    thumb = np.asarray(cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA), np.uint8)
    return frame_to_qimage(thumb)


def analyse_source(path: Path, analyser: Any = None) -> SourceAnalysis:
    """Load ``path`` and find its faces (runs on a worker thread).

    Raises:
        ImageLoadError: the file is missing or not an image.
    """
    from livefuse.faces.selection import detect_robust, pick_source_face

    image = load_image(path)
    faces = detect_robust(analyser or shared_analyser(), image.bgr)
    thumbs = [face_thumbnail(image.bgr, f) for f in faces]
    default = faces.index(pick_source_face(faces, path)) if faces else -1
    return SourceAnalysis(path=Path(path), image=image, faces=faces, thumbnails=thumbs,
                          default_index=default)


class SourcePicker(QWidget):
    """Choose the source photo and, when it holds several faces, the face.

    Signals:
        source_changed(Path, int): a photo with at least one face and the chosen face's index
            (left to right).
        source_failed(str): the photo could not be used; the message names the file and why.
    """

    source_changed = Signal(object, int)
    source_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None, analyser: Any = None) -> None:
        super().__init__(parent)
        self._analyser = analyser
        self.analysis: SourceAnalysis | None = None
        self._prefer = -1
        self.setAcceptDrops(True)
        self.button = QPushButton("Choose source photo…")
        self.button.clicked.connect(self.browse)
        self.message = QLabel("Drop a photo here or choose one")
        self.message.setWordWrap(True)
        self.thumb = QLabel()
        self.thumb.setFixedSize(THUMB_PX, THUMB_PX)
        self.thumb.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.thumb.setStyleSheet("border: 1px dashed #888")
        self.faces = QListWidget()
        self.faces.setViewMode(QListWidget.ViewMode.IconMode)
        self.faces.setIconSize(QSize(48, 48))
        self.faces.setFixedHeight(72)
        self.faces.setFlow(QListWidget.Flow.LeftToRight)
        self.faces.setWrapping(False)
        self.faces.hide()
        self.faces.currentRowChanged.connect(self._face_chosen)
        top = QHBoxLayout()
        top.addWidget(self.thumb)
        right = QVBoxLayout()
        right.addWidget(self.button)
        right.addWidget(self.message)
        top.addLayout(right, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(top)
        lay.addWidget(self.faces)

    @property
    def face_index(self) -> int:
        """The chosen face (left to right), or -1 when there is none."""
        return self.faces.currentRow() if self.analysis and self.analysis.faces else -1

    def browse(self) -> None:
        suffixes = " ".join(f"*{s}" for s in sorted(IMAGE_SUFFIXES))
        path, _ = QFileDialog.getOpenFileName(self, "Source face photo", "",
                                              f"Images ({suffixes});;All files (*)")
        if path:
            self.load(Path(path))

    def load(self, path: Path, prefer_index: int = -1) -> None:
        """Analyse ``path`` on the thread pool; the result arrives as a signal.

        ``prefer_index`` selects that face (left to right) when the photo has it (a restored
        session); otherwise the largest face is selected.
        """
        self._prefer = prefer_index
        self.message.setText(f"Looking for faces in {Path(path).name}…")
        self.message.setStyleSheet("")
        self.button.setEnabled(False)
        run_async(lambda: analyse_source(Path(path), self._analyser), self._analysed,
                  lambda exc: self._failed(path, exc))

    def _failed(self, path: Path, exc: BaseException) -> None:
        self.button.setEnabled(True)
        text = str(exc) if isinstance(exc, LivefuseError) else (
            f"cannot use '{path}': {type(exc).__name__}: {exc}")
        self._show_error(text)

    def _show_error(self, text: str) -> None:
        self.analysis = None
        self.thumb.clear()
        self.faces.clear()
        self.faces.hide()
        self.message.setText(text)
        self.message.setStyleSheet("color: #c0392b")
        self.source_failed.emit(text)

    def _analysed(self, result: SourceAnalysis) -> None:
        self.button.setEnabled(True)
        if not result.faces:
            self._show_error(f"No face found in '{result.path.name}'. Choose a photo where the "
                             "face is frontal, lit and at least ~80 px wide.")
            return
        self.analysis = result
        self.faces.blockSignals(True)
        self.faces.clear()
        for i, img in enumerate(result.thumbnails):
            QListWidgetItem(QIcon(QPixmap.fromImage(img)), f"{i + 1}", self.faces)
        self.faces.setVisible(len(result.faces) > 1)
        self.faces.blockSignals(False)
        # The list was cleared (row -1), so this always emits and reaches _face_chosen.
        row = self._prefer if 0 <= self._prefer < len(result.faces) else result.default_index
        self._prefer = -1
        self.faces.setCurrentRow(row)

    def _face_chosen(self, row: int) -> None:
        if self.analysis is None or not 0 <= row < len(self.analysis.faces):
            return
        self.thumb.setPixmap(QPixmap.fromImage(self.analysis.thumbnails[row]))
        n = len(self.analysis.faces)
        extra = f" (face {row + 1} of {n}; click another to change)" if n > 1 else ""
        self.message.setText(f"{self.analysis.path.name}{extra}")
        self.message.setStyleSheet("")
        self.source_changed.emit(self.analysis.path, row)

    # -- drag and drop ---------------------------------------------------------------------------
    @staticmethod
    def _dropped_path(event: QDragEnterEvent | QDropEvent) -> Path | None:
        urls = event.mimeData().urls()
        if len(urls) != 1 or not urls[0].isLocalFile():
            return None
        return Path(urls[0].toLocalFile())

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self._dropped_path(event) is not None:
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        path = self._dropped_path(event)
        if path is not None:
            event.acceptProposedAction()
            self.load(path)


__all__ = ["SourceAnalysis", "SourcePicker", "analyse_source", "face_thumbnail",
           "shared_analyser"]
