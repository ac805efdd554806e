"""Engine rebuilds under load (issue 17, item 5): frames captured while the engine is being
rebuilt reach it unstaged, and a stop that times out inside a model load must not leave two
inference threads (and two engines loading) when the session starts again.

On the CPU the GPU path's contract is played by a stager that makes CPU tensors and a renderer
that, like the neural renderer on CUDA, renders from the staged device copy only; the CUDA test
runs the real neural engine (replicas) on the H200.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from stub_engine import wait_for

from livefuse.config import AppConfig, CaptureConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.io.sources import FramesSource
from livefuse.live import REBUILD_DELAY_S, LiveRunner
from livefuse.session import Session
from livefuse.swap.frame_path import HostPath
from livefuse.testing.scripted import ScriptedFaces
from livefuse.testing.synthetic import face_kps
from livefuse.types import Face, Frame, Patch, StagedFrame

LOAD_S = 0.6  # what the fake model load takes


class CpuStager:
    """:class:`~livefuse.swap.gpu_frame.FrameStager`'s contract with CPU tensors."""

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.staged = 0

    def stage(self, frame: Frame) -> StagedFrame:
        self.staged += 1
        return StagedFrame(host=frame, device=torch.from_numpy(frame.copy()))

    def wait(self, staged: StagedFrame) -> None:
        pass


class CpuStagedPath(HostPath):
    """The host frame path with frames staged by :class:`CpuStager` (the engine's own staging of
    unstaged frames is what these tests exercise; pasting stays on the host)."""

    def __init__(self) -> None:
        self.stager = CpuStager()

    def stage(self, frame: Frame) -> StagedFrame:
        return self.stager.stage(frame)


class DeviceOnlyRenderer:
    """Renders (inverts each face's box) from the staged device copy only."""

    device = "cpu"
    precision_in_use = "fp32"
    precision_reason = "a test renderer"

    def prepare(self, image: Frame, face: Face, path: Path | None = None) -> Any:
        return "latent"

    def configure(self, config: EngineConfig) -> None:
        pass

    def render(self, frame: StagedFrame, faces: Sequence[Face], source: Any
               ) -> list[Patch | None]:
        if frame.device is None:
            raise RuntimeError("the neural renderer on CUDA needs a staged frame")
        out: list[Patch | None] = []
        for f in faces:
            x0, y0, x1, y1 = (int(v) for v in f.bbox)
            img = 255 - frame.device[y0:y1, x0:x1].numpy()
            out.append(Patch(image=np.ascontiguousarray(img),
                             alpha=np.ones(img.shape[:2], np.float32),
                             affine=np.array([[1, 0, -x0], [0, 1, -y0]], np.float64)))
        return out

    def verify(self) -> bool:
        return True


def _face() -> Face:
    kps = face_kps(80.0, 60.0, 24.0)
    return Face(bbox=np.array([50, 25, 110, 100], np.float32), kps=kps, score=0.9)


def _frames() -> list[Frame]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (120, 160, 3), dtype=np.uint8) for _ in range(4)]


