"""The neural frame path end to end (issue 9): ``Engine.process`` at 1080p and 720p, 1 and 4
faces, cache off and on, fp32 strict vs fp16, all in one run, with ms per stage and the host's CPU
time per frame; then LiveRunner at 60 fps into a virtual camera (latency to the real send).

Models: random-weight replicas with the released architectures at full size: SCRFD-10GF
(det_10g), ArcFace IResNet-50 (w600k_r50) and inswapper_128 (138 M parameters). Random weights
find random boxes, so the detector runs in full (network, decoding, NMS and its read-back) and its
answer is then replaced by N scripted faces that drift and roll across the frame (the rest of the
path sees 1 or 4 real-sized faces; tracking frames run the real region detector on them).

Every row builds a fresh Engine; times are medians over ``--n`` frames after ``--warmup`` frames.
"ms/frame" is wall time of ``Engine.process`` (it ends with the download of the pasted regions,
a device sync, so it is the full GPU time too); stage columns come from a second pass with
``sync_timings`` (each stage synchronised, so their sum is a little above ms/frame).

    python benchmarks/bench_frame_path.py --device cuda --n 200
    python benchmarks/bench_frame_path.py --device cpu --n 3 --sizes 640x360 --width 8   # smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.bench import git_commit, machine
from livefuse.config import AppConfig, CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.faces.analyser import AnyFrame
from livefuse.imaging import LoadedImage
from livefuse.samples import astronaut, insightface_image
from livefuse.swap.neural_engine import NeuralPaths, build_landmarker, build_neural
from livefuse.testing.face_points import points_at_kps
from livefuse.testing.replica_landmark import build_landmark106_replica
from livefuse.testing.replicas import build_arcface_replica, build_scrfd_replica
from livefuse.testing.synthetic import build_synthetic_inswapper, face_kps
from livefuse.types import Face, Frame, StagedFrame

try:
    from livefuse.faces.analyser import DetectsAhead
except ImportError:  # a BENCH_TREE from before it (A/B against older code)
    DetectsAhead = None  # type: ignore[assignment,misc]


try:
    from livefuse.faces import rotation as _rotation
except ImportError:  # a BENCH_TREE from before --rotation
    _rotation = None  # type: ignore[assignment]

_TURNED: set[int] = set()
"""ids of the frames ``--rotation`` turned and has not yet detected on (see below)."""

if _rotation is not None:
    _rotate_frame = _rotation.rotate_frame

    def _rotate_marked(frame: AnyFrame, angle: int) -> AnyFrame:
        turned = _rotate_frame(frame, angle)
        _TURNED.add(id(turned))
        return turned

    _rotation.rotate_frame = _rotate_marked


class ScriptedAnalyser:
    """Runs the real detector / region tracker (their full cost), then answers with scripted
    faces: ``faces_at(i)`` for frame ``i`` (set :attr:`index` before each ``process``).

    A frame turned by ``--rotation`` (the default ``auto`` sweeps a stream's first frame) is
    answered with no face, as a real detector answers an upright face turned a quarter turn or
    more: answering the script there too showed the engine eight faces at eight places, so
    every frame swept every turn (25 fps on the H100 instead of ~190, 2026-12-05)."""

    def __init__(self, inner: Any, faces_at: Any) -> None:
        self.inner, self.faces_at, self.index = inner, faces_at, 0

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        self.inner.detect(frame)
        if id(frame) in _TURNED:
            _TURNED.discard(id(frame))
            return []
        return self.faces_at(self.index)

    def detect_ahead(self, frame: StagedFrame) -> None:
        # the real detector's own early start (a pipelined run), read by detect() above
        if DetectsAhead is not None and isinstance(self.inner, DetectsAhead):
            self.inner.detect_ahead(frame)

    def track(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face | None]:
        self.inner.track(frame, faces)
        now = self.faces_at(self.index)
        return [replace(now[i], track_id=f.track_id) if i < len(now) else None
                for i, f in enumerate(faces)]

    def embed(self, frame: Frame, face: Face) -> Any:
        return self.inner.embed(frame, face)

    def reset(self) -> None:
        if hasattr(self.inner, "reset"):  # trees from before Analyser.reset (--tree A/B)
            self.inner.reset()


def script(size: tuple[int, int], n_faces: int) -> Any:
    """Faces ~ 18 % of the frame height (a webcam close-up at 1 face), on a 2x2 grid for 4,
    drifting 0.2 % of the width and rolling 1 degree per frame, back and forth."""
    w, h = size
    eye = 0.075 * h if n_faces == 1 else 0.05 * h
    centres = [(w / 2, h / 2)] if n_faces == 1 else \
        [(w * (0.3 + 0.4 * (k % 2)), h * (0.3 + 0.4 * (k // 2))) for k in range(n_faces)]

    def faces_at(i: int) -> list[Face]:
        t = np.sin(i / 15.0)
        out = []
        for cx, cy in centres:
            kps = face_kps(cx + 0.02 * w * t, cy, eye, 8.0 * t)
            x0, y0 = kps.min(0) - eye
            x1, y1 = kps.max(0) + eye
            out.append(Face(bbox=np.array([x0, y0, x1, y1], np.float32), kps=kps, score=0.9))
        return out
    return Memo(faces_at)


class Memo:
    """``faces_at`` made once per frame index: :meth:`fill` runs it for the frames a benchmark
    will time before the clock starts, so the host-CPU figures hold the frame path's work and
    not the script's (~0.1-0.16 ms a frame on the H200's host, docs/BENCHMARKS.md §12.5)."""

    def __init__(self, faces_at: Any) -> None:
        self.faces_at, self.done = faces_at, {}

    def __call__(self, i: int) -> list[Face]:
        faces = self.done.get(i)
        if faces is None:
            faces = self.done[i] = self.faces_at(i)
        return list(faces)

    def fill(self, n: int, landmarker: Any = None) -> None:
        """Frames 0..n-1, and (with a :class:`NeutralLandmarker`) their neutral 106 points."""
        for i in range(n):
            for f in self(i):
                if isinstance(landmarker, NeutralLandmarker):
                    landmarker.neutral(f.kps)


class NeutralLandmarker:
    """Runs the real landmarker (its full cost), then answers a still, neutral face on each
    face's kps (random-weight replicas see no real face): as
    :class:`~livefuse.testing.scripted.ScriptedLandmarker` with ``points_at=None``, with the
    points made once per kps (:meth:`Memo.fill` makes them before the clock starts)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._points: dict[bytes, Any] = {}

    def neutral(self, kps: Any) -> Any:
        key = np.asarray(kps, np.float32).tobytes()
        pts = self._points.get(key)
        if pts is None:
            pts = self._points[key] = np.asarray(points_at_kps(kps), np.float32)
        return pts

    def landmarks(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face]:
        self.inner.landmarks(frame, faces)
        return [replace(f, landmarks_106=self.neutral(f.kps)) for f in faces]


