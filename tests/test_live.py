"""LiveRunner end to end: a video file stands in for the camera, a recording pyvirtualcam
backend stands in for the virtual camera device."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import pyvirtualcam
from recording_cam import recording_backend
from skimage import data
from stub_engine import PassEngine, wait_for

from livefuse.config import LIVE_DEFAULTS, AppConfig, CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage, load_image
from livefuse.io.sinks import CallbackSink, VirtualCameraSink
from livefuse.io.sources import ImageSource, TestPatternSource, VideoFileSource
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.live import REBUILD_DELAY_S, LiveRunner
from livefuse.live_cli import OPEN_ATTEMPTS
from livefuse.samples import insightface_image
from livefuse.types import Frame, FramePacket, StagedFrame

RecordingBackend = recording_backend("recording")


class MissingBackend(RecordingBackend):
    def __init__(self, **kw: Any) -> None:
        raise RuntimeError("no v4l2loopback device found")


pyvirtualcam.register_backend("missing", MissingBackend)


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    photo = load_image(insightface_image("t1.jpg")).bgr
    frames = motion_clip(photo, (640, 480), 30, centre=(514.0, 362.0), face_px=125.0)
    return write_clip(frames, tmp_path_factory.mktemp("clip") / "cam.mp4", audio=False)


@pytest.fixture(scope="module")
def source_face() -> LoadedImage:
    return LoadedImage(bgr=np.ascontiguousarray(data.astronaut()[..., ::-1]), alpha=None,
                       path=Path("astronaut.png"))


def test_frames_flow_to_the_virtual_camera(clip_path: Path, source_face: LoadedImage) -> None:
    RecordingBackend.frames.clear()
    outs: dict[int, Frame] = {}  # the engine's first outputs by capture time
    sent: list[int] = []  # capture times of the frames the camera sent, in order
    cfg = AppConfig(engine=EngineConfig(detect_every=3, face_selector="one"),
                    cache=CacheConfig(threshold=0.5, refresh_every_n=5))
    statuses: list[str] = []
    with VirtualCameraSink(320, 180, 30, backend="recording", on_status=statuses.append,
                           on_sent=lambda t_cap, t_sent: sent.append(t_cap)) as cam:
        keep_first = CallbackSink(lambda f, t: outs.setdefault(t, f) if len(outs) < 60 else None)
        runner = LiveRunner(None, VideoFileSource(clip_path, loop=True), [cam, keep_first],
                            cfg, source_face=source_face, on_status=statuses.append,
                            factory=lambda c: Engine(c.engine, cache=c.cache))
        runner.start()
        # new frames, not re-sends: the camera re-sends its last frame while the engine works
        assert wait_for(lambda: cam.frames_new >= 15, 30), statuses
        assert runner.stop(1.0)
    snap = runner.metrics.snapshot()
    assert snap.frames_processed >= 15 and snap.latency_p50_ms is not None
    assert snap.cache_hits > 0
    assert any(s.startswith("virtual camera on: recording") for s in statuses)
    rec = RecordingBackend.frames[-1]
    assert rec.shape == (180, 320, 3) and rec.dtype == np.uint8
    # 640x480 letterboxed into 320x180: black bars left and right, picture 240 px wide.
    assert rec[:, :38].max() == 0 and rec[:, 282:].max() == 0 and rec[:, 40:280].mean() > 30
    # BGR order (PixelFormat.BGR): the camera's first frame equals that frame's output (frames
    # that came before the device opened were not sent)
    out = outs[sent[0]]
    expected = cv2.resize(out, (240, 180), interpolation=cv2.INTER_AREA)
    assert np.abs(RecordingBackend.frames[0][:, 40:280].astype(int) - expected).mean() < 1.0
    # The face region of the first output changed against the camera's first frame.
    first_out = outs[min(outs)]
    raw = cv2.resize(_first_frame(clip_path), (240, 180), interpolation=cv2.INTER_AREA)
    centre = (slice(60, 120), slice(90, 150))
    swapped = cv2.resize(first_out, (240, 180), interpolation=cv2.INTER_AREA)
    diff = np.abs(swapped[centre].astype(int) - raw[centre])
    assert diff.mean() > 8


def _first_frame(path: Path) -> Frame:
    from livefuse.io.video import read_frames
    return read_frames(path)[0]


def test_missing_virtual_camera_is_reported_and_the_rest_runs(source_face: LoadedImage) -> None:
    statuses: list[str] = []
    got: list[int] = []
    with VirtualCameraSink(320, 240, 30, backend="missing", on_status=statuses.append,
                           retry_s=0.2) as cam:
        runner = LiveRunner(_Passthrough(), TestPatternSource(160, 120, 60),
                            [cam, CallbackSink(lambda f, t: got.append(1))])
        runner.start()
        assert wait_for(lambda: len(got) >= 10, 10)
        assert runner.stop(1.0)
    assert any("virtual camera missing: " in s and "no v4l2loopback" in s for s in statuses)


class _Passthrough(PassEngine):
    """An engine stub: the frame through unchanged, optionally slowly, optionally raising.

    ``seen`` records, per processed frame, the frame's number (from its first pixel row, see
    :class:`_CountingSource`) and how many frames the source had produced when it was taken.
    """

    def __init__(self, delay_s: float = 0.0, fail_every: int = 0,
                 source: _CountingSource | None = None) -> None:
        super().__init__()
        self.delay_s, self.fail_every, self.calls = delay_s, fail_every, 0
        self.source = source
        self.seen: list[tuple[int, int]] = []
        self.applied: list[EngineConfig] = []

    def apply(self, config: EngineConfig) -> bool:
        self.applied.append(config)
        return config.precision == EngineConfig().precision

    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False, ahead: StagedFrame | None = None) -> FramePacket:
        host = frame.host if isinstance(frame, StagedFrame) else frame
        self.calls += 1
        if self.source is not None:
            self.seen.append((_CountingSource.number(host), self.source.produced))
        if self.fail_every and self.calls % self.fail_every == 0:
            raise RuntimeError("stub failure")
        time.sleep(self.delay_s)
        packet = super().process(frame, index, t_capture_ns)
        packet.timings_ms["swap"] = self.delay_s * 1e3
        return packet


class _CountingSource(TestPatternSource):
    """The test pattern with each frame's number written into its first pixel row."""

    __test__ = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.produced = 0

    def read(self, out: Frame | None = None) -> Frame | None:
        f = super().read()
        assert f is not None
        f[0, :4] = np.frombuffer(self.produced.to_bytes(12, "little"), np.uint8).reshape(4, 3)
        self.produced += 1
        return f

    @staticmethod
    def number(frame: Frame) -> int:
        return int.from_bytes(frame[0, :4].tobytes(), "little")


