"""Sources and the capture thread, with fake cameras that fail in the ways real ones do."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from livefuse.errors import VideoError
from livefuse.io.sources import CameraSource, Capture, TestPatternSource, VideoFileSource
from livefuse.io.synthetic import write_clip


class FakeCapture:
    """A cv2.VideoCapture look-alike; ``mode`` picks the failure."""

    def __init__(self, mode: str) -> None:
        self.mode, self.released = mode, False
        self.props: dict[int, float] = {}
        self._n = 0
        self._frame = np.full((48, 64, 3), 7, np.uint8)
        self.unblock = threading.Event()

    def isOpened(self) -> bool:
        return self.mode != "no-open"

    def set(self, prop: int, value: float) -> bool:
        self.props[prop] = value
        return True

    def get(self, prop: int) -> float:
        return {3: 64.0, 4: 48.0, 5: 30.0}.get(prop, 0.0)

    def read(self) -> tuple[bool, Any]:
        if self.mode == "none":
            time.sleep(0.01)
            return False, None
        if self.mode == "stale":
            time.sleep(0.01)
            return True, self._frame
        if self.mode == "block":
            self.unblock.wait(10)
            return False, None
        self._n += 1
        time.sleep(0.01)
        return True, np.full((48, 64, 3), self._n % 250, np.uint8)

    def release(self) -> None:
        self.released = True


def _run(mode: str, seconds: float) -> tuple[list[str], int, Capture, list[FakeCapture], float]:
    made: list[FakeCapture] = []

    def factory(dev: int | str) -> FakeCapture:
        made.append(FakeCapture(mode))
        return made[-1]

    statuses: list[str] = []
    frames: list[int] = []
    cap = Capture(CameraSource(0, capture_factory=factory), lambda f, t: frames.append(t),
                  statuses.append)
    cap.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        cap.watch()  # the live runner calls this from its inference thread
        time.sleep(0.05)
    t0 = time.monotonic()
    cap.stop(0.5)
    return statuses, len(frames), cap, made, time.monotonic() - t0


@pytest.mark.parametrize("mode", ["no-open", "none", "stale", "block"])
def test_dead_camera_is_reported_within_2_s_and_stop_works(mode: str) -> None:
    statuses, n, cap, made, stop_s = _run(mode, 2.6)
    lost = [s for s in statuses if s.startswith("camera lost")]
    assert lost, statuses
    assert stop_s < 0.6
    if mode == "block":
        assert cap.alive  # still inside read(): a daemon, not waited for
        made[0].unblock.set()
        cap._thread.join(2)  # type: ignore[union-attr]
        assert not cap.alive and made[0].released  # exits and closes once the read returns
    else:
        assert not cap.alive
    if mode == "stale":
        assert n <= len(made)  # per open, the repeated buffer is passed on once only
    if mode in ("none", "stale"):
        assert len(made) >= 2  # closed and reopened (back-off)
    if mode == "no-open":
        assert any("cannot be opened" in s for s in statuses) and n == 0


def test_working_camera_negotiates_and_delivers() -> None:
    statuses, n, _cap, made, _ = _run("ok", 0.5)
    assert n >= 10 and not [s for s in statuses if "lost" in s]
    assert statuses[0].startswith("opened: camera 0") and "64x48 @ 30 fps" in statuses[0]
    assert made[0].props[3] == 1280 and made[0].props[4] == 720  # requested size
    assert made[0].released


def test_video_file_is_paced_and_loops(tmp_path: Path) -> None:
    frames = [np.full((32, 48, 3), i * 20, np.uint8) for i in range(6)]
    clip = write_clip(frames, tmp_path / "c.mp4", audio=False)
    got: list[int] = []
    statuses: list[str] = []
    cap = Capture(VideoFileSource(clip, loop=True), lambda f, t: got.append(t), statuses.append)
    cap.start()
    time.sleep(0.55)
    cap.stop()
    # 30 fps for 0.55 s: ~17 frames, so the 6-frame clip looped
    assert 12 <= len(got) <= 19
    gaps = np.diff(got) / 1e6
    assert 25 < float(np.median(gaps)) < 42


def test_video_file_without_loop_ends(tmp_path: Path) -> None:
    clip = write_clip([np.zeros((32, 48, 3), np.uint8)] * 3, tmp_path / "c.mp4", audio=False)
    statuses: list[str] = []
    cap = Capture(VideoFileSource(clip), lambda f, t: None, statuses.append)
    cap.start()
    time.sleep(0.4)
    assert cap.ended and statuses[-1] == "source ended"
    cap.watch()
    assert not [s for s in statuses if "lost" in s]
    cap.stop()


def test_missing_video_file_reports_the_path(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"nope\.mp4"):
        VideoFileSource(tmp_path / "nope.mp4").open()


def test_test_pattern_moves() -> None:
    src = TestPatternSource(160, 120, 30)
    info = src.open()
    a, b = src.read(), src.read()
    assert info.width == 160 and a is not None and b is not None and a.shape == (120, 160, 3)
    assert not np.array_equal(a, b)