def frames_for(size: tuple[int, int], count: int) -> list[Frame]:
    from livefuse.imaging import load_image

    photo = load_image(insightface_image("t1.jpg")).bgr
    base = np.asarray(cv2.resize(photo, size, interpolation=cv2.INTER_AREA), np.uint8)
    rng = np.random.default_rng(0)
    return [np.clip(base.astype(np.int16) + rng.integers(-3, 4, base.shape), 0, 255)
            .astype(np.uint8) for _ in range(count)]


def build(paths: NeuralPaths, cfg: EngineConfig, cache: CacheConfig | None, n_faces: int,
          size: tuple[int, int], sync_timings: bool = False,
          warm_up: bool = False) -> tuple[Engine, ScriptedAnalyser]:
    analyser, renderer = build_neural(cfg, paths)
    scripted = ScriptedAnalyser(analyser, script(size, n_faces))
    # with the cache on, the 2d106det runner runs on every frame (its full cost), then its
    # random-weight answer is replaced by a still, neutral face on each scripted face's kps
    landmarker = NeutralLandmarker(build_landmarker(cfg, renderer, paths)) \
        if cache is not None and cache.enabled else None
    engine = Engine(cfg, components=(scripted, renderer), cache=cache,
                    sync_timings=sync_timings, landmarker=landmarker, warm_up=warm_up)
    scripted.index = 0  # the source face: the first scripted face, on the astronaut photo
    engine.set_source(LoadedImage(bgr=astronaut(), alpha=None, path=Path("astronaut.png")))
    return engine, scripted


