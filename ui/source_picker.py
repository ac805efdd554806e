"""The source-face picker: a file dialog or drag and drop, the candidate faces as thumbnails.

Loading the photo, detecting its faces and choosing among them run on the thread pool (dlib's HOG
takes tens of ms, a large photo more); the widget only shows the result. The choice rule is the
engine's own (:func:`livefuse.faces.selection.choose_source_face`): only its candidates are
offered, its choice is selected first, and its notes ("tiny source face", ...) are shown.

The picker hands on the chosen :class:`~livefuse.types.Face` itself (box and keypoints), never an
index: the neural engine detects with another detector whose faces come in another order, and
matches the picked face by position.

A photo analysed before (same path, size and modification time) is shown from a small memo: the
app shares one dlib analyser between the picker and a classic engine, so every analysis delays a
live frame's detection by its own length, and a streamer switching presets back and forth shows
the same few photos again and again.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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

from livefuse.errors import SHARP_FACE_PX, LivefuseError
from livefuse.faces.analyser import Analyser, AnyFrame
from livefuse.imaging import IMAGE_SUFFIXES, LoadedImage, load_image
from livefuse.types import Face, FloatArray, Frame

THUMB_PX = 96
_MARGIN = 0.35  # share of the bbox added on each side of a thumbnail, so hair and chin show
_SAME_FACE_IOU = 0.5  # a restored face box matches a candidate at least this well
ANALYSES_KEPT = 16  # analysed photos kept (a decoded photo and a few thumbnails each)


class _Serialized:
    """An analyser behind a lock: one call at a time, from any thread."""

    def __init__(self, inner: Analyser, lock: threading.Lock) -> None:
        self._inner, self._lock = inner, lock

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        with self._lock:
            return self._inner.detect(frame, upsample)

    def track(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face | None]:
        with self._lock:
            return self._inner.track(frame, faces)

    def embed(self, frame: Frame, face: Face) -> FloatArray:
        with self._lock:
            return self._inner.embed(frame, face)

    def reset(self) -> None:
        with self._lock:
            self._inner.reset()


class SharedAnalyser:
    """The app's one DlibFaceAnalyser, built on first use by whichever worker thread needs it
    first (the picker's job or the inference thread building the classic engine), and used by
    one thread at a time.

    Loading dlib's models takes ~1 s and holds the GIL all along (measured: a Python thread
    ticking every 5 ms stalled 0.96 s), which would freeze the GUI at every engine rebuild; so
    the picker and every classic engine share one instance. Its calls are serialized: dlib's
    HOG detector releases the GIL inside ``run`` and is not safe to enter twice (two photo
    analyses at once crashed the app in SIGSEGV; the picker's photo and the live engine's
    frame could meet there the same way). A photo analysis therefore delays a live frame's
    detection by its own length, once per photo chosen.
    """

    def __init__(self, analyser: Analyser | None = None) -> None:
        self._lock = threading.Lock()
        self._calls = threading.Lock()
        self._analyser: Analyser | None = None if analyser is None else \
            _Serialized(analyser, self._calls)

    def get(self) -> Analyser:
        """The analyser (any thread but the GUI thread: the first call loads dlib's models)."""
        with self._lock:
            if self._analyser is None:
                from livefuse.faces.dlib_analyser import DlibFaceAnalyser

                self._analyser = _Serialized(DlibFaceAnalyser(), self._calls)
            return self._analyser


@dataclass(frozen=True)
class SourceAnalysis:
    """The candidate faces of a source photo.

    Attributes:
        path: the photo.
        image: the decoded photo (handed to the engine as the source).
        candidates: the faces offered, left to right (``choose_source_face``'s candidates).
        thumbnails: one detached ``QImage`` per candidate, ``THUMB_PX`` square.
        default_index: the candidate the rule chooses.
        notes: per candidate, what the user should be told when that face is used.
    """

    path: Path
    image: LoadedImage
    candidates: list[Face]
    thumbnails: list[QImage]
    default_index: int
    notes: list[tuple[str, ...]]


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


def analyse_source(path: Path, analyser: Analyser) -> SourceAnalysis:
    """Load ``path``, find its faces and choose among them (runs on a worker thread).

    A photo without any detection gives an analysis without candidates.

    Raises:
        ImageLoadError: the file is missing or not an image.
        NoFaceError: faces were detected but none is usable (the message says why).
    """
    from livefuse.faces.selection import choose_source_face, detect_robust

    image = load_image(path)
    faces = detect_robust(analyser, image.bgr)
    if not faces:
        return SourceAnalysis(Path(path), image, [], [], -1, [])
    choice = choose_source_face(faces, image.bgr, image.path)
    notes = [choice.notes if i == choice.index else
             choose_source_face(faces, image.bgr, image.path, i).notes
             for i in range(len(choice.candidates))]
    thumbs = [face_thumbnail(image.bgr, f) for f in choice.candidates]
    return SourceAnalysis(path=Path(path), image=image, candidates=list(choice.candidates),
                          thumbnails=thumbs, default_index=choice.index, notes=notes)


def choose_image(parent: QWidget, title: str) -> Path | None:
    """An image file chosen in the open dialog (the suffixes livefuse reads), or ``None``."""
    suffixes = " ".join(f"*{s}" for s in sorted(IMAGE_SUFFIXES))
    path, _ = QFileDialog.getOpenFileName(parent, title, "",
                                          f"Images ({suffixes});;All files (*)")
    return Path(path) if path else None


def matching_candidate(candidates: Sequence[Face], box: Sequence[float]) -> int:
    """The candidate whose box overlaps ``box`` best (IoU >= 0.5), or -1."""
    from livefuse.faces.tracking import iou

    if len(box) != 4 or not candidates:
        return -1
    target = np.asarray(box, np.float32)
    best = max(range(len(candidates)), key=lambda i: iou(candidates[i].bbox, target))
    return best if iou(candidates[best].bbox, target) >= _SAME_FACE_IOU else -1


class SourcePicker(QWidget):
    """Choose the source photo and, when it holds several faces, the face (GUI thread).

    Args:
        analyser: the app's shared analyser (a new lazy one by default).

    Signals:
        source_changed(Path, int): a photo with at least one face was loaded or another face
            chosen; the int is the candidate's index (read the face itself from :attr:`face`).
        source_failed(str): the photo could not be used; the message names the file and why
            (and the photo still in use, which stays chosen).
    """

    source_changed = Signal(object, int)
    source_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None,
                 analyser: SharedAnalyser | None = None) -> None:
        super().__init__(parent)
        self._analyser = analyser or SharedAnalyser()
        self.analysis: SourceAnalysis | None = None
        self._prefer: Sequence[float] = ()
        self._generation = 0  # the newest load; an older one finishing later is dropped
        self._memo: OrderedDict[tuple[str, int, int], SourceAnalysis] = OrderedDict()
        self._memo_lock = threading.Lock()  # the jobs run on the thread pool
        self.analyses = 0  # photos analysed (not taken from the memo)
        self.setAcceptDrops(True)
        self.button = QPushButton("Choose source photo…")
        self.button.clicked.connect(self.browse)
        self.message = QLabel("Drop a photo here or choose one")
        self.message.setWordWrap(True)
        self.notes = QLabel("")
        self.notes.setWordWrap(True)
        self.notes.setStyleSheet("color: #b9770e")
        self.notes.hide()
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
        lay.addWidget(self.notes)

    @property
    def face_index(self) -> int:
        """The chosen candidate (left to right), or -1 when there is none."""
        a = self.analysis
        row = self.faces.currentRow()
        return row if a is not None and 0 <= row < len(a.candidates) else -1

    @property
    def face(self) -> Face | None:
        """The chosen face (box and keypoints in the photo), or ``None``."""
        i = self.face_index
        return None if i < 0 or self.analysis is None else self.analysis.candidates[i]

    def browse(self) -> None:
        path = choose_image(self, "Source face photo")
        if path is not None:
            self.load(path)

    def load(self, path: Path, prefer_box: Sequence[float] = ()) -> None:
        """Analyse ``path`` on the thread pool; the result arrives as a signal.

        ``prefer_box`` (x1, y1, x2, y2) selects the candidate at that place when there is one
        (a restored session); otherwise the rule's choice is selected.
        """
        self._prefer = tuple(prefer_box)
        self._generation += 1
        gen = self._generation
        self.message.setText(f"Looking for faces in {Path(path).name}…")
        self.message.setStyleSheet("")
        self.button.setEnabled(False)
        analyser = self._analyser

        def job() -> tuple[int, Path, SourceAnalysis | BaseException]:
            try:
                return gen, Path(path), self._analyse(Path(path), analyser)
            except Exception as exc:  # shown by the widget, like any unusable photo
                return gen, Path(path), exc

        run_async(job, self._loaded)  # a bound method: dropped if the widget is gone

    def _analyse(self, path: Path, analyser: SharedAnalyser) -> SourceAnalysis:
        """:func:`analyse_source`, or the memo's analysis of the same file (thread pool)."""
        try:
            st = os.stat(path)
            key: tuple[str, int, int] | None = (os.path.abspath(path), st.st_size,
                                                st.st_mtime_ns)
        except OSError:
            key = None  # analyse_source says why the file cannot be read
        if key is not None:
            with self._memo_lock:
                hit = self._memo.get(key)
                if hit is not None:
                    self._memo.move_to_end(key)
                    return hit
        result = analyse_source(path, analyser.get())
        with self._memo_lock:
            self.analyses += 1
            if key is not None and result.candidates:
                self._memo[key] = result
                while len(self._memo) > ANALYSES_KEPT:
                    self._memo.popitem(last=False)
        return result

    def _loaded(self, payload: tuple[int, Path, SourceAnalysis | BaseException]) -> None:
        gen, path, result = payload
        if gen != self._generation:
            return  # a newer photo was chosen meanwhile
        if isinstance(result, BaseException):
            self._failed(path, result)
        else:
            self._analysed(result)

    def _failed(self, path: Path, exc: BaseException) -> None:
        self.button.setEnabled(True)
        text = str(exc) if isinstance(exc, LivefuseError) else (
            f"cannot use '{path}': {type(exc).__name__}: {exc}")
        self._show_error(text)

    def _show_error(self, text: str) -> None:
        """Say why the photo chosen cannot be used. A source already in use stays in use (its
        thumbnail and faces stay shown): a bad pick never leaves the app without a source."""
        kept = self.analysis
        if kept is None:
            self.thumb.clear()
            self.faces.clear()
            self.faces.hide()
            self.notes.hide()
        else:
            text = f"{text.rstrip('.')}. Still using {kept.path.name}."
        self.message.setText(text)
        self.message.setStyleSheet("color: #c0392b")
        self.source_failed.emit(text)

    def _analysed(self, result: SourceAnalysis) -> None:
        self.button.setEnabled(True)
        if not result.candidates:
            self._show_error(f"No face found in '{result.path.name}'. Choose a photo where the "
                             f"face is frontal, lit and about {SHARP_FACE_PX} px wide or more.")
            return
        self.analysis = result
        self.faces.blockSignals(True)
        self.faces.clear()
        for i, img in enumerate(result.thumbnails):
            QListWidgetItem(QIcon(QPixmap.fromImage(img)), f"{i}", self.faces)
        self.faces.setVisible(len(result.candidates) > 1)
        self.faces.blockSignals(False)
        row = matching_candidate(result.candidates, self._prefer)
        self._prefer = ()
        # The list was cleared (row -1), so this always emits and reaches _face_chosen.
        self.faces.setCurrentRow(row if row >= 0 else result.default_index)

    def _face_chosen(self, row: int) -> None:
        a = self.analysis
        if a is None or not 0 <= row < len(a.candidates):
            return
        self.thumb.setPixmap(QPixmap.fromImage(a.thumbnails[row]))
        n = len(a.candidates)
        extra = f" (face {row} of 0..{n - 1}, left to right; click another to change)" \
            if n > 1 else ""
        self.message.setText(f"{a.path.name}{extra}")
        self.message.setStyleSheet("")
        notes = a.notes[row] if row < len(a.notes) else ()
        self.notes.setText("\n".join(f"• {n}" for n in notes))
        self.notes.setVisible(bool(notes))
        self.source_changed.emit(a.path, row)

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


__all__ = ["SharedAnalyser", "SourceAnalysis", "SourcePicker", "analyse_source", "choose_image",
           "face_thumbnail", "matching_candidate"]
