"""The main window: the composition root that wires the live runner to the widgets.

Nothing heavy runs on the GUI thread: the photo is analysed on the thread pool, the camera is
opened on the runner's capture thread, the engine runs on its inference thread, metrics are read
on the thread pool. The window only hands over frozen settings and draws what comes back.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
from livefuse_ui.bridge import RunnerBridge
from livefuse_ui.models_dialog import ModelsDialog
from livefuse_ui.preview import OverlayInfo, PreviewWidget
from livefuse_ui.settings_panel import SettingsPanel
from livefuse_ui.source_picker import SourcePicker, shared_analyser
from livefuse_ui.worker import run_async
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from livefuse.config import AppConfig, default_config_path, load_config, save_config
from livefuse.errors import LivefuseError
from livefuse.imaging import LoadedImage, atomic_write_bytes
from livefuse.io.sinks import PreviewSink, Sink, VirtualCameraSink
from livefuse.io.sources import (
    CameraSource,
    Source,
    TestPatternSource,
    VideoFileSource,
    v4l2_devices,
)
from livefuse.live import LiveRunner, default_engine_factory
from livefuse.metrics import MetricsSnapshot

INPUT_KINDS = ("camera", "video", "test pattern")
RESOLUTIONS = ((640, 480), (1280, 720), (1920, 1080))
METRICS_MS = 500  # overlay refresh period


@dataclass(frozen=True)
class GuiState:
    """What the window remembers besides the engine settings (``gui.toml`` beside them).

    Attributes:
        source_path: the source face photo; face_index: its chosen face (left to right).
        input_kind: one of :data:`INPUT_KINDS`; video_path: the video input.
        camera: camera index or device path; width, height (px), fps: requested camera format.
        mirror: mirror the preview; virtual_camera: send frames to the virtual camera.
    """

    source_path: str = ""
    face_index: int = -1
    input_kind: str = "camera"
    video_path: str = ""
    camera: str = "0"
    width: int = 1280
    height: int = 720
    fps: int = 30
    mirror: bool = True
    virtual_camera: bool = False


def gui_state_path(config_path: Path) -> Path:
    return config_path.with_name("gui.toml")


def load_gui_state(path: Path) -> GuiState:
    """Read ``gui.toml``; a missing or unreadable file gives the defaults (it is only comfort)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        known = {f.name for f in dataclasses.fields(GuiState)}
        return GuiState(**{k: v for k, v in data.items() if k in known})
    except (OSError, tomllib.TOMLDecodeError, TypeError):
        return GuiState()


def save_gui_state(state: GuiState, path: Path) -> None:
    atomic_write_bytes(path, tomli_w.dumps(dataclasses.asdict(state)).encode("utf-8"))


def engine_factory(config: AppConfig) -> Any:
    """The runner's engine factory (called on its inference thread at start and on an engine
    settings change): the classic engine reuses the app's one analyser (see
    :func:`livefuse_ui.source_picker.shared_analyser`)."""
    if config.engine.engine == "classic":
        from livefuse.engine import Engine

        return Engine(config.engine, analyser=shared_analyser(), cache=config.cache)
    return default_engine_factory(config)


def list_cameras() -> list[tuple[str, str]]:
    """``(device, label)`` pairs; V4L2 card names on Linux, indices 0-3 elsewhere (runs on the
    thread pool: it reads sysfs)."""
    if sys.platform.startswith("linux"):
        return [(dev, f"{name} ({dev})") for dev, name in v4l2_devices()]
    return [(str(i), f"camera {i}") for i in range(4)]


RunnerFactory = Callable[..., LiveRunner]
SourceFactory = Callable[[GuiState], Source]


def default_source_factory(state: GuiState) -> Source:
    if state.input_kind == "video":
        return VideoFileSource(state.video_path, loop=True)
    if state.input_kind == "test pattern":
        return TestPatternSource(state.width, state.height, float(state.fps))
    device: int | str = int(state.camera) if state.camera.isdigit() else state.camera
    return CameraSource(device, state.width, state.height, float(state.fps))


