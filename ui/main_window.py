"""The main window: a thin view over one :class:`livefuse.session.Session`.

The window holds one frozen :class:`AppConfig` (capture, engine, cache, output). Every edit makes
a new one, which goes to the session (``Session.apply``, debounced: a dragged spin box gives one
apply) and to ``settings.toml``. ``gui.toml`` only keeps window comfort: the source photo, the
chosen face and the window geometry.

Threads: the widgets live on the GUI thread and only hand values over. Every session call (start,
stop, apply, a new source face) runs on one serial control thread (:class:`SerialWorker`), in
order, so the GUI never waits for a thread join, a camera switch or a face detection. The engine
is built at Start on the control thread (``Session.prepare``, then the presets' photos are
prepared on it), and again on the inference thread when a setting needs other models; the camera
opens on the session's capture thread; preview frames and status lines come back through
:class:`RunnerBridge`; metrics are read, the photo analysed and the settings written on the
thread pool.

On stream (design.md §9): the presets panel lists ``Session.presets`` (the ``presets`` folder beside
the settings file) numbered as Ctrl+1..9 switch them; a switch, save, rename or delete runs on the
control thread (a switch blocks until the inference thread took it at a frame boundary), and a
refused preset is said in the banner while the stream keeps what it had. The control API serves
when its setting is on (its token beside the settings file). Whatever changed the session (a
preset, the control API's requests), the window follows it: the metrics timer compares
``Session.revision`` and reads the settings, preset, source photo and swap again when it moved.

Telling the user: every status line goes to the status bar (one line, shortened with "…" when
it must be, the whole text in its tooltip) and to the log (View ▸ Log, every line in full). A
problem that stops the user (the session cannot start, settings cannot be applied, model files
are missing) shows in a banner above the preview, word-wrapped, with the button that fixes it
(Manage models…) where there is one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import tomli_w
from livefuse_ui.bridge import RunnerBridge
from livefuse_ui.models_dialog import ModelsDialog
from livefuse_ui.presets_panel import NO_SOURCE, SHORTCUT_PRESETS, PresetsPanel
from livefuse_ui.preview import STOPPED, OverlayInfo, PreviewWidget
from livefuse_ui.settings_panel import SettingsPanel
from livefuse_ui.source_picker import SharedAnalyser, SourcePicker, choose_image
from livefuse_ui.widgets import ElidedLabel, FpsSpinBox, WheelGuard, guard_wheel
from livefuse_ui.worker import SerialWorker, run_async
from PySide6.QtCore import QByteArray, QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from livefuse.config import (
    CAPTURE_CHOICES,
    LIVE_DEFAULTS,
    RESOLUTION_CHOICES,
    AppConfig,
    CaptureConfig,
    CaptureKind,
    EngineConfig,
    default_config_path,
    load_config,
    save_config,
)
from livefuse.control import load_or_create_token, read_token, token_path
from livefuse.errors import LivefuseError, NoFaceError
from livefuse.faces.tracking import iou
from livefuse.imaging import LoadedImage, atomic_write_bytes, load_image
from livefuse.io.paths import free_name
from livefuse.io.sources import Source, v4l2_devices
from livefuse.live import EngineFactory, EngineLike, default_engine_factory
from livefuse.metrics import MetricsSnapshot
from livefuse.models.download import ModelMissingError, ModelVerifyError
from livefuse.models.engine_choice import EngineChoice, models_error, resolve_engine
from livefuse.precision import device_choices
from livefuse.presets import Preset, PresetError, PresetStore
from livefuse.run import check_video_input
from livefuse.session import Session, build_source

log = logging.getLogger("livefuse_ui")

METRICS_MS = 500  # overlay refresh period
APPLY_DELAY_MS = 300  # settings edits are handed to the session once they pause this long
SAVE_DELAY_MS = 300
QUIT_JOIN_S = 10.0  # at quit: the session stop (threads, sinks, a recording's last write)
START_SHORTCUTS = ("Space", "Ctrl+R")
SAME_FACE_IOU = 0.5  # the picker shows the session's face when its box overlaps this well
LOG_LINES = 2000  # the log view keeps this many status lines
RECORD_FILTER = "Videos (*.mp4 *.mkv *.mov)"


@dataclass(frozen=True)
class GuiState:
    """Window comfort, kept in ``gui.toml`` beside ``settings.toml`` (the session's settings
    live in the :class:`AppConfig`).

    Attributes:
        source_path: the source face photo.
        face_box: the chosen face's box in that photo (x1, y1, x2, y2); matched by position
            at the next start, so it survives a change of the detector or of the choice rule.
        geometry: the window geometry (``QWidget.saveGeometry``, hex).
        reference_path: the reference photo of the ``reference`` face selector.
    """

    source_path: str = ""
    face_box: tuple[float, ...] = ()
    geometry: str = ""
    reference_path: str = ""


def gui_state_path(config_path: Path) -> Path:
    return config_path.with_name("gui.toml")


def load_gui_state(path: Path) -> GuiState:
    """Read ``gui.toml``; a missing or unreadable file gives the defaults (it is only comfort)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        box = tuple(float(v) for v in data.get("face_box", ()))
        return GuiState(source_path=str(data.get("source_path", "")),
                        face_box=box if len(box) == 4 else (),
                        geometry=str(data.get("geometry", "")),
                        reference_path=str(data.get("reference_path", "")))
    except (OSError, tomllib.TOMLDecodeError, TypeError, ValueError):
        return GuiState()


def save_gui_state(state: GuiState, path: Path) -> None:
    atomic_write_bytes(path, tomli_w.dumps(dataclasses.asdict(state)).encode("utf-8"))


