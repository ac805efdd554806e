"""The privacy guard: no frame reaches a sink with a face unaltered while it is on (design.md §9).

The end-to-end test runs a live session (LiveRunner, the classic engine, a sink) over a scripted
clip from a real photo with detection dropouts, a face that turns away and a second face that
enters unswapped; every frame that reaches the sink is compared with its input on each face's
core (livefuse.testing.guard_clip.unaltered_faces). Without the guard the same clip shows the
real faces on dozens of frames, so the test fails when the guard is taken out.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lockstep import LockstepSource
from test_live import _Passthrough

from livefuse.config import AppConfig, EngineConfig, GuardConfig
from livefuse.engine import Engine
from livefuse.errors import ConfigError
from livefuse.guard import PrivacyGuard, grown, lost_region, pixelate
from livefuse.imaging import LoadedImage, load_image
from livefuse.io.sinks import CallbackSink
from livefuse.io.sources import TestPatternSource
from livefuse.live import LiveRunner
from livefuse.metrics import Metrics
from livefuse.samples import astronaut, insightface_image
from livefuse.testing.guard_clip import (
    DROPOUTS,
    DropoutAnalyser,
    GuardClip,
    guard_clip,
    same_fraction,
    unaltered_faces,
)
from livefuse.types import Face, Frame, FramePacket, StagedFrame


def _face(x: float, y: float, w: float = 100.0, track_id: int = 1) -> Face:
    return Face(bbox=np.array([x, y, x + w, y + w], np.float32),
                kps=np.zeros((5, 2), np.float32), track_id=track_id)


def _frame(value: int = 0) -> Frame:
    rng = np.random.default_rng(value)
    return rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)


# -- the pieces ----------------------------------------------------------------------------------
def test_pixelate_replaces_the_region_by_blocks_and_nothing_else() -> None:
    f = _frame()
    before = f.copy()
    assert pixelate(f, np.array([40, 30, 120, 110], np.float32), 10.0)
    region = f[30:110, 40:120]
    assert len(np.unique(region.reshape(-1, 3), axis=0)) <= 64  # 8 x 8 blocks
    assert same_fraction(f, before, np.array([[40, 30], [119, 30], [119, 109], [40, 109]],
                                             np.float32)) < 0.1
    outside = np.ones(f.shape[:2], bool)
    outside[30:110, 40:120] = False
    assert np.array_equal(f[outside], before[outside])
    assert not pixelate(f, np.array([400, 300, 500, 400], np.float32), 10.0)  # off the frame


def test_a_lost_face_region_follows_its_motion_and_grows_to_a_cap() -> None:
    box = np.array([100, 100, 200, 200], np.float32)
    still = lost_region(box, np.zeros(2, np.float32), 1)
    assert np.allclose(still, grown(box, 0.04 * 100))
    moving = lost_region(box, np.array([10.0, 0.0], np.float32), 5)
    assert moving[0] > still[0] - 60 and (moving[0] + moving[2]) / 2 == pytest.approx(200.0)
    assert moving[2] - moving[0] > still[2] - still[0] + 2 * 50  # grown by the distance
    far = lost_region(box, np.array([10.0, 0.0], np.float32), 10_000)
    assert far[2] - far[0] == pytest.approx(300.0, rel=1e-3)  # MAX_GROWTH face sizes


def test_blur_hides_a_lost_face_until_it_is_swapped_again_nearby() -> None:
    guard = PrivacyGuard(GuardConfig(mode="blur"))
    for i in range(5):  # swapped and moving right
        f = _frame(i)
        assert guard.apply(f, [_face(50 + 5 * i, 60)], []) is f
        assert guard.state.action == "none"
    f, before = _frame(9), _frame(9)
    out = guard.apply(f, [], [])  # lost
    assert out is f and guard.state.action == "blur" and guard.state.lost == 1
    face_core = np.array([[80, 70], [150, 70], [150, 150], [80, 150]], np.float32)
    assert same_fraction(out, before, face_core) < 0.2
    guard.apply(_frame(10), [], [])
    assert guard.state.lost == 1  # still hidden: the guard cannot see whether it is there
    f, before = _frame(11), _frame(11)
    guard.apply(f, [_face(82, 62, track_id=7)], [])  # found again (a new track id) nearby
    assert guard.state.action == "none" and np.array_equal(f, before)


def test_blur_hides_every_unswapped_face_and_a_far_new_face_does_not_end_a_loss() -> None:
    guard = PrivacyGuard(GuardConfig(mode="blur"))
    guard.apply(_frame(), [_face(20, 20)], [])
    guard.apply(_frame(), [], [])  # lost at the left
    guard.apply(_frame(), [_face(210, 120, w=80, track_id=5)], [_face(120, 10, w=60)])
    assert guard.state.regions == 2 and guard.state.lost == 1


def test_an_unswapped_face_the_detector_loses_stays_hidden() -> None:
    """A face found and left unswapped (a face at the frame's edge) was blurred while found;
    the frame after the detector lost it showed it unaltered (a new user's trial, demo clip)."""
    guard = PrivacyGuard(GuardConfig(mode="blur"))
    for i in range(4):  # the swapped face at the left; another found, not swapped, at the right
        guard.apply(_frame(i), [_face(20, 60)], [_face(200 + 2 * i, 40, w=90)])
        assert guard.state.action == "blur" and guard.state.lost == 0
    f, before = _frame(5), _frame(5)
    guard.apply(f, [_face(20, 60)], [])  # no longer found
    assert guard.state.action == "blur" and guard.state.lost == 1
    core = np.array([[215, 55], [285, 55], [285, 125], [215, 125]], np.float32)
    assert same_fraction(f, before, core) < 0.2
    guard.apply(_frame(6), [_face(20, 60)], [_face(210, 42, w=90)])  # found again: one face
    assert guard.state.regions == 1 and guard.state.lost == 0
    guard.apply(_frame(7), [_face(20, 60)], [])
    f, before = _frame(8), _frame(8)
    guard.apply(f, [_face(20, 60), _face(212, 44, w=90, track_id=9)], [])  # now swapped there
    assert guard.state.action == "none" and np.array_equal(f, before)


def test_hold_repeats_the_last_fully_swapped_frame_then_blurs() -> None:
    guard = PrivacyGuard(GuardConfig(mode="hold", hold_frames=3))
    good = _frame(1)
    guard.apply(good, [_face(50, 50)], [])
    kept = good.copy()
    outs = [guard.apply(_frame(2 + i), [], []) for i in range(5)]
    assert all(o is good for o in outs[:3]) and np.array_equal(good, kept)
    assert guard.state.action == "blur" and guard.state.frames_held == 3
    assert outs[3] is not good and guard.state.frames_blurred == 2
    guard.apply(_frame(8), [_face(52, 50, track_id=3)], [])  # swapped again: armed again
    assert guard.state.action == "none"
    assert np.array_equal(guard.apply(_frame(9), [_face(52, 50, track_id=3)],
                                      [_face(200, 100, w=50)]), _frame(8))


def test_off_passes_frames_through_and_turning_it_off_forgets() -> None:
    guard = PrivacyGuard()
    f = _frame()
    assert guard.apply(f, [], [_face(10, 10)]) is f and np.array_equal(f, _frame())
    guard.configure(GuardConfig(mode="blur"))
    guard.apply(_frame(), [_face(10, 10)], [])
    guard.configure(GuardConfig(mode="off"))
    guard.configure(GuardConfig(mode="blur"))
    f = _frame()
    guard.apply(f, [], [])
    assert guard.state.action == "none" and np.array_equal(f, _frame())
    with pytest.raises(ConfigError, match="privacy guard"):
        guard.configure(GuardConfig(mode="smudge"))  # type: ignore[arg-type]


def test_the_guard_turns_detection_on_every_frame() -> None:
    cfg = AppConfig(engine=EngineConfig(detect_every=3))
    assert cfg.effective_engine().detect_every == 3
    on = AppConfig(engine=EngineConfig(detect_every=3), guard=GuardConfig(mode="hold"))
    assert on.effective_engine().detect_every == 1


# -- the runner ----------------------------------------------------------------------------------
class _FaceStub(_Passthrough):
    """test_live's pass-through engine, finding one face at a fixed place and 'swapping' it by
    painting it white."""

    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False, ahead: StagedFrame | None = None) -> FramePacket:
        packet = super().process(frame, index, t_capture_ns, strict, in_place, ahead)
        out = packet.frame if in_place else packet.frame.copy()
        out[40:100, 60:120] = 255
        packet.output, packet.faces, packet.swapped = out, [_face(60, 40, w=60)], 1
        return packet


def _first_frames(runner: LiveRunner, got: list[Frame], n: int) -> None:
    runner.start()
    end = time.monotonic() + 10
    while len(got) < n and time.monotonic() < end:
        time.sleep(0.01)
    assert runner.stop(1.0) and len(got) >= n


def _blurring_runner(got: list[Frame], metrics: Metrics) -> LiveRunner:
    """A live runner with the blur guard, its frames appended to ``got``."""
    return LiveRunner(_FaceStub(), TestPatternSource(160, 120, 100),  # type: ignore[arg-type]
                      [CallbackSink(lambda f, t: got.append(f.copy()))],
                      AppConfig(guard=GuardConfig(mode="blur")), metrics=metrics)


def test_swap_off_with_the_guard_on_hides_the_faces_the_engine_finds() -> None:
    got: list[Frame] = []
    metrics = Metrics()
    runner = _blurring_runner(got, metrics)
    runner.swap = False
    _first_frames(runner, got, 3)
    face = got[-1][40:100, 60:120]
    assert face.min() < 255  # not the engine's output: the input, pixelated
    assert len(np.unique(face.reshape(-1, 3), axis=0)) < 40
    snap = metrics.snapshot(memory=False)
    assert snap.guard.mode == "blur" and snap.guard.action == "blur"
    assert snap.guard.frames_blurred >= 3 and "guard" in snap.stage_ms
    assert "guard blur: hiding 1 face" in snap.line()


def test_a_face_swapped_then_unswapped_is_one_face_not_a_lost_one_too() -> None:
    """Turning the swap off left the guard following the swapped face as lost while the same
    face, found unswapped, was hidden too: "hiding 2 faces (1 lost)" for one person."""
    guard = PrivacyGuard(GuardConfig(mode="blur"))
    for i in range(3):
        guard.apply(_frame(i), [_face(50 + 2 * i, 60)], [])
    guard.swap_off()
    guard.apply(_frame(3), [], [_face(56, 60)])
    assert guard.state.regions == 1 and guard.state.lost == 0, guard.state
    f, before = _frame(4), _frame(4)
    guard.apply(f, [], [])  # and it stays hidden when the detector misses it
    assert guard.state.lost == 1
    core = np.array([[80, 70], [150, 70], [150, 150], [80, 150]], np.float32)
    assert same_fraction(f, before, core) < 0.2

    # missed by the detector in the very frame the swap went off: hidden as a lost face
    guard = PrivacyGuard(GuardConfig(mode="blur"))
    guard.apply(_frame(0), [_face(50, 60)], [])
    guard.swap_off()
    f, before = _frame(1), _frame(1)
    guard.apply(f, [], [])
    assert guard.state.lost == 1 and same_fraction(f, before, core) < 0.2


def test_the_live_runner_tells_the_guard_when_the_swap_goes_off() -> None:
    got: list[Frame] = []
    runner = _blurring_runner(got, Metrics())
    told: list[bool] = []
    runner.guard.swap_off = lambda: told.append(True)  # type: ignore[method-assign]
    runner.swap = False
    _first_frames(runner, got, 3)
    assert told == [True]


def test_swap_off_without_the_guard_passes_the_input() -> None:
    got: list[Frame] = []
    runner = LiveRunner(_FaceStub(), TestPatternSource(160, 120, 100),  # type: ignore[arg-type]
                        [CallbackSink(lambda f, t: got.append(f.copy()))])
    runner.swap = False
    _first_frames(runner, got, 3)
    assert got[-1][40:100, 60:120].min() < 255  # the stub never ran: no white square


# -- the scripted clip, end to end ---------------------------------------------------------------
@pytest.fixture(scope="module")
def clip() -> GuardClip:
    return guard_clip(load_image(insightface_image("t1.jpg")).bgr)


@pytest.fixture
def analyser() -> Any:
    """A fresh classic analyser for each clip run, in place of the session's shared one. Its
    wide scan runs every :data:`~livefuse.faces.dlib_analyser.WIDE_EVERY` detections; before
    ``Analyser.reset`` the count ran over every detection earlier tests made, and a full CI run
    found one turned frame more than a run of this file. A stream now starts the count afresh;
    a fresh analyser keeps the clip runs independent of anything else the shared one holds."""
    pytest.importorskip("dlib")
    from livefuse.faces.dlib_analyser import DlibFaceAnalyser

    return DlibFaceAnalyser()


def run_clip(clip: GuardClip, analyser: Any, mode: str) -> tuple[dict[int, list[str]], Metrics]:
    """Run the clip through a live session with the guard in ``mode``; per frame that reached
    the sink, the faces it shows unaltered."""
    source = LockstepSource(clip.frames)
    shown: dict[int, list[str]] = {}

    def sink(frame: Frame, t_ns: int) -> None:
        i = source.current
        shown[i] = unaltered_faces(frame, clip.frames[i], clip.faces[i])
        source.turn.release()

    cfg = AppConfig(engine=EngineConfig(face_selector="one", detect_every=3, rotation="off"),
                    guard=GuardConfig(mode=mode))  # type: ignore[arg-type]
    metrics = Metrics()
    face = LoadedImage(bgr=astronaut(), alpha=None, path=Path("astronaut.png"))
    runner = LiveRunner(None, source, [CallbackSink(sink)], cfg, source_face=face,
                        metrics=metrics, factory=lambda c: Engine(
                            c.engine, analyser=DropoutAnalyser(analyser), cache=c.cache))
    runner.start()
    end = time.monotonic() + 240
    while not runner.source_ended and time.monotonic() < end:
        time.sleep(0.05)
    assert runner.stop(2.0) and runner.errors == 0
    return shown, metrics


@pytest.mark.slow
def test_without_the_guard_the_clip_shows_the_real_faces(clip: GuardClip,
                                                          analyser: Any) -> None:
    """The measure sees the failure the guard exists for: the dropouts, the turned face and
    the second person are shown as they are."""
    shown, _ = run_clip(clip, analyser, "off")
    leaks = {i: faces for i, faces in shown.items() if faces}
    assert all(leaks.get(i) == ["A"] for i in DROPOUTS)
    # The turn: 36..59, turned fully over 48..55. Where the detector stops finding a face rolled
    # that far is a matter of a frame or two between CPUs and library builds (14 and 13 frames
    # in all were both seen on CI), so the bound asks for most of the fully turned frames only.
    turned = [i for i in range(36, 60) if "A" in leaks.get(i, [])]
    assert len(turned) >= 5 and set(turned) <= set(range(44, 60)), turned
    assert sum("B" in f for f in leaks.values()) >= 20
    # and it does not call a swapped face unaltered
    assert all("A" not in shown[i] for i in range(0, 20))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blur", "hold"])
def test_with_the_guard_no_frame_shows_a_face_unaltered(clip: GuardClip, analyser: Any,
                                                        mode: str) -> None:
    shown, metrics = run_clip(clip, analyser, mode)
    assert len(shown) == len(clip.frames)  # the stream ran through: every frame was sent
    leaks = {i: faces for i, faces in shown.items() if faces}
    assert leaks == {}
    snap = metrics.snapshot(memory=False)
    assert snap.guard.mode == mode
    altered = snap.guard.frames_blurred + snap.guard.frames_held
    assert altered >= len(DROPOUTS) + 5 + 20  # the dropouts, the turn (see above) and B
    if mode == "hold":
        assert snap.guard.frames_held >= 15


def test_an_fp16_fallback_is_counted_once_per_engine() -> None:
    class Falling(_FaceStub):
        def process(self, *a: Any, **k: Any) -> FramePacket:
            self.precision_in_use = "fp32 (fallback)"
            return super().process(*a, **k)

    got: list[Frame] = []
    metrics = Metrics()
    runner = LiveRunner(Falling(), TestPatternSource(160, 120, 100),  # type: ignore[arg-type]
                        [CallbackSink(lambda f, t: got.append(f))], metrics=metrics)
    _first_frames(runner, got, 5)
    assert metrics.snapshot(memory=False).precision_fallbacks == 1