class MainWindow(QMainWindow):
    """livefuse's window.

    Args:
        config_path: the settings file (``default_config_path()`` by default); ``gui.toml``
            beside it holds the window's own state.
        source_factory: builds the frame source from the window state (tests inject fakes).
        models_directory: for the models dialog.
    """

    def __init__(self, config_path: Path | None = None,
                 source_factory: SourceFactory = default_source_factory,
                 models_directory: Path | None = None) -> None:
        super().__init__()
        self.setWindowTitle("livefuse")
        self.config_path = config_path or default_config_path()
        self.source_factory = source_factory
        self.models_directory = models_directory
        self.runner: LiveRunner | None = None
        self._sinks: list[Sink] = []
        self._vcam: VirtualCameraSink | None = None
        self._source_face: LoadedImage | None = None
        self._source_index: int | None = None
        self._metrics_busy = False
        self.last_metrics: MetricsSnapshot | None = None
        self.metrics_updates = 0
        self.statuses: list[str] = []
        self._stopping: list[threading.Thread] = []

        self.config, load_error = self._load_config()
        self.state = load_gui_state(gui_state_path(self.config_path))

        self.bridge = RunnerBridge(self)
        self.bridge.frame_ready.connect(self._show_frame)
        self.bridge.status.connect(self._on_status)

        self.preview = PreviewWidget()
        self.picker = SourcePicker()
        self.picker.source_changed.connect(self._source_chosen)
        self.settings = SettingsPanel(self.config)
        self.settings.config_changed.connect(self._config_edited)
        self.settings.virtual_camera_toggled.connect(self._vcam_toggled)
        self.mirror = QCheckBox("Mirror preview")
        self.mirror.toggled.connect(self._mirror_toggled)
        self.start_button = QPushButton("Start")
        self.start_button.setToolTip("Start or stop (Space / Ctrl+R)")
        self.start_button.clicked.connect(self.toggle_running)
        self.start_button.setMinimumHeight(36)

        self._build_input_box()
        side = QWidget()
        sl = QVBoxLayout(side)
        src_box = QGroupBox("Source face")
        QVBoxLayout(src_box).addWidget(self.picker)
        sl.addWidget(src_box)
        sl.addWidget(self.input_box)
        sl.addWidget(self.settings)
        sl.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(side)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(side.sizeHint().width() + 24)
        column = QVBoxLayout()  # Start and the mirror switch stay visible however small the window
        column.addWidget(scroll, 1)
        column.addWidget(self.mirror)
        column.addWidget(self.start_button)
        central = QWidget()
        cl = QHBoxLayout(central)
        cl.addWidget(self.preview, 1)
        cl.addLayout(column)
        self.setCentralWidget(central)
        self._build_actions()
        self.resize(1280, 760)

        self._metrics_timer = QTimer(self)
        self._metrics_timer.setInterval(METRICS_MS)
        self._metrics_timer.timeout.connect(self._poll_metrics)
        self._save_timer = QTimer(self)
        self._save_timer.setSingleShot(True)
        self._save_timer.setInterval(300)
        self._save_timer.timeout.connect(self._save_async)

        self._restore_state()
        if load_error:
            self._on_status(load_error)
        run_async(list_cameras, self._cameras_listed)

    # -- construction --------------------------------------------------------------------------
    def _load_config(self) -> tuple[AppConfig, str]:
        if not self.config_path.is_file():
            return AppConfig(), ""
        try:
            return load_config(self.config_path), ""
        except LivefuseError as exc:
            return AppConfig(), f"settings not restored: {exc}"

    def _build_input_box(self) -> None:
        self.input_box = QGroupBox("Input")
        self.input_kind = QComboBox()
        self.input_kind.addItems(list(INPUT_KINDS))
        self.camera = QComboBox()
        self.camera.setEditable(True)  # a device path or index the scan did not find
        self.resolution = QComboBox()
        for w, h in RESOLUTIONS:
            self.resolution.addItem(f"{w}×{h}", (w, h))
        self.fps = QSpinBox()
        self.fps.setRange(1, 120)
        self.fps.setSuffix(" fps")
        self.video_path = QLabel("no video chosen")
        self.video_path.setWordWrap(True)
        video_button = QPushButton("Choose video…")
        video_button.clicked.connect(self._browse_video)
        cam_page, vid_page = QWidget(), QWidget()
        cf = QFormLayout(cam_page)
        cf.setContentsMargins(0, 0, 0, 0)
        cf.addRow("Camera", self.camera)
        cf.addRow("Resolution", self.resolution)
        cf.addRow("Frame rate", self.fps)
        vf = QVBoxLayout(vid_page)
        vf.setContentsMargins(0, 0, 0, 0)
        vf.addWidget(self.video_path)
        vf.addWidget(video_button)
        self.input_pages = QStackedWidget()
        self.input_pages.addWidget(cam_page)
        self.input_pages.addWidget(vid_page)
        self.input_pages.addWidget(QLabel("Colour bars with a moving square"))
        self.input_kind.currentIndexChanged.connect(self.input_pages.setCurrentIndex)
        self.input_kind.currentIndexChanged.connect(self._state_edited)
        for sig in (self.camera.currentTextChanged, self.resolution.currentIndexChanged,
                    self.fps.valueChanged):
            sig.connect(self._state_edited)
        lay = QVBoxLayout(self.input_box)
        lay.addWidget(self.input_kind)
        lay.addWidget(self.input_pages)

    def _build_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.start_action = QAction("Start / Stop", self)
        self.start_action.setShortcuts([QKeySequence("Ctrl+R"), QKeySequence(Qt.Key.Key_Space)])
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
        models = menu.addMenu("&Models")
        manage = QAction("Manage models…", self)
        manage.triggered.connect(self.open_models)
        models.addAction(manage)

    def _restore_state(self) -> None:
        s = self.state
        self.input_kind.setCurrentText(s.input_kind if s.input_kind in INPUT_KINDS else "camera")
        self.input_pages.setCurrentIndex(self.input_kind.currentIndex())
        self.camera.setEditText(s.camera)
        idx = self.resolution.findData((s.width, s.height))
        self.resolution.setCurrentIndex(max(idx, 0))
        self.fps.setValue(s.fps)
        if s.video_path:
            self.video_path.setText(s.video_path)
        self.mirror.setChecked(s.mirror)
        self.preview.set_mirror(s.mirror)
        self.settings.vcam.blockSignals(True)
        self.settings.vcam.setChecked(s.virtual_camera)
        self.settings.vcam.blockSignals(False)
        if s.source_path:
            self.picker.load(Path(s.source_path), prefer_index=s.face_index)

    # -- state ---------------------------------------------------------------------------------
    def current_state(self) -> GuiState:
        w, h = self.resolution.currentData() or (1280, 720)
        src = self.picker.analysis
        return GuiState(
            source_path=str(src.path) if src else self.state.source_path,
            face_index=self.picker.face_index if src else self.state.face_index,
            input_kind=self.input_kind.currentText(),
            video_path=self.state.video_path, camera=self.camera.currentText().strip() or "0",
            width=int(w), height=int(h), fps=self.fps.value(), mirror=self.mirror.isChecked(),
            virtual_camera=self.settings.vcam.isChecked())

    def _state_edited(self, *_: object) -> None:
        self.state = self.current_state()
        self._save_timer.start()

    def _save_async(self) -> None:
        cfg, state, path = self.config, self.state, self.config_path
        run_async(lambda: self._write_settings(cfg, state, path), lambda _: None,
                  lambda exc: self._on_status(f"settings not saved: {exc}"))

    @staticmethod
    def _write_settings(cfg: AppConfig, state: GuiState, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_config(cfg, path)
        save_gui_state(state, gui_state_path(path))

    # -- user actions ---------------------------------------------------------------------------
    def set_video(self, path: Path) -> None:
        """Use a video file as the input (looped)."""
        self.state = dataclasses.replace(self.current_state(), video_path=str(path))
        self.video_path.setText(str(path))
        self.input_kind.setCurrentText("video")
        self._state_edited()

    def _browse_video(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Video input", "",
                                              "Videos (*.mp4 *.mov *.mkv *.avi *.webm);;"
                                              "All files (*)")
        if path:
            self.set_video(Path(path))

    def _cameras_listed(self, cams: list[tuple[str, str]]) -> None:
        current = self.camera.currentText()
        self.camera.blockSignals(True)
        self.camera.clear()
        for dev, label in cams:
            self.camera.addItem(label, dev)
        self.camera.setEditText(current)
        self.camera.blockSignals(False)

    def open_models(self) -> ModelsDialog:
        dlg = ModelsDialog(self.models_directory, self)
        dlg.show()
        return dlg

    def _source_chosen(self, path: Path, index: int) -> None:
        analysis = self.picker.analysis
        if analysis is None:
            return
        img = analysis.image
        self._source_face, self._source_index = analysis.image, index
        if self.runner is not None:
            self.runner.apply(source_face=img, face_index=index)
        self._state_edited()

    def _config_edited(self, cfg: AppConfig) -> None:
        self.config = cfg
        if self.runner is not None:
            self.runner.apply(cfg)
        self._save_timer.start()
        self._update_overlay()

    def _mirror_toggled(self, on: bool) -> None:
        self.preview.set_mirror(on)
        self._state_edited()

    def _vcam_toggled(self, on: bool) -> None:
        self._state_edited()
        if self.runner is None:
            self.settings.set_virtual_camera_status("on at Start" if on else "off")
            return
        if self._vcam is not None:
            self._vcam.set_enabled(on)
        elif on:
            self._vcam = self._make_vcam()
            self._sinks.append(self._vcam)
            self.runner.sinks.append(self._vcam)  # list.append is atomic; read between frames
        if not on:
            self.settings.set_virtual_camera_status("off")

    def _make_vcam(self) -> VirtualCameraSink:
        s = self.current_state()
        return VirtualCameraSink(s.width, s.height, float(s.fps), on_status=self.bridge.on_status)

    # -- running -------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.runner is not None

    def toggle_running(self) -> None:
        if self.runner is None:
            self.start()
        else:
            self.stop()

    def start(self) -> bool:
        """Build the source, sinks and runner from the current settings and start (returns at
        once: the source opens on the capture thread)."""
        if self.runner is not None:
            return True
        if self._source_face is None:
            self._on_status("choose a source face photo first")
            return False
        state = self.current_state()
        if state.input_kind == "video" and not state.video_path:
            self._on_status("choose a video file first (Input → video)")
            return False
        try:
            source = self.source_factory(state)
        except LivefuseError as exc:
            self._on_status(str(exc))
            return False
        preview = PreviewSink(self.bridge.on_frame, on_status=self.bridge.on_status)
        self._sinks = [preview]
        if state.virtual_camera:
            self._vcam = self._make_vcam()
            self._sinks.append(self._vcam)
        self.runner = LiveRunner(engine_factory, source, list(self._sinks), config=self.config,
                                 source_face=self._source_face, face_index=self._source_index,
                                 on_status=self.bridge.on_status)
        self.runner.start()
        self.start_button.setText("Stop")
        self.input_box.setEnabled(False)
        self._metrics_timer.start()
        self._on_status(f"starting: {state.input_kind}")
        return True

    def stop(self, wait: bool = False) -> None:
        """Stop the runner and close the sinks; on a helper thread unless ``wait``."""
        runner, sinks = self.runner, self._sinks
        if runner is None:
            return
        self.runner, self._sinks, self._vcam = None, [], None
        self._metrics_timer.stop()
        self.start_button.setText("Start")
        self.input_box.setEnabled(True)

        def shutdown() -> None:
            runner.stop(1.0)
            for sink in sinks:
                sink.close()

        if wait:
            shutdown()
        else:
            # runner.stop may wait up to 1 s for the threads; not on the GUI thread.
            t = threading.Thread(target=shutdown, name="livefuse-ui-stop", daemon=True)
            self._stopping.append(t)
            t.start()
        self._on_status("stopped")

    def join_stopping(self, timeout: float = 2.0) -> None:
        for t in self._stopping:
            t.join(timeout)
        self._stopping = [t for t in self._stopping if t.is_alive()]

    # -- feedback ------------------------------------------------------------------------------
    def _show_frame(self) -> None:
        item = self.bridge.take_frame()
        if item is not None:
            self.preview.set_image(item[0])

    def _poll_metrics(self) -> None:
        runner = self.runner
        if runner is None or self._metrics_busy:
            return
        self._metrics_busy = True

        def done(snap: MetricsSnapshot) -> None:
            self._metrics_busy = False
            self.last_metrics = snap
            self.metrics_updates += 1
            self._update_overlay()

        def failed(exc: BaseException) -> None:
            self._metrics_busy = False

        run_async(runner.metrics.snapshot, done, failed)

    def precision_in_use(self) -> str:
        """What the overlay shows as precision: the engine's own report when it has one."""
        engine = self.runner.engine if self.runner is not None else None
        used = getattr(engine, "precision_in_use", None) if engine is not None else None
        if isinstance(used, str):
            return used
        if self.config.engine.engine == "classic":
            return "n/a (classic engine)"
        return f"{self.config.engine.precision} (requested)"

    def _update_overlay(self) -> None:
        self.preview.set_metrics(self.last_metrics, OverlayInfo(precision=self.precision_in_use()))

    def _on_status(self, text: str) -> None:
        self.statuses.append(text)
        del self.statuses[:-200]
        self.statusBar().showMessage(text, 8000)
        if text.startswith("virtual camera"):
            ok = text.startswith(("virtual camera on", "virtual camera off"))
            hint = "" if ok else (
                "\nLinux: sudo modprobe v4l2loopback devices=1 exclusive_caps=1 "
                "card_label=livefuse; Windows/macOS: install OBS >= 26 and start its virtual "
                "camera once. A camera in use by another app shows as busy.")
            self.settings.set_virtual_camera_status(text.removeprefix("virtual camera ") + hint,
                                                    ok)

    def closeEvent(self, event: QCloseEvent) -> None:
        self._save_timer.stop()
        self.stop(wait=True)
        self.join_stopping()
        try:
            # Closing: the window is going away, a short synchronous write is what we want here.
            self._write_settings(self.config, self.current_state(), self.config_path)
        except OSError as exc:
            print(f"livefuse: settings not saved: {exc}", file=sys.stderr)
        super().closeEvent(event)


__all__ = ["GuiState", "MainWindow", "list_cameras"]
