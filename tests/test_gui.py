"""The desktop app, offscreen (pytest-qt): a thin view over livefuse.session.Session.

Waits are event-driven (``qtbot.waitUntil`` on a condition, generous timeouts), so a loaded
machine makes the tests slower, never red.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

import requests
from livefuse_ui.main_window import APPLY_DELAY_MS, METRICS_MS, MainWindow, is_text_field
from livefuse_ui.models_dialog import ModelsDialog, ProgressSession
from livefuse_ui.preview import STOPPED, SWAP_OFF, OverlayInfo, PreviewWidget, overlay_lines
from livefuse_ui.settings_panel import NEURAL_ONLY_TIP
from livefuse_ui.source_picker import SharedAnalyser, SourcePicker
from PySide6.QtCore import QPoint, QPointF, Qt, QThreadPool, QTimer
from PySide6.QtGui import QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget
from recording_cam import recording_backend
from stub_engine import PassEngine

from livefuse.config import (
    BACKEND_CHOICES,
    CAPTURE_CHOICES,
    ENGINE_REQUEST_CHOICES,
    FACE_SELECTOR_CHOICES,
    GUARD_CHOICES,
    LIVE_DEFAULTS,
    MODEL_RELOAD_FIELDS,
    PRECISION_CHOICES,
    RESOLUTION_CHOICES,
    AppConfig,
    CacheConfig,
    CaptureConfig,
    EngineConfig,
    GuardConfig,
    load_config,
)
from livefuse.control import load_or_create_token, read_token
from livefuse.engine import Engine, PreparedSource
from livefuse.errors import NoFaceError
from livefuse.faces.tracking import iou
from livefuse.guard import GuardState
from livefuse.imaging import LoadedImage, load_image, save_image
from livefuse.io.sinks import VirtualCameraSink
from livefuse.io.sources import CameraSource, ImageSource, Source, TestPatternSource
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.metrics import MetricsSnapshot
from livefuse.models.catalog import ModelSpec
from livefuse.models.download import ModelVerifyError
from livefuse.presets import Preset, PresetSource, PresetStore
from livefuse.samples import insightface_image
from livefuse.types import Face, Frame, FramePacket, StagedFrame

WAIT_MS = 60_000  # generous: the CI machine may be loaded


def _livefuse_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("livefuse") and t.is_alive()]


_RecordingCam = recording_backend("gui-recording")


class _PassEngine(PassEngine):
    """An engine stub: frames through unchanged; remembers the source faces it was given, the
    photos it prepared and where each was taken into use (the thread and the frames processed
    by then). A photo of one flat colour has no face."""

    def __init__(self, config: AppConfig) -> None:
        super().__init__()
        self.config = config.engine
        self.frames = 0
        self.prepared: list[str] = []
        self.used: list[tuple[str, int, str]] = []

    def prepare_source(self, image: LoadedImage, face_index: int | None = None,
                       face: Any = None) -> PreparedSource:
        if int(np.ptp(image.bgr)) == 0:
            raise NoFaceError(image.path)
        self.prepared.append(str(image.path))
        box = np.array([10, 10, 60, 60], np.float32)
        chosen = face if face is not None else Face(bbox=box, kps=np.zeros((5, 2), np.float32))
        return PreparedSource(face=chosen, data=str(image.path))

    def use_source(self, prepared: PreparedSource) -> Any:
        self.used.append((threading.current_thread().name, self.frames, str(prepared.data)))
        return prepared.face

    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False, ahead: StagedFrame | None = None) -> FramePacket:
        self.frames += 1
        return super().process(frame, index, t_capture_ns, strict, in_place, ahead)

    def apply(self, config: EngineConfig) -> bool:
        if any(getattr(config, f) != getattr(self.config, f) for f in MODEL_RELOAD_FIELDS):
            return False
        self.config = config
        return True


class _CountingFactory:
    """Engine factory counting the engines it builds (each build = a model load)."""

    def __init__(self) -> None:
        self.built: list[_PassEngine] = []

    def __call__(self, config: AppConfig) -> _PassEngine:
        engine = _PassEngine(config)
        self.built.append(engine)
        return engine


def _pattern(capture: CaptureConfig) -> Source:
    return TestPatternSource(320, 240, 30)


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    photo = load_image(insightface_image("t1.jpg")).bgr
    path = tmp_path_factory.mktemp("clip") / "t1.mp4"
    # Faces of t1.jpg about 110 px wide: big enough for dlib's HOG detector.
    return write_clip(motion_clip(photo, (480, 360), frames=30, face_px=110, face_width=110),
                      path, audio=False)


def _window(qtbot: Any, tmp_path: Path, analyser: Any, **kw: Any) -> MainWindow:
    win = MainWindow(config_path=tmp_path / "settings.toml", analyser=analyser,
                     models_directory=tmp_path / "models", **kw)
    qtbot.addWidget(win)
    win.show()
    return win


@pytest.fixture
def window(qtbot: Any, tmp_path: Path, analyser: Any) -> MainWindow:
    return _window(qtbot, tmp_path, analyser)


def _choose_source(qtbot: Any, win: MainWindow, path: Path) -> None:
    with qtbot.waitSignal(win.picker.source_changed, timeout=WAIT_MS):
        win.picker.load(path)


def _close(qtbot: Any, win: MainWindow) -> None:
    win.close()
    assert not win.session.running
    deadline = time.monotonic() + 10.0
    while _livefuse_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _livefuse_threads() == []


# -- the window over the session ---------------------------------------------------------------
def test_window_builds_with_the_config_choices(window: MainWindow) -> None:
    s = window.settings
    assert [s.engine.itemData(i) for i in range(s.engine.count())] == \
        list(ENGINE_REQUEST_CHOICES)
    assert [s.face_selector.itemData(i) for i in range(s.face_selector.count())] == \
        list(FACE_SELECTOR_CHOICES)
    assert [s.precision.itemText(i) for i in range(s.precision.count())] == list(PRECISION_CHOICES)
    assert [s.backend.itemText(i) for i in range(s.backend.count())] == list(BACKEND_CHOICES)
    kinds = window.input_kind
    assert [kinds.itemText(i) for i in range(kinds.count())] == list(CAPTURE_CHOICES)
    sizes = window.resolution
    assert [sizes.itemText(i) for i in range(sizes.count())] == \
        [f"{w}×{h}" for w, h in RESOLUTION_CHOICES]
    assert window.start_button.text() == "Start"
    assert not window.start()  # no source face yet: refused with a message, nothing started
    assert not window.running and not window.session.running
    assert "source face" in window.statuses[-1]


def test_the_video_dialog_offers_every_type_livefuse_reads(
        window: MainWindow, clip_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its filter was a list of its own, without the .flv and .ts that OBS records."""
    from livefuse.io.video import VIDEO_SUFFIXES

    asked: list[str] = []

    def dialog(parent: object, title: str, folder: str, filters: str) -> tuple[str, str]:
        asked.append(filters)
        return str(clip_path), ""

    monkeypatch.setattr("livefuse_ui.main_window.QFileDialog.getOpenFileName", dialog)
    window._browse_video()
    assert all(f"*{s}" in asked[0].split(";;")[0] for s in VIDEO_SUFFIXES), asked
    assert window.config.capture.video == str(clip_path.absolute())


