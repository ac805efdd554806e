"""The live tail (issue 17 item 2): LiveRunner at 1080p/60 into a virtual camera while faces come,
go and grow, with the latency of every frame (capture → the camera's send), per phase and through
a soak, plus torch's allocated and reserved VRAM and the host CPU per frame.

Models: the full-size random-weight replicas of det_10g, w600k_r50 and inswapper_128 (as
``bench_frame_path.py``); the detector and the region tracker run in full on every frame, then
their answer is replaced by scripted faces (:class:`ScriptedAnalyser`), driven by capture time.
Settings: fp16, ``face_selector=many``, detect every 3, the pose cache on, rotation off.

Phases (``--phase-seconds`` each, after the start-up warm-up): 1 face; a 2nd face appears;
4 faces; back to 1 face; 1 face growing from 15 % to 60 % of the frame height. Then a soak
(``--soak-seconds``): 1-4 faces of 10-60 % of the height, a new scene every 0.5 s, reported per
30 s window. "dropped" counts frames the runner dropped (capture → engine slot) or the camera did
not send, in that phase; "captures" counts CUDA graphs captured in it (none, after a warm-up).

    python benchmarks/bench_live_tail.py --phase-seconds 6 --soak-seconds 120
    python benchmarks/bench_live_tail.py --host-only      # the host-CPU rows alone

It runs on the tree it is started from (``--tree`` puts another tree first on the path for an
A/B: the figures of the landed code).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

_tree = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--tree"), None)
sys.path.insert(0, str(Path(_tree).resolve() if _tree else Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))
__import__("livefuse")  # before bench_frame_path, which puts its own tree first on the path

import numpy as np  # noqa: E402
from bench_frame_path import ScriptedAnalyser, frames_for  # noqa: E402

from livefuse.config import AppConfig, CacheConfig, EngineConfig  # noqa: E402
from livefuse.engine import Engine  # noqa: E402
from livefuse.imaging import LoadedImage  # noqa: E402
from livefuse.metrics import Metrics  # noqa: E402
from livefuse.samples import astronaut  # noqa: E402
from livefuse.swap.neural_engine import NeuralPaths, build_neural  # noqa: E402
from livefuse.testing.synthetic import face_kps  # noqa: E402
from livefuse.types import Face  # noqa: E402

SIZE = (1920, 1080)
FPS = 60.0

# per capture time: when process started and ended (ns), its timings, detected, faces swapped
PROCESSED: dict[int, tuple[int, int, dict[str, float], bool, int]] = {}
# (start, stop) ns of every garbage collection, to tell a collector's pause in a slow frame
GC_SPANS: list[tuple[int, int]] = []


def _track_gc() -> None:
    import gc

    started = [0]

    def on_gc(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter_ns()
        else:
            GC_SPANS.append((started[0], time.perf_counter_ns()))
    gc.callbacks.append(on_gc)


def _slowest(metrics: RecordingMetrics, t0: int, t1: int) -> str:
    """Where the slowest frame of [t0, t1) spent its latency: waiting for the engine (from
    capture to the start of ``process``), in ``process`` (and its stages), and after it (to
    the camera's send); garbage collection inside that span."""
    with metrics._rec_lock:
        frames = [(lat, t) for t, lat in metrics.frames if t0 <= t < t1]
    if not frames:
        return "-"
    lat, t = max(frames)
    info = PROCESSED.get(t)
    if info is None:
        return f"{lat:.1f} ms (not timed)"
    start, stop, timings, detected, swapped = info
    end = t + int(lat * 1e6)
    gc_ms = sum(min(b, end) - max(a, t) for a, b in GC_SPANS if b > t and a < end) / 1e6
    steps = ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
    return (f"{lat:.1f} ms = wait {(start - t) / 1e6:.1f} + process {(stop - start) / 1e6:.1f} "
            f"({'detect' if detected else 'track'}, {swapped} faces: {steps}) + send "
            f"{(end - stop) / 1e6:.1f}; gc {gc_ms:.2f} ms")


def _captures() -> int:
    try:
        from livefuse.models.graph_cache import cuda_captures
    except ImportError:  # the landed tree has no graph cache
        return -1
    return cuda_captures()


class RecordingMetrics(Metrics):
    """Metrics that also keep every frame's (capture time, latency)."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[tuple[int, float]] = []
        self._rec_lock = threading.Lock()

    def frame_out(self, t_capture_ns: int, t_sent_ns: int | None = None) -> None:
        now = time.perf_counter_ns() if t_sent_ns is None else t_sent_ns
        super().frame_out(t_capture_ns, now)
        with self._rec_lock:
            self.frames.append((t_capture_ns, (now - t_capture_ns) / 1e6))

    def between(self, t0: int, t1: int) -> np.ndarray:
        with self._rec_lock:
            return np.array([lat for t, lat in self.frames if t0 <= t < t1], np.float64)


def _face(cx: float, cy: float, height_frac: float, roll: float = 0.0) -> Face:
    h = SIZE[1]
    eye = height_frac * h / 2.4  # eye distance of a face that tall (bench_frame_path's ratio)
    kps = face_kps(cx, cy, eye, roll)
    x0, y0 = kps.min(0) - eye
    x1, y1 = kps.max(0) + eye
    return Face(bbox=np.array([x0, y0, x1, y1], np.float32), kps=kps, score=0.9)


class Scene:
    """The scripted faces as a function of capture time; the main thread swaps the script."""

    def __init__(self) -> None:
        self.script: Any = lambda t: [_face(SIZE[0] * 0.5, SIZE[1] * 0.5, 0.18)]
        self.t_ns = 0

    def __call__(self, _index: int) -> list[Face]:
        return list(self.script(self.t_ns / 1e9))


def _drift(cx: float, cy: float, frac: float, t: float, k: int = 0) -> Face:
    s = np.sin(t * 2.0 + k)
    return _face(cx + 0.02 * SIZE[0] * s, cy + 0.01 * SIZE[1] * np.cos(t * 1.7 + k), frac, 6.0 * s)


def one_face(t: float) -> list[Face]:
    return [_drift(SIZE[0] * 0.5, SIZE[1] * 0.5, 0.18, t)]


def two_faces(t: float) -> list[Face]:
    return [_drift(SIZE[0] * 0.33, SIZE[1] * 0.5, 0.18, t), _drift(SIZE[0] * 0.7, SIZE[1] * 0.45,
                                                                   0.2, t, 1)]


def four_faces(t: float) -> list[Face]:
    return [_drift(SIZE[0] * (0.25 + 0.5 * (k % 2)), SIZE[1] * (0.3 + 0.4 * (k // 2)),
                   0.14 + 0.03 * k, t, k) for k in range(4)]


def growing(t0: float, seconds: float) -> Any:
    def script(t: float) -> list[Face]:
        a = min(max((t - t0) / seconds, 0.0), 1.0)
        return [_drift(SIZE[0] * 0.5, SIZE[1] * 0.5, 0.15 + 0.45 * a, t)]
    return script


def soak_script(seed: int) -> Any:
    rng = np.random.default_rng(seed)
    scenes: dict[int, list[tuple[float, float, float]]] = {}

    def script(t: float) -> list[Face]:
        k = int(t / 0.5)
        if k not in scenes:
            n = int(rng.integers(1, 5))
            scenes[k] = [(float(rng.uniform(0.2, 0.8)), float(rng.uniform(0.3, 0.7)),
                          float(rng.uniform(0.10, 0.60))) for _ in range(n)]
        return [_drift(x * SIZE[0], y * SIZE[1], f, t, j) for j, (x, y, f) in enumerate(scenes[k])]
    return script


def _stats(lat: np.ndarray) -> str:
    if not len(lat):
        return "| - | - | - | - |"
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return f"| {p50:.2f} | {p95:.2f} | {p99:.2f} | {lat.max():.1f} |"


def _drops(runner: Any, cam: Any) -> int:
    s = runner.metrics.snapshot(memory=False)
    return int(sum(s.dropped.values())) + int(cam.unsent)


def _vram() -> tuple[float, float]:
    import torch

    return torch.cuda.memory_allocated() / 2**30, torch.cuda.memory_reserved() / 2**30


def _pools() -> str:
    """Reserved and allocated GiB per memory pool: torch's default pool and the CUDA graphs'
    (``segment_pool_id`` other than ``(0, 0)``), from ``torch.cuda.memory_snapshot``."""
    import torch

    pools: dict[str, list[float]] = {}
    for seg in torch.cuda.memory_snapshot():
        pid = tuple(seg.get("segment_pool_id", (0, 0)))
        name = "default" if pid == (0, 0) else f"graph pool {pid}"
        row = pools.setdefault(name, [0.0, 0.0, 0.0])
        row[0] += seg["total_size"] / 2**30
        row[1] += seg["allocated_size"] / 2**30
        row[2] += 1
    return "; ".join(f"{k}: reserved {r:.2f} GiB, allocated {a:.2f} GiB in {n:.0f} segments"
                     for k, (r, a, n) in sorted(pools.items()))


def _build(paths: NeuralPaths, scene: Scene, landmarks: bool = True
           ) -> tuple[Engine, ScriptedAnalyser]:
    cfg = EngineConfig(engine="neural", backend="torch", precision="fp16", device="cuda",
                       face_selector="many", detect_every=3, rotation="off")
    analyser, renderer = build_neural(cfg, paths)
    scripted = ScriptedAnalyser(analyser, scene)
    try:  # a tree before the 106-point landmarker (--tree A/B) has neither
        from livefuse.swap.neural_engine import build_landmarker
        from livefuse.testing.scripted import ScriptedLandmarker
    except ImportError:
        landmarks = False
    if not landmarks:
        engine = Engine(cfg, components=(scripted, renderer), cache=CacheConfig(enabled=True),
                        warm_up=True)
    else:
        # the 2d106det runner runs on every frame (its full cost) for the cache's key; its
        # random-weight answer is replaced by a still, neutral face on each scripted face's kps
        landmarker = ScriptedLandmarker(None, inner=build_landmarker(cfg, renderer, paths))
        engine = Engine(cfg, components=(scripted, renderer), cache=CacheConfig(enabled=True),
                        landmarker=landmarker, warm_up=True)
    engine.set_source(LoadedImage(bgr=astronaut(), alpha=None, path=Path("astronaut.png")))
    process = engine.process

    def timed(frame: Any, index: int = 0, t_capture_ns: int | None = None, *a: Any,
              **kw: Any) -> Any:
        scene.t_ns = t_capture_ns or time.perf_counter_ns()
        t0 = time.perf_counter_ns()
        packet = process(frame, index, t_capture_ns, *a, **kw)
        t1 = time.perf_counter_ns()
        if t_capture_ns is not None:
            PROCESSED[t_capture_ns] = (t0, t1, dict(packet.timings_ms), bool(packet.detected),
                                       int(packet.swapped))
        return packet

    engine.process = timed  # type: ignore[method-assign]
    return engine, scripted


def _start(paths: NeuralPaths, scene: Scene, landmarks: bool = True
           ) -> tuple[Engine, Any, Any, RecordingMetrics, float]:
    """A LiveRunner on the scripted scene into the null camera, started: (engine, runner,
    camera, metrics, start time)."""
    from bench_frame_path import register_null_camera

    from livefuse.io.sinks import VirtualCameraSink
    from livefuse.io.sources import FramesSource
    from livefuse.live import LiveRunner

    register_null_camera()
    engine, _ = _build(paths, scene, landmarks)
    metrics = RecordingMetrics()
    cam = VirtualCameraSink(SIZE[0], SIZE[1], FPS, backend="null")
    runner = LiveRunner(engine, FramesSource(frames_for(SIZE, 30), fps=FPS), [cam],
                        AppConfig(engine=engine.config, cache=CacheConfig(enabled=True)),
                        metrics=metrics)
    t_start = time.perf_counter()
    runner.start()
    _wait_warm(engine, metrics, t_start)
    return engine, runner, cam, metrics, t_start


def _wait_warm(engine: Engine, metrics: RecordingMetrics, t_start: float) -> None:
    # the start-up warm-up runs on the first frame: wait for it (the landed tree has none: 3 s)
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        time.sleep(0.1)
        warm = getattr(engine, "warm_up_s", None)
        if warm is None and time.perf_counter() - t_start > 3.0:
            break
        if warm and metrics.frames:
            break
    time.sleep(1.0)


def ab_live(paths: NeuralPaths, seconds: float) -> None:
    """Where the live latency goes, side by side in one process: the same live session with
    the 106-point landmarker in the key, without it (a kps-only key), and with it under a
    0.5 ms GIL switch interval (Python's default: 5 ms)."""
    print(f"\n# live A/B ({seconds:.0f} s per phase): capture -> send latency, ms\n")
    print("| variant | faces | frames | p50 ms | p95 | p99 | max | dropped | host CPU ms/frame |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    default = sys.getswitchinterval()
    for name, landmarks, switch in (("106-point landmarks", True, default),
                                    ("kps-only key", False, default),
                                    ("106-point landmarks, switch interval 0.5 ms", True,
                                     0.0005)):
        sys.setswitchinterval(switch)
        scene = Scene()
        _engine, runner, cam, metrics, _ = _start(paths, scene, landmarks)
        for faces, script in ((1, one_face), (4, four_faces)):
            d0, cpu0 = _drops(runner, cam), time.process_time()
            t0 = time.perf_counter_ns()
            scene.script = script
            time.sleep(seconds)
            lat = metrics.between(t0, time.perf_counter_ns())
            cpu = (time.process_time() - cpu0) * 1e3 / max(len(lat), 1)
            print(f"| {name} | {faces} | {len(lat)} {_stats(lat)} {_drops(runner, cam) - d0} | "
                  f"{cpu:.2f} |", flush=True)
        runner.stop(2.0)
        cam.close()
        del _engine, runner, cam, metrics
        _free()
    sys.setswitchinterval(default)


def _free() -> None:
    """Free the sessions dropped so far, and give their VRAM back, so that the next one's
    figures are its own."""
    import gc

    import torch

    gc.unfreeze()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def live(paths: NeuralPaths, phase_s: float, soak_s: float, seed: int) -> None:
    import torch

    scene = Scene()
    _track_gc()
    engine, runner, cam, metrics, t_start = _start(paths, scene)
    warm_s = getattr(engine, "warm_up_s", None)
    print(f"\n# LiveRunner {SIZE[0]}x{SIZE[1]} at {FPS:.0f} fps -> virtual camera; fp16, detect "
          f"every 3, cache on; start-up warm-up "
          f"{f'{warm_s:.2f} s' if warm_s else 'none (3 s wait)'}, "
          f"ready {time.perf_counter() - t_start:.1f} s after start")
    a0, r0 = _vram()
    print(f"VRAM after the warm-up: torch allocated {a0:.2f} GiB, reserved {r0:.2f} GiB")
    print(f"by pool: {_pools()}")
    print(f"\n| phase ({phase_s:.0f} s each) | frames | p50 ms | p95 | p99 | max | dropped | "
          "captures | host CPU ms/frame |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    phases = [("1 face after warm-up", lambda t0: one_face),
              ("a 2nd face appears", lambda t0: two_faces),
              ("4 faces", lambda t0: four_faces),
              ("back to 1 face", lambda t0: one_face),
              ("1 face growing from 15 % to 60 % of the height",
               lambda t0: growing(t0, phase_s))]
    slowest = []
    for name, make in phases:
        d0, c0, cpu0 = _drops(runner, cam), _captures(), time.process_time()
        t0 = time.perf_counter_ns()
        scene.script = make(t0 / 1e9)
        time.sleep(phase_s)
        t1 = time.perf_counter_ns()
        lat = metrics.between(t0, t1)
        cpu = (time.process_time() - cpu0) * 1e3 / max(len(lat), 1)
        print(f"| {name} | {len(lat)} {_stats(lat)} {_drops(runner, cam) - d0} | "
              f"{_captures() - c0} | {cpu:.2f} |", flush=True)
        slowest.append(f"* {name}: {_slowest(metrics, t0, t1)}")
    print("\nThe slowest frame of each phase:\n")
    print("\n".join(slowest))

    if soak_s > 0:
        print(f"\n# soak: 1-4 faces of 10-60 % height, a new scene every 0.5 s, {soak_s:.0f} s "
              "(per 30 s window)\n")
        print("| window | frames | p50 ms | p95 | p99 | max | dropped | captures | allocated "
              "GiB | reserved GiB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        scene.script = soak_script(seed)
        t_soak = time.perf_counter_ns()
        w = 0
        while (time.perf_counter_ns() - t_soak) / 1e9 < soak_s - 1e-3:
            span = min(30.0, soak_s - (time.perf_counter_ns() - t_soak) / 1e9)
            d0, c0 = _drops(runner, cam), _captures()
            t0 = time.perf_counter_ns()
            peak = (0.0, 0.0)
            end = time.perf_counter() + span
            while time.perf_counter() < end:
                time.sleep(0.5)
                a, r = _vram()
                peak = (max(peak[0], a), max(peak[1], r))
            t1 = time.perf_counter_ns()
            lat = metrics.between(t0, t1)
            print(f"| {w * 30}-{w * 30 + span:.0f} s | {len(lat)} {_stats(lat)} "
                  f"{_drops(runner, cam) - d0} | {_captures() - c0} | {peak[0]:.2f} | "
                  f"{peak[1]:.2f} |", flush=True)
            slowest.append(f"* soak {w * 30}-{w * 30 + span:.0f} s: "
                           f"{_slowest(metrics, t0, t1)}")
            w += 1
        print("\nThe slowest frame of each window:\n")
        print("\n".join(slowest[len(phases):]))
    runner.stop(2.0)
    cam.close()
    print(f"by pool at the end: {_pools()}")
    print(f"\nrunner errors: {runner.errors}; torch max allocated "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, max reserved "
          f"{torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")


def _camera_frame(engine: Any, frame: np.ndarray, lend: bool) -> np.ndarray:
    """The camera's next frame: written into a buffer the engine lends (pinned memory, which
    its stage uploads without a copy), or into a fresh array of its own. Either way the write
    is the camera's (its decoder's) work, made outside the measure. Trees from before
    ``Engine.lend`` get their own array."""
    buf = engine.lend(frame.shape) if lend and hasattr(engine, "lend") else None
    if buf is None:
        return frame.copy()
    np.copyto(buf, frame)
    return buf


def _host_row(paths: NeuralPaths, cfg: EngineConfig, cache: CacheConfig,
              frames: list[np.ndarray], n: int, warmup: int, landmarks: bool = True,
              lend: bool = True) -> tuple[float, float, float, int]:
    """ms per frame (p50), the process's CPU ms per frame over ``stage`` + ``process`` (the
    frame path's own host cost), over ``stage`` alone, and how many frames the stage copied.
    The camera's write of each frame (:func:`_camera_frame`, a 6 MB memcpy, ~0.9 ms on the
    H200's host) is made outside the measure."""
    import statistics

    from bench_frame_path import build

    engine, scripted = build(paths, cfg, cache, 1, SIZE)
    if not landmarks:
        engine.landmarker = None
    scripted.faces_at.fill(warmup + n + 1, engine.landmarker)
    times, cpu, cpu_stage = [], 0.0, 0.0
    staged = engine.stage(_camera_frame(engine, frames[0], lend))
    copies0 = getattr(engine.stager, "copies", 0)
    for i in range(warmup + n):
        scripted.index = i
        fresh = _camera_frame(engine, frames[(i + 1) % len(frames)], lend)
        c0 = time.process_time()
        nxt = engine.stage(fresh)
        cs = time.process_time()
        t1 = time.perf_counter()
        packet = engine.process(staged, i, t_capture_ns=i * 16_666_667, in_place=True)
        t2 = time.perf_counter()
        c1 = time.process_time()
        assert packet.swapped == 1
        del fresh, packet  # a lent buffer is free again once nothing holds the frame
        if i >= warmup:
            times.append((t2 - t1) * 1e3)
            cpu += c1 - c0
            cpu_stage += cs - c0
        staged = nxt
    copies = getattr(engine.stager, "copies", -1) - copies0
    return statistics.median(times), cpu * 1e3 / n, cpu_stage * 1e3 / n, copies


def host_rows(paths: NeuralPaths, n: int, warmup: int, profile: bool) -> None:
    """``Engine.process`` at 1080p with one face, frames staged one ahead and written in place
    (as the live runner runs it): ms per frame and the host CPU per frame (:func:`_host_row`),
    with the camera writing into lent pinned buffers (the live runner's capture) and, for
    comparison, into arrays of its own."""
    print("\n# Engine.process, 1920x1080, 1 face, fp16 (staged one ahead, in place)\n")
    print("| cache | detect every | camera writes into | ms/frame p50 | host CPU ms/frame "
          "(stage + process) | of it stage | frames the stage copied |")
    print("|---|---:|---|---:|---:|---:|---:|")
    frames = frames_for(SIZE, 8)
    rows = ((False, 1, True, True), (True, 3, True, True), (True, 3, True, False),
            (False, 1, True, False), (True, 3, False, True))
    for cache_on, every, landmarks, lend in rows:
        cfg = EngineConfig(engine="neural", backend="torch", precision="fp16", device="cuda",
                           face_selector="many", detect_every=every, smooth=False,
                           rotation="off")
        ms, cpu, cpu_stage, copies = _host_row(paths, cfg, CacheConfig(enabled=cache_on),
                                               frames, n, warmup, landmarks, lend)
        label = "on" if cache_on else "off"
        if cache_on and not landmarks:
            label += ", no 106-point landmarks (kps-only key)"
        into = "a lent pinned buffer" if lend else "its own array"
        print(f"| {label} | {every} | {into} | {ms:.2f} | {cpu:.2f} | {cpu_stage:.2f} | "
              f"{copies} of {n + warmup} |", flush=True)
    if profile:
        import cProfile
        import pstats

        from bench_frame_path import build

        cfg = EngineConfig(engine="neural", backend="torch", precision="fp16", device="cuda",
                           face_selector="many", detect_every=3, smooth=False, rotation="off")
        engine, scripted = build(paths, cfg, CacheConfig(enabled=True), 1, SIZE)
        scripted.faces_at.fill(warmup + n + 1, engine.landmarker)
        staged = engine.stage(_camera_frame(engine, frames[0], True))
        for i in range(warmup):
            scripted.index = i
            nxt = engine.stage(_camera_frame(engine, frames[(i + 1) % 8], True))
            engine.process(staged, i, in_place=True)
            staged = nxt
        prof = cProfile.Profile()
        for i in range(warmup, warmup + n):
            scripted.index = i
            fresh = _camera_frame(engine, frames[(i + 1) % 8], True)
            prof.enable()
            nxt = engine.stage(fresh)
            engine.process(staged, i, in_place=True)
            prof.disable()
            del fresh
            staged = nxt
        print(f"\n# cProfile, {n} frames, detect every 3 + cache, lent buffers (tottime, top 25)"
              "\n```")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        print("```")
        print("\n# cProfile, the same frames (cumulative, top 45)\n```")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
        print("```")


class _Steps:
    """Methods wrapped to add up the calling thread's CPU time and its wall time per label
    (while :attr:`on`)."""

    def __init__(self) -> None:
        self.cpu: dict[str, int] = {}
        self.wall: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.on = False

    def wrap(self, obj: Any, name: str, label: str) -> None:
        fn = getattr(obj, name)

        def timed(*a: Any, **k: Any) -> Any:
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                if self.on:
                    self.cpu[label] = self.cpu.get(label, 0) + time.thread_time_ns() - c0
                    self.wall[label] = self.wall.get(label, 0) + time.perf_counter_ns() - w0
                    self.calls[label] = self.calls.get(label, 0) + 1
        setattr(obj, name, timed)


def phase_rows(paths: NeuralPaths, n: int, warmup: int) -> None:
    """Where the host CPU of a frame goes: each step of ``Engine.process`` wrapped to add up
    the inference thread's own CPU time (``time.thread_time_ns``) and its wall time, per frame,
    cache on (106-point key, detect every 3) and off (detect every frame). Steps nest (the
    tracker runs inside ``find``); "process, other threads" is the process's CPU over the
    thread's own."""
    from bench_frame_path import build

    import livefuse.engine as engine_mod

    frames = frames_for(SIZE, 8)
    for cache_on, every in ((True, 3), (False, 1)):
        cfg = EngineConfig(engine="neural", backend="torch", precision="fp16", device="cuda",
                           face_selector="many", detect_every=every, smooth=False,
                           rotation="off")
        engine, scripted = build(paths, cfg, CacheConfig(enabled=cache_on), 1, SIZE)
        scripted.faces_at.fill(warmup + n + 1, engine.landmarker)
        steps = _Steps()
        wrap = steps.wrap
        wrap(engine, "stage", "stage")
        wrap(engine.path, "begin", "begin (wait for the upload)")
        wrap(engine, "_find", "find (detect/track, select, commit)")
        wrap(scripted.inner, "detect", "  detector")
        wrap(scripted.inner, "track", "  region tracker")
        wrap(scripted, "faces_at", "  (the bench's scripted faces)")
        if engine.landmarker is not None:
            wrap(engine.landmarker, "landmarks", "landmarks (+ the bench's points)")
            wrap(engine.landmarker.inner, "landmarks", "  106-point landmarker")
        wrap(engine, "_patches", "patches (key, lookup, rewarp or render)")
        wrap(engine_mod, "pose_key", "  pose key")
        wrap(engine_mod, "rewarp", "  rewarp (hit)")
        wrap(engine.renderer, "render", "  render (miss)")
        wrap(engine.path, "paste", "paste")
        wrap(engine.path, "fetch", "fetch (read-back)")
        wrap(engine.path, "finish", "finish (write the regions)")
        wrap(engine, "_verify", "verify (guards)")
        staged = engine.stage(_camera_frame(engine, frames[0], True))
        total_cpu = total_thread = total_wall = 0
        for i in range(warmup + n):
            scripted.index = i
            fresh = _camera_frame(engine, frames[(i + 1) % len(frames)], True)
            steps.on = i >= warmup
            p0, t0, w0 = time.process_time_ns(), time.thread_time_ns(), time.perf_counter_ns()
            nxt = engine.stage(fresh)
            engine.process(staged, i, t_capture_ns=i * 16_666_667, in_place=True)
            if steps.on:
                total_cpu += time.process_time_ns() - p0
                total_thread += time.thread_time_ns() - t0
                total_wall += time.perf_counter_ns() - w0
            del fresh
            staged = nxt
        steps.on = False
        print(f"\n# host CPU by step, cache {'on (106-point key)' if cache_on else 'off'}, "
              f"detect every {every}, {n} frames; us per frame\n")
        print("| step | thread CPU | wall | calls/frame |")
        print("|---|---:|---:|---:|")
        for label, c in steps.cpu.items():
            print(f"| {label} | {c / n / 1e3:.0f} | {steps.wall[label] / n / 1e3:.0f} | "
                  f"{steps.calls[label] / n:.2f} |")
        print(f"| **stage + process, the thread** | {total_thread / n / 1e3:.0f} | "
              f"{total_wall / n / 1e3:.0f} | |")
        print(f"| process, other threads | {(total_cpu - total_thread) / n / 1e3:.0f} | | |",
              flush=True)

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase-seconds", type=float, default=6.0)
    ap.add_argument("--soak-seconds", type=float, default=120.0)
    ap.add_argument("--n", type=int, default=300, help="frames per host-CPU row")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--host-only", action="store_true")
    ap.add_argument("--no-host", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile the host (one row)")
    ap.add_argument("--phases", action="store_true",
                    help="then the host CPU by step of Engine.process (cache on and off)")
    ap.add_argument("--tree", default=None, help="run this livefuse tree (A/B)")
    ap.add_argument("--ab-live", type=float, default=0.0, metavar="SECONDS",
                    help="first, the live A/B of the landmarker and the GIL switch interval")
    ap.add_argument("--models", default=None,
                    help="folder for the replicas (reused when there; default: a temporary one)")
    ap.add_argument("--blocking-sync", action="store_true",
                    help="CUDA waits on the host sleep instead of spinning "
                         "(cudaDeviceScheduleBlockingSync, set before the context exists)")
    args = ap.parse_args()
    import tempfile

    import torch

    if args.blocking_sync:
        import ctypes

        rc = ctypes.CDLL("libcudart.so.13").cudaSetDeviceFlags(0x04)
        print(f"# cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) -> {rc}")

    from livefuse.bench import git_commit, machine
    from livefuse.testing.replica_landmark import build_landmark106_replica
    from livefuse.testing.replicas import build_arcface_replica, build_scrfd_replica
    from livefuse.testing.synthetic import build_synthetic_inswapper

    livefuse = sys.modules["livefuse"]
    print(f"# bench_live_tail, tree {Path(livefuse.__file__).parents[1]}, commit {git_commit()}, "
          f"{machine()}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.models or tmp)
        d.mkdir(parents=True, exist_ok=True)
        files = (d / "det_10g.onnx", d / "w600k_r50.onnx", d / "inswapper_128.onnx",
                 d / "2d106det.onnx")
        if not files[3].is_file():
            build_landmark106_replica(files[3])
        if all(f.is_file() for f in files[:3]):
            paths = NeuralPaths(*files[:3], landmarker=files[3])
        else:
            paths = NeuralPaths(build_scrfd_replica(files[0]), build_arcface_replica(files[1]),
                                build_synthetic_inswapper(files[2], width=128),
                                landmarker=files[3])
        if args.ab_live > 0:
            ab_live(paths, args.ab_live)
        if not args.host_only:
            live(paths, args.phase_seconds, args.soak_seconds, args.seed)
        if not args.no_host:
            host_rows(paths, args.n, args.warmup, args.profile)
        if args.phases:
            phase_rows(paths, args.n, args.warmup)


if __name__ == "__main__":
    main()