def write_settings(cfg: AppConfig, state: GuiState, path: Path) -> None:
    """``settings.toml`` and ``gui.toml`` (a worker thread; the GUI thread only at quit)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_config(cfg, path)
    save_gui_state(state, gui_state_path(path))


def app_engine_factory(analyser: SharedAnalyser) -> EngineFactory:
    """The session's engine factory (called on the control thread at Start, on the inference
    thread when a setting needs the models loaded again): the classic engine reuses the app's
    one dlib analyser."""

    def build(config: AppConfig) -> EngineLike:
        if resolve_engine(config.engine).engine == "classic":
            from livefuse.engine import Engine

            return Engine(config.engine, analyser=analyser.get(), cache=config.cache)
        return default_engine_factory(config)

    return build


def list_cameras() -> list[tuple[str, str]]:
    """``(device, label)`` pairs; V4L2 card names on Linux, indices 0-3 elsewhere (runs on the
    thread pool: it reads sysfs)."""
    if sys.platform.startswith("linux"):
        return [(dev, f"{name} ({dev})") for dev, name in v4l2_devices()]
    return [(str(i), f"camera {i}") for i in range(4)]


def load_reference(path: Path, analyser: SharedAnalyser) -> LoadedImage:
    """Load a reference photo and check that it shows a face (thread pool).

    Raises:
        ImageLoadError: the file is missing or not an image.
        NoFaceError: no face in it.
    """
    from livefuse.faces.selection import detect_robust

    image = load_image(path)
    if not detect_robust(analyser.get(), image.bgr):
        raise NoFaceError(path, "reference photo")
    return image


def _size_key(w: int, h: int) -> str:
    return f"{w}x{h}"


def is_text_field(widget: QWidget | None) -> bool:
    """Whether Space types a character into ``widget`` (so it must not start/stop)."""
    if isinstance(widget, QLineEdit):
        parent = widget.parentWidget()
        if isinstance(parent, QAbstractSpinBox):
            return False  # a number: Space means nothing there
        return not widget.isReadOnly()
    if isinstance(widget, (QTextEdit, QPlainTextEdit)):
        return not widget.isReadOnly()
    if isinstance(widget, QComboBox):
        return widget.isEditable()
    return False


class _ModelsMissing(PresetError):
    """A preset refused because its settings need model files that are not usable."""


class _SpaceToStart(QObject):
    """Application-wide event filter: Space starts/stops wherever the focus is in the window,
    except in a text field. Without it a focused button, check box or list takes Space for
    itself, so Space worked only after clicking the preview."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self._window = window

    def _ours(self, watched: QObject) -> bool:
        win = self._window
        if not isinstance(watched, QWidget) or watched.window() is not win:
            return False
        return not is_text_field(QApplication.focusWidget() or watched)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind not in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress):
            return False
        assert isinstance(event, QKeyEvent)
        mods = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
        if event.key() != Qt.Key.Key_Space or mods != Qt.KeyboardModifier.NoModifier \
                or not self._ours(watched):
            return False
        if kind == QEvent.Type.ShortcutOverride:
            # Claimed here so the menu action's own Space shortcut does not fire as well; the
            # key press that follows is handled below.
            event.accept()
            return True
        if not event.isAutoRepeat():
            self._window.toggle_running()
        return True  # never also click the focused button or tick the focused box


