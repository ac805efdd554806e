"""Sinks: letterbox, recorder, preview, and the virtual camera through recording backends.

Waits are event-driven with generous timeouts (the suite runs on loaded 2-core machines): a test
waits for what it needs to have happened, never for a fixed time, and asserts no rate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import av
import numpy as np
import pytest
import pyvirtualcam
from pyvirtualcam.util import encode_fourcc

from livefuse.errors import VideoError
from livefuse.io.sinks import PreviewSink, RecorderSink, VirtualCameraSink, letterbox
from livefuse.io.video import probe, read_frames

WAIT_S = 10.0  # generous: a loaded 2-core CI machine can stall a thread for seconds


def wait_for(cond: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.002)


class Recording:
    """A pyvirtualcam backend that keeps a copy of every frame it is sent.

    Class attributes (reset by the ``rec`` fixture) steer it: ``refuse`` lists fourccs it
    rejects, ``absent`` makes every open fail like a missing device, ``hold`` blocks the first
    ``send`` until released (a busy device).
    """

    opened: ClassVar[int] = 0
    fourcc: ClassVar[int | None] = None
    sent: ClassVar[list[tuple[np.ndarray, int, int]]] = []  # (frame copy, data pointer, t_ns)
    refuse: ClassVar[set[int]] = set()
    absent: ClassVar[bool] = False
    hold: ClassVar[threading.Event | None] = None
    entered: ClassVar[threading.Event] = threading.Event()

    def __init__(self, *, width: int, height: int, fps: float, fourcc: int,
                 device: str | None, **kw: Any) -> None:
        if Recording.absent:
            raise RuntimeError("No v4l2 loopback device found at /dev/video[0-99].")
        if fourcc in Recording.refuse:
            raise RuntimeError("Unsupported image format.")
        Recording.opened += 1
        Recording.fourcc = fourcc
        self.shape = (height, width, 3)

    def close(self) -> None:
        pass

    def send(self, frame: np.ndarray) -> None:
        Recording.entered.set()
        if Recording.hold is not None and not Recording.hold.is_set():
            Recording.hold.wait(WAIT_S)
        pointer = frame.__array_interface__["data"][0]
        Recording.sent.append((frame.reshape(self.shape).copy(), pointer,
                               time.perf_counter_ns()))

    def device(self) -> str:
        return "recording"

    def native_fourcc(self) -> int | None:
        return None


# pyvirtualcam's registry is global to the process: a name of its own, so another test
# module's backend (test_live registers "recording") cannot replace this one
BACKEND = "test-sinks-recording"
pyvirtualcam.register_backend(BACKEND, Recording)
BGR = encode_fourcc(pyvirtualcam.PixelFormat.BGR.value)
RGB = encode_fourcc(pyvirtualcam.PixelFormat.RGB.value)


@pytest.fixture
def rec() -> Iterator[type[Recording]]:
    Recording.opened, Recording.fourcc, Recording.sent = 0, None, []
    Recording.refuse, Recording.absent, Recording.hold = set(), False, None
    Recording.entered = threading.Event()
    yield Recording
    if Recording.hold is not None:
        Recording.hold.set()


def _pattern(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_letterbox_keeps_aspect() -> None:
    f = np.full((100, 200, 3), 200, np.uint8)
    out = letterbox(f, 100, 100)
    assert out.shape == (100, 100, 3)
    assert out[:24].max() == 0 and out[76:].max() == 0 and out[26:74].min() == 200


# --- virtual camera ---------------------------------------------------------------------------


def test_vcam_sends_bgr_as_is_and_resends_its_own_copy(rec: type[Recording]) -> None:
    sent_at: list[tuple[int, int]] = []
    frame = _pattern(24, 32)
    original = frame.copy()
    with VirtualCameraSink(32, 24, 100, backend=BACKEND,
                           on_sent=lambda c, s: sent_at.append((c, s))) as cam:
        wait_for(lambda: cam.is_open, "the device to open")
        cam.send(frame, time.perf_counter_ns())
        wait_for(lambda: len(rec.sent) >= 1, "the first send")
        frame[:] = 0  # the caller reuses its array once the frame was taken
        wait_for(lambda: len(rec.sent) >= 4, "three re-sends")
    assert rec.fourcc == BGR and not cam.rgb_fallback
    for got, _, _ in rec.sent:
        np.testing.assert_array_equal(got, original)  # no channel swap, no caller's zeros
    pointers = {p for _, p, _ in rec.sent}
    assert len(pointers) == 1  # every re-send is the one converted buffer
    assert pointers != {frame.__array_interface__["data"][0]}  # never the caller's array
    assert len(sent_at) == 1 and cam.frames_new == 1 and cam.frames_sent >= 4


def test_vcam_letterboxes_only_another_size(rec: type[Recording]) -> None:
    tall = _pattern(48, 32, seed=1)
    with VirtualCameraSink(32, 24, 100, backend=BACKEND) as cam:
        wait_for(lambda: cam.is_open, "the device to open")
        cam.send(tall, 0)
        wait_for(lambda: len(rec.sent) >= 1, "a send")
    np.testing.assert_array_equal(rec.sent[0][0], letterbox(tall, 32, 24))


def test_vcam_backend_without_bgr_gets_rgb(rec: type[Recording]) -> None:
    rec.refuse = {BGR}
    statuses: list[str] = []
    frame = _pattern(24, 32, seed=2)
    with VirtualCameraSink(32, 24, 100, backend=BACKEND, on_status=statuses.append) as cam:
        wait_for(lambda: cam.is_open, "the device to open")
        cam.send(frame, 0)
        wait_for(lambda: len(rec.sent) >= 2, "a send and a re-send")
    assert rec.fourcc == RGB and cam.rgb_fallback
    assert any("refuses BGR" in s for s in statuses)
    for got, _, _ in rec.sent:
        np.testing.assert_array_equal(got, frame[..., ::-1])


def test_vcam_on_sent_once_per_new_frame_after_the_real_send(rec: type[Recording]) -> None:
    calls: list[tuple[int, int]] = []
    t_caps = []
    with VirtualCameraSink(32, 24, 100, backend=BACKEND,
                           on_sent=lambda c, s: calls.append((c, s))) as cam:
        wait_for(lambda: cam.is_open, "the device to open")
        for i in range(3):
            t_caps.append(time.perf_counter_ns())
            cam.send(np.full((24, 32, 3), 10 * i, np.uint8), t_caps[-1])
            wait_for(lambda i=i: len(calls) == i + 1, f"on_sent for frame {i}")  # type: ignore[misc]
        wait_for(lambda: cam.frames_sent >= 5, "re-sends")
    assert [c for c, _ in calls] == t_caps
    firsts = {}
    for got, _, t_ns in rec.sent:
        firsts.setdefault(int(got[0, 0, 0]), t_ns)  # each new frame's first (real) send
    assert sorted(firsts) == [0, 10, 20]
    for (t_cap, t_sent), value in zip(calls, (0, 10, 20), strict=True):
        assert t_cap <= firsts[value] <= t_sent  # taken after the backend really had it
    assert len(calls) == 3 and cam.frames_new == 3  # re-sends call nothing


def test_vcam_missing_device_counts_unsent_not_dropped(rec: type[Recording]) -> None:
    rec.absent = True
    statuses: list[str] = []
    with VirtualCameraSink(32, 24, 30, backend=BACKEND, on_status=statuses.append,
                           retry_s=0.05) as cam:
        wait_for(lambda: any("virtual camera missing" in s for s in statuses), "the status")
        for _ in range(40):
            cam.send(np.zeros((24, 32, 3), np.uint8), 0)
        time.sleep(0.3)  # about six retries
    assert cam.unsent == 40 and cam.dropped == 0 and cam.frames_sent == 0
    assert "modprobe v4l2loopback" in statuses[0] or "v4l2 loopback" in statuses[0]
    # retried every 0.05 s meanwhile: the same failure is said once (a new user's trial read
    # it again every retry)
    assert len(statuses) == 1, statuses


def test_vcam_counts_a_drop_only_for_a_frame_replaced_unsent(rec: type[Recording]) -> None:
    rec.hold = threading.Event()
    with VirtualCameraSink(32, 24, 100, backend=BACKEND) as cam:
        wait_for(lambda: cam.is_open, "the device to open")
        cam.send(np.full((24, 32, 3), 1, np.uint8), 0)
        wait_for(rec.entered.is_set, "the device to take frame 1")  # now busy sending it
        for value in (2, 3, 4):
            cam.send(np.full((24, 32, 3), value, np.uint8), 0)
        assert cam.dropped == 2 and cam.unsent == 0  # 2 and 3 were replaced before a send
        rec.hold.set()
        wait_for(lambda: cam.frames_new == 2, "frame 4")
    assert [int(f[0, 0, 0]) for f, _, _ in rec.sent][:2] == [1, 4]


def test_vcam_resends_and_toggles(rec: type[Recording]) -> None:
    with VirtualCameraSink(32, 24, 100, backend=BACKEND) as cam:
        wait_for(lambda: cam.is_open, "the device to open")
        cam.send(np.zeros((24, 32, 3), np.uint8), time.perf_counter_ns())
        wait_for(lambda: len(rec.sent) >= 5, "one frame re-sent")
        cam.set_enabled(False)
        wait_for(lambda: not cam.is_open, "the device to close")
        sent = len(rec.sent)
        cam.send(np.zeros((24, 32, 3), np.uint8), 0)  # off: ignored, not even "unsent"
        assert cam.unsent == 0 and len(rec.sent) == sent  # off: nothing sent
        cam.set_enabled(True)
        wait_for(lambda: cam.is_open, "the device to reopen")
        cam.send(np.zeros((24, 32, 3), np.uint8), time.perf_counter_ns())
        wait_for(lambda: len(rec.sent) > sent, "a send after reopening")
    assert rec.opened == 2


# --- preview ----------------------------------------------------------------------------------


def test_preview_keeps_only_the_latest() -> None:
    got: list[int] = []
    busy, release = threading.Event(), threading.Event()

    def slow(frame: np.ndarray, t: int) -> None:
        busy.set()
        release.wait(WAIT_S)  # the GUI is busy with frame 0 while 1..19 arrive
        got.append(int(frame[0, 0, 0]))

    with PreviewSink(slow) as p:
        p.send(np.full((4, 4, 3), 0, np.uint8), 0)
        wait_for(busy.is_set, "the callback to start")
        for i in range(1, 20):
            p.send(np.full((4, 4, 3), i, np.uint8), 0)
        release.set()
        wait_for(lambda: got[-1:] == [19], "the latest frame")
    assert got == [0, 19] and p.dropped == 18 and p.delivered == 2


# --- recorder ---------------------------------------------------------------------------------


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


def test_recorder_letterboxes_a_size_change_and_says_so_once(tmp_path: Path) -> None:
    path = tmp_path / "rec.mkv"
    statuses: list[str] = []
    with RecorderSink(path, on_status=statuses.append) as rec:
        for i in range(3):
            rec.send(np.full((48, 64, 3), 90, np.uint8), i * 33_000_000)  # 4:3
        for i in range(3, 6):
            rec.send(np.full((54, 96, 3), 250, np.uint8), i * 33_000_000)  # 16:9
    assert len(statuses) == 1 and "64x48 to 96x54" in statuses[0]
    assert rec.notes == statuses and rec.resized == 3
    last = read_frames(path)[-1]
    assert last.shape == (48, 64, 3)
    # 96x54 scaled to 64x36: black bars of 6 rows above and below, not stretched to 48 rows
    assert last[:4].max() < 30 and last[-4:].max() < 30 and last[10:38].min() > 200


def test_recorder_pads_an_odd_size_without_calling_it_a_change(tmp_path: Path) -> None:
    statuses: list[str] = []
    with RecorderSink(tmp_path / "odd.mp4", on_status=statuses.append) as rec:
        for i in range(3):
            rec.send(np.full((47, 63, 3), 128, np.uint8), i * 33_000_000)
    assert statuses == [] and rec.resized == 0
    assert (probe(tmp_path / "odd.mp4").width, probe(tmp_path / "odd.mp4").height) == (64, 48)


@pytest.mark.parametrize("suffix", [".mp4", ".mkv", ".mov"])
def test_recorder_reports_the_rate_it_holds(tmp_path: Path, suffix: str) -> None:
    """Asked for 30 fps, fed 24 fps (the engine's pace): every container says ~24."""
    path = tmp_path / f"rec{suffix}"
    n = 48
    with RecorderSink(path, fps=30) as rec:
        for i in range(n):
            rec.send(np.full((48, 64, 3), (i * 5) % 250, np.uint8), 5 + i * 1_000_000_000 // 24)
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        reported = float(stream.average_rate or 0)
        times = [float(f.pts * f.time_base) for f in c.decode(video=0)]
    held = (len(times) - 1) / (times[-1] - times[0])
    assert len(times) == n
    assert abs(held - 24) < 0.1
    assert reported == pytest.approx(held, rel=0.02)
