"""The settings panel: the engine, cache and virtual-camera parts of an AppConfig.

Every choice list comes from ``livefuse.config`` (``*_CHOICES``), so the CLI and the GUI can never
disagree about what is allowed. The panel only shows and edits values: it emits ``edited`` and
the main window builds the new frozen :class:`AppConfig` (:meth:`SettingsPanel.config`) and
hands it, debounced, to the session.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from livefuse.config import (
    BACKEND_CHOICES,
    ENGINE_CHOICES,
    PRECISION_CHOICES,
    AppConfig,
    CacheConfig,
)

NEURAL_ONLY_TIP = ("Applies to the neural engine only: the classic engine runs dlib and OpenCV "
                   "on the CPU in float32")
PRECISION_TIP = "auto: fp16 on CUDA with compute capability >= 7.0, else fp32"
BACKEND_TIP = "torch: livefuse's PyTorch port of inswapper; onnxruntime: the ONNX model as is"


def _combo(choices: tuple[str, ...]) -> QComboBox:
    box = QComboBox()
    box.addItems(list(choices))
    return box


class SettingsPanel(QWidget):
    """Engine, precision, backend, detection interval, keep-mouth, cache and virtual camera.

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

        engine_box = QGroupBox("Engine")
        ef = QFormLayout(engine_box)
        ef.addRow("Engine", self.engine)
        ef.addRow("Precision", self.precision)
        ef.addRow("Backend", self.backend)
        ef.addRow("Detect every", self.detect_every)
        ef.addRow(self.keep_mouth)
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
        for w in (engine_box, cache_box, out_box, self.error):
            lay.addWidget(w)

        self.set_config(config or AppConfig())
        for combo in (self.engine, self.precision, self.backend):
            combo.currentIndexChanged.connect(self._edited)
        for spin in (self.threshold, self.refresh, self.detect_every):
            spin.valueChanged.connect(self._edited)
        for check in (self.cache_enabled, self.keep_mouth, self.vcam):
            check.toggled.connect(self._edited)

    def _widgets(self) -> tuple[QWidget, ...]:
        return (self.engine, self.precision, self.backend, self.threshold, self.refresh,
                self.detect_every, self.cache_enabled, self.keep_mouth, self.vcam)

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
        engine = dataclasses.replace(
            base.engine, engine=self.engine.currentText(),
            precision=self.precision.currentText(), backend=self.backend.currentText(),
            detect_every=self.detect_every.value(), keep_mouth=self.keep_mouth.isChecked())
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

    def _edited(self) -> None:
        self._sync_enabled()
        self.edited.emit()


__all__ = ["NEURAL_ONLY_TIP", "SettingsPanel"]
