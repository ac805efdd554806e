"""Issue 11's figures on the neural frame path: pixel boost (ms and sharpness), the face enhancer
at 1080p with the pose cache on and off, and the quality gate (PSNR/SSIM of fp16, the cache, the
enhancer and the masks against their references).

Models: full-size random-weight replicas (det_10g, w600k_r50, inswapper_128, and the GFPGAN-1.4
architecture exported to ONNX and run through ``OnnxModule``); the scripted faces of
``bench_frame_path.py`` (the detector runs in full, its random answer is replaced). Sharpness is
the variance of the Laplacian of the output's face region: with random weights it says how much
detail the path can carry, not how a trained model looks.

    python benchmarks/bench_effects.py --device cuda --n 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import cv2

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_frame_path import ScriptedAnalyser, frames_for, script

from livefuse.bench import bench_quality, git_commit, machine
from livefuse.config import CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.samples import astronaut
from livefuse.swap.enhance import FaceEnhancer
from livefuse.swap.neural_engine import NeuralPaths, build_neural
from livefuse.testing import replicas_masks as R
from livefuse.testing.replicas import build_arcface_replica, build_scrfd_replica
from livefuse.testing.synthetic import build_synthetic_inswapper
from livefuse.types import Frame


class Maker:
    """Engines for a config, on the replicas, with the scripted faces of one frame size."""

    def __init__(self, paths: NeuralPaths, enhancer_file: Path | None, size: tuple[int, int],
                 n_faces: int = 1) -> None:
        self.paths, self.enhancer_file, self.size, self.n_faces = paths, enhancer_file, size, \
            n_faces

    def __call__(self, cfg: EngineConfig, cache: CacheConfig | None) -> Engine:
        analyser, renderer = build_neural(cfg, self.paths)
        scripted = ScriptedAnalyser(analyser, script(self.size, self.n_faces))
        enh = None
        if cfg.enhancer is not None and self.enhancer_file is not None:
            on_gpu = renderer.device.startswith("cuda")
            enh = FaceEnhancer(self.enhancer_file, "torch" if on_gpu else "onnxruntime",
                               device=renderer.device, blend=cfg.enhancer_blend,
                               cuda_graph=on_gpu)
        engine = Engine(replace(cfg, enhancer=None), components=(scripted, renderer),
                        cache=cache, enhancer=enh)
        engine.config = cfg
        engine.set_source(LoadedImage(bgr=astronaut(), alpha=None, path=Path("a.png")))
        real = engine.process

        def process(frame: Any, index: int = 0, *a: Any, **kw: Any) -> Any:
            scripted.index = index
            return real(frame, index, *a, **kw)

        engine.process = process  # type: ignore[method-assign]
        return engine


def timed(engine: Engine, frames: list[Frame], n: int, warmup: int
          ) -> tuple[float, Any, float]:
    """Median ms/frame, the last packet, and the mean enhance ms over the frames it ran on."""
    times, enh = [], []
    last = None
    for i in range(warmup + n):
        t = time.perf_counter()
        last = engine.process(frames[i % len(frames)].copy(), i, t_capture_ns=i * 16_666_667,
                              in_place=True)
        if i >= warmup:
            times.append((time.perf_counter() - t) * 1e3)
            if "enhance" in last.timings_ms:
                enh.append(last.timings_ms["enhance"])
    return statistics.median(times), last, statistics.mean(enh) if enh else 0.0


def sharpness(frame: Frame, faces: Any) -> float:
    x0, y0, x1, y1 = (int(v) for v in faces[0].bbox)
    grey = cv2.cvtColor(frame[max(y0, 0):y1, max(x0, 0):x1], cv2.COLOR_BGR2GRAY)
    return float(cv2.Laplacian(grey, cv2.CV_64F).var())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--width", type=int, default=128, help="inswapper replica width")
    ap.add_argument("--gfpgan-width", type=float, default=1.0)
    ap.add_argument("--quality-frames", type=int, default=40)
    args = ap.parse_args()
    size = (1920, 1080)
    frames = frames_for(size, 8)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        t = time.perf_counter()
        paths = NeuralPaths(build_scrfd_replica(d / "det_10g.onnx"),
                            build_arcface_replica(d / "w600k_r50.onnx"),
                            build_synthetic_inswapper(d / "inswapper_128.onnx", width=args.width),
                            occluder=R.build_replica("occluder", d / "xseg.onnx"),
                            parser=R.build_replica("parser", d / "parser.onnx"))
        gfpgan = R.export_gfpgan(R.random_gfpgan(width=args.gfpgan_width), d / "gfpgan.onnx")
        print(f"(replicas built in {time.perf_counter() - t:.0f} s)")
        print(f"# commit {git_commit()}, {machine()}, 1920x1080, 1 face, fp16, {args.n} frames")
        make = Maker(paths, gfpgan, size)
        base = EngineConfig(engine="neural", backend="torch", precision="fp16",
                            device=args.device, face_selector="many", smooth=False,
                            rotation="off")

        print("\n## Pixel boost\n| pixel boost | ms/frame p50 | x vs 128 | sharpness | "
              "x vs 128 |\n|---:|---:|---:|---:|---:|")
        ref = None
        for pb in (128, 256, 384, 512):
            ms, last, _ = timed(make(replace(base, pixel_boost=pb), None), frames, args.n,
                                args.warmup)
            sharp = sharpness(last.output, last.faces)
            ref = ref or (ms, sharp)
            print(f"| {pb} | {ms:.2f} | {ms / ref[0]:.2f} | {sharp:.0f} | "
                  f"{sharp / ref[1]:.2f} |", flush=True)

        print("\n## Face enhancer (GFPGAN-1.4 architecture, full size) and the pose cache\n"
              "| enhancer | cache | ms/frame p50 | fps | x fps vs no enhancer (same cache) | "
              "enhance ms (when run) |\n|---|---|---:|---:|---:|---:|")
        plain = {}
        for enh in (None, "gfpgan_1.4"):
            for cache_on in (False, True):
                cfg = replace(base, enhancer=enh, enhancer_blend=80.0)
                engine = make(cfg, CacheConfig(enabled=cache_on))
                ms, last, enh_ms = timed(engine, frames, args.n, args.warmup)
                if enh is None:
                    plain[cache_on] = ms
                print(f"| {enh or 'off'} | {'on' if cache_on else 'off'} | {ms:.2f} | "
                      f"{1e3 / ms:.0f} | {plain[cache_on] / ms:.2f} | {enh_ms:.2f} |",
                      flush=True)

        print("\n## Quality gate (face region, against the reference)")
        bench_quality(base=base, make_engine=make, cuda=args.device.startswith("cuda"),
                      clip=frames_for(size, args.quality_frames), enhancer="gfpgan_1.4",
                      masks=True, period_ns=16_666_667)


if __name__ == "__main__":
    main()