def run_rows(paths: NeuralPaths, device: str, sizes: list[tuple[int, int]], n: int,
             warmup: int, faces: list[int], precisions: list[str]) -> None:
    import torch

    # fp32 strict: no TF32 anywhere (the detector's and recogniser's convs use the global flags)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"# Engine.process, commit {git_commit()}, {machine()}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0) if device.startswith('cuda') else 'cpu'}")
    print("| size | faces | precision | cache | detect every | ms/frame p50 | fps | host CPU "
          "ms/frame | detect | track | render | paste | hits |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for size in sizes:
        frames = frames_for(size, 8)
        for n_faces in faces:
            for precision in precisions:
                for cache_on, every in ((False, 1), (True, 1), (True, 3)):
                    if every == 3 and precision == "fp32":
                        continue
                    cfg = EngineConfig(engine="neural", backend="torch", precision=precision,
                                       device=device, face_selector="many", detect_every=every,
                                       smooth=False, rotation="off")
                    cache = CacheConfig(enabled=cache_on)
                    ms, cpu, hits = _time(paths, cfg, cache, n_faces, size, frames, n, warmup)
                    stages = _stages(paths, cfg, cache, n_faces, size, frames, max(n // 4, 10),
                                     warmup)
                    row = (size, n_faces, precision, cache_on, every, ms, cpu, stages, hits)
                    rows.append(row)
                    print(f"| {size[0]}x{size[1]} | {n_faces} | {precision} | "
                          f"{'on' if cache_on else 'off'} | {every} | {ms:.2f} | {1e3 / ms:.0f} | "
                          f"{cpu:.2f} | {stages.get('detect', 0):.2f} | "
                          f"{stages.get('track', 0):.2f} | {stages.get('render', 0):.2f} | "
                          f"{stages.get('paste', 0):.2f} | {hits:.0%} |", flush=True)
    _ratios(rows)


def _time(paths: NeuralPaths, cfg: EngineConfig, cache: CacheConfig, n_faces: int,
          size: tuple[int, int], frames: list[Frame], n: int, warmup: int
          ) -> tuple[float, float, float]:
    """As the live loop runs it: frame i+1 is staged (copied to pinned memory, upload started)
    before frame i is processed, and the output is written into the frame (``in_place``); the
    timer covers ``process`` alone, the host CPU figure covers staging too."""
    engine, scripted = build(paths, cfg, cache, n_faces, size)
    scripted.faces_at.fill(warmup + n + 1, engine.landmarker)
    times, cpu0 = [], 0.0
    staged = engine.stage(frames[0].copy())
    for i in range(warmup + n):
        scripted.index = i
        if i == warmup:
            cpu0 = time.process_time()
        nxt = engine.stage(frames[(i + 1) % len(frames)].copy())
        t = time.perf_counter()
        packet = engine.process(staged, i, t_capture_ns=i * 16_666_667, in_place=True)
        if i >= warmup:
            times.append((time.perf_counter() - t) * 1e3)
        staged = nxt
        assert packet.swapped == n_faces, (packet.swapped, n_faces)
    cpu = (time.process_time() - cpu0) * 1e3 / n
    st = engine.cache.stats
    lookups = st.hits + st.misses + st.forced_refreshes
    return statistics.median(times), cpu, st.hits / lookups if lookups else 0.0


def _stages(paths: NeuralPaths, cfg: EngineConfig, cache: CacheConfig, n_faces: int,
            size: tuple[int, int], frames: list[Frame], n: int, warmup: int) -> dict[str, float]:
    engine, scripted = build(paths, cfg, cache, n_faces, size, sync_timings=True)
    acc: dict[str, list[float]] = {}
    for i in range(warmup + n):
        scripted.index = i
        staged = engine.stage(frames[i % len(frames)].copy())
        p = engine.process(staged, i, t_capture_ns=i * 16_666_667, in_place=True)
        if i >= warmup:
            for k, v in p.timings_ms.items():
                acc.setdefault(k, []).append(v)
    # a stage that does not run every frame (detect with detect-every 3) is averaged per frame
    return {k: sum(v) / n for k, v in acc.items()}


def _ratios(rows: list[Any]) -> None:
    print("\nRatios (same run):")
    by = {(r[0], r[1], r[2], r[3], r[4]): r[5] for r in rows}
    for size in sorted({r[0] for r in rows}):
        f32, f16 = by.get((size, 1, "fp32", False, 1)), by.get((size, 1, "fp16", False, 1))
        one, four = by.get((size, 1, "fp16", False, 1)), by.get((size, 4, "fp16", False, 1))
        d3 = by.get((size, 1, "fp16", True, 3))
        tag = f"{size[0]}x{size[1]}"
        if f32 and f16:
            print(f"* {tag}: fp16 end to end {f32 / f16:.2f}x faster than fp32 (1 face, no cache)")
        if one and four:
            print(f"* {tag}: 4 faces take {four / one:.2f}x the time of 1 face (fp16, no cache)")
        if d3:
            print(f"* {tag}: detect-every 3 + cache, 1 face: {1e3 / d3:.0f} fps")


def _indexed(process: Any, scripted: ScriptedAnalyser) -> Any:
    """``process`` that first tells the scripted analyser which frame it is on."""
    def run(frame: Any, index: int = 0, *a: Any, **kw: Any) -> Any:
        scripted.index = index
        return process(frame, index, *a, **kw)
    return run


class NullCam:
    """A pyvirtualcam backend that drops every frame (the virtual camera's send, no device)."""

    def __init__(self, *, width: int, height: int, fps: float, fourcc: int,
                 device: str | None, **kw: Any) -> None:
        self._fourcc = fourcc

    def close(self) -> None:
        pass

    def send(self, frame: np.ndarray) -> None:
        pass

    def device(self) -> str:
        return "null"

    def native_fourcc(self) -> int | None:
        return self._fourcc


def register_null_camera() -> None:
    """Register :class:`NullCam` as pyvirtualcam's ``null`` backend.

    Raises:
        ImportError: pyvirtualcam is not installed.
    """
    import pyvirtualcam

    pyvirtualcam.register_backend("null", NullCam)


def live(paths: NeuralPaths, device: str, size: tuple[int, int], seconds: float) -> None:
    """LiveRunner, source paced at 60 fps, into a virtual camera (a pyvirtualcam backend that
    drops the frames): latency from capture to the camera's send."""
    from livefuse.io.sinks import VirtualCameraSink
    from livefuse.io.sources import FramesSource
    from livefuse.live import LiveRunner

    try:
        register_null_camera()
    except ImportError:
        print("\n(live row skipped: pyvirtualcam is not installed)")
        return
    print(f"\n# LiveRunner, {size[0]}x{size[1]} source at 60 fps -> virtual camera, "
          f"{seconds:.0f} s per row")
    print("| faces | cache | detect every | in fps | out fps | latency p50 ms | p95 ms | "
          "dropped | unsent | host CPU % |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    frames = frames_for(size, 30)
    for n_faces, cache_on, every in ((1, False, 1), (1, True, 3), (4, True, 3)):
        cfg = EngineConfig(engine="neural", backend="torch", precision="fp16", device=device,
                           face_selector="many", detect_every=every, rotation="off")
        cache = CacheConfig(enabled=cache_on)
        engine, scripted = build(paths, cfg, cache, n_faces, size, warm_up=True)  # as live
        engine.process = _indexed(engine.process, scripted)  # type: ignore[method-assign]
        cam = VirtualCameraSink(size[0], size[1], 60.0, backend="null")
        runner = LiveRunner(engine, FramesSource(frames, fps=60.0), [cam],
                            AppConfig(engine=cfg, cache=cache))
        time.sleep(0.5)
        runner.start()
        time.sleep(1.0)  # warm-up: graphs captured
        cpu0, t0 = time.process_time(), time.perf_counter()
        m0 = runner.metrics.snapshot(memory=False)
        time.sleep(seconds)
        s = runner.metrics.snapshot(memory=False)
        cpu = (time.process_time() - cpu0) / (time.perf_counter() - t0) * 100
        runner.stop(2.0)
        cam.close()
        drops = sum(s.dropped.values()) - sum(m0.dropped.values())
        print(f"| {n_faces} | {'on' if cache_on else 'off'} | {every} | {s.input_fps:.1f} | "
              f"{s.output_fps:.1f} | {s.latency_p50_ms or 0:.2f} | {s.latency_p95_ms or 0:.2f} | "
              f"{drops} | {sum(s.unsent.values())} | {cpu:.0f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--sizes", default="1920x1080,1280x720")
    ap.add_argument("--faces", default="1,4")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--width", type=int, default=128, help="inswapper replica width")
    ap.add_argument("--live-seconds", type=float, default=5.0)
    ap.add_argument("--no-live", action="store_true")
    ap.add_argument("--live-only", action="store_true")
    args = ap.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        t = time.perf_counter()
        paths = NeuralPaths(build_scrfd_replica(d / "det_10g.onnx"),
                            build_arcface_replica(d / "w600k_r50.onnx"),
                            build_synthetic_inswapper(d / "inswapper_128.onnx", width=args.width),
                            landmarker=build_landmark106_replica(d / "2d106det.onnx"))
        print(f"(replicas built in {time.perf_counter() - t:.0f} s)")
        if not args.live_only:
            run_rows(paths, args.device, sizes, args.n, args.warmup,  # type: ignore[arg-type]
                     [int(f) for f in args.faces.split(",")], args.precisions.split(","))
        if not args.no_live and args.device.startswith("cuda"):
            live(paths, args.device, sizes[0], args.live_seconds)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