def test_a_video_given_by_a_relative_path_is_kept_absolute(
        window: MainWindow, clip_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`livefuse gui --video clip.mp4` saved "clip.mp4"; the next launch from another folder
    retried it forever (a new user's trial)."""
    monkeypatch.chdir(clip_path.parent)
    window.set_video(Path(clip_path.name))
    assert window.config.capture.video == str(clip_path.absolute())


def test_start_with_video_gives_frames_and_metrics(qtbot: Any, window: MainWindow,
                                                   astronaut_path: Path, clip_path: Path) -> None:
    _choose_source(qtbot, window, astronaut_path)
    assert window.picker.face_index == 0
    assert window.picker.thumb.pixmap() is not None and not window.picker.thumb.pixmap().isNull()
    window.set_video(clip_path)
    assert window.start()
    session = window.session
    qtbot.waitUntil(lambda: window.preview.frames_shown >= 5, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: window.metrics_updates >= 2 and window.last_metrics is not None
                    and window.last_metrics.frames_out > 0, timeout=WAIT_MS)
    runner = session.runner
    assert runner is not None and session.config == window.config
    snap = window.last_metrics
    assert snap is not None and snap.latency_p50_ms is not None and snap.latency_p50_ms > 0
    image = window.preview.image
    assert image is not None and (image.width(), image.height()) == (480, 360)
    lines = window.preview.lines()
    assert "fps" in lines[0] and lines[1].startswith("latency p50")
    assert lines[-1] == "precision n/a (classic engine)"
    assert runner.errors == 0, runner.statuses

    # Toggling the cache and the detection interval reaches the runner's applied config.
    window.settings.cache_enabled.setChecked(False)
    window.settings.detect_every.setValue(4)
    qtbot.waitUntil(lambda: not runner.config.cache.enabled
                    and runner.config.engine.detect_every == 4, timeout=WAIT_MS)
    assert runner.config == window.config == session.config

    # The virtual camera is a sink of the session, added by Session.apply at a frame boundary.
    # No v4l2loopback here: switching it on says so, with the fix, and the preview keeps running.
    shown = window.preview.frames_shown
    window.settings.vcam.setChecked(True)
    qtbot.waitUntil(lambda: any(isinstance(s, VirtualCameraSink) for s in session.sinks),
                    timeout=WAIT_MS)
    qtbot.waitUntil(lambda: any(isinstance(s, VirtualCameraSink) for s in runner.sinks),
                    timeout=WAIT_MS)
    qtbot.waitUntil(lambda: "missing" in window.settings.vcam_status.text(), timeout=WAIT_MS)
    assert "modprobe v4l2loopback" in window.settings.vcam_status.text()
    qtbot.waitUntil(lambda: window.preview.frames_shown > shown + 3, timeout=WAIT_MS)

    # Stop runs off the GUI thread; the window answers at once. The last frame does not stay
    # up (a still swapped face reads as a frozen stream), and none in flight shows after it.
    window.stop()
    assert window.start_button.text() == "Start"
    assert window.preview.image is None and window.preview.idle_text == STOPPED
    qtbot.waitUntil(lambda: window.idle and not session.running, timeout=WAIT_MS)
    window.bridge.on_frame(np.zeros((8, 8, 3), np.uint8), 0)  # one in flight at the Stop
    window._show_frame()
    assert window.preview.image is None
    _close(qtbot, window)


def test_settings_survive_a_restart(qtbot: Any, tmp_path: Path, clip_path: Path,
                                    analyser: Any, t1_path: Path) -> None:
    first = _window(qtbot, tmp_path, analyser)
    with qtbot.waitSignal(first.picker.source_changed, timeout=WAIT_MS):
        first.picker.load(t1_path)
    assert first.picker.analysis is not None
    n = len(first.picker.analysis.candidates)
    picked = (first.picker.analysis.default_index + 1) % n
    with qtbot.waitSignal(first.picker.source_changed, timeout=WAIT_MS):
        first.picker.faces.setCurrentRow(picked)
    face = first.picker.face
    assert face is not None
    s = first.settings
    s.engine.setCurrentText("neural")
    s.precision.setCurrentText("fp16")
    s.backend.setCurrentText("onnxruntime")
    s.threshold.setValue(0.9)
    s.refresh.setValue(7)
    s.detect_every.setValue(3)
    s.keep_mouth.setChecked(False)
    s.cache_enabled.setChecked(False)
    s.vcam.setChecked(True)
    first.set_video(clip_path)
    first.resolution.setCurrentIndex(len(RESOLUTION_CHOICES) - 1)  # not the first: 1920×1080
    first.fps.setValue(24)
    first.camera.setEditText("/dev/video7")
    first.mirror.setChecked(True)  # a video input is not mirrored by default: the user's choice
    expected = first.config
    assert expected.capture == dataclasses.replace(
        expected.capture, kind="video", video=str(clip_path), camera="/dev/video7",
        width=RESOLUTION_CHOICES[-1][0], height=RESOLUTION_CHOICES[-1][1], fps=24.0)
    assert expected.output.mirror_preview is True and expected.output.virtual_camera
    first.close()
    assert load_config(tmp_path / "settings.toml") == expected

    second = _window(qtbot, tmp_path, analyser)
    assert second.config == expected
    t = second.settings
    assert (t.engine.currentText(), t.precision.currentText(), t.backend.currentText(),
            t.threshold.value(), t.refresh.value(), t.detect_every.value(),
            t.keep_mouth.isChecked(), t.cache_enabled.isChecked(), t.vcam.isChecked()) == \
        ("neural", "fp16", "onnxruntime", 0.9, 7, 3, False, False, True)
    w, h = RESOLUTION_CHOICES[-1]
    assert second.resolution.currentText() == f"{w}×{h}"
    assert second.fps.value() == 24 and second.camera.currentText() == "/dev/video7"
    assert second.input_kind.currentText() == "video"
    assert second.video_path.text() == str(clip_path)
    assert second.mirror.isChecked() and second.preview.mirror
    # The same face of the same photo is chosen again (matched by its place in the photo).
    qtbot.waitUntil(lambda: second.picker.face is not None, timeout=WAIT_MS)
    assert second.picker.face_index == picked
    assert iou(second.picker.face.bbox, face.bbox) > 0.9  # type: ignore[union-attr]
    second.close()


def test_mirror_preview_defaults_by_input_and_keeps_the_users_choice(
        qtbot: Any, window: MainWindow, clip_path: Path) -> None:
    assert window.config.capture.kind == "camera"
    assert window.mirror.isChecked() and window.preview.mirror  # a selfie view
    window.set_video(clip_path)
    assert not window.mirror.isChecked() and not window.preview.mirror  # a file: as recorded
    assert window.config.output.mirror_preview is None
    window.mirror.setChecked(True)
    window.input_kind.setCurrentText("camera")
    window.input_kind.setCurrentText("video")
    assert window.mirror.isChecked() and window.config.output.mirror_preview is True


def test_precision_and_backend_are_disabled_for_the_classic_engine(qtbot: Any,
                                                                   window: MainWindow) -> None:
    s = window.settings
    assert s.engine.currentData() == "auto"  # classic here: no neural models installed
    qtbot.waitUntil(lambda: s.engine.currentText() == "auto (classic)", timeout=WAIT_MS)
    assert not s.precision.isEnabled() and not s.backend.isEnabled()
    assert not s.device.isEnabled()
    assert s.precision.toolTip() == s.backend.toolTip() == s.device.toolTip() == NEURAL_ONLY_TIP
    s.engine.setCurrentIndex(s.engine.findData("neural"))
    assert s.precision.isEnabled() and s.backend.isEnabled() and s.device.isEnabled()
    assert s.precision.toolTip() != NEURAL_ONLY_TIP


def test_the_panel_keeps_every_value_the_cli_can_store(qtbot: Any) -> None:
    """An option trial: values the CLI and settings.toml take but the panel's narrower ranges
    and fewer decimals could not show were clamped or rounded and written back at the first
    edit (threshold 0.3 -> 0.5, refresh 200 -> 120, detect every 90 -> 60, face 120 -> 99,
    enhancer blend 80.5 -> 80, mask blur 0.333 -> 0.33). The blend had no control at all."""
    from livefuse_ui.settings_panel import SettingsPanel

    cfg = AppConfig(
        engine=EngineConfig(detect_every=90, target_face_index=120, face_selector="one",
                            enhancer_blend=80.5, face_mask_blur=0.333, blend="seamless"),
        cache=CacheConfig(threshold=0.3, refresh_every_n=200)).validate()
    panel = SettingsPanel(cfg)
    qtbot.addWidget(panel)
    assert panel.config(cfg) == cfg
    assert panel.blend.currentText() == "seamless" and panel.blend.isEnabled()
    panel.blend.setCurrentText("feather")
    panel.threshold.setValue(0.75)
    edited = panel.config(cfg)
    assert (edited.engine.blend, edited.cache.threshold) == ("feather", 0.75)
    panel.engine.setCurrentIndex(panel.engine.findData("neural"))
    assert not panel.blend.isEnabled()  # the CLI refuses --blend with the neural engine


def test_face_panel_edits_reach_the_config_and_are_off_for_the_classic_engine(
        window: MainWindow) -> None:
    s = window.settings
    assert not s.face_box.isEnabled()  # classic: masks, boost and enhancer do not apply
    s.engine.setCurrentText("neural")
    assert s.face_box.isEnabled()
    # keep-mouth means something to the neural engine only with the region mask (issue 15.14)
    assert not s.keep_mouth.isEnabled()
    s.masks["region"].setChecked(True)
    assert s.keep_mouth.isEnabled()
    s.masks["region"].setChecked(False)
    s.rotation.setCurrentText("always")
    s.smooth.setChecked(False)
    s.pixel_boost.setCurrentText("384")
    s.masks["box"].setChecked(True)
    s.masks["region"].setChecked(True)
    s.masks["occlusion"].setChecked(False)
    for i in range(s.regions.count()):
        item = s.regions.item(i)
        item.setCheckState(Qt.CheckState.Checked if item.text() in ("skin", "nose")
                           else Qt.CheckState.Unchecked)
    s.mask_blur.setValue(0.45)
    s.enhancer.setCurrentText("gfpgan_1.4")
    s.enhancer_blend.setValue(70)
    cfg = s.config(AppConfig())
    e = cfg.engine
    assert (e.rotation, e.smooth, e.pixel_boost) == ("always", False, 384)
    assert e.face_mask_types == ("box", "region")
    assert e.face_mask_regions == ("skin", "nose")
    assert (e.face_mask_blur, e.enhancer, e.enhancer_blend) == (0.45, "gfpgan_1.4", 70.0)
    # shown back without loss (the settings file path), and nothing edited while showing it
    s.set_config(AppConfig())
    assert s.config(AppConfig()).engine.enhancer is None
    assert not s.enhancer_blend.isEnabled()  # blend means nothing without an enhancer
    s.set_config(cfg)
    assert s.config(AppConfig()) == cfg
    assert s.enhancer_blend.isEnabled() and s.regions.isEnabled()


# -- item 7.2: the picker's choice rule, and the face itself handed on --------------------------
def test_source_picker_no_face_and_several_faces(qtbot: Any, tmp_path: Path, t1_path: Path,
                                                 analyser: Any) -> None:
    picker = SourcePicker(analyser=SharedAnalyser(analyser))
    qtbot.addWidget(picker)
    blank = save_image(tmp_path / "wall.png", np.full((200, 300, 3), 128, np.uint8))
    with qtbot.waitSignal(picker.source_failed, timeout=WAIT_MS) as failed:
        picker.load(blank)
    assert "No face found in 'wall.png'" in failed.args[0]
    assert picker.face_index == -1 and picker.face is None

    with qtbot.waitSignal(picker.source_changed, timeout=WAIT_MS) as chosen:
        picker.load(t1_path)
    assert picker.analysis is not None
    n = len(picker.analysis.candidates)
    assert n >= 2 and picker.faces.count() == n and not picker.faces.isHidden()
    assert chosen.args == [t1_path, picker.analysis.default_index]
    other = (picker.analysis.default_index + 1) % n
    with qtbot.waitSignal(picker.source_changed) as again:
        picker.faces.setCurrentRow(other)
    assert again.args == [t1_path, other] and picker.face_index == other
    assert picker.face is picker.analysis.candidates[other]


def test_picker_offers_the_rules_candidates_its_choice_and_its_notes(
        qtbot: Any, t1_path: Path, analyser: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The picker shows what choose_source_face decides: only its candidates (a rejected
    detection is not offered), its choice selected, its notes shown for the face in use."""
    import livefuse.faces.selection as selection

    real = selection.choose_source_face

    def rule(faces: list[Face], image: Frame, path: Path | None,
             index: int | None = None) -> selection.SourceChoice:
        ordered = real(faces, image, path).candidates
        kept = ordered[1:]  # the left-most detection "failed the sanity check"
        i = len(kept) - 1 if index is None else index
        return selection.SourceChoice(face=kept[i], index=i, candidates=kept,
                                      notes=(f"note for face {i}", "greyscale photo"))

    monkeypatch.setattr(selection, "choose_source_face", rule)
    picker = SourcePicker(analyser=SharedAnalyser(analyser))
    qtbot.addWidget(picker)
    picker.show()
    with qtbot.waitSignal(picker.source_changed, timeout=WAIT_MS):
        picker.load(t1_path)
    a = picker.analysis
    assert a is not None
    everything = real(analyser.detect(a.image.bgr), a.image.bgr, None).candidates
    assert len(a.candidates) == len(everything) - 1 == picker.faces.count()
    assert all(iou(f.bbox, g.bbox) > 0.99 for f, g in zip(a.candidates, everything[1:],
                                                         strict=True))
    assert picker.face_index == len(a.candidates) - 1 == a.default_index
    assert picker.notes.isVisible()
    assert f"note for face {a.default_index}" in picker.notes.text()
    assert "greyscale photo" in picker.notes.text()
    with qtbot.waitSignal(picker.source_changed):
        picker.faces.setCurrentRow(0)
    assert "note for face 0" in picker.notes.text()


class _Reentrancy:
    """An analyser that records how many calls run at once (dlib's HOG detector releases the
    GIL and crashes when entered twice)."""

    def __init__(self) -> None:
        self.inside = 0
        self.most = 0
        self._count = threading.Lock()

    def _enter(self) -> None:
        with self._count:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.02)  # a detection's length, with the GIL released as dlib does
        with self._count:
            self.inside -= 1

    def detect(self, frame: Frame, upsample: int | None = None) -> list[Face]:
        self._enter()
        return []

    def track(self, frame: Frame, faces: Any) -> list[Face | None]:
        self._enter()
        return []

    def reset(self) -> None:
        pass

    def embed(self, frame: Frame, face: Face) -> np.ndarray:
        self._enter()
        return np.zeros(128, np.float32)


def test_the_shared_analyser_runs_one_call_at_a_time() -> None:
    """The picker's photo analysis (thread pool) and the classic engine (inference thread)
    share one dlib analyser; two photo analyses at once crashed the app (SIGSEGV in the HOG
    detector, seen in the soak test when a restored photo and --source loaded together)."""
    # the widgets of earlier tests may still sit in reference cycles: collected in one of the
    # threads below, Qt objects would be destroyed off the GUI thread (CI once died here with
    # a segmentation fault)
    gc.collect()
    inner = _Reentrancy()
    shared = SharedAnalyser(inner)
    frame = np.zeros((8, 8, 3), np.uint8)

    def use() -> None:
        a = shared.get()
        for _ in range(5):
            a.detect(frame)
            a.track(frame, [])
            a.embed(frame, Face(bbox=np.zeros(4, np.float32), kps=np.zeros((5, 2), np.float32)))

    threads = [threading.Thread(target=use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert inner.most == 1


def test_a_photo_shown_again_is_not_analysed_again(qtbot: Any, tmp_path: Path, analyser: Any,
                                                  astronaut_path: Path) -> None:
    """Switching presets back and forth shows the same photos again: each analysis held the
    shared dlib analyser, and so delayed the live frame's detection, every time."""
    picker = SourcePicker(analyser=SharedAnalyser(analyser))
    qtbot.addWidget(picker)
    photo = tmp_path / "me.png"
    photo.write_bytes(astronaut_path.read_bytes())
    for _ in range(3):
        with qtbot.waitSignal(picker.source_changed, timeout=WAIT_MS):
            picker.load(photo)
    assert picker.analyses == 1 and picker.face is not None
    stat = photo.stat()
    os.utime(photo, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # edited since
    with qtbot.waitSignal(picker.source_changed, timeout=WAIT_MS):
        picker.load(photo)
    assert picker.analyses == 2


def test_a_photo_chosen_later_wins_over_one_still_loading(
        qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restored photo still loading when the user (or --source) picks another must not
    replace the newer choice when it finishes last."""
    import livefuse_ui.source_picker as sp

    release = threading.Event()
    real = load_image(insightface_image("t1.jpg"))

    def fake_analyse(path: Path, analyser: Any) -> sp.SourceAnalysis:
        if path.name == "old.png":
            release.wait(WAIT_MS / 1000)
        face = Face(bbox=np.array([10, 10, 60, 60], np.float32),
                    kps=np.zeros((5, 2), np.float32))
        img = LoadedImage(bgr=real.bgr, alpha=None, path=path)
        return sp.SourceAnalysis(path, img, [face], [sp.face_thumbnail(real.bgr, face)], 0,
                                 [()])

    monkeypatch.setattr(sp, "analyse_source", fake_analyse)
    picker = SourcePicker(analyser=SharedAnalyser(_Reentrancy()))
    qtbot.addWidget(picker)
    changed: list[Path] = []
    picker.source_changed.connect(lambda p, i: changed.append(p))
    picker.load(tmp_path / "old.png")
    with qtbot.waitSignal(picker.source_changed, timeout=WAIT_MS):
        picker.load(tmp_path / "new.png")
    release.set()
    qtbot.waitUntil(lambda: QThreadPool.globalInstance().activeThreadCount() == 0,
                    timeout=WAIT_MS)
    qtbot.wait(50)  # the old job's queued result, had it not been dropped
    QApplication.processEvents()
    assert changed == [tmp_path / "new.png"]
    assert picker.analysis is not None and picker.analysis.path.name == "new.png"


class _Reversed:
    """An analyser whose detections come right to left: another detector's order."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def detect(self, frame: Frame, upsample: int | None = None) -> list[Face]:
        return list(reversed(self.inner.detect(frame, upsample)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_engine_uses_the_face_picked_even_when_its_detector_orders_faces_otherwise(
        qtbot: Any, tmp_path: Path, t1_path: Path, analyser: Any) -> None:
    """The picker lists dlib's faces left to right; the engine's analyser lists them right to
    left (as SCRFD lists them in its own order). An index would name another person; the face
    handed over is matched by place."""

    def factory(cfg: AppConfig) -> Engine:
        return Engine(cfg.engine, analyser=_Reversed(analyser), cache=cfg.cache)

    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    with qtbot.waitSignal(win.picker.source_changed, timeout=WAIT_MS):
        win.picker.load(t1_path)
    a = win.picker.analysis
    assert a is not None and len(a.candidates) >= 3
    row = 0 if a.default_index != 0 else 1
    with qtbot.waitSignal(win.picker.source_changed):
        win.picker.faces.setCurrentRow(row)
    picked = win.picker.face
    assert picked is not None
    win.input_kind.setCurrentText("test pattern")
    assert win.start()

    def engine_source() -> Face | None:
        engine = win.session.engine
        return getattr(engine, "source_face", None)

    qtbot.waitUntil(lambda: engine_source() is not None, timeout=WAIT_MS)
    assert iou(engine_source().bbox, picked.bbox) > 0.9  # type: ignore[union-attr]

    # A new pick while running reaches the engine at a frame boundary, by place again.
    row2 = len(a.candidates) - 1 - row if len(a.candidates) - 1 - row != row else row + 1
    with qtbot.waitSignal(win.picker.source_changed):
        win.picker.faces.setCurrentRow(row2)
    picked2 = win.picker.face
    assert picked2 is not None
    qtbot.waitUntil(lambda: iou(engine_source().bbox, picked2.bbox) > 0.9,  # type: ignore
                    timeout=WAIT_MS)
    _close(qtbot, win)


# -- item 7.5: settings -------------------------------------------------------------------------
def _wheel(widget: QWidget, up: bool = False) -> bool:
    """Send a wheel step to ``widget``; returns whether the widget took it (accepted)."""
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    ev = QWheelEvent(pos, widget.mapToGlobal(pos), QPoint(0, 0), QPoint(0, 120 if up else -120),
                     Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                     Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, ev)
    return ev.isAccepted()


def test_the_wheel_changes_only_a_focused_box(qtbot: Any, window: MainWindow) -> None:
    """An unfocused spin box or combo box leaves the wheel alone: the event stays ignored, which
    makes Qt offer a real (spontaneous) wheel event to the parents, up to the scroll area.
    (Qt does not propagate a synthesized wheel event, so the scrolling itself is not visible
    here; under Xvfb, real wheel clicks from xdotool scrolled the panel and left the box.)"""
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=WAIT_MS)
    s = window.settings
    window.start_button.setFocus()
    boxes = (s.threshold, s.refresh, s.detect_every, s.engine, window.resolution, window.fps,
             window.input_kind)
    before = [b.property("value") if hasattr(b, "value") else b.currentIndex() for b in boxes]
    for box in boxes:
        assert box.focusPolicy() == Qt.FocusPolicy.StrongFocus
        assert not _wheel(box) and not _wheel(box, up=True), type(box).__name__
    after = [b.property("value") if hasattr(b, "value") else b.currentIndex() for b in boxes]
    assert after == before
    assert window.config == LIVE_DEFAULTS and window.idle  # nothing changed, nothing saved

    # Once clicked (focused), the box takes the wheel.
    s.threshold.setFocus()
    qtbot.waitUntil(s.threshold.hasFocus, timeout=WAIT_MS)
    assert _wheel(s.threshold, up=True)
    assert s.threshold.value() == pytest.approx(0.81)
    qtbot.waitUntil(lambda: window.config.cache.threshold == 0.81, timeout=WAIT_MS)


def test_space_starts_and_stops_wherever_the_focus_is_except_in_text_fields(
        qtbot: Any, window: MainWindow) -> None:
    assert window.start_action.shortcut().toString() == "Space"  # what the menu shows
    assert "Space" in window.start_button.toolTip()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=WAIT_MS)
    s = window.settings

    def refusals() -> int:  # no source face: each start/stop toggle is refused with a line
        return sum("source face" in x for x in window.statuses)

    for widget in (s.keep_mouth, window.start_button, s.detect_every, s.engine, window.mirror,
                   window.preview, window.input_kind):
        widget.setFocus()
        before, ticked, value = refusals(), s.keep_mouth.isChecked(), s.detect_every.value()
        mirrored = window.mirror.isChecked()
        QTest.keyClick(QApplication.focusWidget() or window, Qt.Key.Key_Space)
        assert refusals() == before + 1, type(widget).__name__
        assert s.keep_mouth.isChecked() == ticked and window.mirror.isChecked() == mirrored
        assert s.detect_every.value() == value

    # In a text field Space is a character.
    window.camera.setFocus()
    qtbot.waitUntil(window.camera.hasFocus, timeout=WAIT_MS)
    assert is_text_field(QApplication.focusWidget())
    window.camera.setEditText("cam")
    window.camera.lineEdit().end(False)
    before = refusals()
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Space)
    assert refusals() == before and window.camera.currentText() == "cam "


def test_quick_steps_make_one_apply_and_one_engine_rebuild(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    applied: list[AppConfig] = []
    real_apply = win.session.apply

    def counting_apply(cfg: AppConfig) -> None:
        applied.append(cfg)
        real_apply(cfg)

    monkeypatch.setattr(win.session, "apply", counting_apply)
    _choose_source(qtbot, win, astronaut_path)
    win.input_kind.setCurrentText("test pattern")
    win.flush_settings()
    assert win.start()
    qtbot.waitUntil(lambda: len(factory.built) == 1 and win.preview.frames_shown > 0,
                    timeout=WAIT_MS)
    qtbot.waitUntil(lambda: win.idle, timeout=WAIT_MS)
    applied.clear()

    # Five spin-box steps in a row (a held arrow key, a dragged wheel): one apply.
    start = win.settings.detect_every.value()
    for _ in range(5):
        win.settings.detect_every.stepUp()
    qtbot.waitUntil(lambda: len(applied) == 1, timeout=WAIT_MS)
    qtbot.wait(3 * APPLY_DELAY_MS)
    assert len(applied) == 1 and applied[0].engine.detect_every == start + 5
    qtbot.waitUntil(lambda: factory.built[-1].config.detect_every == start + 5,
                    timeout=WAIT_MS)
    assert len(factory.built) == 1  # taken in place: no model reload

    # Stepping through every precision (each needs the models loaded again): one rebuild.
    for p in (*PRECISION_CHOICES[1:], PRECISION_CHOICES[0], "fp16"):
        win.settings.precision.setCurrentText(p)
    qtbot.waitUntil(lambda: len(factory.built) == 2, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: win.idle, timeout=WAIT_MS)
    qtbot.wait(3 * APPLY_DELAY_MS)
    assert len(factory.built) == 2 and factory.built[-1].config.precision == "fp16"
    assert len(applied) == 2
    _close(qtbot, win)


def test_engine_edits_made_while_stopped_reach_the_engine_at_the_next_start(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    _choose_source(qtbot, win, astronaut_path)
    win.input_kind.setCurrentText("test pattern")
    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown > 0, timeout=WAIT_MS)
    win.stop()
    qtbot.waitUntil(lambda: win.idle and not win.session.running, timeout=WAIT_MS)
    win.settings.detect_every.setValue(5)  # taken in place by the kept engine
    win.settings.precision.setCurrentText("fp16")  # needs the models loaded again
    shown = win.preview.frames_shown
    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown > shown + 2, timeout=WAIT_MS)
    engine = win.session.engine
    assert isinstance(engine, _PassEngine)
    assert engine.config.precision == "fp16" and engine.config.detect_every == 5
    assert len(factory.built) == 2
    _close(qtbot, win)


# -- item 7.6: a camera that cannot be opened ---------------------------------------------------
class _FakeCapture:
    """A cv2.VideoCapture stand-in that delivers a new frame at every read."""

    def __init__(self) -> None:
        self.n = 0

    def isOpened(self) -> bool:
        return True

    def set(self, prop: int, value: float) -> bool:
        return True

    def get(self, prop: int) -> float:
        import cv2

        return {cv2.CAP_PROP_FRAME_WIDTH: 320.0, cv2.CAP_PROP_FRAME_HEIGHT: 240.0,
                cv2.CAP_PROP_FPS: 30.0}.get(prop, 0.0)

    def read(self) -> tuple[bool, np.ndarray]:
        time.sleep(1 / 30)
        self.n += 1
        frame = np.full((240, 320, 3), 90, np.uint8)
        frame[::17, ::13] = self.n % 256  # a real sensor never repeats a frame
        return True, frame

    def release(self) -> None:
        pass


class _Closed:
    def isOpened(self) -> bool:
        return False

    def release(self) -> None:
        pass


def test_a_camera_that_cannot_be_opened_is_retried_with_a_visible_status(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    attempts: list[int] = []
    fail_first = 2

    def capture(_dev: int | str) -> Any:
        attempts.append(1)
        return _Closed() if len(attempts) <= fail_first else _FakeCapture()

    def source(c: CaptureConfig) -> Source:
        return CameraSource(c.camera, c.width, c.height, c.fps, capture_factory=capture)

    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory(),
                  source_factory=source)
    assert win.config.capture.max_open_attempts is None  # the app keeps retrying
    _choose_source(qtbot, win, astronaut_path)
    assert win.start()
    qtbot.waitUntil(lambda: "cannot open, retrying" in win.input_status.text(), timeout=WAIT_MS)
    assert win.input_status.text() == "camera 0: cannot open, retrying…"
    assert "cannot open, retrying" in win.status_line.full_text()
    qtbot.waitUntil(lambda: win.preview.frames_shown >= 3, timeout=WAIT_MS)
    assert len(attempts) == fail_first + 1
    qtbot.waitUntil(lambda: "320x240" in win.input_status.text(), timeout=WAIT_MS)
    assert win.input_status.text().startswith("camera 0")
    assert "retrying" not in win.input_status.text()
    _close(qtbot, win)


# -- item 7.7: tests that can fail ------------------------------------------------------------
class _BlockingCapture(_Closed):
    """A camera whose open blocks until released (a slow USB camera, a busy driver)."""

    def __init__(self, release: threading.Event, opened_on: list[threading.Thread],
                 entered: threading.Event) -> None:
        opened_on.append(threading.current_thread())
        entered.set()
        release.wait(WAIT_MS / 1000)


def test_a_slow_camera_open_never_blocks_the_gui_thread(qtbot: Any, tmp_path: Path,
                                                        analyser: Any,
                                                        astronaut_path: Path) -> None:
    """Event-driven: the camera's open blocks until the GUI thread itself releases it from a
    timer. Were the camera opened on the GUI thread, that timer could not fire while the open
    waits (the release would only come from the open's own timeout, and the checks fail)."""
    release, entered = threading.Event(), threading.Event()
    opened_on: list[threading.Thread] = []
    released_while_open: list[bool] = []

    def source(c: CaptureConfig) -> Source:
        return CameraSource(0, capture_factory=lambda _d: _BlockingCapture(release, opened_on,
                                                                           entered))

    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory(),
                  source_factory=source)
    _choose_source(qtbot, win, astronaut_path)
    assert win.start()
    assert win.running and win.start_button.text() == "Stop"  # answered at once
    qtbot.waitUntil(entered.is_set, timeout=WAIT_MS)

    def free() -> None:
        released_while_open.append(not release.is_set())
        release.set()

    QTimer.singleShot(0, free)
    qtbot.waitUntil(release.is_set, timeout=WAIT_MS)
    assert released_while_open == [True]
    assert opened_on and all(t is not threading.main_thread() for t in opened_on)
    _close(qtbot, win)


def test_the_overlay_is_on_the_preview_never_in_the_frames_the_sinks_get(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    colour = (40, 160, 90)  # BGR
    w, h = RESOLUTION_CHOICES[0]
    still = np.empty((h, w, 3), np.uint8)
    still[:] = colour
    _RecordingCam.frames.clear()
    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory(),
                  source_factory=lambda c: ImageSource(still, fps=30),
                  vcam_backend="gui-recording")
    win.resize(1000, 700)
    _choose_source(qtbot, win, astronaut_path)
    win.resolution.setCurrentIndex(0)
    win.mirror.setChecked(False)
    win.settings.vcam.setChecked(True)
    assert win.start()
    qtbot.waitUntil(lambda: len(_RecordingCam.frames) >= 5 and win.preview.frames_shown >= 5
                    and win.metrics_updates >= 1, timeout=WAIT_MS)
    shot = win.preview.grab().toImage()
    win.preview.set_overlay_visible(False)
    bare = win.preview.grab().toImage()
    frame_rect = win.preview.target_rect()
    preview_lines = win.preview.lines()
    _close(qtbot, win)

    # The virtual camera got the frame exactly (BGR, pyvirtualcam's PixelFormat.BGR), every
    # pixel, in every frame.
    for sent in list(_RecordingCam.frames):
        assert sent.shape == (h, w, 3)
        assert (sent == np.array(colour, np.uint8)).all()
    # The preview shows that frame, and over it the overlay's text box (top left).
    assert "fps" in preview_lines[0]

    def px(img: Any, x: int, y: int) -> tuple[int, int, int]:
        c = img.pixelColor(x, y)
        return c.red(), c.green(), c.blue()

    inside = px(shot, frame_rect.right() - 10, frame_rect.bottom() - 10)  # Qt reads RGB
    assert all(abs(a - b) <= 2 for a, b in zip(inside, colour[::-1], strict=True)), inside
    box = [(x, y) for x in range(12, 120, 3) for y in range(12, 60, 3)]
    assert sum(px(shot, x, y) != px(bare, x, y) for x, y in box) > len(box) // 4


def test_preview_widget_owns_its_copy_and_mirrors(qtbot: Any) -> None:
    w = PreviewWidget()
    qtbot.addWidget(w)
    w.resize(400, 300)
    frame = np.zeros((120, 160, 3), np.uint8)
    frame[:, :80] = (255, 0, 0)  # left half blue (BGR)
    w.set_frame(frame)
    frame[:] = 7  # the worker reuses its buffer: the widget must own a copy
    img = w.image
    assert img is not None and img.pixelColor(10, 60).blue() == 255
    w.set_metrics(None, OverlayInfo(precision="fp16"))
    w.set_mirror(True)
    shot = w.grab().toImage()
    assert w.target_rect().width() == 400 and w.target_rect().height() == 300
    # Mirrored: the blue half is now on the right of the widget; the overlay sits top-left.
    assert shot.pixelColor(390, 290).blue() > 200 and shot.pixelColor(10, 290).blue() < 50
    assert w.lines() == ["waiting for frames", "precision fp16"]


# -- the models dialog ------------------------------------------------------------------------
class _Adapter(requests.adapters.BaseAdapter):
    """Serves ``body`` for any URL, ``delay`` s per 64 KiB block."""

    def __init__(self, body: bytes, delay: float = 0.0) -> None:
        super().__init__()
        self.body, self.delay = body, delay

    def send(self, request: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        adapter = self

        class _Raw(io.BytesIO):
            def read(self, n: int | None = -1, *a: Any, **k: Any) -> bytes:
                time.sleep(adapter.delay)
                return super().read(n)

            def stream(self, n: int, decode_content: bool = False) -> Any:
                while block := self.read(n):
                    yield block

        r = requests.Response()
        r.status_code, r.raw, r.url, r.request = 200, _Raw(self.body), request.url, request
        return r

    def close(self) -> None:
        pass


def _session(body: bytes, delay: float = 0.0) -> Any:
    def make(on_bytes: Any, cancel: threading.Event) -> ProgressSession:
        s = ProgressSession(on_bytes, cancel)
        s.mount("https://", _Adapter(body, delay))
        return s

    return make


def test_models_dialog_status_fetch_cancel_import(qtbot: Any, tmp_path: Path) -> None:
    models = tmp_path / "models"
    dlg = ModelsDialog(models)
    qtbot.addWidget(dlg)
    qtbot.waitUntil(lambda: len(dlg.statuses) == dlg.table.rowCount(), timeout=WAIT_MS)
    assert set(dlg.statuses.values()) == {"missing"}
    assert "non-commercial" in dlg.table.item(0, 4).text()

    body = bytes(range(256)) * 4096  # 1 MiB
    spec = ModelSpec(name="tiny", role="detector", filename="tiny.onnx",
                     urls=("https://example.invalid/tiny.onnx",), size=len(body),
                     sha256=hashlib.sha256(body).hexdigest(), licence="test", input_size=(1, 1))
    dlg.fetch(spec, session_factory=_session(body))
    qtbot.waitUntil(lambda: not dlg.busy, timeout=WAIT_MS)
    assert (models / "tiny.onnx").read_bytes() == body
    assert dlg.progress.value() == 1000 and "verified" in dlg.message.text()

    slow = ModelSpec(**{**spec.__dict__, "filename": "slow.onnx"})
    dlg.fetch(slow, session_factory=_session(body, delay=0.02))
    qtbot.waitUntil(lambda: dlg.progress.value() > 0, timeout=WAIT_MS)
    dlg.cancel()
    qtbot.waitUntil(lambda: not dlg.busy, timeout=WAIT_MS)
    assert "cancelled" in dlg.message.text()
    assert not (models / "slow.onnx").exists() and (models / "slow.onnx.part").exists()

    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"<html>not a model</html>")
    dlg.import_file(spec, bogus)
    qtbot.waitUntil(lambda: not dlg.busy, timeout=WAIT_MS)
    assert "failed verification" in dlg.message.text() and "bogus.onnx" in dlg.message.text()


# -- issue 15, items 9-11: refusing to start, a bad photo, what `live` has ------------------------
def test_neural_engine_without_models_refuses_to_start_and_names_every_file(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path, clip_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Start with the neural engine and no model files entered a fake running state: the button
    said Stop, the overlay 0.0 fps, and the error was cut off at the status bar's edge."""
    monkeypatch.setattr("livefuse_ui.main_window.device_choices", lambda: (("auto", "auto"),))
    opened: list[CaptureConfig] = []

    def source(c: CaptureConfig) -> Source:
        opened.append(c)
        return _pattern(c)

    window = _window(qtbot, tmp_path, analyser, source_factory=source)
    _choose_source(qtbot, window, astronaut_path)
    window.set_video(clip_path)
    s = window.settings
    s.engine.setCurrentIndex(s.engine.findData("neural"))
    qtbot.waitUntil(lambda: window.idle and window.config.engine.engine == "neural",
                    timeout=WAIT_MS)
    window.start()
    qtbot.waitUntil(lambda: not window.running and window.idle, timeout=20_000)
    assert window.start_button.text() == "Start" and not window.session.running
    assert opened == [] and window.preview.frames_shown == 0  # refused before any device opens
    assert window.banner.isVisible() and window.banner_text.wordWrap()
    text = window.banner_text.text()
    assert text.startswith("Cannot start: ")
    for name in ("det_10g.onnx", "w600k_r50.onnx", "inswapper_128.onnx"):
        assert name in text, name
    assert window.banner_models.isVisible()
    window.banner_models.click()
    dialogs = window.findChildren(ModelsDialog)
    assert len(dialogs) == 1 and dialogs[0].isVisible()
    dialogs[0].close()
    assert text.removeprefix("Cannot start: ") in window.log_view.toPlainText()  # in full
    _close(qtbot, window)


def test_an_engine_that_fails_to_build_stops_the_session(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    """A model that passes the file check but does not load (or a broken runtime) fails on
    the inference thread: the window stops and says why instead of showing a stream."""
    def broken(config: AppConfig) -> Any:
        raise ModelVerifyError(tmp_path / "inswapper_128.onnx", "not an ONNX graph")

    win = _window(qtbot, tmp_path, analyser, engine_factory=broken, source_factory=_pattern)
    _choose_source(qtbot, win, astronaut_path)
    win.input_kind.setCurrentText("test pattern")
    assert win.start()
    qtbot.waitUntil(lambda: not win.running and not win.session.running and win.idle,
                    timeout=20_000)
    assert win.start_button.text() == "Start"
    assert "not an ONNX graph" in win.banner_text.text() and win.banner_models.isVisible()
    _close(qtbot, win)


def test_settings_that_cannot_run_keep_the_stream_as_it_is(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While streaming, the neural engine without its models (or a recording the session
    refuses) is not taken: the stream goes on, the window shows the settings in force again
    and says why."""
    monkeypatch.setattr("livefuse_ui.main_window.device_choices", lambda: (("auto", "auto"),))
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    _choose_source(qtbot, win, astronaut_path)
    win.input_kind.setCurrentText("test pattern")
    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown > 0 and win.idle, timeout=WAIT_MS)
    s = win.settings
    s.engine.setCurrentIndex(s.engine.findData("neural"))
    qtbot.waitUntil(lambda: win.banner.isVisible() and win.idle, timeout=WAIT_MS)
    assert "inswapper_128.onnx" in win.banner_text.text() and win.banner_models.isVisible()
    assert win.config.engine.engine == "auto" and s.engine.currentData() == "auto"
    assert win.session.config.engine.engine == "auto" and len(factory.built) == 1
    shown = win.preview.frames_shown
    qtbot.waitUntil(lambda: win.preview.frames_shown > shown + 3, timeout=WAIT_MS)
    win.hide_banner()

    s.set_record_path(str(tmp_path / "stream.txt"))  # a suffix no recorder writes
    qtbot.waitUntil(lambda: win.banner.isVisible() and win.idle, timeout=WAIT_MS)
    assert "stream.txt" in win.banner_text.text() and not win.banner_models.isVisible()
    qtbot.waitUntil(lambda: win.session.config.output.record is None, timeout=WAIT_MS)
    assert win.config.output.record is None and not s.record.isChecked()
    assert {sink.name for sink in win.session.sinks} == {"preview"}
    assert win.running and win.session.running
    _close(qtbot, win)


def test_status_messages_are_never_cut_off(qtbot: Any, window: MainWindow) -> None:
    window.resize(700, 500)
    qtbot.waitUntil(lambda: window.width() <= 800, timeout=WAIT_MS)
    long = ("virtual camera missing: " + "no v4l2loopback device found; " * 8).strip()
    window._on_status(long)
    line = window.status_line
    assert line.full_text() == long and line.toolTip() == long
    assert line.is_elided() and line.text().endswith("…")  # shortened where it must be ...
    assert line.width() <= window.width()
    assert long in window.log_view.toPlainText()  # ... and whole in the log
    assert not window.log_dock.isVisible()
    line.clicked.emit()
    assert window.log_dock.isVisible()
    window.show_banner(long)
    assert window.banner_text.text() == long and window.banner_text.wordWrap()
    assert not window.banner_models.isVisible()


def test_a_bad_source_photo_keeps_the_good_one(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    _choose_source(qtbot, win, astronaut_path)
    picker = win.picker
    face, analysis = picker.face, picker.analysis
    assert face is not None and analysis is not None
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_bytes(b"not a picture")
    no_face = save_image(tmp_path / "grey.png", np.full((200, 200, 3), 128, np.uint8))
    for bad in (not_an_image, no_face):
        with qtbot.waitSignal(picker.source_failed, timeout=WAIT_MS) as failed:
            picker.load(bad)
        assert bad.name in failed.args[0] and "Still using astronaut.png" in failed.args[0]
        assert picker.face is face and picker.analysis is analysis
        assert picker.thumb.pixmap() is not None and not picker.thumb.pixmap().isNull()
        assert "Still using astronaut.png" in picker.message.text()
    win.input_kind.setCurrentText("test pattern")
    qtbot.waitUntil(lambda: win.idle, timeout=WAIT_MS)
    assert win.current_state().source_path == str(astronaut_path)
    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown > 0, timeout=WAIT_MS)
    engine = factory.built[-1]
    # the face kept (set when the engine is prepared at Start, and by the runner)
    assert engine.sources and all(f is face for _, f in engine.sources)
    _close(qtbot, win)


def test_a_first_start_takes_the_live_defaults(window: MainWindow) -> None:
    """The app detected every frame and swapped every face; `live` every 3rd and one."""
    assert window.config == LIVE_DEFAULTS
    s = window.settings
    assert s.detect_every.value() == LIVE_DEFAULTS.engine.detect_every == 3
    assert s.face_selector.currentData() == LIVE_DEFAULTS.engine.face_selector == "one"
    assert s.engine.currentData() == "auto" and s.face_index.text() == "largest"


def test_the_device_box_lists_what_the_engine_package_sees(
        qtbot: Any, tmp_path: Path, analyser: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def devices() -> tuple[tuple[str, str], ...]:
        asked.append(1)
        return (("auto", "auto"), ("cpu", "cpu"), ("cuda:0", "cuda:0 (GPU A)"),
                ("cuda:1", "cuda:1 (GPU B)"))

    monkeypatch.setattr("livefuse_ui.main_window.device_choices", devices)
    win = _window(qtbot, tmp_path, analyser)
    s = win.settings
    qtbot.waitUntil(lambda: s.engine.currentText() == "auto (classic)", timeout=WAIT_MS)
    assert asked == []  # the classic engine never imports torch for a list it cannot use
    s.engine.setCurrentIndex(s.engine.findData("neural"))
    qtbot.waitUntil(lambda: s.device.count() == 4, timeout=WAIT_MS)
    assert [s.device.itemData(i) for i in range(4)] == ["auto", "cpu", "cuda:0", "cuda:1"]
    assert s.device.itemText(3) == "cuda:1 (GPU B)" and s.device.isEnabled()
    s.device.setCurrentIndex(3)
    qtbot.waitUntil(lambda: win.config.engine.device == "cuda:1", timeout=WAIT_MS)
    assert len(asked) == 1
    _close(qtbot, win)


def test_auto_shows_the_engine_it_runs(qtbot: Any, tmp_path: Path, analyser: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("livefuse.models.engine_choice.neural_models_present",
                        lambda directory=None: True)
    monkeypatch.setattr("livefuse_ui.main_window.device_choices", lambda: (("auto", "auto"),))
    win = _window(qtbot, tmp_path, analyser)
    s = win.settings
    qtbot.waitUntil(lambda: s.engine.currentText() == "auto (neural)", timeout=WAIT_MS)
    assert s.precision.isEnabled() and s.device.isEnabled() and s.face_box.isEnabled()
    assert "present" in s.engine.itemData(0, Qt.ItemDataRole.ToolTipRole)
    _close(qtbot, win)


def test_face_selector_index_and_reference_photo(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        hanks_path: Path) -> None:
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    _choose_source(qtbot, win, astronaut_path)
    win.input_kind.setCurrentText("test pattern")
    s = win.settings
    s.face_index.setValue(2)
    qtbot.waitUntil(lambda: win.config.engine.target_face_index == 2, timeout=WAIT_MS)
    s.face_selector.setCurrentIndex(s.face_selector.findData("many"))
    qtbot.waitUntil(lambda: win.config.engine.face_selector == "many", timeout=WAIT_MS)
    assert win.config.engine.target_face_index is None and not s.face_index.isEnabled()

    # `reference` needs a photo: refused (and said) until one is chosen
    s.face_selector.setCurrentIndex(s.face_selector.findData("reference"))
    assert "reference photo" in s.error.text() and win.config.engine.face_selector == "many"
    assert s.reference_button.isEnabled()
    win.config = dataclasses.replace(  # as if saved so by an earlier session
        win.config, engine=dataclasses.replace(win.config.engine, face_selector="reference"))
    assert not win.start() and "reference photo" in win.statuses[-1]
    win.load_reference(hanks_path)
    qtbot.waitUntil(lambda: win.reference is not None, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: win.idle, timeout=WAIT_MS)
    assert s.reference_label.text() == hanks_path.name and s.error.text() == ""
    assert win.config.engine.face_selector == "reference"
    assert win.current_state().reference_path == str(hanks_path)

    # a photo without a face is refused; the one in use stays
    grey = save_image(tmp_path / "grey.png", np.full((160, 160, 3), 128, np.uint8))
    win.load_reference(grey)
    qtbot.waitUntil(lambda: "grey.png" in s.reference_label.text(), timeout=WAIT_MS)
    assert f"still using {hanks_path.name}" in s.reference_label.text()
    assert win.reference is not None and win.reference.path == hanks_path

    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown > 0, timeout=WAIT_MS)
    engine = factory.built[-1]
    assert [r.path for r in engine.references][-1] == hanks_path
    assert engine.config.face_selector == "reference"
    _close(qtbot, win)
    again = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory(),
                    source_factory=_pattern)  # restored at the next start
    qtbot.waitUntil(lambda: again.reference is not None, timeout=WAIT_MS)
    assert again.reference is not None and again.reference.path == hanks_path
    assert again.config.engine.face_selector == "reference"
    _close(qtbot, again)


def test_recording_to_a_file_from_the_app(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import av

    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory(),
                  source_factory=_pattern)
    _choose_source(qtbot, win, astronaut_path)
    win.input_kind.setCurrentText("test pattern")
    s = win.settings
    out = tmp_path / "stream.mp4"
    monkeypatch.setattr("livefuse_ui.main_window.QFileDialog.getSaveFileName",
                        lambda *a, **k: (str(out), ""))
    s.record.setChecked(True)  # no file yet: the save dialog asks for one
    qtbot.waitUntil(lambda: win.config.output.record == str(out), timeout=WAIT_MS)
    assert s.record.isChecked() and s.record_label.text() == str(out)
    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown >= 10, timeout=WAIT_MS)
    win.stop()
    qtbot.waitUntil(lambda: win.idle and not win.session.running, timeout=WAIT_MS)
    with av.open(str(out)) as f:
        assert sum(1 for _ in f.decode(video=0)) >= 5
    # the next Start keeps it and records to the next free name (a new user's trial: every
    # Start wrote over the last recording); the dialog's own choice was replaced once only
    first, shown = out.read_bytes(), win.preview.frames_shown
    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown >= shown + 10, timeout=WAIT_MS)
    win.stop()
    qtbot.waitUntil(lambda: win.idle and not win.session.running, timeout=WAIT_MS)
    assert out.read_bytes() == first and (tmp_path / "stream-2.mp4").is_file()
    assert win.config.output.record == str(tmp_path / "stream-2.mp4")
    assert any("recording to 'stream-2.mp4': 'stream.mp4' is there and is kept" in line
               for line in win.statuses)
    s.record.setChecked(False)
    qtbot.waitUntil(lambda: win.config.output.record is None, timeout=WAIT_MS)

    # the session refuses a recording it cannot write: the window says so, in full
    s.set_record_path(str(tmp_path / "stream.txt"))
    qtbot.waitUntil(lambda: win.idle, timeout=WAIT_MS)
    win.start()
    qtbot.waitUntil(lambda: not win.running and win.banner.isVisible(), timeout=WAIT_MS)
    assert "stream.txt" in win.banner_text.text() and not win.session.running
    _close(qtbot, win)


def test_a_recording_that_fails_while_running_is_shown_in_the_banner(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A GUI trial: a recording that could not be written after Start said so only in the
    status bar, without the file: "recorder failed: [Errno 2] No such file or directory"."""
    from livefuse.io.sinks import RecorderSink

    def broken(self: RecorderSink, *a: object) -> None:
        raise OSError(2, "No such file or directory")

    monkeypatch.setattr(RecorderSink, "_start", broken)
    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory(),
                  source_factory=_pattern)
    _choose_source(qtbot, win, astronaut_path)
    win.input_kind.setCurrentText("test pattern")
    win.settings.set_record_path(str(tmp_path / "rec.mp4"))
    qtbot.waitUntil(lambda: win.idle, timeout=WAIT_MS)
    assert win.start()
    qtbot.waitUntil(lambda: win.banner.isVisible(), timeout=WAIT_MS)
    assert f"Recording '{tmp_path / 'rec.mp4'}' is not being written" in \
        win.banner_text.text()
    win.stop()
    qtbot.waitUntil(lambda: win.idle and not win.session.running, timeout=WAIT_MS)
    _close(qtbot, win)


def test_start_refuses_what_the_panel_shows_and_cannot_run(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    """A GUI trial: with "Swap: reference" and no reference photo the combo showed reference
    while the largest face was swapped (the reason at the foot of the settings, off-screen);
    a missing video input was retried like a camera, "retrying…" for 20 s and more."""
    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory())
    _choose_source(qtbot, win, astronaut_path)
    win.set_video(tmp_path / "missing.mp4")
    s = win.settings
    s.face_selector.setCurrentIndex(s.face_selector.findData("reference"))
    assert not win.start() and win.banner.isVisible()
    assert "reference selector needs a reference photo" in win.banner_text.text()
    s.face_selector.setCurrentIndex(s.face_selector.findData("one"))
    qtbot.waitUntil(lambda: win.idle, timeout=WAIT_MS)
    win.start()
    qtbot.waitUntil(lambda: not win.running and "missing.mp4" in win.banner_text.text(),
                    timeout=WAIT_MS)
    assert "file not found" in win.banner_text.text() and not win.session.running
    _close(qtbot, win)


def test_recording_onto_the_input_video_is_refused(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        clip_path: Path) -> None:
    video = tmp_path / "input.mp4"
    video.write_bytes(clip_path.read_bytes())
    before = video.read_bytes()
    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory())
    _choose_source(qtbot, win, astronaut_path)
    win.set_video(video)
    win.settings.set_record_path(str(tmp_path / "." / "input.mp4"))
    qtbot.waitUntil(lambda: win.idle, timeout=WAIT_MS)
    win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown > 0 or win.banner.isVisible(),
                    timeout=WAIT_MS)
    win.stop()
    qtbot.waitUntil(lambda: win.idle and not win.session.running, timeout=WAIT_MS)
    _close(qtbot, win)
    assert video.read_bytes() == before
    assert "input.mp4" in win.banner_text.text()


# -- issue 19: presets, the privacy guard, the control API, swap on/off -------------------------
def _presets(tmp_path: Path, **photos: Path) -> PresetStore:
    """Presets beside the window's settings.toml, one per ``NAME=photo`` (copied, so a test
    may delete it); a preset called ``Hanks`` has the blur guard."""
    store = PresetStore(tmp_path / "presets")
    folder = tmp_path / "photos"
    folder.mkdir(exist_ok=True)
    for name, src in photos.items():
        dst = folder / f"{name}{src.suffix}"
        dst.write_bytes(src.read_bytes())
        guard = GuardConfig(mode="blur") if name == "Hanks" else GuardConfig()
        store.save(Preset.of(name, AppConfig(engine=LIVE_DEFAULTS.engine, guard=guard),
                             PresetSource(path=str(dst))))
    return store


def _stream(qtbot: Any, win: MainWindow, source: Path) -> None:
    _choose_source(qtbot, win, source)
    win.input_kind.setCurrentText("test pattern")
    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown > 2 and win.idle, timeout=WAIT_MS)


def _press_ctrl(qtbot: Any, win: MainWindow, number: int) -> None:
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow, timeout=WAIT_MS)
    QTest.keyClick(win.preview, getattr(Qt.Key, f"Key_{number}"),
                   Qt.KeyboardModifier.ControlModifier)


def test_ctrl_number_switches_the_preset_at_a_frame_boundary(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        hanks_path: Path) -> None:
    store = _presets(tmp_path, Astro=astronaut_path, Hanks=hanks_path)
    opened: list[CaptureConfig] = []

    def source(c: CaptureConfig) -> Source:
        opened.append(c)
        return _pattern(c)

    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=source)
    qtbot.waitUntil(lambda: win.presets.names() == ["Astro", "Hanks"], timeout=WAIT_MS)
    rows = [win.presets.list.item(i).text() for i in range(win.presets.list.count())]
    assert rows == ["1  Astro", "2  Hanks"]  # the numbers Ctrl+N goes by
    assert "Ctrl+1" in win.presets.hint.text()
    _stream(qtbot, win, astronaut_path)
    engine = factory.built[-1]
    hanks = str(store.load("Hanks").source.path)
    assert hanks in engine.prepared  # prepared before the start: the switch detects nothing
    runner, frames = win.session.runner, win.preview.frames_shown

    _press_ctrl(qtbot, win, 2)
    qtbot.waitUntil(lambda: win.session.active_preset == "Hanks" and win.idle, timeout=WAIT_MS)
    # taken by the inference thread between two frames, on the running engine
    thread, at, photo = engine.used[-1]
    assert thread == "livefuse-inference" and photo == hanks and at > 0
    sources = len(engine.sources)
    assert factory.built == [engine] and win.session.runner is runner and len(opened) == 1
    qtbot.waitUntil(lambda: win.preview.frames_shown > frames + 3, timeout=WAIT_MS)
    # the window follows: the preset's settings and photo, the list and the overlay
    qtbot.waitUntil(lambda: win.settings.guard_mode.currentData() == "blur"
                    and win.picker.analysis is not None
                    and win.picker.analysis.path == Path(hanks), timeout=WAIT_MS)
    assert win.config.guard.mode == "blur" == win.session.config.guard.mode
    qtbot.waitUntil(lambda: win.presets.list.item(1).text() == "2  Hanks (active)",
                    timeout=WAIT_MS)
    assert "preset Hanks" in win.preview.lines()
    qtbot.wait(3 * METRICS_MS)  # the picker's photo is not handed back to the session
    assert len(engine.sources) == sources and engine.used[-1][2] == hanks
    assert win.session.active_preset == "Hanks" and not win.session.preset_modified

    _press_ctrl(qtbot, win, 1)  # and back, again in place
    qtbot.waitUntil(lambda: win.session.active_preset == "Astro" and win.idle,
                    timeout=WAIT_MS)
    assert engine.used[-1][0] == "livefuse-inference" and factory.built == [engine]
    qtbot.waitUntil(lambda: win.settings.guard_mode.currentData() == "off", timeout=WAIT_MS)
    _close(qtbot, win)


