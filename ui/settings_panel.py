"""The settings panel: edits an AppConfig and the virtual-camera switch.

Every choice list comes from ``livefuse.config`` (``*_CHOICES``), so the CLI and the GUI can never
disagree about what is allowed. An edit emits a new frozen :class:`AppConfig`; the main window
hands it to ``LiveRunner.apply``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

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
    EngineConfig,
)
from livefuse.errors import ConfigError


def _combo(choices: tuple[str, ...]) -> QComboBox:
    box = QComboBox()
    box.addItems(list(choices))
    return box


class SettingsPanel(QWidget):
    """Engine, precision, backend, cache, detection interval, keep-mouth and virtual camera.

    Signals:
        config_changed(AppConfig): a valid new config after any edit.
        virtual_camera_toggled(bool): the user switched the virtual camera on or off.
    """

    config_changed = Signal(object)
    virtual_camera_toggled = Signal(bool)

    def __init__(self, config: AppConfig | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._base = config or AppConfig()

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
        self.keep_mouth = QCheckBox("Keep the target's mouth")
        self.vcam = QCheckBox("Virtual camera")
        self.vcam_status = QLabel("off")
        self.vcam_status.setWordWrap(True)
        self.error = QLabel("")
        self.error.setStyleSheet("color: #c0392b")
        self.error.setWordWrap(True)

        self.engine.setToolTip("classic: offline, no download; neural: inswapper-class models")
        self.precision.setToolTip("auto: fp16 on CUDA with compute capability >= 7.0, else fp32")
        self.threshold.setToolTip("Reuse a cached swap while the pose similarity is at least this")
        self.refresh.setToolTip("Force a fresh swap after this many frames of reuse")
        self.detect_every.setToolTip("Run the face detector every k frames; track in between")

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

        self.set_config(self._base)
        for combo in (self.engine, self.precision, self.backend):
            combo.currentIndexChanged.connect(self._edited)
        for spin in (self.threshold, self.refresh, self.detect_every):
            spin.valueChanged.connect(self._edited)
        for check in (self.cache_enabled, self.keep_mouth):
            check.toggled.connect(self._edited)
        self.cache_enabled.toggled.connect(self._sync_enabled)
        self.vcam.toggled.connect(self.virtual_camera_toggled)

    def set_config(self, cfg: AppConfig) -> None:
        """Show ``cfg`` without emitting :attr:`config_changed`."""
        self._base = cfg
        widgets = (self.engine, self.precision, self.backend, self.threshold, self.refresh,
                   self.detect_every, self.cache_enabled, self.keep_mouth)
        for w in widgets:
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
        finally:
            for w in widgets:
                w.blockSignals(False)
        self._sync_enabled()

    def config(self) -> AppConfig:
        """The config the widgets show; fields the panel does not edit keep their last value.

        Raises:
            ConfigError: the combination is invalid.
        """
        # The combo boxes hold exactly the *_CHOICES values; validate() re-checks them.
        changes: dict[str, Any] = dict(
            engine=self.engine.currentText(), precision=self.precision.currentText(),
            backend=self.backend.currentText(), detect_every=self.detect_every.value(),
            keep_mouth=self.keep_mouth.isChecked())
        eng: EngineConfig = dataclasses.replace(self._base.engine, **changes)
        cache = CacheConfig(enabled=self.cache_enabled.isChecked(),
                            threshold=round(self.threshold.value(), 2),
                            refresh_every_n=self.refresh.value())
        return AppConfig(engine=eng, cache=cache).validate()

    def set_virtual_camera_status(self, text: str, ok: bool = True) -> None:
        """Show the virtual camera's state (device and size, or "missing"/"busy" with the fix)."""
        self.vcam_status.setText(text)
        self.vcam_status.setStyleSheet("" if ok else "color: #c0392b")

    def _sync_enabled(self) -> None:
        on = self.cache_enabled.isChecked()
        self.threshold.setEnabled(on)
        self.refresh.setEnabled(on)

    def _edited(self) -> None:
        try:
            cfg = self.config()
        except ConfigError as exc:
            self.error.setText(str(exc))
            return
        self.error.setText("")
        self._base = cfg
        self.config_changed.emit(cfg)


__all__ = ["SettingsPanel"]