class MainWindow(QMainWindow):
    """livefuse's window (GUI thread).

    Args:
        config_path: the settings file (``default_config_path()`` by default); ``gui.toml``
            beside it holds the window's own state.
        source_factory: ``CaptureConfig -> Source`` (tests inject fakes); called on the
            control thread.
        engine_factory: ``AppConfig -> engine``, called on the control or the inference thread
            (default: the project's Engine, the classic one sharing the app's dlib analyser).
        analyser: the dlib analyser to share (built on first use by default).
        models_directory: for the models dialog.
        vcam_backend: pyvirtualcam backend name (``None``: the OS's own).
    """

    def __init__(self, config_path: Path | None = None, *,
                 source_factory: Callable[[CaptureConfig], Source] = build_source,
                 engine_factory: EngineFactory | None = None, analyser: Any = None,
                 models_directory: Path | None = None, vcam_backend: str | None = None) -> None:
        super().__init__()
        self.setWindowTitle("livefuse")
        self.config_path = config_path or default_config_path()
        self.models_directory = models_directory
        self.analyser = SharedAnalyser(analyser)
        self.last_metrics: MetricsSnapshot | None = None
        self.metrics_updates = 0
        self.frames_since_start = 0
        self.statuses: list[str] = []
        self.reference: LoadedImage | None = None
        self._banner_models = False  # the banner is about model files (Manage models fixes it)
        self._banner_settings = False  # ... and it is the warning about the settings shown
        self._banner_preset = False  # ... and it says why a preset was refused
        self._devices_asked = False  # torch's devices are listed once, for the neural engine
        self._running = False
        self._metrics_busy = False
        self._capture_open = False
        self._opened = ""  # the source's own description once it opened
        self._closed = False
        self._record_confirmed: str | None = None  # chosen in the dialog, replaced once

        # Read once, before the window exists: a small TOML file, the settings everything
        # below is built from.
        self.config, load_error = self._load_config()
        self._in_force = self.config  # the last config the session took
        self._apply_whole = False  # the next apply hands the config over whole
        self.state = load_gui_state(gui_state_path(self.config_path))

        self.bridge = RunnerBridge(self)
        self.bridge.frame_ready.connect(self._show_frame)
        self.bridge.status.connect(self._on_status)
        self._engine_factory = engine_factory or app_engine_factory(self.analyser)
        self.built_engine: str | None = None  # what the session's engine was built to run
        folder = self.config_path.parent
        self.token_file = token_path(folder)
        self.session = Session(self.config, on_status=self.bridge.on_status,
                               on_frame=self.bridge.on_frame, engine_factory=self._build_engine,
                               source_factory=source_factory, vcam_backend=vcam_backend,
                               presets=PresetStore(folder / "presets"),
                               token_file=self.token_file)
        self._seen_revision = self.session.revision
        self._echo_source: Path | None = None  # a photo the picker loads to follow the session
        self._control = SerialWorker("livefuse-ui-session", self)

        self.preview = PreviewWidget()
        self.picker = SourcePicker(analyser=self.analyser)
        self.picker.source_changed.connect(self._source_chosen)
        self.picker.source_failed.connect(self._on_status)
        self.settings = SettingsPanel(self.config)
        self.settings.edited.connect(self._settings_edited)
        self.settings.reference_requested.connect(self.choose_reference)
        self.settings.record_path_requested.connect(self.choose_record_path)
        self.mirror = QCheckBox("Mirror preview")
        self.mirror.setToolTip("Flip the preview only (never the virtual camera or a "
                               "recording). Default: on for a camera, off for a video file")
        self.mirror.toggled.connect(self._mirror_toggled)
        self.swap_box = QCheckBox("Swap faces")
        self.swap_box.setChecked(True)
        self.swap_box.setToolTip("Off: frames pass as they are, e.g. to show your own face for "
                                 "a moment (with the privacy guard on, every face is hidden "
                                 "instead). Ctrl+0; also POST /swap on the control API")
        self.swap_box.toggled.connect(self.set_swap)
        self.presets = PresetsPanel()
        self.presets.switch_requested.connect(self.switch_preset)
        self.presets.save_requested.connect(self.save_preset)
        self.presets.rename_requested.connect(self.rename_preset)
        self.presets.delete_requested.connect(self.delete_preset)
        self.start_button = QPushButton("Start")
        self.start_button.setToolTip("Start or stop (Space, or Ctrl+R)")
        self.start_button.clicked.connect(self.toggle_running)
        self.start_button.setMinimumHeight(36)

        self._build_input_box()
        side = QWidget()
        sl = QVBoxLayout(side)
        src_box = QGroupBox("Source face")
        QVBoxLayout(src_box).addWidget(self.picker)
        sl.addWidget(src_box)
        presets_box = QGroupBox("Presets")
        QVBoxLayout(presets_box).addWidget(self.presets)
        sl.addWidget(presets_box)
        sl.addWidget(self.input_box)
        sl.addWidget(self.settings)
        sl.addStretch(1)
        self.side_scroll = QScrollArea()
        self.side_scroll.setWidget(side)
        self.side_scroll.setWidgetResizable(True)
        self.side_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.side_scroll.setMinimumWidth(side.sizeHint().width() + 24)
        self._wheel_guard = WheelGuard(self)
        guard_wheel(side, self._wheel_guard)
        column = QVBoxLayout()  # Start and the mirror switch stay visible however small the window
        column.addWidget(self.side_scroll, 1)
        toggles = QHBoxLayout()
        toggles.addWidget(self.swap_box)
        toggles.addWidget(self.mirror)
        column.addLayout(toggles)
        column.addWidget(self.start_button)
        self._build_banner()
        left = QVBoxLayout()
        left.addWidget(self.banner)
        left.addWidget(self.preview, 1)
        central = QWidget()
        cl = QHBoxLayout(central)
        cl.addLayout(left, 1)
        cl.addLayout(column)
        self.setCentralWidget(central)
        self._build_log()
        self._build_actions()
        self.resize(1280, 760)
        if self.state.geometry:
            self.restoreGeometry(QByteArray.fromHex(self.state.geometry.encode("ascii")))

        self._metrics_timer = self._timer(METRICS_MS, self._poll_metrics, single=False)
        self._apply_timer = self._timer(APPLY_DELAY_MS, self._apply_now)
        self._save_timer = self._timer(SAVE_DELAY_MS, self._save_async)

        self._show_capture(self.config.capture)
        self._sync_mirror()
        self._metrics_timer.start()  # metrics while running; the session's changes always
        app = QApplication.instance()
        self._space = _SpaceToStart(self)
        if app is not None:
            app.installEventFilter(self._space)
        if self.state.source_path:
            self.picker.load(Path(self.state.source_path), prefer_box=self.state.face_box)
        if self.state.reference_path:
            self.load_reference(Path(self.state.reference_path))
        if load_error:
            self._on_status(load_error)
        run_async(list_cameras, self._cameras_listed)
        self._list_devices()
        self.check_models()
        self.refresh_presets()
        self._load_token()
        if self.config.control.enabled:
            self._open_control()

    # -- construction --------------------------------------------------------------------------
    def _timer(self, ms: int, slot: Callable[[], None], single: bool = True) -> QTimer:
        t = QTimer(self)
        t.setInterval(ms)
        t.setSingleShot(single)
        t.timeout.connect(slot)
        return t

    def _load_config(self) -> tuple[AppConfig, str]:
        """``settings.toml``; the live defaults (those of ``livefuse live``) for a first start
        and for every setting the file leaves out."""
        if not self.config_path.is_file():
            return LIVE_DEFAULTS, ""
        try:
            return load_config(self.config_path, LIVE_DEFAULTS), ""
        except LivefuseError as exc:
            return LIVE_DEFAULTS, f"settings not restored: {exc}"

    def _build_banner(self) -> None:
        """A problem the user must act on, above the preview: the whole text, wrapped, with the
        button that fixes it where there is one."""
        self.banner = QFrame()
        self.banner.setObjectName("banner")
        self.banner.setStyleSheet("#banner { background: #fdecea; border: 1px solid #c0392b; "
                                  "border-radius: 4px; } QLabel { color: #7b241c; }")
        self.banner_text = QLabel()
        self.banner_text.setWordWrap(True)
        self.banner_text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner_models = QPushButton("Manage models…")
        self.banner_models.clicked.connect(self.open_models)
        close = QToolButton()
        close.setText("×")
        close.setToolTip("Hide (the log keeps the message)")
        close.clicked.connect(self.hide_banner)
        lay = QHBoxLayout(self.banner)
        lay.addWidget(self.banner_text, 1)
        lay.addWidget(self.banner_models, 0, Qt.AlignmentFlag.AlignTop)
        lay.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        self.banner.hide()

    def show_banner(self, text: str, models: bool = False) -> None:
        """Show ``text`` in full above the preview; ``models``: with Manage models…"""
        self._banner_models, self._banner_settings, self._banner_preset = models, False, False
        self.banner_text.setText(text)
        self.banner_models.setVisible(models)
        self.banner.show()

    def hide_banner(self) -> None:
        self._banner_models = self._banner_settings = self._banner_preset = False
        self.banner.hide()

    def _build_log(self) -> None:
        """Every status line in full (View ▸ Log, or a click on the status bar)."""
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(LOG_LINES)
        self.log_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.log_dock = QDockWidget("Log", self)
        self.log_dock.setObjectName("log")
        self.log_dock.setWidget(self.log_view)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.log_dock)
        self.log_dock.hide()
        self.status_line = ElidedLabel()
        self.status_line.setCursor(Qt.CursorShape.PointingHandCursor)
        self.status_line.clicked.connect(self.show_log)
        self.statusBar().addWidget(self.status_line, 1)
        log_button = QToolButton()
        log_button.setText("Log")
        log_button.setToolTip("Every status message in full (View ▸ Log)")
        log_button.clicked.connect(self.show_log)
        self.statusBar().addPermanentWidget(log_button)

    def show_log(self) -> None:
        self.log_dock.show()
        self.log_dock.raise_()

    def _build_input_box(self) -> None:
        self.input_box = QGroupBox("Input")
        self.input_kind = QComboBox()
        self.input_kind.addItems(list(CAPTURE_CHOICES))
        self.camera = QComboBox()
        self.camera.setEditable(True)  # a device path or index the scan did not find
        self.resolution = QComboBox()
        for w, h in RESOLUTION_CHOICES:
            self.resolution.addItem(f"{w}×{h}", _size_key(w, h))
        self.resolution.setToolTip("The size asked of the camera; also the virtual camera's "
                                   "size (other inputs are letterboxed into it)")
        self.fps = FpsSpinBox()
        self.fps.setRange(1.0, 240.0)
        self.fps.setToolTip("The rate asked of the camera; also the virtual camera's rate")
        self.video_path = QLabel("no video chosen")
        self.video_path.setWordWrap(True)
        video_button = QPushButton("Choose video…")
        video_button.clicked.connect(self._browse_video)
        cam_page, vid_page = QWidget(), QWidget()
        cf = QFormLayout(cam_page)
        cf.setContentsMargins(0, 0, 0, 0)
        cf.addRow("Camera", self.camera)
        vf = QVBoxLayout(vid_page)
        vf.setContentsMargins(0, 0, 0, 0)
        vf.addWidget(self.video_path)
        vf.addWidget(video_button)
        self.input_pages = QStackedWidget()
        pages = {"camera": cam_page, "video": vid_page,
                 "test pattern": QLabel("Colour bars with a moving square")}
        for kind in CAPTURE_CHOICES:
            self.input_pages.addWidget(pages.get(kind) or QLabel(kind))
        common = QFormLayout()
        common.addRow("Size", self.resolution)
        common.addRow("Frame rate", self.fps)
        self.input_status = QLabel("")
        self.input_status.setWordWrap(True)
        self.input_kind.currentIndexChanged.connect(self.input_pages.setCurrentIndex)
        for sig in (self.input_kind.currentIndexChanged, self.camera.currentTextChanged,
                    self.resolution.currentIndexChanged, self.fps.valueChanged):
            sig.connect(self._capture_edited)
        lay = QVBoxLayout(self.input_box)
        lay.addWidget(self.input_kind)
        lay.addWidget(self.input_pages)
        lay.addLayout(common)
        lay.addWidget(self.input_status)

    def _build_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.start_action = QAction("Start / Stop", self)
        # Space is handled for the whole window by _SpaceToStart (a focused widget would take
        # it otherwise); listing it first makes the menu show it, as the README says.
        self.start_action.setShortcuts([QKeySequence(s) for s in START_SHORTCUTS])
        self.start_action.triggered.connect(self.toggle_running)
        src = QAction("Choose source photo…", self)
        src.setShortcut(QKeySequence.StandardKey.Open)
        src.triggered.connect(self.picker.browse)
        quit_action = QAction("Quit", self)
        quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        for a in (self.start_action, src, quit_action):
            file_menu.addAction(a)
        view = menu.addMenu("&View")
        mirror = QAction("Mirror preview", self)
        mirror.setShortcut(QKeySequence("Ctrl+M"))
        mirror.triggered.connect(self.mirror.toggle)
        view.addAction(mirror)
        log_action = self.log_dock.toggleViewAction()
        log_action.setShortcut(QKeySequence("Ctrl+L"))
        view.addAction(log_action)
        presets = menu.addMenu("&Presets")
        self.preset_actions: list[QAction] = []
        for n in range(1, SHORTCUT_PRESETS + 1):
            action = QAction(f"Preset {n}", self)
            action.setShortcut(QKeySequence(f"Ctrl+{n}"))
            action.triggered.connect(lambda _=False, n=n: self.switch_to_number(n))
            presets.addAction(action)
            self.preset_actions.append(action)
        presets.addSeparator()
        save = QAction("Save preset…", self)
        save.setShortcut(QKeySequence("Ctrl+Shift+S"))
        save.triggered.connect(self.presets.ask_save)
        presets.addAction(save)
        swap = QAction("Swap faces on/off", self)
        swap.setShortcut(QKeySequence("Ctrl+0"))
        swap.triggered.connect(self.swap_box.toggle)
        presets.addAction(swap)
        models = menu.addMenu("&Models")
        manage = QAction("Manage models…", self)
        manage.triggered.connect(self.open_models)
        models.addAction(manage)

    def _show_capture(self, c: CaptureConfig) -> None:
        """Show ``c`` in the input box without emitting edits."""
        widgets = (self.input_kind, self.camera, self.resolution, self.fps)
        for w in widgets:
            w.blockSignals(True)
        try:
            self.input_kind.setCurrentText(c.kind)
            self.input_pages.setCurrentIndex(self.input_kind.currentIndex())
            self._select_camera(c.camera)
            key = _size_key(c.width, c.height)
            idx = self.resolution.findData(key)
            if idx < 0:  # a size set in settings.toml or by the CLI: offered, not replaced
                self.resolution.addItem(f"{c.width}×{c.height}", key)
                idx = self.resolution.count() - 1
            self.resolution.setCurrentIndex(idx)
            self.fps.setValue(c.fps)
            self.video_path.setText(c.video or "no video chosen")
        finally:
            for w in widgets:
                w.blockSignals(False)

    def _select_camera(self, device: str) -> None:
        idx = self.camera.findData(device)
        if idx >= 0:
            self.camera.setCurrentIndex(idx)
        else:
            self.camera.setEditText(device)

    def _camera_value(self) -> str:
        text = self.camera.currentText().strip()
        idx = self.camera.findText(text)
        data = self.camera.itemData(idx) if idx >= 0 else None
        return str(data) if data else (text or "0")

    # -- the config ----------------------------------------------------------------------------
    def _set_config(self, cfg: AppConfig) -> None:
        """Take a new config: shown at once, handed to the session once edits pause, saved."""
        if cfg == self.config:
            return
        self.config = cfg
        self._sync_mirror()
        self._apply_timer.start()
        self._save_timer.start()
        self._update_overlay()

    def _apply_now(self) -> None:
        """Hand the config to the session (control thread). Model files the new settings need
        are checked first: while running, settings that cannot load keep the stream as it is
        (the window goes back to the settings in force and says why); while stopped they are
        kept, the banner says what is missing, and Start refuses until it is installed.

        Only the window's own edits are handed over: a setting the session changed meanwhile
        (the control API, a preset switched) and the window has not shown yet is kept
        (:func:`rebase_edits`), so a spin box stepped a moment after a Stream Deck key never
        turns the privacy guard back off."""
        self._apply_timer.stop()
        cfg, base, session = self.config, self._in_force, self.session
        # after a refused apply the session may hold part of it: the settings in force go whole
        whole, self._apply_whole = self._apply_whole, False

        def job() -> tuple[AppConfig, LivefuseError | None]:
            merged = cfg if whole else rebase_edits(cfg, base, session.config)
            problem = models_error(merged.engine)
            if problem is not None and session.running:
                raise problem
            session.apply(merged)
            return merged, problem

        self._control.submit(job, done=lambda result: self._applied(cfg, *result),
                             failed=lambda exc: self._apply_failed(cfg, exc))

    def _applied(self, cfg: AppConfig, merged: AppConfig,
                 problem: LivefuseError | None) -> None:
        self._in_force = merged
        if merged != cfg and self.config is cfg:  # the session's own changes kept: shown
            self._show_config(merged)
        if not cfg.control.enabled:
            self.settings.set_control_status("off")
        if problem is not None:
            text = (f"These settings need model files that are not usable yet: {problem}. "
                    "Start is refused until they are installed.")
            if not (self.banner.isVisible() and self.banner_text.text() == text):
                self._on_status(f"the settings need model files: {problem}")
                self.show_banner(text, models=True)
                self._banner_settings = True
        elif self._banner_settings:
            self.hide_banner()

    def _apply_failed(self, cfg: AppConfig, exc: BaseException) -> None:
        models = isinstance(exc, (ModelMissingError, ModelVerifyError))
        kept = " (the stream keeps its settings)" if self._running else ""
        self._on_status(f"settings not applied: {exc}")
        self.show_banner(f"Settings not applied{kept}: {exc}", models=models)
        if self.config is cfg:  # no newer edit: back to the settings in force, shown and held
            self._show_config(self._in_force)
            self._apply_whole = True
            self._apply_timer.start()

    def _show_config(self, cfg: AppConfig) -> None:
        """Show ``cfg`` in every widget (no edit emitted) and keep it as the window's config."""
        self.config = cfg
        self.settings.set_config(cfg)
        self._show_capture(cfg.capture)
        self._sync_mirror()
        self._save_timer.start()
        self._update_overlay()

    def flush_settings(self) -> None:
        """Hand a pending (debounced) edit to the session now."""
        if self._apply_timer.isActive():
            self._apply_now()

    def _settings_edited(self) -> None:
        try:
            cfg = self.settings.config(self.config)
        except LivefuseError as exc:
            self.settings.set_error(str(exc))
            return
        self.settings.set_error("")
        self._list_devices()
        self._set_config(cfg)

    def _capture_edited(self, *_: object) -> None:
        w, h = RESOLUTION_CHOICES[0]
        key = self.resolution.currentData()
        if isinstance(key, str) and "x" in key:
            w, h = (int(v) for v in key.split("x"))
        kind = cast(CaptureKind, self.input_kind.currentText())  # CAPTURE_CHOICES' items
        capture = dataclasses.replace(self.config.capture, kind=kind,
                                      camera=self._camera_value(), width=w, height=h,
                                      fps=round(self.fps.value(), 2))
        self._set_config(dataclasses.replace(self.config, capture=capture))

    def _mirror_toggled(self, on: bool) -> None:
        output = dataclasses.replace(self.config.output, mirror_preview=bool(on))
        self.preview.set_mirror(on)
        self._set_config(dataclasses.replace(self.config, output=output))

    def _sync_mirror(self) -> None:
        on = self.config.output.mirrored(self.config.capture)
        self.mirror.blockSignals(True)
        self.mirror.setChecked(on)
        self.mirror.blockSignals(False)
        self.preview.set_mirror(on)

    def current_state(self) -> GuiState:
        face, analysis = self.picker.face, self.picker.analysis
        if analysis is None or face is None:
            src, box = self.state.source_path, self.state.face_box
        else:
            src, box = str(analysis.path), tuple(round(float(v), 1) for v in face.bbox)
        geometry = bytes(self.saveGeometry().toHex().data()).decode("ascii")
        ref = self.state.reference_path if self.reference is None or \
            self.reference.path is None else str(self.reference.path)
        return GuiState(source_path=src, face_box=box, geometry=geometry, reference_path=ref)

    def _save_async(self) -> None:
        cfg, state, path = self.config, self.current_state(), self.config_path
        self.state = state
        run_async(lambda: write_settings(cfg, state, path), lambda _: None,
                  lambda exc: self._on_status(f"settings not saved: {exc}"))

    # -- user actions ---------------------------------------------------------------------------
    def set_video(self, path: Path) -> None:
        """Use a video file as the input (looped)."""
        # absolute: the settings keep it, and the next launch may start in another folder
        capture = dataclasses.replace(self.config.capture, kind="video",
                                      video=str(Path(path).absolute()), loop=True)
        self._show_capture(capture)
        self._set_config(dataclasses.replace(self.config, capture=capture))

    def _browse_video(self) -> None:
        from livefuse.io.video import VIDEO_SUFFIXES

        suffixes = " ".join(f"*{s}" for s in sorted(VIDEO_SUFFIXES))  # what livefuse reads
        path, _ = QFileDialog.getOpenFileName(self, "Video input", "",
                                              f"Videos ({suffixes});;All files (*)")
        if path:
            self.set_video(Path(path))

    def _cameras_listed(self, cams: list[tuple[str, str]]) -> None:
        if self._closed:
            return
        self.camera.blockSignals(True)
        self.camera.clear()
        for dev, label in cams:
            self.camera.addItem(label, dev)
        self._select_camera(self.config.capture.camera)
        self.camera.blockSignals(False)

    def open_models(self) -> ModelsDialog:
        dlg = ModelsDialog(self.models_directory, self)
        dlg.finished.connect(lambda _: self.check_models())  # models may have come or gone
        dlg.show()
        return dlg

    def _build_engine(self, config: AppConfig) -> EngineLike:
        """The session's engine factory (the inference or the control thread): the app's, and
        what it was built to run, so that a Start after models were fetched builds the engine
        ``auto`` now resolves to (:meth:`start`)."""
        kind = resolve_engine(config.engine).engine
        engine = self._engine_factory(config)
        self.built_engine = kind
        return engine

    def _list_devices(self) -> None:
        """Ask torch for its devices (thread pool) once the neural engine is chosen: importing
        torch takes a second and ~300 MB, which the classic engine never needs."""
        if self._devices_asked or not self.settings.neural:
            return
        self._devices_asked = True
        run_async(device_choices, self._devices_listed)

    def _devices_listed(self, devices: tuple[tuple[str, str], ...]) -> None:
        if not self._closed:
            self.settings.set_devices(devices)

    def check_models(self) -> None:
        """Ask (thread pool: the first check of a new file hashes it) what ``auto`` runs here
        and whether the settings' model files are usable; the panel and the banner follow."""
        engine = self.config.engine

        def job() -> tuple[EngineChoice, LivefuseError | None]:
            auto = resolve_engine(EngineConfig(engine="auto", models_dir=engine.models_dir))
            return auto, models_error(engine)

        run_async(job, self._models_checked)

    def _models_checked(self, result: tuple[EngineChoice, LivefuseError | None]) -> None:
        if self._closed:
            return
        auto, problem = result
        self.settings.set_engine_choice(auto)
        self._list_devices()
        built = self.built_engine
        if self.config.engine.engine == "auto" and built is not None and auto.engine != built:
            when = "from the next Start (Stop, then Start)" if self._running else "at Start"
            self._on_status(f"auto now runs the {auto.engine} engine here ({auto.reason}); "
                            f"it is used {when}")
        if problem is None and self._banner_models:
            self.hide_banner()

    def choose_reference(self) -> None:
        path = choose_image(self, "Reference photo: the person to swap")
        if path is not None:
            self.load_reference(path)

    def load_reference(self, path: Path) -> None:
        """Load a reference photo for the ``reference`` face selector (thread pool); once it
        shows a face it goes to the session. A photo that cannot be used leaves the one in use
        in place."""
        analyser = self.analyser
        run_async(lambda: load_reference(path, analyser), self._reference_loaded,
                  lambda exc: self._reference_failed(path, exc))

    def _reference_loaded(self, image: LoadedImage) -> None:
        if self._closed:
            return
        self.reference = image
        self.settings.set_reference(image.path)
        session = self.session
        self._control.submit(lambda: session.set_reference(image),
                             failed=lambda exc: self._on_status(f"reference photo: {exc}"))
        self._save_timer.start()
        self._settings_edited()  # a reference selector waiting for its photo is valid now

    def _reference_failed(self, path: Path, exc: BaseException) -> None:
        if self._closed:
            return
        text = str(exc) if isinstance(exc, LivefuseError) else \
            f"cannot use '{path}': {type(exc).__name__}: {exc}"
        kept = f" (still using {self.reference.path.name})" if self.reference is not None \
            and self.reference.path is not None else ""
        self.settings.set_reference(None, error=f"{text}{kept}")
        self._on_status(f"reference photo not used: {text}{kept}")

    def _keep_last_recording(self) -> None:
        """A recording file that exists is kept: this Start records to the next free name
        (``rec-2.mp4``) and says so, unless the file was just chosen in the save dialog, which
        asked before replacing it (a new user's trial: every Start wrote over the last
        recording, and the next launch over the last session's)."""
        record, confirmed = self.config.output.record, self._record_confirmed
        self._record_confirmed = None
        if not record or record == confirmed or not Path(record).exists():
            return
        try:
            self.session.check_outputs(self.config)
        except LivefuseError:
            return  # an input: Start refuses it with its own message, nothing is renamed
        fresh = free_name(Path(record))
        self.settings.set_record_path(str(fresh))
        self.flush_settings()
        self._on_status(f"recording to '{fresh.name}': '{Path(record).name}' is there and is "
                        "kept")

    def choose_record_path(self) -> None:
        current = self.settings.record_path or str(Path.home() / "livefuse-recording.mp4")
        path, _ = QFileDialog.getSaveFileName(self, "Record to", current, RECORD_FILTER)
        if path:
            self._record_confirmed = path  # the dialog asked before replacing it: once
            self.settings.set_record_path(path)

    def _source_chosen(self, path: Path, index: int) -> None:
        analysis, face = self.picker.analysis, self.picker.face
        echo, self._echo_source = self._echo_source, None
        self.presets.set_can_save(face is not None)
        if analysis is None or face is None:
            return
        if echo is not None and _same_path(path, echo):
            self._save_timer.start()  # the session chose this photo (a preset, the API)
            return
        image, session = analysis.image, self.session
        # The face itself, not its index: the engine's own detector may list faces in
        # another order; it uses its detection at this place.
        self._control.submit(lambda: session.set_source_face(image, face=face),
                             failed=lambda exc: self._on_status(f"source face: {exc}"))
        self._save_timer.start()

    # -- on stream: presets, swap, the control API ----------------------------------------------
    def refresh_presets(self) -> None:
        """Read the presets again (thread pool: they are files) and show them."""
        run_async(self.session.presets.list, self._presets_listed,
                  lambda exc: self._on_status(f"presets not read: {exc}"))

    def _presets_listed(self, items: list[Preset | PresetError]) -> None:
        if self._closed:
            return
        self.presets.set_presets(items)
        self.presets.set_active(self.session.active_preset, self.session.preset_modified)
        for n, action in enumerate(self.preset_actions, 1):
            name = self.presets.name_at(n)
            action.setText(f"&{n}  {name}" if name else f"Preset {n} (none)")

    def switch_to_number(self, number: int) -> None:
        """Ctrl+``number``: switch to the preset shown with that number."""
        name = self.presets.name_at(number)
        if name is None:
            self._on_status(f"no preset {number}: the list has {len(self.presets.names())}")
            return
        self.switch_preset(name)

    def switch_preset(self, name: str) -> None:
        """Switch to a preset on the control thread (``Session.switch_preset`` blocks until the
        inference thread took it at a frame boundary). A refused preset (photo gone, no face,
        models missing) is said in the banner; the stream keeps what it had."""
        if self._closed:
            return
        self.flush_settings()  # an edit made before the key press is not applied after it
        self.presets.set_message(f"switching to {name}…")
        cfg, session = self.config, self.session

        def job() -> Preset:
            preset = session.presets.load(name)
            problem = models_error(preset.applied_to(cfg).effective_engine())
            if problem is not None:  # refused before the stream waits for a model load
                keeps = session.active_preset
                raise _ModelsMissing(preset.name, f"refused: {problem}; the stream keeps "
                                     + (f"preset '{keeps}'" if keeps else "its source face"))
            return session.switch_preset(name)

        self._control.submit(job, done=self._preset_switched,
                             failed=lambda exc: self._preset_refused(name, exc))

    def _preset_switched(self, preset: Preset) -> None:
        self.presets.set_message("")
        if self._banner_preset:
            self.hide_banner()
        self._follow_session()

    def _preset_refused(self, name: str, exc: BaseException) -> None:
        text = str(exc) if isinstance(exc, LivefuseError) else f"preset '{name}': {exc}"
        self.presets.set_message(text, ok=False)
        self._on_status(text)
        self.show_banner(text, models=isinstance(exc, _ModelsMissing))
        self._banner_preset = True

    def save_preset(self, name: str, overwrite: bool = False) -> None:
        """Save the source photo, chosen face and settings in use as preset ``name`` (control
        thread, after any pending edit)."""
        if self.picker.face is None:
            self.presets.set_message(NO_SOURCE, ok=False)
            return
        self.flush_settings()
        session = self.session
        self._control.submit(lambda: session.save_preset(name, overwrite=overwrite),
                             done=lambda p: self._presets_changed(f"preset saved: {p.name}"),
                             failed=self._preset_failed)

    def rename_preset(self, old: str, new: str) -> None:
        session = self.session
        self._control.submit(lambda: session.rename_preset(old, new),
                             done=lambda n: self._presets_changed(f"preset renamed: {old} → {n}"),
                             failed=self._preset_failed)

    def delete_preset(self, name: str) -> None:
        session = self.session
        self._control.submit(lambda: session.delete_preset(name),
                             done=lambda _: self._presets_changed(f"preset deleted: {name}"),
                             failed=self._preset_failed)

    def _presets_changed(self, text: str) -> None:
        self.presets.set_message("")
        self._on_status(text)
        self.refresh_presets()

    def _preset_failed(self, exc: BaseException) -> None:
        self.presets.set_message(str(exc), ok=False)
        self._on_status(str(exc))
        self.refresh_presets()

    def set_swap(self, on: bool) -> None:
        """Swap faces or pass frames as they are (``Session.set_swap``, from the next frame)."""
        if self.swap_box.isChecked() != on:
            self.swap_box.setChecked(on)  # comes back here through toggled
            return
        session = self.session
        self._control.submit(lambda: session.set_swap(on))
        self._on_status("swap on" if on else "swap off: faces pass as they are"
                        + (" (the privacy guard hides them)"
                           if self.config.guard.mode != "off" else ""))
        self._update_overlay()

    def _follow_session(self) -> None:
        """Show what the session runs when it changed (a preset switched, the control API's
        requests): settings, preset, source photo and swap. Waits while an edit of the window's
        own is on its way (the session's older settings would undo it on screen)."""
        session = self.session
        revision = session.revision
        if revision == self._seen_revision or not self.idle or self._closed:
            return
        self._seen_revision = revision
        cfg = session.config
        if cfg != self.config:
            self._in_force = cfg
            self._show_config(cfg)
        if self.swap_box.isChecked() != session.swap_on:
            self.swap_box.blockSignals(True)
            self.swap_box.setChecked(session.swap_on)
            self.swap_box.blockSignals(False)
        self._follow_source(session.source_path, session.source_face_box)
        self.refresh_presets()
        self._update_overlay()

    def _follow_source(self, path: Path | None, box: tuple[float, ...] | None) -> None:
        """Show the session's source photo and face in the picker (loaded there without being
        handed back to the session)."""
        if path is None:
            return
        analysis, face = self.picker.analysis, self.picker.face
        if analysis is not None and _same_path(analysis.path, path) and (
                box is None or (face is not None and
                                iou(face.bbox, np.asarray(box, np.float32)) >= SAME_FACE_IOU)):
            return
        self._echo_source = path
        self.picker.load(path, prefer_box=box or ())

    def _load_token(self) -> None:
        """Show the control API's token (thread pool: a file, made on first use only when the
        API is on)."""
        path, enabled = self.token_file, self.config.control.enabled

        def job() -> str | None:
            if path.exists():
                return read_token(path)
            return load_or_create_token(path) if enabled else None

        run_async(job, self._token_loaded,
                  lambda exc: None if self._closed else self.settings.set_token(None, str(exc)))

    def _token_loaded(self, token: str | None) -> None:
        if not self._closed:
            self.settings.set_token(token)

    def _open_control(self) -> None:
        """Serve the control API (control thread); the status line says where, or why not."""
        session = self.session
        self._control.submit(session.open_control,
                             failed=lambda exc: self._on_status(
                                 f"control API off: {str(exc).removeprefix('control API: ')}"))

    def changeEvent(self, event: QEvent) -> None:
        # presets saved meanwhile by `livefuse presets save` show when the window is back
        if event.type() == QEvent.Type.ActivationChange and self.isActiveWindow() \
                and not self._closed:
            self.refresh_presets()
            # ... and a token replaced by `livefuse control-token --new`, which the app's own
            # server takes at once (livefuse.control.TokenFile): Copy must give the new one
            self._load_token()
        super().changeEvent(event)

    # -- running -------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Whether the user started the session (it may still be opening the camera)."""
        return self._running

    @property
    def idle(self) -> bool:
        """No session call queued or running (tests wait for it)."""
        return self._control.pending == 0 and not self._apply_timer.isActive()

    def toggle_running(self) -> None:
        if self._running:
            self.stop()
        else:
            self.start()

    def start(self) -> bool:
        """Start the session (returns at once: the engine is built and the presets prepared on
        the control thread, the camera opens on the capture thread).

        Returns:
            ``False`` (with a status line) when something is missing.
        """
        if self._running:
            return True
        if self._closed:
            return False
        if self.picker.face is None:
            self._on_status("choose a source face photo first")
            return False
        capture = self.config.capture
        if capture.kind == "video" and not capture.video:
            self._on_status("choose a video file first (Input → video)")
            return False
        if self.config.engine.face_selector == "reference" and self.reference is None:
            self._on_status("choose a reference photo first (Target faces → Choose reference "
                            "photo…), or another face selector")
            return False
        try:  # what the panel shows must be what runs (a GUI trial: "reference" shown, the
            self.settings.config(self.config)  # largest face swapped, the reason off-screen)
        except LivefuseError as exc:
            self._on_status(f"cannot start: {exc}")
            self.show_banner(f"Cannot start: {exc}")
            return False
        self.flush_settings()
        self._keep_last_recording()
        self._running = True
        self._capture_open, self._opened = False, ""
        self.frames_since_start = 0
        self.start_button.setText("Stop")
        self._set_input_status(f"{self._input_name()}: opening…")
        self._on_status(f"starting: {self._input_name()}")
        cfg, session = self.config, self.session

        def start() -> dict[str, str | None]:
            # After the queued apply: the model files these settings load, all named at once,
            # before any thread starts (the inference thread would fail on the first one only).
            problem = models_error(cfg.engine)
            if problem is not None:
                raise problem
            if cfg.capture.kind == "video" and cfg.capture.video:
                # a missing or unreadable file is refused here, as `live --video` refuses it,
                # not retried like a camera (a GUI trial: "retrying…" for 20 s and more)
                check_video_input(Path(cfg.capture.video))
            if session.engine is not None and \
                    resolve_engine(cfg.engine).engine != self.built_engine:
                session.drop_engine()  # `auto` resolves otherwise since models were fetched
            # Built here, not on the inference thread: a model or a source photo that fails
            # says so before any device opens, and the presets' photos are prepared on it so
            # that Ctrl+N runs no detection.
            session.prepare()
            ready = session.preload_presets() if session.presets.names() else {}
            session.start()
            return ready

        self._control.submit(start, done=self._started, failed=self._start_failed)
        return True

    def _started(self, ready: dict[str, str | None]) -> None:
        if ready:
            good = [name for name, why in ready.items() if why is None]
            bad = [f"{name}: {why}" for name, why in ready.items() if why is not None]
            self._on_status(f"presets ready: {', '.join(good) or 'none'}"
                            + (f"; not prepared: {'; '.join(bad)}" if bad else ""))

    def _start_failed(self, exc: BaseException) -> None:
        self._running = False
        self.start_button.setText("Start")
        self._set_input_status("")
        self._on_status(f"cannot start: {exc}")
        self.show_banner(f"Cannot start: {exc}",
                         models=isinstance(exc, (ModelMissingError, ModelVerifyError)))

    def _engine_failed(self, text: str) -> None:
        """The engine could not be built on the inference thread (a model that fails to load,
        a missing runtime): nothing can run, so stop instead of showing a stream that is not
        there."""
        self.stop()
        why = text.removeprefix("engine error: ")
        self.show_banner(f"Cannot start: {why}", models="model" in why.lower())

    def stop(self) -> None:
        """Stop the session on the control thread (threads joined, sinks closed there)."""
        if not self._running:
            return
        self._running = False
        self.start_button.setText("Start")
        self._set_input_status("")
        self.bridge.take_frame()  # one handed over before the stop is not shown after it
        self.preview.clear(STOPPED)
        session = self.session
        self._control.submit(lambda: session.stop(2.0),
                             done=lambda ok: self._on_status("stopped" if ok else
                                                             "stopped (a device is still busy)"),
                             failed=lambda exc: self._on_status(f"stop failed: {exc}"))

    # -- feedback ------------------------------------------------------------------------------
    def _show_frame(self) -> None:
        item = self.bridge.take_frame()
        if item is None or not self._running:
            return
        self.preview.set_image(item[0])
        self.frames_since_start += 1
        if self.frames_since_start == 1:
            log.info("preview: first frame (%dx%d)", item[0].width(), item[0].height())

    def _poll_metrics(self) -> None:
        self._follow_session()
        if not self._running or self._metrics_busy:
            return
        self._metrics_busy = True

        def done(snap: MetricsSnapshot) -> None:
            self._metrics_busy = False
            if self._closed:
                return
            self.last_metrics = snap
            self.metrics_updates += 1
            self._update_overlay()

        def failed(exc: BaseException) -> None:
            self._metrics_busy = False

        run_async(self.session.metrics.snapshot, done, failed)

    def precision_in_use(self) -> str:
        """What the overlay shows as precision: the engine's own report when it exists."""
        return self.session.precision_in_use

    def _update_overlay(self) -> None:
        session = self.session
        self.preview.set_metrics(self.last_metrics, OverlayInfo(
            precision=self.precision_in_use(), preset=session.active_preset or "",
            modified=session.preset_modified, swap=session.swap_on))

    def _input_name(self) -> str:
        c = self.config.capture
        if c.kind == "camera":
            return f"camera {c.camera}"
        if c.kind == "video":
            return f"video {Path(c.video).name}" if c.video else "video"
        return c.kind

    def _set_input_status(self, text: str, ok: bool = True) -> None:
        self.input_status.setText(text)
        self.input_status.setStyleSheet("" if ok else "color: #c0392b")

    def _show_capture_status(self, text: str) -> str | None:
        """Show a capture status line in the input box; returns what the status bar says about
        it (``None``: the line as is)."""
        if not self._running:
            return None
        name = self._input_name()
        retrying = f"{name}: cannot open, retrying…"
        if text.startswith("opened: "):
            self._capture_open = True
            self._opened = text.removeprefix("opened: ")
            self._set_input_status(self._opened)
        elif text == "camera back":
            self._capture_open = True
            self._set_input_status(self._opened or f"{name}: back")
        elif text.startswith(("camera lost: ", "source failed: ")) and not self._capture_open:
            self._set_input_status(retrying, ok=False)
            return f"{retrying} ({text})"
        elif text.startswith("camera lost: "):
            self._capture_open = False
            lost = f"{name}: lost ({text.removeprefix('camera lost: ')}), retrying…"
            self._set_input_status(lost, ok=False)
            return lost
        elif text.startswith("source failed: "):
            self._set_input_status(f"{name}: {text}", ok=False)
        elif text.startswith("source gave up: "):
            self._set_input_status(f"{name}: {text.removeprefix('source ')}", ok=False)
        elif text == "source ended":
            self._set_input_status(f"{name}: ended")
        return None

    def _on_status(self, text: str) -> None:
        if self._closed:
            return
        log.info("status: %s", text)
        self.statuses.append(text)
        del self.statuses[:-200]
        shown = self._show_capture_status(text)
        self.status_line.set_full_text(shown or text)
        self.log_view.appendPlainText(f"{time.strftime('%H:%M:%S')}  {shown or text}")
        if text.startswith("engine error: ") and self._running and self.session.engine is None:
            self._engine_failed(text)
        if text.startswith("recorder failed: "):  # a recording lost is not a status bar line
            why = text.removeprefix("recorder failed: ")
            self.show_banner(why[:1].upper() + why[1:])
        if text.startswith("control API on "):
            self.settings.set_control_status(f"serving on {text.removeprefix('control API on ')}")
            if not self.settings.token:
                self._load_token()  # made just now, on first use
        elif text.startswith("control API off: "):
            self.settings.set_control_status(text.removeprefix("control API off: "), ok=False)
        if text.startswith("virtual camera"):
            ok = text.startswith(("virtual camera on", "virtual camera off"))
            hint = "" if ok else (
                "\nLinux: sudo modprobe v4l2loopback devices=1 exclusive_caps=1 "
                "card_label=livefuse; Windows/macOS: install OBS >= 26 and start its virtual "
                "camera once. A camera in use by another app shows as busy.")
            self.settings.set_virtual_camera_status(text.removeprefix("virtual camera ") + hint,
                                                    ok)

    # -- quitting ------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the session, join its threads and save the settings (GUI thread, once; the
        window is closing, so waiting here is what we want). Afterwards no thread of this
        window reports to Qt any more."""
        if self._closed:
            return
        self._closed = True
        state = self.current_state()
        for t in (self._metrics_timer, self._apply_timer, self._save_timer):
            t.stop()
        app = QApplication.instance()
        if app is not None:
            app.removeEventFilter(self._space)
        for dlg in self.findChildren(ModelsDialog):
            dlg.cancel()  # a download on the thread pool ends after its block (kept as .part)
        self._running = False
        cfg, session = self.config, self.session
        # After whatever is queued (the last edit included), in order.
        self._control.submit(lambda: session.apply(cfg))
        self._control.submit(lambda: session.stop(2.0))
        self._control.submit(session.close_control)
        joined = self._control.close(QUIT_JOIN_S)
        if not joined:
            print("livefuse: the session did not stop in time", file=sys.stderr)
        self.bridge.close()
        joined = _join_session_threads(3.0) and joined
        try:
            write_settings(cfg, state, self.config_path)
        except OSError as exc:
            print(f"livefuse: settings not saved: {exc}", file=sys.stderr)
            return
        log.info("quit: session stopped, threads %s, settings saved",
                 "joined" if joined else "NOT all joined")

    def closeEvent(self, event: QCloseEvent) -> None:
        self.shutdown()
        super().closeEvent(event)


def rebase_edits(mine: AppConfig, base: AppConfig, live: AppConfig) -> AppConfig:
    """The settings to hand to the session: ``live`` (what it runs now) with every setting the
    window changed since ``base`` (what it last knew the session ran) set to the window's value.
    A setting changed by someone else meanwhile and not by the window stays as ``live`` has it.

    Raises:
        ConfigError: the merged settings are invalid.
    """
    if live == base:
        return mine
    sections = {}
    for section in dataclasses.fields(AppConfig):
        m, b, lv = (getattr(c, section.name) for c in (mine, base, live))
        edits = {f.name: getattr(m, f.name) for f in dataclasses.fields(m)
                 if getattr(m, f.name) != getattr(b, f.name)}
        sections[section.name] = dataclasses.replace(lv, **edits)
    return dataclasses.replace(live, **sections).validate()


def _same_path(a: Path, b: Path) -> bool:
    """Whether two spellings name the same file, without touching the disk (GUI thread)."""
    return os.path.normcase(os.path.abspath(a)) == os.path.normcase(os.path.abspath(b))


def _join_session_threads(timeout: float, names: Sequence[str] = ("livefuse",)) -> bool:
    """Wait for the session's helper threads (e.g. a removed virtual camera still closing);
    ``True`` when none is left."""
    deadline = time.monotonic() + timeout
    me = threading.current_thread()
    left = False
    for t in threading.enumerate():
        if t is not me and t.name.startswith(tuple(names)):
            t.join(max(0.0, deadline - time.monotonic()))
            left = left or t.is_alive()
    return not left


__all__ = ["GuiState", "MainWindow", "app_engine_factory", "is_text_field", "list_cameras",
           "load_gui_state", "rebase_edits", "write_settings"]
