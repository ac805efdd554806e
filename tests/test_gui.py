"""The desktop app, offscreen (pytest-qt): window, source picker, live run, settings, shutdown."""

from __future__ import annotations

import hashlib
import io
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

import requests
from livefuse_ui.main_window import MainWindow
from livefuse_ui.models_dialog import ModelsDialog, ProgressSession
from livefuse_ui.preview import OverlayInfo, PreviewWidget
from livefuse_ui.source_picker import SourcePicker
from PySide6.QtCore import QElapsedTimer, QTimer

from livefuse.config import (
    BACKEND_CHOICES,
    ENGINE_CHOICES,
    PRECISION_CHOICES,
    load_config,
)
from livefuse.imaging import load_image, save_image
from livefuse.io.sources import CameraSource
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.models.catalog import ModelSpec
from livefuse.samples import insightface_image


def _livefuse_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("livefuse") and t.is_alive()]


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    photo = load_image(insightface_image("t1.jpg")).bgr
    path = tmp_path_factory.mktemp("clip") / "t1.mp4"
    # Faces of t1.jpg about 110 px wide: big enough for dlib's HOG detector.
    return write_clip(motion_clip(photo, (480, 360), frames=30, face_px=110, face_width=110),
                      path, audio=False)


@pytest.fixture
def window(qtbot: Any, tmp_path: Path) -> MainWindow:
    win = MainWindow(config_path=tmp_path / "settings.toml", models_directory=tmp_path / "models")
    qtbot.addWidget(win)
    win.show()
    return win


def _choose_source(qtbot: Any, win: MainWindow, path: Path) -> None:
    with qtbot.waitSignal(win.picker.source_changed, timeout=20_000):
        win.picker.load(path)


def test_window_builds_with_the_config_choices(window: MainWindow) -> None:
    s = window.settings
    assert [s.engine.itemText(i) for i in range(s.engine.count())] == list(ENGINE_CHOICES)
    assert [s.precision.itemText(i) for i in range(s.precision.count())] == list(PRECISION_CHOICES)
    assert [s.backend.itemText(i) for i in range(s.backend.count())] == list(BACKEND_CHOICES)
    assert window.start_button.text() == "Start"
    assert not window.start()  # no source face yet: refused with a message, nothing started
    assert window.runner is None
    assert "source face" in window.statuses[-1]


def test_start_with_video_gives_frames_and_metrics(qtbot: Any, window: MainWindow,
                                                   astronaut_path: Path, clip_path: Path) -> None:
    _choose_source(qtbot, window, astronaut_path)
    assert window.picker.face_index == 0
    assert window.picker.thumb.pixmap() is not None and not window.picker.thumb.pixmap().isNull()
    window.set_video(clip_path)
    assert window.start()
    runner = window.runner
    assert runner is not None
    qtbot.waitUntil(lambda: window.preview.frames_shown >= 5, timeout=30_000)
    qtbot.waitUntil(lambda: window.metrics_updates >= 2 and window.last_metrics is not None
                    and window.last_metrics.frames_out > 0, timeout=10_000)
    snap = window.last_metrics
    assert snap is not None and snap.latency_p50_ms is not None and snap.latency_p50_ms > 0
    image = window.preview.image
    assert image is not None and (image.width(), image.height()) == (480, 360)
    lines = window.preview.lines()
    assert "fps" in lines[0] and lines[1].startswith("latency p50")
    assert lines[-1] == "precision n/a (classic engine)"
    assert runner.errors == 0, runner.statuses

    # Toggling the cache and the precision reaches the runner's applied config.
    window.settings.cache_enabled.setChecked(False)
    window.settings.precision.setCurrentText("fp32")
    qtbot.waitUntil(lambda: not runner.config.cache.enabled
                    and runner.config.engine.precision == "fp32", timeout=10_000)
    assert runner.config == window.config

    # No v4l2loopback here: switching the virtual camera on says so, with the fix, and the
    # preview keeps running.
    shown = window.preview.frames_shown
    window.settings.vcam.setChecked(True)
    qtbot.waitUntil(lambda: "missing" in window.settings.vcam_status.text(), timeout=10_000)
    assert "modprobe v4l2loopback" in window.settings.vcam_status.text()
    qtbot.waitUntil(lambda: window.preview.frames_shown > shown + 3, timeout=10_000)

    # Closing joins every livefuse thread.
    window.close()
    assert window.runner is None
    deadline = time.monotonic() + 2.0
    while _livefuse_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _livefuse_threads() == []


def test_settings_survive_a_restart(qtbot: Any, tmp_path: Path, clip_path: Path) -> None:
    cfg_path = tmp_path / "settings.toml"
    first = MainWindow(config_path=cfg_path)
    qtbot.addWidget(first)
    s = first.settings
    s.precision.setCurrentText("fp16")
    s.threshold.setValue(0.9)
    s.refresh.setValue(7)
    s.detect_every.setValue(3)
    s.keep_mouth.setChecked(False)
    first.mirror.setChecked(False)
    first.set_video(clip_path)
    expected = first.config
    first.close()
    assert load_config(cfg_path) == expected

    second = MainWindow(config_path=cfg_path)
    qtbot.addWidget(second)
    assert second.config == expected
    t = second.settings
    assert (t.precision.currentText(), t.threshold.value(), t.refresh.value(),
            t.detect_every.value(), t.keep_mouth.isChecked()) == ("fp16", 0.9, 7, 3, False)
    assert not second.mirror.isChecked() and not second.preview.mirror
    assert second.input_kind.currentText() == "video"
    assert second.state.video_path == str(clip_path)
    second.close()


