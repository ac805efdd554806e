"""Sources and the capture thread, with fake cameras that fail in the ways real ones do."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from livefuse.errors import VideoError
from livefuse.io.sources import (
    CameraError,
    CameraSource,
    Capture,
    SourceFailedError,
    TestPatternSource,
    VideoFileSource,
)
from livefuse.io.synthetic import write_clip


class FakeClock:
    """A scripted ``time.perf_counter_ns``: moves only when a fake camera delivers a frame."""

    def __init__(self) -> None:
        self.ns = 1_000_000_000
        self._lock = threading.Lock()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.ns += round(seconds * 1e9)

    def now(self) -> int:
        with self._lock:
            return self.ns


class FakeCapture:
    """A cv2.VideoCapture look-alike; ``mode`` picks the failure."""

    def __init__(self, mode: str, clock: FakeClock | None = None) -> None:
        self.mode, self.released, self.clock = mode, False, clock
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
        if self.mode == "static":  # a still scene: the same picture, at the camera's rate
            assert self.clock is not None
            self.clock.advance(1 / 30)
            return True, self._frame
        if self.mode == "block":
            self.unblock.wait(10)
            return False, None
        self._n += 1
        time.sleep(0.01)
        return True, np.full((48, 64, 3), self._n % 250, np.uint8)

    def release(self) -> None:
        self.released = True


WAIT_S = 10.0  # generous: a loaded 2-core CI machine can stall a thread for seconds


def wait_for(cond: Callable[[], bool], what: str, tick: Callable[[], None] = lambda: None,
             timeout: float = WAIT_S) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        tick()
        time.sleep(0.01)


def _camera(mode: str, **kw: Any) -> tuple[Capture, list[str], list[int], list[FakeCapture]]:
    made: list[FakeCapture] = []

    def factory(dev: int | str) -> FakeCapture:
        made.append(FakeCapture(mode))
        return made[-1]

    statuses: list[str] = []
    frames: list[int] = []
    cap = Capture(CameraSource(0, capture_factory=factory), lambda f, t: frames.append(t),
                  statuses.append, **kw)
    return cap, statuses, frames, made


@pytest.mark.parametrize("mode", ["no-open", "none", "block"])
def test_dead_camera_is_reported_and_stop_works(mode: str) -> None:
    lost_after = 0.3
    cap, statuses, frames, made = _camera(mode, lost_after_s=lost_after, backoff_s=(0.05,))
    t0 = time.monotonic()
    cap.start()
    # the live runner calls watch() from its inference thread; it alone sees a blocked read
    # a camera that never opened was never "lost": its open failures are the report
    said = "source failed" if mode == "no-open" else "camera lost"
    wait_for(lambda: any(s.startswith(said) for s in statuses), repr(said), tick=cap.watch)
    if mode != "no-open":  # an open failure is reported at once; silence only after lost_after
        assert time.monotonic() - t0 >= lost_after
    if mode == "none":
        wait_for(lambda: len(made) >= 2, "a reopen after the back-off")
    t_stop = time.monotonic()
    stopped = cap.stop(0.5)
    assert time.monotonic() - t_stop < 5.0  # bounded by its timeout, not by the driver
    if mode == "block":
        assert not stopped and cap.alive  # still inside read(): a daemon, not waited for
        made[0].unblock.set()
        cap._thread.join(WAIT_S)  # type: ignore[union-attr]
        assert not cap.alive and made[0].released  # exits and closes once the read returns
    else:
        cap._thread.join(WAIT_S)  # type: ignore[union-attr]
        assert not cap.alive
    if mode == "no-open":
        assert any("camera 0: cannot be opened" in s for s in statuses) and not frames
        assert not any(s.startswith("camera lost") for s in statuses), statuses
    assert not cap.failed  # retrying forever by default (the GUI)


@pytest.mark.parametrize("picture", ["black shutter", "still scene"])
def test_a_static_input_runs_30_s_without_a_reopen(picture: str) -> None:
    """An OBS static scene, a closed shutter's black frame or an HDMI capture of a still
    desktop repeats one picture: 30 s of it (on a scripted clock that a frame advances by 1/30 s)
    through the real capture loop and its watchdog is never a lost camera."""
    clock = FakeClock()
    made: list[FakeCapture] = []

    def factory(dev: int | str) -> FakeCapture:
        made.append(FakeCapture("static", clock))
        if picture == "black shutter":
            made[-1]._frame = np.zeros((48, 64, 3), np.uint8)
        return made[-1]

    statuses: list[str] = []
    frames: list[int] = []
    cap = Capture(CameraSource(0, capture_factory=factory), lambda f, t: frames.append(t),
                  statuses.append, clock=clock.now, backoff_s=(0.0,))
    cap.start()
    wait_for(lambda: clock.now() >= 31_000_000_000, "30 s of frames", tick=cap.watch)
    assert cap.stop(WAIT_S)
    assert len(made) == 1, statuses  # opened once, never reopened
    assert not [s for s in statuses if "lost" in s], statuses
    assert len(frames) >= 900 and frames == sorted(frames)  # stamped by the clock


def test_working_camera_negotiates_and_delivers() -> None:
    cap, statuses, frames, made = _camera("ok")
    cap.start()
    wait_for(lambda: len(frames) >= 10, "10 frames")
    assert cap.stop(WAIT_S)
    assert not [s for s in statuses if "lost" in s]
    assert statuses[0].startswith("opened: camera 0") and "64x48 @ 30 fps" in statuses[0]
    assert made[0].props[3] == 1280 and made[0].props[4] == 720  # requested size
    assert made[0].released


# --- bounded open retries (`livefuse live` gives up; the GUI keeps retrying) -------------------


def test_camera_that_never_opens_gives_up_after_max_attempts() -> None:
    waits: list[float] = []
    cap, statuses, frames, made = _camera("no-open", max_open_attempts=3,
                                          backoff_s=(0.01, 0.02))
    cap._sleep = lambda s: bool(waits.append(s))  # type: ignore[method-assign]
    cap.start()
    cap._thread.join(WAIT_S)  # type: ignore[union-attr]
    assert not cap.alive and cap.failed and not frames
    assert len(made) == 3 and all(m.released for m in made)
    assert waits == [0.01, 0.02]  # back-off between attempts, none after the last
    assert cap.error is not None and cap.error.attempts == 3
    line = str(cap.error)
    assert line == ("camera 0: cannot be opened (missing, busy, or no permission?) "
                    "(gave up after 3 attempts)")
    assert statuses[-1] == f"giving up: {line}"
    assert [s for s in statuses if s.startswith("giving up")] == [statuses[-1]]  # once
    cap.watch()
    assert statuses[-1] == f"giving up: {line}"  # no "camera lost" after giving up


def test_camera_that_opens_but_sends_nothing_gives_up_too() -> None:
    cap, _, frames, made = _camera("none", max_open_attempts=2, lost_after_s=0.05,
                                   backoff_s=(0.0,))
    cap.start()
    cap._thread.join(WAIT_S)  # type: ignore[union-attr]
    assert cap.failed and len(made) == 2 and not frames
    line = str(cap.error)
    assert line.startswith("camera 0 ") and "opened, but no frame (camera lost)" in line
    assert line.endswith("(gave up after 2 attempts)")


def test_a_fresh_frame_resets_the_attempts() -> None:
    """Opens fail twice, the third delivers: with 3 attempts allowed it must not give up."""
    outcomes = iter(["no-open", "no-open", "ok"])
    made: list[FakeCapture] = []

    def factory(dev: int | str) -> FakeCapture:
        made.append(FakeCapture(next(outcomes, "ok")))
        return made[-1]

    frames: list[int] = []
    cap = Capture(CameraSource(0, capture_factory=factory), lambda f, t: frames.append(t),
                  max_open_attempts=3, backoff_s=(0.0,))
    cap.start()
    wait_for(lambda: len(frames) >= 3, "frames from the third open")
    assert cap.stop(WAIT_S) and not cap.failed and cap._attempts == 0


def test_bad_max_open_attempts() -> None:
    with pytest.raises(ValueError, match="max_open_attempts"):
        Capture(TestPatternSource(), lambda f, t: None, max_open_attempts=0)


def test_source_failed_error_pickles_and_is_one_line() -> None:
    import pickle

    err = SourceFailedError(1, "camera 2: cannot be opened")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == "camera 2: cannot be opened (gave up after 1 attempt)"
    assert back.attempts == 1 and "\n" not in str(back)


def test_video_file_is_paced_and_loops(tmp_path: Path) -> None:
    frames = [np.full((32, 48, 3), i * 40, np.uint8) for i in range(6)]
    clip = write_clip(frames, tmp_path / "c.mp4", audio=False)
    got: list[tuple[int, int]] = []
    cap = Capture(VideoFileSource(clip, loop=True),
                  lambda f, t: got.append((round(float(f.mean()) / 40), t)))
    cap.start()
    wait_for(lambda: len(got) >= 40, "40 frames (six loops of the clip)")
    cap.stop(WAIT_S)
    values = [v for v, _ in got[:40]]
    assert values == ([0, 1, 2, 3, 4, 5] * 7)[:40]  # looped, in order
    # Paced at the clip's 30 fps, not decoded as fast as it can be (~1 ms a frame here). Frame
    # k is never sent before its slot (start + k/30 s); a stalled frame is followed by a short
    # catch-up burst, so single gaps prove nothing: bound the whole span from below, with room
    # for a first frame that is late by up to 19 frame periods.
    span_s = (got[39][1] - got[0][1]) / 1e9
    assert span_s > 20 / 30


def test_video_file_without_loop_ends(tmp_path: Path) -> None:
    clip = write_clip([np.zeros((32, 48, 3), np.uint8)] * 3, tmp_path / "c.mp4", audio=False)
    statuses: list[str] = []
    cap = Capture(VideoFileSource(clip), lambda f, t: None, statuses.append)
    cap.start()
    wait_for(lambda: cap.ended, "the end of the clip")
    assert statuses[-1] == "source ended"
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


def test_a_missing_device_node_is_named(capfd: pytest.CaptureFixture[str]) -> None:
    """With no camera, OpenCV only says it cannot open; on Linux the missing node is the
    reason, and the line says so (a real VideoCapture on a node that cannot exist). It is said
    before OpenCV tries: given a path, its FFmpeg backend printed five lines of its own."""
    if not sys.platform.startswith("linux"):
        pytest.skip("device nodes are Linux's")
    with pytest.raises(CameraError, match=r"camera /dev/video987: /dev/video987 does not exist"):
        CameraSource("/dev/video987").open()
    with pytest.raises(CameraError, match=r"camera 987: /dev/video987 does not exist"):
        CameraSource(987).open()
    out, err = capfd.readouterr()
    assert "video4linux2" not in out + err and "VIDEOIO" not in out + err


def test_a_still_photo_as_the_video_input_is_upright(tmp_path: Path) -> None:
    """A new user's trial: `live --video photo.jpg` with EXIF orientation 6 streamed the photo
    sideways (FFmpeg's image decoders ignore EXIF), so no face was swapped; `run` read it
    upright. The live input reads stills as `run` does."""
    from PIL import Image

    from livefuse.config import CaptureConfig
    from livefuse.io.sources import ImageSource
    from livefuse.session import build_source

    stored = np.zeros((20, 40, 3), np.uint8)
    stored[:, :5] = 255  # a white band at the stored left edge
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned 90 degrees clockwise: the band on top
    path = tmp_path / "photo.jpg"
    Image.fromarray(stored).save(path, exif=exif.tobytes(), quality=95)
    source = build_source(CaptureConfig(kind="video", video=str(path)))
    assert isinstance(source, ImageSource)
    info = source.open()
    frame = source.read()
    assert frame is not None and (info.width, info.height) == (20, 40)
    assert frame[:5].mean() > 200 and frame[-5:].mean() < 50
    video = build_source(CaptureConfig(kind="video", video=str(tmp_path / "clip.mp4")))
    assert isinstance(video, VideoFileSource)