def test_slow_engine_drops_frames_and_never_queues() -> None:
    """The engine always takes the newest frame: between the frame it processes and the newest
    one captured there is at most the frame in flight, however loaded the machine is."""
    source = _CountingSource(160, 120, 100)
    engine = _Passthrough(delay_s=0.05, source=source)
    runner = LiveRunner(engine, source, [])
    runner.start()
    assert wait_for(lambda: len(engine.seen) >= 10, 30)
    assert runner.stop(2.0)
    snap = runner.metrics.snapshot()
    numbers = [n for n, _ in engine.seen]
    assert numbers == sorted(numbers)
    # newest-first: the frame taken is the last produced, or the one before (a put in flight)
    assert all(produced - n <= 2 for n, produced in engine.seen), engine.seen
    # every frame the engine skipped was counted as dropped, none queued up
    skipped = numbers[-1] + 1 - len(numbers)
    assert snap.dropped["capture->engine"] >= skipped - 2 > 0
    assert snap.output_fps <= snap.input_fps


def test_a_running_session_hands_the_gil_over_sooner_and_gives_the_setting_back() -> None:
    import sys

    from livefuse.live import LIVE_SWITCH_INTERVAL_S

    before = sys.getswitchinterval()
    source = _CountingSource(160, 120, 100)
    runner = LiveRunner(_Passthrough(delay_s=0.0, source=source), source, [])
    runner.start()
    try:
        assert sys.getswitchinterval() == pytest.approx(min(before, LIVE_SWITCH_INTERVAL_S))
        runner.start()  # a second start changes nothing, and the stop still restores
    finally:
        assert runner.stop(2.0)
    assert sys.getswitchinterval() == before