class _SlowCapture:
    """A cv2.VideoCapture stand-in that takes 5 s to open and then fails."""

    def __init__(self, release: threading.Event) -> None:
        release.wait(5.0)

    def isOpened(self) -> bool:
        return False

    def release(self) -> None:
        pass


def test_slow_camera_open_keeps_the_gui_responsive(qtbot: Any, tmp_path: Path,
                                                   astronaut_path: Path) -> None:
    release = threading.Event()
    opened = threading.Event()

    def factory(_state: Any) -> CameraSource:
        def capture(_dev: int | str) -> _SlowCapture:
            opened.set()
            return _SlowCapture(release)

        return CameraSource(0, capture_factory=capture)

    win = MainWindow(config_path=tmp_path / "settings.toml", source_factory=factory)
    qtbot.addWidget(win)
    win.show()
    _choose_source(qtbot, win, astronaut_path)
    win.input_kind.setCurrentText("camera")

    period_ms = 10
    lateness: list[float] = []
    clock = QElapsedTimer()
    timer = QTimer()
    timer.setInterval(period_ms)

    def tick() -> None:
        lateness.append(clock.restart() - period_ms)

    timer.timeout.connect(tick)
    clock.start()
    timer.start()
    assert win.start()
    qtbot.wait(1500)  # the camera is still opening during all of this
    timer.stop()
    try:
        assert opened.is_set() and win.runner is not None
        assert len(lateness) > 50
        assert max(lateness[1:]) < 100, f"event loop late by {max(lateness):.0f} ms"
    finally:
        release.set()
        win.close()


def test_source_picker_no_face_and_several_faces(qtbot: Any, tmp_path: Path,
                                                 t1_path: Path) -> None:
    picker = SourcePicker()
    qtbot.addWidget(picker)
    blank = save_image(tmp_path / "wall.png", np.full((200, 300, 3), 128, np.uint8))
    with qtbot.waitSignal(picker.source_failed, timeout=20_000) as failed:
        picker.load(blank)
    assert "No face found in 'wall.png'" in failed.args[0]
    assert picker.face_index == -1

    with qtbot.waitSignal(picker.source_changed, timeout=20_000) as chosen:
        picker.load(t1_path)
    assert picker.analysis is not None
    n = len(picker.analysis.faces)
    assert n >= 2 and picker.faces.count() == n and not picker.faces.isHidden()
    assert chosen.args == [t1_path, picker.analysis.default_index]
    other = (picker.analysis.default_index + 1) % n
    with qtbot.waitSignal(picker.source_changed) as again:
        picker.faces.setCurrentRow(other)
    assert again.args == [t1_path, other] and picker.face_index == other


def test_preview_overlay_never_touches_the_frame(qtbot: Any) -> None:
    w = PreviewWidget()
    qtbot.addWidget(w)
    w.resize(400, 300)
    frame = np.zeros((120, 160, 3), np.uint8)
    frame[:, :80] = (255, 0, 0)  # left half blue (BGR)
    before = frame.copy()
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
    np.testing.assert_array_equal(before[:, :80], np.full((120, 80, 3), (255, 0, 0), np.uint8))


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
    qtbot.waitUntil(lambda: len(dlg.statuses) == dlg.table.rowCount(), timeout=10_000)
    assert set(dlg.statuses.values()) == {"missing"}
    assert "non-commercial" in dlg.table.item(0, 4).text()

    body = bytes(range(256)) * 4096  # 1 MiB
    spec = ModelSpec(name="tiny", role="detector", filename="tiny.onnx",
                     urls=("https://example.invalid/tiny.onnx",), size=len(body),
                     sha256=hashlib.sha256(body).hexdigest(), licence="test", input_size=(1, 1))
    dlg.fetch(spec, session_factory=_session(body))
    qtbot.waitUntil(lambda: not dlg.busy, timeout=10_000)
    assert (models / "tiny.onnx").read_bytes() == body
    assert dlg.progress.value() == 1000 and "verified" in dlg.message.text()

    slow = ModelSpec(**{**spec.__dict__, "filename": "slow.onnx"})
    dlg.fetch(slow, session_factory=_session(body, delay=0.02))
    qtbot.waitUntil(lambda: dlg.progress.value() > 0, timeout=10_000)
    dlg.cancel()
    qtbot.waitUntil(lambda: not dlg.busy, timeout=10_000)
    assert "cancelled" in dlg.message.text()
    assert not (models / "slow.onnx").exists() and (models / "slow.onnx.part").exists()

    bogus = tmp_path / "bogus.onnx"
    bogus.write_bytes(b"<html>not a model</html>")
    dlg.import_file(spec, bogus)
    qtbot.waitUntil(lambda: not dlg.busy, timeout=10_000)
    assert "failed verification" in dlg.message.text() and "bogus.onnx" in dlg.message.text()