class Busy:
    """Counts the threads inside engine work (a model load or a frame) at once."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


class CountedEngine(Engine):
    busy: Busy

    def process(self, *args: Any, **kw: Any) -> Any:
        with self.busy:
            return super().process(*args, **kw)


def slow_factory(loads: list[float], busy: Busy | None = None
                 ) -> Callable[[AppConfig], Engine]:
    """An engine factory whose model load takes LOAD_S, building a GPU-path-like engine."""
    busy = busy or Busy()

    def factory(cfg: AppConfig) -> Engine:
        with busy:
            loads.append(time.monotonic())
            time.sleep(LOAD_S)
            engine = CountedEngine(cfg.engine, components=(
                ScriptedFaces(lambda i: [_face()]), DeviceOnlyRenderer()), cache=cfg.cache)
            engine.path = CpuStagedPath()
            engine.stager = engine.path.stager
            engine.busy = busy
            return engine
    return factory


class ThreadWatch:
    """Samples the live inference threads every 2 ms: the most seen alive at once (a thread
    still waiting for the old one to end is named ``livefuse-inference-next``)."""

    def __init__(self) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            n = sum(t.name == "livefuse-inference" and t.is_alive()
                    for t in threading.enumerate())
            self.most = max(self.most, n)
            time.sleep(0.002)

    def __enter__(self) -> ThreadWatch:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()



SOURCE = LoadedImage(bgr=_frames()[0], alpha=None, path=Path("src.png"))


def test_frames_captured_during_rebuilds_are_staged_by_the_new_engine() -> None:
    loads: list[float] = []
    statuses: list[str] = []
    runner = LiveRunner(None, FramesSource(_frames(), fps=200, live=True), [],
                        AppConfig(), source_face=SOURCE, factory=slow_factory(loads),
                        on_status=statuses.append)
    with ThreadWatch() as watch:
        runner.start()
        assert wait_for(lambda: runner.frames_out > 5)
        for i in range(3):  # a precision change needs the models loaded again: a rebuild
            out = runner.frames_out
            runner.apply(AppConfig(engine=EngineConfig(precision="fp16" if i % 2 == 0 else
                                                       "fp32")))
            assert wait_for(lambda n=i: len(loads) == n + 2)
            assert wait_for(lambda o=out: runner.frames_out > o + 5)
        assert runner.stop(2.0)
    assert runner.errors == 0, statuses
    assert not [s for s in statuses if s.startswith("engine error")], statuses
    assert watch.most == 1


def test_a_stop_inside_a_rebuild_never_leaves_two_inference_threads() -> None:
    """The session stops while its engine is being rebuilt (the stop times out) and starts
    again at once: the new inference thread waits for the old one, takes the engine it was
    loading, and no second load starts beside it."""
    loads: list[float] = []
    statuses: list[str] = []
    busy = Busy()
    cfg = AppConfig(capture=CaptureConfig(kind="test pattern"))
    session = Session(cfg, engine_factory=slow_factory(loads, busy),
                      source_factory=lambda c: FramesSource(_frames(), fps=200, live=True),
                      on_status=statuses.append)
    session.set_source_face(SOURCE)
    with ThreadWatch() as watch:
        session.start()
        runner = session.runner
        assert runner is not None and wait_for(lambda: runner.frames_out > 5)
        for i in range(2):
            session.apply(replace(cfg, engine=EngineConfig(
                precision="fp16" if i % 2 == 0 else "fp32")))
            n = len(loads)
            assert wait_for(lambda n=n: len(loads) == n + 1)  # the rebuild's load has begun
            assert not session.stop(0.05)  # it times out inside the load
            session.start()  # at once
            runner = session.runner
            assert runner is not None and wait_for(lambda r=runner: r.frames_out > 5)
            time.sleep(REBUILD_DELAY_S)
        assert session.stop(2.0)
    assert watch.most == 1 and busy.most == 1
    assert len(loads) == 3, loads  # the first and two rebuilds: each loaded once
    assert not [s for s in statuses if s.startswith("engine error")], statuses


def test_a_runner_restarted_after_a_timed_out_stop_runs_one_thread() -> None:
    loads: list[float] = []
    busy = Busy()
    runner = LiveRunner(None, FramesSource(_frames(), fps=200, live=True), [],
                        AppConfig(), source_face=SOURCE, factory=slow_factory(loads, busy))
    with ThreadWatch() as watch:
        runner.start()
        assert wait_for(lambda: len(loads) == 1)
        assert not runner.stop(0.05)  # inside the first load
        runner.start()
        assert wait_for(lambda: runner.frames_out > 5)  # it does run after all
        assert runner.stop(2.0)
    assert watch.most == 1 and busy.most == 1 and len(loads) == 1 and runner.errors == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_neural_engine_rebuilds_under_load_on_cuda(tmp_path: Path) -> None:
    """The real GPU path: FrameStager uploads on the capture thread; fp16 ↔ fp32 rebuilds
    under a 200 fps source; no engine error, one inference thread."""
    from synthetic_faces import build_arcface, build_scrfd

    from livefuse.swap.neural_engine import NeuralPaths, build_neural
    from livefuse.testing.synthetic import build_synthetic_inswapper

    paths = NeuralPaths(build_scrfd(tmp_path / "det.onnx"), build_arcface(tmp_path / "rec.onnx"),
                        build_synthetic_inswapper(tmp_path / "inswapper.onnx", width=8))
    rng = np.random.default_rng(2)
    frame = rng.integers(40, 90, (640, 640, 3), dtype=np.uint8)
    frame[32 * 9:32 * 10, 32 * 9:32 * 10] = 255  # a face for the synthetic SCRFD
    loads: list[float] = []

    def factory(cfg: AppConfig) -> Engine:
        loads.append(time.monotonic())
        return Engine(cfg.engine, components=build_neural(cfg.engine, paths), cache=cfg.cache)

    statuses: list[str] = []
    engine_cfg = EngineConfig(engine="neural", backend="torch", device="cuda", precision="fp16")
    runner = LiveRunner(None, FramesSource([frame], fps=200, live=True), [],
                        AppConfig(engine=engine_cfg),
                        source_face=LoadedImage(bgr=frame, alpha=None, path=Path("s.png")),
                        factory=factory, on_status=statuses.append)
    with ThreadWatch() as watch:
        runner.start()
        assert wait_for(lambda: runner.frames_out > 10, 60)
        for i in range(4):
            out = runner.frames_out
            runner.apply(AppConfig(engine=replace(
                engine_cfg, precision="fp32" if i % 2 == 0 else "fp16")))
            assert wait_for(lambda n=i: len(loads) == n + 2, 60)
            assert wait_for(lambda o=out: runner.frames_out > o + 10, 60)
        assert runner.stop(5.0)
    assert runner.errors == 0, statuses
    assert watch.most == 1
