"""The settings panel: the engine, target-face, privacy-guard, cache, output and control-API
parts of an AppConfig.

Every choice list comes from ``livefuse.config`` (``*_CHOICES``), so the CLI and the GUI can never
disagree about what is allowed; the devices come from the engine package
(:func:`livefuse.precision.device_choices`: torch's CUDA devices), and what ``auto`` resolves to
from :func:`livefuse.models.engine_choice.resolve_engine` (the main window asks both off the GUI
thread and hands the answers in). The panel only shows and edits values: it emits ``edited`` and
the main window builds the new frozen :class:`AppConfig` (:meth:`SettingsPanel.config`) and
hands it, debounced, to the session. Files (the reference photo, the recording) are chosen by
the main window when the panel asks for them.

To add a setting: a widget built from its ``*_CHOICES``, a row in its group, a line in
:meth:`SettingsPanel.set_config` and in :meth:`SettingsPanel.config`, and the widget in
``_widgets``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from livefuse.config import (
    BACKEND_CHOICES,
    BLEND_CHOICES,
    BLEND_HELP,
    CONTROL_HOST,
    ENGINE_REQUEST_CHOICES,
    ENHANCER_CHOICES,
    FACE_MASK_REGION_CHOICES,
    FACE_MASK_TYPE_CHOICES,
    FACE_SELECTOR_CHOICES,
    GUARD_CHOICES,
    PIXEL_BOOST_CHOICES,
    PRECISION_CHOICES,
    ROTATION_CHOICES,
    AppConfig,
    Backend,
    BlendMode,
    CacheConfig,
    ControlConfig,
    GuardConfig,
    Precision,
    Rotation,
)
from livefuse.errors import ConfigError
from livefuse.models.engine_choice import EngineChoice

_INT_MAX = 2**31 - 1  # QSpinBox's own limit: the CLI sets none on these
CLASSIC_ONLY_TIP = "Applies to the classic engine only: the neural engine pastes with its masks"
NEURAL_ONLY_TIP = ("Applies to the neural engine only: the classic engine runs dlib and OpenCV "
                   "on the CPU in float32")
PRECISION_TIP = "auto: fp16 on CUDA with compute capability >= 7.0, else fp32"
DEVICE_TIP = ("Where the neural engine runs: auto = the first CUDA GPU torch sees, else the "
              "CPU; or a GPU by number")
SELECTOR_TIPS = {
    "one": "one: the largest face, or the face number set below (left to right from 0)",
    "many": "many: every face in the picture",
    "reference": "reference: the face nearest to the person in a reference photo",
}
NO_REFERENCE = "no reference photo"
NO_RECORDING = "no file chosen"
LARGEST = "largest"
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
    """A combo box whose items show and hold (``currentData``) the choices."""
    box = QComboBox()
    for choice in choices:
        box.addItem(choice, choice)
    return box


def _shown(spin: QDoubleSpinBox, stored: float) -> float:
    """The spin box's value, or ``stored`` when the box shows ``stored`` rounded to its decimals:
    a value set from the CLI or settings.toml (0.333) is kept until the user changes it."""
    shown = round(spin.value(), spin.decimals())
    return stored if round(stored, spin.decimals()) == shown else shown


def _select(box: QComboBox, value: str, label: str | None = None) -> None:
    """Select the item holding ``value``; a value not offered (a GPU that is gone, a value
    from settings.toml) is added rather than replaced."""
    idx = box.findData(value)
    if idx < 0:
        box.addItem(label or value, value)
        idx = box.count() - 1
    box.setCurrentIndex(idx)


GUARD_TIPS = {
    "off": "off: a face the tracker loses or does not swap shows as it is",
    "blur": "blur: pixelate every face that is not swapped (a lost face's last known place, "
            "grown with its motion)",
    "hold": "hold: repeat the last fully swapped frame for up to the frames set below, then "
            "blur",
}
GUARD_TIP = ("Never show a real face: a face that was being swapped and is lost, or a face "
             "found but not swapped, is hidden. While on, the detector runs on every frame")
LOCAL_HOSTS = ("127.0.0.1", "::1", "localhost")
NOT_LOCAL_WARNING = ("Not only this computer: anyone on that network who has the token can "
                     "control the stream, and plain HTTP carries the token unencrypted")
NO_TOKEN = "none yet"
ANY_PORT = "any free port"


KEEP_MOUTH_CLASSIC_TIP = ("The target's open mouth (teeth, tongue) shows through the swap, and "
                          "the source's own teeth are left out")
KEEP_MOUTH_TIP = ("The neural engine keeps the mouth with the face parser: tick the region mask "
                  "(Face, neural engine) to use this")


class SettingsPanel(QWidget):
    """Engine (auto/classic/neural), device, precision, backend, detection interval, rotation,
    smoothing, keep-mouth; the target faces (one, many or a reference person, a face number);
    the neural engine's pixel boost, masks and enhancer; cache; virtual camera and recording.

    All methods are for the GUI thread.

    Signals:
        edited(): the user changed a value (read it with :meth:`config`).
        reference_requested(): the user wants to choose a reference photo.
        record_path_requested(): the user wants to choose the recording's file.
    """

    edited = Signal()
    reference_requested = Signal()
    record_path_requested = Signal()

    def __init__(self, config: AppConfig | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._auto_engine = "classic"  # what `auto` runs, until the window knows better
        self._reference_name = ""
        self._record_path = ""
        self.engine = _combo(ENGINE_REQUEST_CHOICES)
        self.device = QComboBox()
        self.precision = _combo(PRECISION_CHOICES)
        self.backend = _combo(BACKEND_CHOICES)
        self.cache_enabled = QCheckBox("Pose-similarity cache")
        self.threshold = QDoubleSpinBox()
        # the ranges config.py validates and the CLI takes, as near as a spin box gets ((0, 1]
        # from 0.001): a stored value outside a narrower range was clamped and written back at
        # the first edit (an option trial: a threshold of 0.3 became 0.5, a refresh of 200, 120)
        self.threshold.setRange(0.001, 1.00)
        self.threshold.setSingleStep(0.01)
        self.threshold.setDecimals(3)
        self.refresh = QSpinBox()
        self.refresh.setRange(1, _INT_MAX)
        self.refresh.setSuffix(" frames")
        self.detect_every = QSpinBox()
        self.detect_every.setRange(1, _INT_MAX)
        self.detect_every.setSuffix(" frames")
        for spin in (self.refresh, self.detect_every):
            spin.setSpecialValueText("1 frame")  # the minimum, in the singular
        self.keep_mouth = QCheckBox("Keep the target's mouth")
        self.blend = _combo(BLEND_CHOICES)
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
        self.mask_blur.setDecimals(3)
        self.enhancer = _combo((NO_ENHANCER, *ENHANCER_CHOICES))
        self.enhancer_blend = QDoubleSpinBox()
        self.enhancer_blend.setRange(0.0, 100.0)
        self.enhancer_blend.setDecimals(1)
        self.enhancer_blend.setSuffix(" %")
        self.face_selector = _combo(FACE_SELECTOR_CHOICES)
        self.face_index = QSpinBox()
        self.face_index.setRange(-1, _INT_MAX)
        self.face_index.setSpecialValueText(LARGEST)  # -1: no index, the largest face
        self.reference_label = QLabel(NO_REFERENCE)
        self.reference_label.setWordWrap(True)
        self.reference_button = QPushButton("Choose reference photo…")
        self.reference_button.clicked.connect(self.reference_requested)
        self.vcam = QCheckBox("Virtual camera")
        self.vcam_status = QLabel("off")
        self.vcam_status.setWordWrap(True)
        self.record = QCheckBox("Record to file")
        self.record_label = QLabel(NO_RECORDING)
        self.record_label.setWordWrap(True)
        self.record_button = QPushButton("Choose file…")
        self.record_button.clicked.connect(self.record_path_requested)
        self.guard_mode = _combo(GUARD_CHOICES)
        self.hold_frames = QSpinBox()
        self.hold_frames.setRange(1, 600)
        self.hold_frames.setSuffix(" frames")
        self.control_enabled = QCheckBox("Serve the control API")
        self.control_host = QLineEdit()
        self.control_port = QSpinBox()
        self.control_port.setRange(0, 65535)
        self.control_port.setSpecialValueText(ANY_PORT)
        self.control_token = QLineEdit()
        self.control_token.setReadOnly(True)
        self.control_token.setEchoMode(QLineEdit.EchoMode.Password)
        self.control_token.setPlaceholderText(NO_TOKEN)
        self.token_show = QCheckBox("Show")
        self.token_show.toggled.connect(self._show_token)
        self.token_copy = QPushButton("Copy")
        self.token_copy.setEnabled(False)
        self.token_copy.clicked.connect(self.copy_token)
        self.control_status = QLabel("off")
        self.control_status.setWordWrap(True)
        self.control_warning = QLabel(NOT_LOCAL_WARNING)
        self.control_warning.setWordWrap(True)
        self.control_warning.setStyleSheet("color: #b9770e")
        self.error = QLabel("")
        self.error.setStyleSheet("color: #c0392b")
        self.error.setWordWrap(True)

        self.engine.setToolTip("auto: neural when its models are installed, else classic; "
                               "classic: offline, no download; neural: inswapper-class models")
        self.device.setToolTip(DEVICE_TIP)
        for i, choice in enumerate(FACE_SELECTOR_CHOICES):
            self.face_selector.setItemData(i, SELECTOR_TIPS.get(choice, choice),
                                           Qt.ItemDataRole.ToolTipRole)
        self.face_selector.setToolTip("Which faces of the picture are swapped")
        self.face_index.setToolTip("With 'one': the face to swap, counted left to right from "
                                   "0; 'largest' follows the largest face")
        self.record.setToolTip("Also write the swapped stream to a video file (.mp4, .mkv, "
                               ".mov); written to a temporary file and renamed when stopped")
        self.threshold.setToolTip("Reuse a cached swap while the pose similarity is at least this")
        self.refresh.setToolTip("A cached swap serves at most this many frames, the one it was "
                                "made on included (1: no reuse)")
        self.detect_every.setToolTip("Run the face detector every k frames; track in between")
        self.vcam.setToolTip("Send the swapped frames (never the overlay) to a virtual camera")
        self.rotation.setToolTip("auto: when no face is upright or one lies on its side, also "
                                 "try the frame turned by every 45 degrees (up to 8x detection "
                                 "on frames without a face); always: at every detection")
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
        self.guard_mode.setToolTip(GUARD_TIP)
        for i, choice in enumerate(GUARD_CHOICES):
            self.guard_mode.setItemData(i, GUARD_TIPS.get(choice, choice),
                                        Qt.ItemDataRole.ToolTipRole)
        self.hold_frames.setToolTip("hold: how many frames in a row the last swapped frame may "
                                    "be repeated before the guard blurs instead")
        self.control_enabled.setToolTip("A local HTTP API for a Stream Deck (Bitfocus "
                                        "Companion), an OBS script or a hotkey daemon: switch "
                                        "presets, swap on/off, the privacy guard, the source "
                                        "photo. Every request needs the token below")
        self.control_host.setToolTip("The address to listen on: 127.0.0.1 (this computer "
                                     "only) unless you name another")
        self.control_port.setToolTip("The TCP port (http://HOST:PORT/status)")
        self.control_token.setToolTip("Send it as 'Authorization: Bearer TOKEN' (also printed "
                                       "by `livefuse control-token`; `--new` replaces it). "
                                       "Made when the API is first switched on")
        self.token_copy.setToolTip("Copy the token to the clipboard")

        engine_box = QGroupBox("Engine")
        ef = QFormLayout(engine_box)
        ef.addRow("Engine", self.engine)
        ef.addRow("Device", self.device)
        ef.addRow("Precision", self.precision)
        ef.addRow("Backend", self.backend)
        ef.addRow("Detect every", self.detect_every)
        ef.addRow("Rotated faces", self.rotation)
        ef.addRow(self.smooth)
        ef.addRow(self.keep_mouth)
        ef.addRow("Blend (classic)", self.blend)
        targets_box = QGroupBox("Target faces")
        tf = QFormLayout(targets_box)
        tf.addRow("Swap", self.face_selector)
        tf.addRow("Face number", self.face_index)
        tf.addRow("Reference", self.reference_label)
        tf.addRow(self.reference_button)
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
        guard_box = QGroupBox("Privacy guard")
        gf = QFormLayout(guard_box)
        gf.addRow("Guard", self.guard_mode)
        gf.addRow("Hold up to", self.hold_frames)
        cache_box = QGroupBox("Cache")
        cf = QFormLayout(cache_box)
        cf.addRow(self.cache_enabled)
        cf.addRow("Threshold", self.threshold)
        cf.addRow("Refresh every", self.refresh)
        out_box = QGroupBox("Output")
        of = QFormLayout(out_box)
        of.addRow(self.vcam)
        of.addRow("Status", self.vcam_status)
        of.addRow(self.record)
        of.addRow("File", self.record_label)
        of.addRow(self.record_button)
        control_box = QGroupBox("Control API (Stream Deck, scripts)")
        kf = QFormLayout(control_box)
        kf.addRow(self.control_enabled)
        kf.addRow("Address", self.control_host)
        kf.addRow("Port", self.control_port)
        token_row = QHBoxLayout()
        token_row.addWidget(self.control_token, 1)
        token_row.addWidget(self.token_show)
        token_row.addWidget(self.token_copy)
        kf.addRow("Token", token_row)
        kf.addRow("Status", self.control_status)
        kf.addRow(self.control_warning)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        # the guard first: what a streamer must see is on before going live
        for w in (guard_box, engine_box, targets_box, face_box, cache_box, out_box,
                  control_box, self.error):
            lay.addWidget(w)

        self.set_devices([])
        self.set_config(config or AppConfig())
        for combo in (self.engine, self.device, self.precision, self.backend, self.rotation,
                      self.blend, self.pixel_boost, self.enhancer, self.face_selector,
                      self.guard_mode):
            combo.currentIndexChanged.connect(self._edited)
        for spinner in (self.threshold, self.refresh, self.detect_every, self.mask_blur,
                        self.enhancer_blend, self.face_index, self.hold_frames,
                        self.control_port):
            spinner.valueChanged.connect(self._edited)
        for check in (self.cache_enabled, self.keep_mouth, self.vcam, self.smooth,
                      self.control_enabled, *self.masks.values()):
            check.toggled.connect(self._edited)
        self.control_host.editingFinished.connect(self._host_edited)
        self.record.toggled.connect(self._record_toggled)
        self.regions.itemChanged.connect(self._edited)

    def _widgets(self) -> tuple[QWidget, ...]:
        return (self.engine, self.device, self.precision, self.backend, self.threshold,
                self.refresh, self.detect_every, self.cache_enabled, self.keep_mouth, self.vcam,
                self.rotation, self.blend, self.smooth, self.pixel_boost, *self.masks.values(),
                self.regions, self.mask_blur, self.enhancer, self.enhancer_blend,
                self.face_selector, self.face_index, self.record, self.guard_mode,
                self.hold_frames, self.control_enabled, self.control_host, self.control_port)

    # -- what the window hands in --------------------------------------------------------------
    def set_devices(self, devices: Sequence[tuple[str, str]]) -> None:
        """Offer these ``(device, label)`` pairs (:func:`livefuse.precision.device_choices`),
        keeping the device selected (added when it is not among them)."""
        current = self.device.currentData() or "auto"
        self.device.blockSignals(True)
        try:
            self.device.clear()
            for device, label in devices or (("auto", "auto"),):
                self.device.addItem(label, device)
            _select(self.device, str(current))
        finally:
            self.device.blockSignals(False)

    def set_engine_choice(self, choice: EngineChoice) -> None:
        """Show what ``auto`` runs here (the window resolves it off the GUI thread)."""
        self._auto_engine = choice.engine if choice.requested == "auto" else self._auto_engine
        idx = self.engine.findData("auto")
        self.engine.setItemText(idx, f"auto ({self._auto_engine})")
        self.engine.setItemData(idx, f"auto runs the {self._auto_engine} engine here: "
                                f"{choice.reason}", Qt.ItemDataRole.ToolTipRole)
        self._sync_enabled()

    def set_reference(self, path: Path | None, error: str = "") -> None:
        """Show the reference photo in use (``None``: none yet), and why the last one chosen
        could not be used (the one in use is kept)."""
        if path is not None:
            self._reference_name = path.name
        name = self._reference_name or NO_REFERENCE
        self.reference_label.setText(f"{name}\n{error}" if error else name)
        self.reference_label.setToolTip(str(path) if path is not None else "")
        self.reference_label.setStyleSheet("color: #c0392b" if error else "")

    @property
    def neural(self) -> bool:
        """Whether the engine shown runs the neural engine (``auto`` as last resolved)."""
        engine = self.engine.currentData()
        return engine == "neural" or (engine == "auto" and self._auto_engine == "neural")

    @property
    def has_reference(self) -> bool:
        return bool(self._reference_name)

    def set_record_path(self, path: str) -> None:
        """The recording's file (chosen in a save dialog by the window); ticks Record."""
        self._record_path = path
        self.record_label.setText(path or NO_RECORDING)
        self.record.setChecked(bool(path))
        self._edited()

    @property
    def record_path(self) -> str:
        return self._record_path

    def _record_toggled(self, on: bool) -> None:
        if on and not self._record_path:
            self.record.blockSignals(True)
            self.record.setChecked(False)  # ticked again once a file is chosen
            self.record.blockSignals(False)
            self.record_path_requested.emit()
            return
        self._edited()

    def set_config(self, cfg: AppConfig) -> None:
        """Show ``cfg`` without emitting :attr:`edited`."""
        for w in self._widgets():
            w.blockSignals(True)
        try:
            _select(self.engine, cfg.engine.engine)
            _select(self.device, cfg.engine.device)
            self.precision.setCurrentText(cfg.engine.precision)
            self.backend.setCurrentText(cfg.engine.backend)
            _select(self.face_selector, cfg.engine.face_selector)
            index = cfg.engine.target_face_index
            self.face_index.setValue(-1 if index is None else index)
            if cfg.output.record:
                self._record_path = cfg.output.record
                self.record_label.setText(cfg.output.record)
            self.record.setChecked(cfg.output.record is not None)
            self.detect_every.setValue(cfg.engine.detect_every)
            self.keep_mouth.setChecked(cfg.engine.keep_mouth)
            self.cache_enabled.setChecked(cfg.cache.enabled)
            self.threshold.setValue(cfg.cache.threshold)
            self.refresh.setValue(cfg.cache.refresh_every_n)
            self.vcam.setChecked(cfg.output.virtual_camera)
            e = cfg.engine
            self.rotation.setCurrentText(e.rotation)
            self.blend.setCurrentText(e.blend)
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
            self.enhancer_blend.setValue(e.enhancer_blend)
            _select(self.guard_mode, cfg.guard.mode)
            self.hold_frames.setValue(cfg.guard.hold_frames)
            self.control_enabled.setChecked(cfg.control.enabled)
            self.control_host.setText(cfg.control.host)
            self.control_port.setValue(cfg.control.port)
        finally:
            for w in self._widgets():
                w.blockSignals(False)
        self._sync_enabled()

    def config(self, base: AppConfig) -> AppConfig:
        """``base`` with the values the widgets show; everything the panel does not edit
        (capture, mirror, face_mask_padding, ...) is kept.

        Raises:
            ConfigError: the combination is invalid.
        """
        # The combo boxes hold exactly the *_CHOICES values; validate() re-checks them.
        enhancer = self.enhancer.currentText()
        selector = self.face_selector.currentData()
        if selector == "reference" and not self.has_reference:
            raise ConfigError("the reference selector needs a reference photo: choose one "
                              "under Target faces")
        index = self.face_index.value()
        engine = dataclasses.replace(
            base.engine, engine=self.engine.currentData(), device=self.device.currentData(),
            face_selector=selector,
            target_face_index=index if selector == "one" and index >= 0 else None,
            # the combos hold the choices config.py defines for these fields, nothing else
            precision=cast(Precision, self.precision.currentText()),
            backend=cast(Backend, self.backend.currentText()),
            detect_every=self.detect_every.value(), keep_mouth=self.keep_mouth.isChecked(),
            rotation=cast(Rotation, self.rotation.currentText()), smooth=self.smooth.isChecked(),
            blend=cast(BlendMode, self.blend.currentText()),
            pixel_boost=int(self.pixel_boost.currentText()),
            face_mask_types=tuple(n for n, b in self.masks.items() if b.isChecked()),
            face_mask_regions=tuple(
                self.regions.item(i).text() for i in range(self.regions.count())
                if self.regions.item(i).checkState() == Qt.CheckState.Checked),
            face_mask_blur=_shown(self.mask_blur, base.engine.face_mask_blur),
            enhancer=None if enhancer == NO_ENHANCER else enhancer,
            enhancer_blend=_shown(self.enhancer_blend, base.engine.enhancer_blend))
        cache = CacheConfig(enabled=self.cache_enabled.isChecked(),
                            threshold=_shown(self.threshold, base.cache.threshold),
                            refresh_every_n=self.refresh.value())
        record = self._record_path if self.record.isChecked() and self._record_path else None
        output = dataclasses.replace(base.output, virtual_camera=self.vcam.isChecked(),
                                     record=record)
        guard = GuardConfig(mode=self.guard_mode.currentData(),
                            hold_frames=self.hold_frames.value())
        control = ControlConfig(enabled=self.control_enabled.isChecked(),
                                port=self.control_port.value(),
                                host=self.control_host.text().strip())
        return dataclasses.replace(base, engine=engine, cache=cache, output=output,
                                   guard=guard, control=control).validate()

    def set_virtual_camera_status(self, text: str, ok: bool = True) -> None:
        """Show the virtual camera's state (device and size, or "missing"/"busy" with the fix)."""
        self.vcam_status.setText(text)
        self.vcam_status.setStyleSheet("" if ok else "color: #c0392b")

    def set_error(self, text: str) -> None:
        self.error.setText(text)

    def set_token(self, token: str | None, error: str = "") -> None:
        """Show the control API's token (read off the GUI thread by the window), or why it
        cannot be read."""
        self.control_token.setText(token or "")
        self.control_token.setPlaceholderText(error or NO_TOKEN)
        self.token_copy.setEnabled(bool(token))

    @property
    def token(self) -> str:
        return self.control_token.text()

    def copy_token(self) -> None:
        """Put the token on the clipboard (never shown on screen unless asked: the window may
        be on stream)."""
        if self.token:
            QGuiApplication.clipboard().setText(self.token)
            self.control_status.setToolTip("token copied to the clipboard")

    def _show_token(self, on: bool) -> None:
        self.control_token.setEchoMode(QLineEdit.EchoMode.Normal if on
                                       else QLineEdit.EchoMode.Password)

    def set_control_status(self, text: str, ok: bool = True) -> None:
        """Show whether the control API serves (its URL) or why not."""
        self.control_status.setText(text)
        self.control_status.setStyleSheet("" if ok else "color: #c0392b")

    def _host_edited(self) -> None:
        if not self.control_host.text().strip():
            self.control_host.setText(CONTROL_HOST)  # an empty address means the default
        self._edited()

    def _sync_enabled(self) -> None:
        on = self.cache_enabled.isChecked()
        self.threshold.setEnabled(on)
        self.refresh.setEnabled(on)
        neural = self.neural
        for box, tip in ((self.precision, PRECISION_TIP), (self.backend, BACKEND_TIP),
                         (self.device, DEVICE_TIP)):
            box.setEnabled(neural)
            box.setToolTip(tip if neural else NEURAL_ONLY_TIP)
        selector = self.face_selector.currentData()
        self.face_index.setEnabled(selector == "one")
        self.reference_button.setEnabled(selector == "reference")
        self.reference_label.setEnabled(selector == "reference")
        self.face_box.setEnabled(neural)
        self.face_box.setToolTip("" if neural else NEURAL_ONLY_TIP)
        region = self.masks["region"].isChecked()
        self.regions.setEnabled(region)
        # the neural engine finds the mouth with the face parser: without the region mask it
        # swaps the mouth, so the box would be ignored (the CLI refuses the option there)
        self.keep_mouth.setEnabled(not neural or region)
        self.keep_mouth.setToolTip(KEEP_MOUTH_CLASSIC_TIP if not neural else
                                   "" if region else KEEP_MOUTH_TIP)
        self.blend.setEnabled(not neural)
        self.blend.setToolTip(BLEND_HELP if not neural else CLASSIC_ONLY_TIP)
        self.mask_blur.setEnabled(self.masks["box"].isChecked())
        self.enhancer_blend.setEnabled(self.enhancer.currentText() != NO_ENHANCER)
        self.hold_frames.setEnabled(self.guard_mode.currentData() == "hold")
        host = self.control_host.text().strip()
        self.control_warning.setVisible(bool(host) and host not in LOCAL_HOSTS)

    def _edited(self) -> None:
        self._sync_enabled()
        self.edited.emit()


__all__ = ["LARGEST", "NEURAL_ONLY_TIP", "NO_RECORDING", "NO_REFERENCE", "SettingsPanel"]