def test_a_refused_preset_keeps_the_stream(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    wall = save_image(tmp_path / "wall.png", np.full((200, 200, 3), 128, np.uint8))
    store = _presets(tmp_path, Astro=astronaut_path, Gone=astronaut_path)
    (tmp_path / "photos" / f"Gone{astronaut_path.suffix}").unlink()  # deleted since
    # written by hand: saving refuses a photo without a face
    (store.folder / "Wall.toml").write_text(f'[source]\npath = "{wall}"\n', encoding="utf-8")
    store.save(Preset.of("Neural", AppConfig(engine=EngineConfig(engine="neural")),
                         PresetSource(path=str(astronaut_path))))  # no model files here
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    qtbot.waitUntil(lambda: win.presets.names() == ["Astro", "Gone", "Neural", "Wall"],
                    timeout=WAIT_MS)
    _stream(qtbot, win, astronaut_path)
    assert "presets ready: Astro" in "\n".join(win.statuses)
    _press_ctrl(qtbot, win, 1)
    qtbot.waitUntil(lambda: win.session.active_preset == "Astro" and win.idle, timeout=WAIT_MS)
    engine, runner = factory.built[-1], win.session.runner
    used = list(engine.used)
    for number, why in ((2, "file not found"), (3, "inswapper_128.onnx"), (4, "no face")):
        frames = win.preview.frames_shown
        _press_ctrl(qtbot, win, number)
        qtbot.waitUntil(lambda: win.banner.isVisible() and win.idle, timeout=WAIT_MS)
        text = win.banner_text.text()
        assert why in text and "the stream keeps preset 'Astro'" in text, text
        assert why in win.presets.message.text() and why in win.statuses[-1]
        assert win.banner_models.isVisible() == (number == 3)  # Manage models… fixes it
        assert win.running and win.session.runner is runner and engine.used == used
        assert win.session.active_preset == "Astro" and factory.built == [engine]
        qtbot.waitUntil(lambda n=frames: win.preview.frames_shown > n + 3, timeout=WAIT_MS)
        win.hide_banner()
    _press_ctrl(qtbot, win, 7)  # no such preset: said, nothing else
    qtbot.waitUntil(lambda: "no preset 7" in win.statuses[-1], timeout=WAIT_MS)
    _close(qtbot, win)


def test_presets_are_saved_renamed_and_deleted_through_the_list(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QInputDialog, QMessageBox

    typed: list[str] = []
    monkeypatch.setattr(QInputDialog, "getText",
                        staticmethod(lambda *a, **k: (typed.pop(0), True)))
    answers: list[QMessageBox.StandardButton] = []
    monkeypatch.setattr(QMessageBox, "question", staticmethod(lambda *a, **k: answers.pop(0)))
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    panel, folder = win.presets, tmp_path / "presets"
    assert panel.names() == [] and not panel.delete_button.isEnabled()
    assert not panel.save_button.isEnabled()  # no source face yet
    win.presets.ask_save()  # Ctrl+Shift+S: said, nothing asked or written
    assert "source face" in panel.message.text() and not folder.exists()
    _choose_source(qtbot, win, astronaut_path)
    win.settings.guard_mode.setCurrentIndex(win.settings.guard_mode.findData("hold"))
    win.settings.hold_frames.setValue(9)

    typed[:] = ["bad/name", "Gaming"]  # a bad name is refused in the dialog, which asks again
    panel.save_button.click()
    qtbot.waitUntil(lambda: panel.names() == ["Gaming"], timeout=WAIT_MS)
    saved = PresetStore(folder).load("Gaming")
    assert saved.source.path == str(astronaut_path.resolve()) and len(saved.source.face_box) == 4
    assert (saved.guard.mode, saved.guard.hold_frames) == ("hold", 9)
    qtbot.waitUntil(lambda: panel.list.item(0).text() == "1  Gaming (active)", timeout=WAIT_MS)

    typed[:] = ["Alpha"]
    panel.save_button.click()
    qtbot.waitUntil(lambda: panel.names() == ["Alpha", "Gaming"], timeout=WAIT_MS)
    assert win.preset_actions[0].text().endswith("Alpha")  # the menu shows Ctrl+1's preset
    typed[:] = ["gaming"]  # an existing name: replaced only when the user says so
    answers[:] = [QMessageBox.StandardButton.No]
    panel.save_button.click()
    qtbot.wait(APPLY_DELAY_MS)
    assert panel.names() == ["Alpha", "Gaming"] and not answers

    panel.list.setCurrentRow(1)
    typed[:] = ["Zeta"]
    panel.rename_button.click()
    qtbot.waitUntil(lambda: panel.names() == ["Alpha", "Zeta"], timeout=WAIT_MS)
    assert not (folder / "Gaming.toml").exists() and (folder / "Zeta.toml").is_file()
    panel.list.setCurrentRow(0)
    typed[:] = ["zeta"]  # taken by another: refused, nothing renamed
    panel.rename_button.click()
    assert "exists already" in panel.message.text() and panel.names() == ["Alpha", "Zeta"]

    answers[:] = [QMessageBox.StandardButton.Yes]
    panel.list.setCurrentRow(0)
    panel.delete_button.click()
    qtbot.waitUntil(lambda: panel.names() == ["Zeta"], timeout=WAIT_MS)
    assert not (folder / "Alpha.toml").exists()
    assert win.session.active_preset == "Alpha" or win.session.active_preset is None
    _close(qtbot, win)


def test_the_guard_setting_reaches_the_session_and_the_overlay(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    s = win.settings
    assert [s.guard_mode.itemData(i) for i in range(s.guard_mode.count())] == \
        list(GUARD_CHOICES)
    assert not s.hold_frames.isEnabled()
    _stream(qtbot, win, astronaut_path)
    runner = win.session.runner
    assert runner is not None
    assert not any(line.startswith("guard") for line in win.preview.lines())
    s.guard_mode.setCurrentIndex(s.guard_mode.findData("hold"))
    assert s.hold_frames.isEnabled()
    s.hold_frames.setValue(7)
    qtbot.waitUntil(lambda: runner.config.guard == GuardConfig(mode="hold", hold_frames=7),
                    timeout=WAIT_MS)
    assert win.session.config.guard == win.config.guard
    # the overlay says what the guard does (the preview only: see the overlay test above)
    qtbot.waitUntil(lambda: "guard hold: armed" in win.preview.lines(), timeout=WAIT_MS)

    # swap off: the runner passes frames as they are and the overlay says so
    win.swap_box.setChecked(False)
    qtbot.waitUntil(lambda: not runner.swap and SWAP_OFF in win.preview.lines(),
                    timeout=WAIT_MS)
    win.swap_box.setChecked(True)
    qtbot.waitUntil(lambda: runner.swap and SWAP_OFF not in win.preview.lines(),
                    timeout=WAIT_MS)
    _close(qtbot, win)


def test_the_overlay_shows_the_guard_line_only_while_it_is_on() -> None:
    hiding = GuardState(mode="blur", action="blur", regions=2, lost=1)
    snap = dataclasses.replace(MetricsSnapshot(), guard=hiding)
    lines = overlay_lines(snap, OverlayInfo(precision="fp16"))
    assert "guard blur: hiding 2 faces (1 lost)" in lines
    assert not any(line.startswith("guard")
                   for line in overlay_lines(MetricsSnapshot(), OverlayInfo()))
    assert overlay_lines(snap, OverlayInfo(preset="Gaming", modified=True,
                                           swap=False))[-2:] == \
        ["preset Gaming (changed)", SWAP_OFF]


def _api(server: Any, token: str, method: str, path: str,
         body: dict[str, Any] | None = None) -> requests.Response:
    return requests.request(method, server.url + path, json=body, timeout=30,
                            headers={"Authorization": f"Bearer {token}"})


def test_the_control_api_serves_from_the_app_and_the_window_follows_it(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path, hanks_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtGui import QGuiApplication

    _presets(tmp_path, Hanks=hanks_path)
    (tmp_path / "settings.toml").write_text("[control]\nenabled = true\nport = 0\n",
                                            encoding="utf-8")
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    s = win.settings
    assert s.control_enabled.isChecked() and s.control_host.text() == "127.0.0.1"
    qtbot.waitUntil(lambda: win.session.control is not None and bool(s.token),
                    timeout=WAIT_MS)
    server = win.session.control
    assert server is not None and server.host == "127.0.0.1"
    token_file = tmp_path / "control-token"
    assert s.token == read_token(token_file) and token_file.stat().st_mode & 0o777 == 0o600
    assert s.control_token.echoMode() == s.control_token.EchoMode.Password  # on stream
    s.token_show.setChecked(True)
    assert s.control_token.echoMode() == s.control_token.EchoMode.Normal
    s.token_copy.click()
    assert QGuiApplication.clipboard().text() == s.token
    qtbot.waitUntil(lambda: s.control_status.text() == f"serving on {server.url}",
                    timeout=WAIT_MS)
    assert _api(server, "wrong-token-wrong-token", "GET", "/status").status_code == 401

    _stream(qtbot, win, astronaut_path)
    token = s.token
    status = _api(server, token, "GET", "/status")
    assert status.status_code == 200 and status.json()["running"] is True
    # what the API changes, the window shows
    assert _api(server, token, "POST", "/guard", {"mode": "hold"}).status_code == 200
    qtbot.waitUntil(lambda: s.guard_mode.currentData() == "hold", timeout=WAIT_MS)
    assert win.config.guard.mode == "hold" and s.hold_frames.isEnabled()
    assert _api(server, token, "POST", "/swap", {"on": False}).status_code == 200
    qtbot.waitUntil(lambda: not win.swap_box.isChecked(), timeout=WAIT_MS)
    assert _api(server, token, "POST", "/preset", {"name": "hanks"}).status_code == 200
    qtbot.waitUntil(lambda: win.picker.analysis is not None
                    and win.picker.analysis.path.name == f"Hanks{hanks_path.suffix}"
                    and win.presets.list.item(0).text() == "1  Hanks (active)",
                    timeout=WAIT_MS)
    assert s.guard_mode.currentData() == "blur"  # the preset's guard
    engine = factory.built[-1]
    qtbot.wait(3 * METRICS_MS)  # the picker's load is not handed back to the session
    assert engine.used[-1][2].endswith(f"Hanks{hanks_path.suffix}")
    assert not win.session.preset_modified

    # switched off in the panel: no longer served
    s.control_enabled.setChecked(False)
    qtbot.waitUntil(lambda: win.session.control is None and s.control_status.text() == "off",
                    timeout=WAIT_MS)
    with pytest.raises(requests.ConnectionError):
        _api(server, token, "GET", "/status")
    _close(qtbot, win)


def test_a_control_api_switched_on_in_the_panel_makes_its_token_beside_the_settings(
        qtbot: Any, tmp_path: Path, analyser: Any) -> None:
    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory())
    s = win.settings
    assert s.token == "" and not s.token_copy.isEnabled()
    qtbot.wait(METRICS_MS)
    assert not (tmp_path / "control-token").exists()  # nothing made while it is off
    s.control_port.setValue(0)
    s.control_enabled.setChecked(True)
    qtbot.waitUntil(lambda: win.session.control is not None and bool(s.token),
                    timeout=WAIT_MS)
    assert s.token == read_token(tmp_path / "control-token") and s.token_copy.isEnabled()
    s.control_host.setText("0.0.0.0")
    assert s.control_warning.isHidden()
    s.control_host.editingFinished.emit()
    assert not s.control_warning.isHidden() and "network" in s.control_warning.text()
    _close(qtbot, win)


def test_auto_runs_the_engine_fetched_models_make_it_at_the_next_start(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Models fetched in the Models dialog while the app is open: "auto" showed "auto
    (neural)" but the engine kept from the last run stayed classic until a reload."""
    monkeypatch.setattr("livefuse_ui.main_window.device_choices", lambda: (("auto", "auto"),))
    factory = _CountingFactory()
    win = _window(qtbot, tmp_path, analyser, engine_factory=factory, source_factory=_pattern)
    qtbot.waitUntil(lambda: win.settings.engine.currentText() == "auto (classic)",
                    timeout=WAIT_MS)
    _stream(qtbot, win, astronaut_path)
    assert win.built_engine == "classic" and len(factory.built) == 1
    win.stop()
    qtbot.waitUntil(lambda: win.idle and not win.session.running, timeout=WAIT_MS)

    # the models dialog fetched the neural models
    monkeypatch.setattr("livefuse.models.engine_choice.neural_models_present",
                        lambda directory=None: True)
    monkeypatch.setattr("livefuse_ui.main_window.models_error", lambda config: None)
    win.check_models()
    qtbot.waitUntil(lambda: win.settings.engine.currentText() == "auto (neural)",
                    timeout=WAIT_MS)
    assert "auto now runs the neural engine" in win.statuses[-1]
    shown = win.preview.frames_shown
    assert win.start()
    qtbot.waitUntil(lambda: win.preview.frames_shown > shown + 2, timeout=WAIT_MS)
    assert win.built_engine == "neural" and len(factory.built) == 2
    assert win.session.engine is factory.built[-1]
    _close(qtbot, win)


def test_the_token_made_before_is_shown_while_the_api_is_off(
        qtbot: Any, tmp_path: Path, analyser: Any) -> None:
    token = load_or_create_token(tmp_path / "control-token")  # e.g. `livefuse control-token`
    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory())
    qtbot.waitUntil(lambda: win.settings.token == token, timeout=WAIT_MS)
    assert win.session.control is None and win.settings.token_copy.isEnabled()
    _close(qtbot, win)


def test_an_edit_never_undoes_what_the_control_api_changed_meanwhile(
        qtbot: Any, tmp_path: Path, analyser: Any, astronaut_path: Path) -> None:
    """A Stream Deck key turns the guard on; a moment later, before the window has shown it,
    the user steps a spin box: the window's settings were handed over whole, and the guard
    went off again without a word."""
    win = _window(qtbot, tmp_path, analyser, engine_factory=_CountingFactory(),
                  source_factory=_pattern)
    _stream(qtbot, win, astronaut_path)
    session, runner = win.session, win.session.runner
    assert runner is not None
    session.set_guard("blur")  # as POST /guard does, from outside the window
    win.settings.detect_every.setValue(5)  # the window still shows the guard off
    qtbot.waitUntil(lambda: win.idle and runner.config.engine.detect_every == 5,
                    timeout=WAIT_MS)
    assert session.config.guard.mode == "blur" and runner.config.guard.mode == "blur"
    qtbot.waitUntil(lambda: win.settings.guard_mode.currentData() == "blur", timeout=WAIT_MS)
    assert win.config == session.config
    _close(qtbot, win)
