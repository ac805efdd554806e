"""The neural frame path end to end: Engine.process per frame, then LiveRunner fps and latency.

Replica models with random weights (no real weights exist on the test machines): the inswapper
port at full size (``--width 128``, 138.3 M parameters) exported to ONNX and loaded back through
the structural loader, plus the synthetic SCRFD / ArcFace stand-ins of the test suite. The SCRFD
stand-in is a few pooling ops, so the ``detect`` column is the frame path's detection overhead
(resize, letterbox, ONNX Runtime call, NMS, kps mapping) rather than det_10g's convolutions.

Usage: python benchmarks/bench_neural_live.py [--width 128] [--frames 120] [--seconds 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from synthetic_faces import build_arcface, build_scrfd

from livefuse.bench import git_commit, machine
from livefuse.config import AppConfig, CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.io.sinks import CallbackSink
from livefuse.io.sources import FramesSource
from livefuse.live import LiveRunner
from livefuse.swap.neural_engine import NeuralPaths, build_landmarker, build_neural
from livefuse.testing.replica_landmark import build_landmark106_replica
from livefuse.testing.scripted import ScriptedLandmarker
from livefuse.testing.synthetic import build_synthetic_inswapper
from livefuse.types import Frame


def clip(size: tuple[int, int], frames: int, seed: int = 0) -> list[Frame]:
    """Dark texture and one white block that the SCRFD stand-in reads as a face; the block
    steps one detector cell every 6 frames (a head moving across the picture)."""
    w, h = size
    cell = 32 * max(w, h) / 640  # a stride-32 detector cell in frame px (letterbox scale)
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 50, (h, w, 3), dtype=np.uint8)
    out = []
    cols = int(w / cell) - 8
    for i in range(frames):
        f = base.copy()
        cx = 4 + (i // 6) % max(cols, 1)
        cy = int(h / cell) // 2
        x0, y0 = round(cx * cell), round(cy * cell)
        f[y0:y0 + round(cell), x0:x0 + round(cell)] = 255
        out.append(f)
    return out


_PLAIN: dict[str, Any] = {"channels_last": False, "cuda_graph": False, "fused": frozenset()}
_CL = {**_PLAIN, "channels_last": True}
_GRAPH = {**_CL, "cuda_graph": True}

VARIANTS: dict[str, tuple[str, dict[str, Any], bool]] = {
    # name: (precision, NeuralSwapper options, cache on)
    "fp32 strict": ("fp32", _PLAIN, False),
    "fp16 half + channels_last": ("fp16", _CL, False),
    "fp16 + CL + cache (N=5, thr 0.8)": ("fp16", _CL, True),
    "fp16 + CL + CUDA graph": ("fp16", _GRAPH, False),
    "fp16 + CL + CUDA graph + cache": ("fp16", _GRAPH, True),
    "fp16 + CL + CUDA graph + GPU paste": ("fp16", {**_GRAPH, "gpu_paste": True}, False),
    "fp16 + CL + compile + GPU paste": ("fp16", {**_CL, "compile_mode": "reduce-overhead",
                                                 "gpu_paste": True}, False),
    # NeuralSwapper's CUDA defaults: channels_last + CUDA graph + fused layers
    "fp16 defaults (CL + graph + fused)": ("fp16", {}, False),
    "fp16 defaults + cache": ("fp16", {}, True),
    "fp16 defaults + GPU paste": ("fp16", {"gpu_paste": True}, False),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=128, help="inswapper width (128 = full size)")
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = ap.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    d = Path(tempfile.mkdtemp(prefix="livefuse_bench_"))
    paths = NeuralPaths(build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx"),
                        build_synthetic_inswapper(d / "inswapper.onnx", width=args.width),
                        landmarker=build_landmark106_replica(d / "2d106det.onnx"))
    source = LoadedImage(bgr=clip((640, 640), 1, seed=1)[0], alpha=None, path=d / "src.png")
    print(f"# neural frame path, commit {git_commit()}, {machine()}, {name}, "
          f"torch {torch.__version__}, inswapper width {args.width}")
    print("\n## Engine.process, one face, ms per frame (median after warm-up)\n")
    print("| size | variant | ms/frame p50 | fps | detect ms | swap ms | × vs fp32 | "
          "precision in use |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    best: tuple[float, str] = (1e9, "fp32 strict")
    for size in ((640, 480), (1280, 720)):
        frames = clip(size, args.frames)
        base_ms = None
        for vname in args.variants:
            precision, opts, cache_on = VARIANTS[vname]
            if device == "cpu" and (precision != "fp32" or opts):
                continue
            cfg = EngineConfig(engine="neural", backend="torch", precision=precision,  # type: ignore[arg-type]
                               device=device)
            cache = CacheConfig(enabled=True, threshold=0.8, refresh_every_n=5) if cache_on \
                else None
            try:
                analyser, renderer = build_neural(cfg, paths, **opts)
                # the 2d106det runner at its full cost; its random answer replaced by a still
                # face on the detected kps (the clip's faces do not talk)
                landmarker = ScriptedLandmarker(
                    None, inner=build_landmarker(cfg, renderer, paths)) if cache_on else None
                engine = Engine(cfg, components=(analyser, renderer), cache=cache,
                                landmarker=landmarker)
                engine.set_source(source)
                for i, f in enumerate(frames[:20]):  # warm-up: cuDNN, graph capture, compile
                    engine.process(f, index=i)
            except Exception as exc:  # one broken variant must not hide the others' figures
                print(f"| {size[0]}x{size[1]} | {vname} | failed: {type(exc).__name__}: "
                      f"{str(exc)[:120]} |||||", flush=True)
                continue
            per, det, swp = [], [], []
            for i, f in enumerate(frames):
                t0 = time.perf_counter()
                p = engine.process(f, index=20 + i)
                per.append((time.perf_counter() - t0) * 1e3)
                det.append(p.timings_ms.get("detect", 0.0))
                swp.append(p.timings_ms.get("swap", 0.0))
            ms = statistics.median(per)
            base_ms = base_ms or ms
            if size == (1280, 720) and ms < best[0]:
                best = (ms, vname)
            print(f"| {size[0]}x{size[1]} | {vname} | {ms:.2f} | {1000 / ms:.0f} | "
                  f"{statistics.mean(det):.2f} | {statistics.mean(swp):.2f} | "
                  f"{base_ms / ms:.2f} | {engine.precision_in_use} |", flush=True)
            del engine
            if device == "cuda":
                torch.cuda.empty_cache()

    vname = best[1]
    precision, opts, cache_on = VARIANTS[vname]
    print(f"\n## LiveRunner end to end ({vname}), {args.seconds:.0f} s per row\n")
    print("| size | input fps | processed fps | latency p50 ms | latency p95 ms | dropped | "
          "VRAM MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for size in ((640, 480), (1280, 720)):
        for fps in (30.0, 60.0):
            cfg = EngineConfig(engine="neural", backend="torch", precision=precision,  # type: ignore[arg-type]
                               device=device)
            engine = Engine(cfg, components=build_neural(cfg, paths, **opts))
            runner = LiveRunner(engine, FramesSource(clip(size, args.frames), fps),
                                [CallbackSink(lambda f, t: None)], AppConfig(engine=cfg),
                                source_face=source)
            runner.start()
            time.sleep(2.0)  # warm-up
            t0 = time.perf_counter()
            s0 = runner.metrics.snapshot()
            time.sleep(args.seconds)
            s = runner.metrics.snapshot()
            dt = time.perf_counter() - t0
            runner.stop()
            vram = s.vram_process_mib if s.vram_process_mib is not None else float("nan")
            print(f"| {size[0]}x{size[1]} | {(s.frames_in - s0.frames_in) / dt:.1f} | "
                  f"{(s.frames_processed - s0.frames_processed) / dt:.1f} | "
                  f"{s.latency_p50_ms:.1f} | {s.latency_p95_ms:.1f} | "
                  f"{sum(s.dropped.values()) - sum(s0.dropped.values())} | {vram:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
