"""Sinks: letterbox, recorder, preview, the virtual camera switched off and on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import pyvirtualcam

from livefuse.errors import VideoError
from livefuse.io.sinks import PreviewSink, RecorderSink, VirtualCameraSink, letterbox
from livefuse.io.video import probe, read_frames


class CountingBackend:
    opened: ClassVar[int] = 0
    sent: ClassVar[int] = 0

    def __init__(self, **kw: Any) -> None:
        CountingBackend.opened += 1

    def close(self) -> None:
        pass

    def send(self, frame: np.ndarray) -> None:
        CountingBackend.sent += 1

    def device(self) -> str:
        return "counting"

    def native_fourcc(self) -> int | None:
        return None


pyvirtualcam.register_backend("counting", CountingBackend)


def test_letterbox_keeps_aspect() -> None:
    f = np.full((100, 200, 3), 200, np.uint8)
    out = letterbox(f, 100, 100)
    assert out.shape == (100, 100, 3)
    assert out[:24].max() == 0 and out[76:].max() == 0 and out[26:74].min() == 200


def test_recorder_writes_a_playable_file(tmp_path: Path) -> None:
    path = tmp_path / "rec.mp4"
    t0 = time.perf_counter_ns()
    with RecorderSink(path, fps=30) as rec:
        for i in range(10):
            rec.send(np.full((48, 64, 3), i * 20, np.uint8), t0 + i * 33_333_333)
        assert not path.exists()  # written under a temp name until closed
    info = probe(path)
    frames = read_frames(path)
    assert (info.width, info.height) == (64, 48) and len(frames) == 10
    assert abs(int(frames[5].mean()) - 100) <= 6  # limited-range YUV round trip


def test_recorder_rejects_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"rec\.gif"):
        RecorderSink(tmp_path / "rec.gif")


def test_preview_keeps_only_the_latest() -> None:
    got: list[int] = []

    def slow(frame: np.ndarray, t: int) -> None:
        time.sleep(0.05)
        got.append(int(frame[0, 0, 0]))

    with PreviewSink(slow) as p:
        for i in range(20):
            p.send(np.full((4, 4, 3), i, np.uint8), 0)
            time.sleep(0.005)
        time.sleep(0.2)
    assert got[-1] == 19 and len(got) < 10 and p.dropped >= 10


def test_virtual_camera_resends_and_toggles() -> None:
    CountingBackend.opened = CountingBackend.sent = 0
    with VirtualCameraSink(32, 24, 50, backend="counting") as cam:
        cam.send(np.zeros((24, 32, 3), np.uint8), time.perf_counter_ns())
        time.sleep(0.3)
        assert CountingBackend.sent >= 10  # one frame, re-sent at ~50 fps
        cam.set_enabled(False)
        time.sleep(0.2)
        sent = CountingBackend.sent
        time.sleep(0.2)
        assert CountingBackend.sent == sent  # off: nothing sent
        cam.set_enabled(True)
        cam.send(np.zeros((24, 32, 3), np.uint8), time.perf_counter_ns())
        time.sleep(0.3)
        assert CountingBackend.opened == 2 and CountingBackend.sent > sent