def test_slow_sink_never_queues() -> None:
    source = _CountingSource(160, 120, 100)
    got: list[tuple[int, int]] = []

    def slow(frame: Frame, t_ns: int) -> None:
        got.append((_CountingSource.number(frame), source.produced))
        time.sleep(0.05)

    runner = LiveRunner(_Passthrough(), source, [CallbackSink(slow)])
    runner.start()
    assert wait_for(lambda: len(got) >= 10, 30)
    assert runner.stop(2.0)
    # A queue falls further behind the camera at every frame: 50 ms per sink call at 100 fps
    # is ~4 frames more each time, >= 36 frames by the 10th call. One slot keeps the sink near
    # the newest frame: typically within the one in flight; the bound leaves room for a loaded
    # machine starving the inference thread for ~100 ms.
    lags = [produced - n for n, produced in got]
    assert max(lags) <= 12 and sorted(lags)[len(lags) // 2] <= 3, got
    assert runner.metrics.snapshot().dropped["capture->engine"] > 0


def test_engine_and_sink_errors_are_reported_and_stop_still_works() -> None:
    statuses: list[str] = []

    def bad_sink(frame: Frame, t_ns: int) -> None:
        raise OSError("disk full")

    runner = LiveRunner(_Passthrough(fail_every=2), TestPatternSource(64, 48, 60),
                        [CallbackSink(bad_sink)], on_status=statuses.append)
    runner.start()
    assert wait_for(lambda: runner.errors >= 6, 5)
    t0 = time.monotonic()
    assert runner.stop(1.0)
    assert time.monotonic() - t0 < 1.0
    assert any(s == "engine error: stub failure" for s in statuses)
    assert any(s == "sink callback failed: disk full" for s in statuses)


def test_apply_changes_settings_at_a_frame_boundary(source_face: LoadedImage) -> None:
    """A setting the engine can take in place never rebuilds it; one that needs the models
    loaded again rebuilds once, after the settings stopped changing (a dragged spin box)."""
    built: list[AppConfig] = []
    engines: list[_Passthrough] = []

    def factory(cfg: AppConfig) -> Any:
        built.append(cfg)
        engines.append(_Passthrough())
        return engines[-1]

    runner = LiveRunner(None, ImageSource(np.zeros((48, 64, 3), np.uint8), 100), [],
                        AppConfig(), source_face=source_face, factory=factory)
    runner.start()
    assert wait_for(lambda: runner.metrics.snapshot(memory=False).frames_processed > 3, 10)
    new = AppConfig(engine=EngineConfig(detect_every=4))
    threading.Thread(target=runner.apply, args=(new,)).start()  # from another thread
    assert wait_for(lambda: bool(engines[0].applied), 10)
    assert engines[0].applied[-1].detect_every == 4 and len(built) == 1
    for step in range(5):  # fp16 needs another model load: five quick edits, one rebuild
        runner.apply(AppConfig(engine=EngineConfig(detect_every=4 + step, precision="fp16")))
    assert wait_for(lambda: len(built) == 2, 10)
    time.sleep(2 * REBUILD_DELAY_S)
    assert len(built) == 2 and built[1].engine.detect_every == 8
    assert runner.config.engine.precision == "fp16"
    assert runner.stop(1.0)


def test_a_reference_photo_reaches_the_engine_and_survives_a_rebuild(
        source_face: LoadedImage) -> None:
    """The app's reference photo (face selector `reference`) is handed over like the source
    face: taken at a frame boundary, set again on every engine a setting change rebuilds."""
    from livefuse.session import Session

    engines: list[_Passthrough] = []

    def factory(cfg: AppConfig) -> Any:
        engines.append(_Passthrough())
        return engines[-1]

    ref = dataclasses.replace(source_face, path=Path("reference.png"))
    session = Session(AppConfig(), engine_factory=factory,
                      source_factory=lambda c: ImageSource(np.zeros((48, 64, 3), np.uint8), 100))
    session.set_source_face(source_face)
    assert session.prepare() is engines[0]  # `livefuse live` prepares its engine
    session.set_reference(ref)  # prepared, not running: taken now
    assert engines[0].references == [ref]
    engines.clear()
    session = Session(AppConfig(), engine_factory=factory,  # the app lets the runner build it
                      source_factory=lambda c: ImageSource(np.zeros((48, 64, 3), np.uint8), 100))
    session.set_source_face(source_face)
    session.set_reference(ref)
    session.start()
    try:
        assert wait_for(lambda: len(engines) == 1 and engines[0].references == [ref], 10)
        other = dataclasses.replace(ref, path=Path("other.png"))
        session.set_reference(other)
        assert wait_for(lambda: engines[0].references[-1] is other, 10)
        session.apply(AppConfig(engine=EngineConfig(precision="fp16")))  # a model reload
        assert wait_for(lambda: len(engines) == 2 and engines[1].references == [other], 10)
    finally:
        assert session.stop(2.0)


def test_a_setting_whose_recording_cannot_be_made_changes_nothing(
        source_face: LoadedImage, tmp_path: Path) -> None:
    """Session.apply makes the new sinks before it takes the settings: a refused recording
    leaves the running session with its old settings and sinks, and a later change works."""
    from livefuse.config import OutputConfig
    from livefuse.errors import LivefuseError
    from livefuse.session import Session

    session = Session(AppConfig(), engine_factory=lambda c: _Passthrough(),
                      source_factory=lambda c: ImageSource(np.zeros((48, 64, 3), np.uint8), 100))
    session.set_source_face(source_face)
    session.start()
    try:
        before = session.config
        bad = dataclasses.replace(before, output=OutputConfig(record=str(tmp_path / "rec.xyz")),
                                  engine=EngineConfig(detect_every=5))
        with pytest.raises(LivefuseError, match=r"rec\.xyz"):
            session.apply(bad)
        assert session.config == before
        good = dataclasses.replace(bad, output=OutputConfig(record=str(tmp_path / "rec.mp4")))
        session.apply(good)
        assert session.config == good
    finally:
        assert session.stop(2.0)
    assert not (tmp_path / "rec.xyz").exists()


def test_start_stop_cycles_leave_no_thread() -> None:
    before = {t.ident for t in threading.enumerate()}
    runner = LiveRunner(_Passthrough(), TestPatternSource(64, 48, 200), [])
    for i in range(50):
        runner.start()
        time.sleep(0.005)
        assert runner.stop(1.0), (i, [t.name for t in threading.enumerate()])
    left = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert left == []


def test_live_cli_records_a_video_file(clip_path: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from livefuse.cli import main
    from livefuse.io.video import probe

    skimage_png = tmp_path / "face.png"
    cv2.imwrite(str(skimage_png), np.ascontiguousarray(data.astronaut()[..., ::-1]))
    out = tmp_path / "out.mp4"
    assert main(["live", "--source", str(skimage_png), "--video", str(clip_path),
                 "--record", str(out), "--cache-refresh", "5", "--duration", "1.5"]) == 0
    printed = capsys.readouterr().out
    assert "fps | latency p50/p95" in printed and "frames processed:" in printed
    assert f"recording: {out}" in printed  # where it went (a new user's trial: not said)
    assert probe(out).width == 640


def test_live_cli_duration_is_kept_to_the_moment(clip_path: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: `--duration 0.5` ran a whole second (30 frames of a 30 fps file):
    the check woke with the metrics line, once a second."""
    import time

    from livefuse.cli import main
    from livefuse.session import Session

    skimage_png = tmp_path / "face.png"
    cv2.imwrite(str(skimage_png), np.ascontiguousarray(data.astronaut()[..., ::-1]))
    when: dict[str, float] = {}
    start, stop = Session.start, Session.stop

    def started(self: Session, *args: Any, **kwargs: Any) -> Any:
        out = start(self, *args, **kwargs)
        when["start"] = time.monotonic()
        return out

    def stopped(self: Session, *args: Any, **kwargs: Any) -> Any:
        when.setdefault("stop", time.monotonic())
        return stop(self, *args, **kwargs)

    monkeypatch.setattr(Session, "start", started)
    monkeypatch.setattr(Session, "stop", stopped)
    assert main(["live", "--source", str(skimage_png), "--video", str(clip_path),
                 "--duration", "0.5"]) == 0
    assert 0.45 <= when["stop"] - when["start"] < 0.8, when
    assert int(capsys.readouterr().out.split("frames processed: ")[1].split()[0]) > 0
    still = tmp_path / "still.jpg"
    cv2.imwrite(str(still), np.ascontiguousarray(data.astronaut()[..., ::-1]))
    assert main(["live", "--source", str(skimage_png), "--video", str(still), "--loop",
                 "--duration", "0.5"]) == 2
    assert "--loop: a still photo as --video repeats until stopped" in capsys.readouterr().err


def test_live_cli_refuses_a_recording_it_cannot_write_and_never_loses_one_with_exit_0(
        clip_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's trial: `--record` into a folder, under a file or a missing folder ran the
    whole session and exited 0 with no file. Such paths are refused before the start; a
    recording that fails while the session runs makes the exit code 1."""

    from livefuse.cli import main
    from livefuse.io.sinks import RecorderSink
    from livefuse.io.video import probe

    face = tmp_path / "face.png"
    cv2.imwrite(str(face), np.ascontiguousarray(data.astronaut()[..., ::-1]))
    (tmp_path / "dir.mp4").mkdir()
    (tmp_path / "afile").write_text("x")
    for bad, why in ((tmp_path / "dir.mp4", "is a folder"),
                     (tmp_path / "afile" / "x.mp4", "is a file"),
                     (tmp_path / "afile" / "deeper" / "x.mp4", "is a file")):
        assert main(["live", "-s", str(face), "--video", str(clip_path), "--record", str(bad),
                     "--duration", "1"]) == 2
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err, err
    # a missing folder is made with the recording, as `run` makes an output's (a new user's
    # trial found it refused here and made there)
    new = tmp_path / "new" / "deeper" / "x.mp4"
    assert main(["live", "-s", str(face), "--video", str(clip_path), "--record", str(new),
                 "--duration", "1"]) == 0
    assert probe(new).width > 0

    def broken(self: RecorderSink, *a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RecorderSink, "_start", broken)
    assert main(["live", "-s", str(face), "--video", str(clip_path), "--record",
                 str(tmp_path / "rec.mp4"), "--duration", "1.5"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert not (tmp_path / "rec.mp4").exists()


def test_live_cli_missing_video_is_a_clear_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    src = save_image(tmp_path / "src.png", astronaut())
    code = main(["live", "-s", str(src), "--video", str(tmp_path / "nope.mp4"),
                 "--duration", "1"])
    assert code == 2
    assert "nope.mp4': file not found" in capsys.readouterr().err


@pytest.mark.parametrize(("options", "says"), [
    (["--fps", "10", "--width", "100"], "--width 100, --fps 10: with --video they set only the "
                                        "virtual camera's format (--virtual-cam)"),
    (["--open-attempts", "3"], "--open-attempts 3: only for a camera"),
    (["--no-cache", "--cache-refresh", "9"], "--cache-refresh 9: the cache is off (--no-cache)"),
    (["--guard-hold-frames", "5"], "--guard-hold-frames 5: only for --privacy-guard hold"),
    (["--control-host", "0.0.0.0"], "--control-host 0.0.0.0: the control API is off without "
                                    "--control-port"),
    # typed with their default values: as unused (an option trial)
    (["--open-attempts", str(OPEN_ATTEMPTS)], f"--open-attempts {OPEN_ATTEMPTS}: only for a "
                                              "camera"),
    (["--no-cache", "--cache-threshold", f"{LIVE_DEFAULTS.cache.threshold:g}"],
     f"--cache-threshold {LIVE_DEFAULTS.cache.threshold:g}: the cache is off"),
])
def test_live_cli_options_this_session_would_not_use_are_refused(
        tmp_path: Path, options: list[str], says: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: each was accepted and did nothing, exit 0 (`run` refuses video
    options for an image)."""
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    src = save_image(tmp_path / "src.png", astronaut())
    clip = write_clip([np.zeros((64, 96, 3), np.uint8)] * 3, tmp_path / "c.mp4", audio=False)
    assert main(["live", "-s", str(src), "--video", str(clip), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("livefuse: error: ") and says in err, err
    assert "[status]" not in err  # before any work


@pytest.mark.parametrize(("name", "says"), [
    ("notes.mp4", "video 'notes.mp4': "),
    ("http://127.0.0.1:1/x.mp4", "a network stream; --video takes a file")])
def test_live_cli_a_video_that_cannot_be_read_is_refused_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, says: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: a text file renamed .mp4 built the engine, was retried like a camera
    and exited 1 ("gave up after 5 attempts"); a URL was "file not found" at 'http:/...'."""
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.mp4").write_text("not a video\n")
    src = save_image(tmp_path / "src.png", astronaut())
    assert main(["live", "-s", str(src), "--video", name, "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert says in err and "[status]" not in err, err


def test_live_says_once_why_faces_in_view_are_not_swapped(
        clip_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `--target-face-index 5` with fewer faces in view (or a reference
    photo of someone else) streamed them unswapped with no word; `run` says why."""
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    src = save_image(tmp_path / "src.png", astronaut())
    assert main(["live", "-s", str(src), "--video", str(clip_path), "--loop", "--engine",
                 "classic", "--target-face-index", "9", "--duration", "2.5"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines()
            if "faces in view, none swapped" in line]
    assert len(said) == 1 and "target face index 9" in said[0], said


@pytest.mark.parametrize(("options", "says"), [
    (["--camera", "0", "--video", "x.mp4"], "--video: not allowed with argument --camera"),
    (["--duration", "nan"], "nan is not a finite number"),
    (["--fps", "inf"], "inf is not a finite number")])
def test_live_cli_argument_slips_are_refused(options: list[str], says: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: `--camera 0 --video x` passed the exclusive group (argparse lets a
    typed value equal to the default's string through) and `--duration nan` ran to the end."""
    from livefuse.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["live", "-s", "src.png", *options])
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_live_cli_a_capture_size_past_8k_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's trial: accepted, where `--fps 1e9` was refused."""
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    src = save_image(tmp_path / "src.png", astronaut())
    assert main(["live", "-s", str(src), "--width", "99999", "--virtual-cam"]) == 2
    assert "capture size 99999x720 is above 8192 px a side" in capsys.readouterr().err


def test_live_cli_loop_without_a_video_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An option trial: `--loop` with a camera was accepted and did nothing."""
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    src = save_image(tmp_path / "src.png", astronaut())
    assert main(["live", "-s", str(src), "--loop", "--camera", "99"]) == 2
    assert "--loop: only for --video" in capsys.readouterr().err


def test_live_cli_says_the_guard_sets_the_detection_interval_aside(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An option trial: `--privacy-guard blur --detect-every 5` detected on every frame with no
    word. It is not refused: the control API may turn the guard off, and then it is used."""
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    src = save_image(tmp_path / "src.png", astronaut())
    clip = write_clip([np.zeros((64, 96, 3), np.uint8)] * 3, tmp_path / "c.mp4", audio=False)
    assert main(["live", "-s", str(src), "--video", str(clip), "--engine", "classic",
                 "--privacy-guard", "blur", "--detect-every", "5", "--duration", "1"]) == 0
    assert "note: --detect-every 5 waits while the privacy guard is on (blur)" in \
        capsys.readouterr().err


def test_live_and_presets_take_what_a_preset_keeps_and_refuse_what_it_would_ignore(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An option trial found each of these accepted with exit 0 and ignored:
    `live --preset P --cache` (the value of live's default: the preset's cache stayed off);
    `--guard-hold-frames` with a preset whose guard is off; `presets save` storing cache tuning
    with the cache off and a hold length without the hold guard; `presets save --reference`
    dropping the photo, so that `live --preset` refused the preset, and `--reference` with it."""
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    src = save_image(tmp_path / "src.png", astronaut())
    clip = write_clip([np.zeros((64, 96, 3), np.uint8)] * 3, tmp_path / "c.mp4", audio=False)
    save = ["presets", "save", "-s", str(src), "--engine", "classic"]
    assert main([*save, "NoCache", "--no-cache"]) == 0
    capsys.readouterr()
    assert main(["live", "--preset", "NoCache", "--cache", "--video", str(clip)]) == 2
    assert "--cache: --preset 'NoCache' sets the engine and cache" in capsys.readouterr().err
    assert main(["live", "--preset", "NoCache", "--guard-hold-frames", "30", "--video",
                 str(clip)]) == 2
    assert "--guard-hold-frames 30: only for --privacy-guard hold (the guard is off)" in \
        capsys.readouterr().err
    assert main([*save, "Tuned", "--no-cache", "--cache-refresh", "9"]) == 2
    assert "--cache-refresh 9: the cache is off" in capsys.readouterr().err
    assert main([*save, "Held", "--guard-hold-frames", "30"]) == 2
    assert "--guard-hold-frames 30: only for --privacy-guard hold" in capsys.readouterr().err
    assert main([*save, "Ref", "--reference", str(src)]) == 2
    assert "a preset keeps the face selector, not the reference photo" in \
        capsys.readouterr().err
    assert main([*save, "Ref", "--face-selector", "reference"]) == 0
    capsys.readouterr()
    assert main(["live", "--preset", "Ref", "--video", str(clip), "--duration", "1"]) == 2
    assert "needs a reference photo" in capsys.readouterr().err
    assert main(["live", "--preset", "Ref", "--reference", str(src), "--video", str(clip),
                 "--duration", "1"]) == 0
    capsys.readouterr()
    assert main(["live", "--preset", "NoCache", "--reference", str(src), "--video",
                 str(clip)]) == 2  # a review: taken and ignored, an extra detection
    assert "preset 'NoCache' swaps faces by 'one', not the person in a reference photo" in \
        capsys.readouterr().err
    stored = sorted(p.name for p in (tmp_path / "cfg" / "livefuse" / "presets").iterdir())
    assert stored == ["NoCache.toml", "Ref.toml"]


@pytest.mark.parametrize(("name", "says"), [("rec.avi", "unsupported suffix '.avi'"),
                                             (".", "is a folder")])
def test_live_cli_a_bad_recording_name_is_refused_first(
        tmp_path: Path, name: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Named as typed, before the source photo is read (it was after, with the absolute path
    and the word 'video')."""
    from livefuse.cli import main

    code = main(["live", "-s", str(tmp_path / "no_photo.png"), "--video",
                 str(tmp_path / "no.mp4"), "--record", name, "--duration", "1"])
    err = capsys.readouterr().err
    assert code == 2 and f"recording '{name}'" in err and says in err
    assert "no_photo" not in err and "no.mp4" not in err


def test_live_cli_gives_up_on_a_camera_that_cannot_be_opened(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No working camera: a bounded number of opens, then one line and a non-zero exit (it
    used to retry forever, printing zero metrics)."""
    from livefuse.cli import main
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    src = save_image(tmp_path / "src.png", astronaut())
    t0 = time.monotonic()
    code = main(["live", "-s", str(src), "--camera", str(tmp_path / "no-such-camera"),
                 "--open-attempts", "2", "--duration", "60"])
    assert code == 1
    assert time.monotonic() - t0 < 30  # gave up, did not wait for --duration
    out, err = capsys.readouterr()
    last = err.strip().splitlines()[-1]
    assert last.startswith("livefuse: error: camera ") and "cannot be opened" in last
    assert "gave up after 2 attempts" in last
    # two failed opens say the same thing: one status line, no "camera lost" for a camera that
    # never opened, and no metrics rows of zeros
    status = [line for line in err.splitlines() if line.startswith("[status]")]
    assert len(status) == 1 and "source failed: camera" in status[0], status
    assert out.strip().splitlines() == ["frames processed: 0"], out


class _SlowCam(RecordingBackend):
    """A virtual camera whose send takes 40 ms (a busy consumer)."""

    def send(self, frame: np.ndarray) -> None:
        time.sleep(0.04)


pyvirtualcam.register_backend("slow", _SlowCam)


def test_latency_ends_at_the_virtual_cameras_send() -> None:
    """With a virtual camera the latency runs to its real send, not to the hand-off."""
    cam = VirtualCameraSink(64, 48, 30, backend="slow")
    runner = LiveRunner(_Passthrough(), TestPatternSource(64, 48, 20), [cam])
    runner.start()
    assert wait_for(lambda: runner.metrics.snapshot(memory=False).frames_out >= 5, 30)
    assert runner.stop(2.0)
    cam.close()
    snap = runner.metrics.snapshot(memory=False)
    assert snap.latency_p50_ms is not None and snap.latency_p50_ms >= 35


def test_live_engines_warm_up_and_file_jobs_do_not() -> None:
    """The warm-up sweep (every CUDA graph captured before a frame size's first frame, 5-7 s at
    1080p) is what keeps a live stream from stalling when a face appears; a file job pays it per
    worker and gains nothing from it (on the H200 it was 7 of each batch worker's 18 busy
    seconds)."""
    from livefuse.engine import Engine
    from livefuse.live import default_engine_factory

    live = default_engine_factory(AppConfig(engine=EngineConfig(engine="classic")))
    assert getattr(live, "warm_up_first", False)
    assert not Engine(EngineConfig(engine="classic")).warm_up_first


def test_live_cli_a_damaged_source_photo_is_the_only_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It came after the engine's line and without its role ("cannot read image")."""
    from livefuse.cli import main

    bad = tmp_path / "face.jpg"
    bad.write_bytes(b"not a picture" * 20)
    clip = write_clip([np.zeros((64, 64, 3), np.uint8)] * 3, tmp_path / "cam.mp4")
    assert main(["live", "-s", str(bad), "--video", str(clip), "--duration", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"livefuse: error: cannot read the source image '{bad}': not a "
                            "recognised image format\n")
    assert captured.out == ""


def test_a_looped_video_is_a_cut_for_the_privacy_guard(tmp_path: Path) -> None:
    """A new user's trial: with a looped clip (the app always loops a video input) the guard
    kept pixelating the last pass's face, lost at the jump and grown over the swapped face of
    the new pass (5 frames in 8). A new pass over the file is a cut: the guard forgets what it
    followed. Frames within a pass, and a camera, are no cut."""
    clip = write_clip([np.full((48, 64, 3), 40 * i, np.uint8) for i in range(4)],
                      tmp_path / "c.mp4", audio=False)
    from livefuse.config import GuardConfig
    from livefuse.types import Face

    source = VideoFileSource(clip, loop=True)
    runner = LiveRunner(PassEngine(), source, [], config=AppConfig(guard=GuardConfig("blur")))
    frame = np.zeros((48, 64, 3), np.uint8)
    source.open()
    cuts, lost = [], []
    for i in range(10):
        source.read()
        cuts.append(runner._forget_at_cut(time.perf_counter_ns()))
        # a face swapped on each pass's first frame, on the other side of the picture than
        # the last pass's (a new track), then lost
        x = 4 if i // 4 % 2 == 0 else 40
        face = Face(bbox=np.array([x, 10, x + 16, 26], np.float32),
                    kps=np.zeros((5, 2), np.float32), score=1.0, track_id=1 + i // 4)
        runner.guard.apply(frame.copy(), [face] if i % 4 == 0 else [], [])
        lost.append(runner.guard.state.lost)
    source.close()
    assert cuts == [True, False, False, False, True, False, False, False, True, False]
    assert lost == [0, 1, 1, 1, 0, 1, 1, 1, 0, 1]  # the lost face is forgotten at each cut
    camera = LiveRunner(PassEngine(), TestPatternSource(64, 48, 30), [])
    assert not camera._forget_at_cut(time.perf_counter_ns())
