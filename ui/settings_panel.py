"""The settings panel: the engine, cache and virtual-camera parts of an AppConfig.

Every choice list comes from ``livefuse.config`` (``*_CHOICES``), so the CLI and the GUI can never
disagree about what is allowed. The panel only shows and edits values: it emits ``edited`` and
the main window builds the new frozen :class:`AppConfig` (:meth:`SettingsPanel.config`) and
hands it, debounced, to the session.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from livefuse.config import (
    BACKEND_CHOICES,
    ENGINE_CHOICES,
    ENHANCER_CHOICES,
    FACE_MASK_REGION_CHOICES,
    FACE_MASK_TYPE_CHOICES,
    PIXEL_BOOST_CHOICES,
    PRECISION_CHOICES,
    ROTATION_CHOICES,
    AppConfig,
    CacheConfig,
)

NEURAL_ONLY_TIP = ("Applies to the neural engine only: the classic engine runs dlib and OpenCV "
                   "on the CPU in float32")
PRECISION_TIP = "auto: fp16 on CUDA with compute capability >= 7.0, else fp32"
BACKEND_TIP = "torch: livefuse's PyTorch port of inswapper; onnxruntime: the ONNX model as is"
NO_ENHANCER = "none"
MASK_TIPS = {
    "box": "A padded, blurred box around the face (FaceFusion's box mask)",
    "occlusion": "The XSeg occluder: a hand or microphone in front of the face stays in front "
                 "(model: livefuse models fetch xseg)",
    "region": "The BiSeNet face parser: swap only the regions ticked below; an open mouth is "
              "kept from the target (model: livefuse models fetch bisenet_resnet34)",
}


def _combo(choices: tuple[str, ...]) -> QComboBox:
    box = QComboBox()
    box.addItems(list(choices))
    return box


class SettingsPanel(QWidget):
    """Engine, precision, backend, detection interval, rotation, smoothing, keep-mouth; the
    neural engine's pixel boost, masks and enhancer; cache and virtual camera.

    All methods are for the GUI thread.

    Signals:
        edited(): the user changed a value (read it with :meth:`config`).
    """

    edited = Signal()

    def __init__(self, config: AppConfig | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.engine = _combo(ENGINE_CHOICES)
        self.precision = _combo(PRECISION_CHOICES)
        self.backend = _combo(BACKEND_CHOICES)
        self.cache_enabled = QCheckBox("Pose-similarity cache")
        self.threshold = QDoubleSpinBox()
        self.threshold.setRange(0.50, 1.00)
        self.threshold.setSingleStep(0.01)
        self.threshold.setDecimals(2)
        self.refresh = QSpinBox()
        self.refresh.setRange(1, 120)
        self.refresh.setSuffix(" frames")
        self.detect_every = QSpinBox()
        self.detect_every.setRange(1, 60)
        self.detect_every.setSuffix(" frames")
        for spin in (self.refresh, self.detect_every):
            spin.setSpecialValueText("1 frame")  # the minimum, in the singular
        self.keep_mouth = QCheckBox("Keep the target's mouth")
        self.rotation = _combo(ROTATION_CHOICES)
        self.smooth = QCheckBox("Steady landmarks")
        self.pixel_boost = _combo(tuple(str(v) for v in PIXEL_BOOST_CHOICES))
        self.masks = {name: QCheckBox(name) for name in FACE_MASK_TYPE_CHOICES}
        self.regions = QListWidget()
        for name in FACE_MASK_REGION_CHOICES:
            item = QListWidgetItem(name, self.regions)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked)
        self.regions.setFixedHeight(96)
        self.mask_blur = QDoubleSpinBox()
        self.mask_blur.setRange(0.0, 1.0)
        self.mask_blur.setSingleStep(0.05)
        self.mask_blur.setDecimals(2)
        self.enhancer = _combo((NO_ENHANCER, *ENHANCER_CHOICES))
        self.enhancer_blend = QSpinBox()
        self.enhancer_blend.setRange(0, 100)
        self.enhancer_blend.setSuffix(" %")
        self.vcam = QCheckBox("Virtual camera")
        self.vcam_status = QLabel("off")
        self.vcam_status.setWordWrap(True)
        self.error = QLabel("")
        self.error.setStyleSheet("color: #c0392b")
        self.error.setWordWrap(True)

        self.engine.setToolTip("classic: offline, no download; neural: inswapper-class models")
        self.threshold.setToolTip("Reuse a cached swap while the pose similarity is at least this")
        self.refresh.setToolTip("Force a fresh swap after this many frames of reuse")
        self.detect_every.setToolTip("Run the face detector every k frames; track in between")
        self.vcam.setToolTip("Send the swapped frames (never the overlay) to a virtual camera")
        self.rotation.setToolTip("auto: when no face is upright, try the frame turned by 90, 180 "
                                 "and 270 degrees (up to 4x detection on frames without a face); "
                                 "always: every detection")
        self.smooth.setToolTip("A One-Euro filter on each face's landmarks: no shimmer on a "
                               "still face, no visible lag on a moving one")
        self.pixel_boost.setToolTip("Swap at this size: the 128 px model on 2x2, 3x3 or 4x4 "
                                    "sub-grids (sharper; 4, 9 or 16 times the work)")
        for name, box in self.masks.items():
            box.setToolTip(MASK_TIPS[name])
        self.mask_blur.setToolTip("The box mask's blur (0..1)")
        self.enhancer.setToolTip("Restore each swapped face at 512 px (needs the model: "
                                 "livefuse models fetch NAME); with the cache on it runs on "
                                 "cache misses only")
        self.enhancer_blend.setToolTip("How much of the enhancer's output is used")

        engine_box = QGroupBox("Engine")
        ef = QFormLayout(engine_box)
        ef.addRow("Engine", self.engine)
        ef.addRow("Precision", self.precision)
        ef.addRow("Backend", self.backend)
        ef.addRow("Detect every", self.detect_every)
        ef.addRow("Rotated faces", self.rotation)
        ef.addRow(self.smooth)
        ef.addRow(self.keep_mouth)
        face_box = QGroupBox("Face (neural engine)")
        ff = QFormLayout(face_box)
        ff.addRow("Pixel boost", self.pixel_boost)
        mask_row = QHBoxLayout()
        for box in self.masks.values():
            mask_row.addWidget(box)
        ff.addRow("Masks", mask_row)
        ff.addRow("Regions", self.regions)
        ff.addRow("Box blur", self.mask_blur)
        ff.addRow("Enhancer", self.enhancer)
        ff.addRow("Blend", self.enhancer_blend)
        self.face_box = face_box
        cache_box = QGroupBox("Cache")
        cf = QFormLayout(cache_box)
        cf.addRow(self.cache_enabled)
        cf.addRow("Threshold", self.threshold)
        cf.addRow("Refresh every", self.refresh)
        out_box = QGroupBox("Output")
        of = QFormLayout(out_box)
        of.addRow(self.vcam)
        of.addRow("Status", self.vcam_status)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        for w in (engine_box, face_box, cache_box, out_box, self.error):
            lay.addWidget(w)

        self.set_config(config or AppConfig())
        for combo in (self.engine, self.precision, self.backend, self.rotation,
                      self.pixel_boost, self.enhancer):
            combo.currentIndexChanged.connect(self._edited)
        for spin in (self.threshold, self.refresh, self.detect_every, self.mask_blur,
                     self.enhancer_blend):
            spin.valueChanged.connect(self._edited)
        for check in (self.cache_enabled, self.keep_mouth, self.vcam, self.smooth,
                      *self.masks.values()):
            check.toggled.connect(self._edited)
        self.regions.itemChanged.connect(self._edited)

    def _widgets(self) -> tuple[QWidget, ...]:
        return (self.engine, self.precision, self.backend, self.threshold, self.refresh,
                self.detect_every, self.cache_enabled, self.keep_mouth, self.vcam,
                self.rotation, self.smooth, self.pixel_boost, *self.masks.values(),
                self.regions, self.mask_blur, self.enhancer, self.enhancer_blend)

    def set_config(self, cfg: AppConfig) -> None:
        """Show ``cfg`` without emitting :attr:`edited`."""
        for w in self._widgets():
            w.blockSignals(True)
        try:
            self.engine.setCurrentText(cfg.engine.engine)
            self.precision.setCurrentText(cfg.engine.precision)
            self.backend.setCurrentText(cfg.engine.backend)
            self.detect_every.setValue(cfg.engine.detect_every)
            self.keep_mouth.setChecked(cfg.engine.keep_mouth)
            self.cache_enabled.setChecked(cfg.cache.enabled)
            self.threshold.setValue(cfg.cache.threshold)
            self.refresh.setValue(cfg.cache.refresh_every_n)
            self.vcam.setChecked(cfg.output.virtual_camera)
            e = cfg.engine
            self.rotation.setCurrentText(e.rotation)
            self.smooth.setChecked(e.smooth)
            self.pixel_boost.setCurrentText(str(e.pixel_boost))
            for name, box in self.masks.items():
                box.setChecked(name in e.face_mask_types)
            for i in range(self.regions.count()):
                item = self.regions.item(i)
                item.setCheckState(Qt.CheckState.Checked if item.text() in e.face_mask_regions
                                   else Qt.CheckState.Unchecked)
            self.mask_blur.setValue(e.face_mask_blur)
            self.enhancer.setCurrentText(e.enhancer or NO_ENHANCER)
            self.enhancer_blend.setValue(round(e.enhancer_blend))
        finally:
            for w in self._widgets():
                w.blockSignals(False)
        self._sync_enabled()

    def config(self, base: AppConfig) -> AppConfig:
        """``base`` with the values the widgets show; everything the panel does not edit
        (capture, mirror, device, blend, ...) is kept.

        Raises:
            ConfigError: the combination is invalid.
        """
        # The combo boxes hold exactly the *_CHOICES values; validate() re-checks them.
        enhancer = self.enhancer.currentText()
        engine = dataclasses.replace(
            base.engine, engine=self.engine.currentText(),
            precision=self.precision.currentText(), backend=self.backend.currentText(),
            detect_every=self.detect_every.value(), keep_mouth=self.keep_mouth.isChecked(),
            rotation=self.rotation.currentText(), smooth=self.smooth.isChecked(),
            pixel_boost=int(self.pixel_boost.currentText()),
            face_mask_types=tuple(n for n, b in self.masks.items() if b.isChecked()),
            face_mask_regions=tuple(
                self.regions.item(i).text() for i in range(self.regions.count())
                if self.regions.item(i).checkState() == Qt.CheckState.Checked),
            face_mask_blur=round(self.mask_blur.value(), 2),
            enhancer=None if enhancer == NO_ENHANCER else enhancer,
            enhancer_blend=float(self.enhancer_blend.value()))
        cache = CacheConfig(enabled=self.cache_enabled.isChecked(),
                            threshold=round(self.threshold.value(), 2),
                            refresh_every_n=self.refresh.value())
        output = dataclasses.replace(base.output, virtual_camera=self.vcam.isChecked())
        return dataclasses.replace(base, engine=engine, cache=cache, output=output).validate()

    def set_virtual_camera_status(self, text: str, ok: bool = True) -> None:
        """Show the virtual camera's state (device and size, or "missing"/"busy" with the fix)."""
        self.vcam_status.setText(text)
        self.vcam_status.setStyleSheet("" if ok else "color: #c0392b")

    def set_error(self, text: str) -> None:
        self.error.setText(text)

    def _sync_enabled(self) -> None:
        on = self.cache_enabled.isChecked()
        self.threshold.setEnabled(on)
        self.refresh.setEnabled(on)
        neural = self.engine.currentText() == "neural"
        self.precision.setEnabled(neural)
        self.backend.setEnabled(neural)
        self.precision.setToolTip(PRECISION_TIP if neural else NEURAL_ONLY_TIP)
        self.backend.setToolTip(BACKEND_TIP if neural else NEURAL_ONLY_TIP)
        self.face_box.setEnabled(neural)
        self.face_box.setToolTip("" if neural else NEURAL_ONLY_TIP)
        region = self.masks["region"].isChecked()
        self.regions.setEnabled(region)
        self.mask_blur.setEnabled(self.masks["box"].isChecked())
        self.enhancer_blend.setEnabled(self.enhancer.currentText() != NO_ENHANCER)

    def _edited(self) -> None:
        self._sync_enabled()
        self.edited.emit()


__all__ = ["NEURAL_ONLY_TIP", "SettingsPanel"]
