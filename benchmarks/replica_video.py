"""Shared by the video and batch benchmarks: a generated 1080p clip with sound, the full-size
replica models, and engines with the scripted faces of ``bench_frame_path.py`` (the detector and
the region tracker run in full; their answer is replaced by one face that drifts and rolls)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

HERE = Path(__file__).resolve().parent
# BENCH_TREE: another livefuse tree for an A/B in one device call (the landed code's figures)
ROOT = Path(os.environ.get("BENCH_TREE") or HERE.parent).resolve()
sys.path[:0] = [str(ROOT), str(HERE)]
# Ray's worker processes inherit the environment, not this sys.path
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
if os.environ.get("BENCH_TREE"):
    # Ray puts the driver's working directory ahead of PYTHONPATH in its workers' sys.path: run
    # from the other tree, or the workers import this checkout's livefuse (the batch A/Bs of
    # docs/BENCHMARKS.md §13 before 2026-12-03's third session did: their base rows ran the new
    # worker code)
    os.chdir(ROOT)
__import__("livefuse")  # before bench_frame_path, which puts this checkout first on the path

from bench_frame_path import _indexed, build, frames_for  # noqa: E402

from livefuse.config import CacheConfig, EngineConfig  # noqa: E402
from livefuse.io.synthetic import write_tone  # noqa: E402
from livefuse.swap.neural_engine import NeuralPaths  # noqa: E402


def make_clip(path: Path, size: tuple[int, int] = (1920, 1080), seconds: float = 60.0,
              rate: int = 30) -> Path:
    """An H.264 clip of t1.jpg (resized, with sensor noise and a slow pan) with a 440 Hz AAC
    track; one keyframe per second, B-frames, so it can be cut into chunks."""
    frames = frames_for(size, 8)
    n = round(seconds * rate)
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=rate)
        vs.width, vs.height, vs.pix_fmt = size[0], size[1], "yuv420p"
        vs.options = {"crf": "20", "preset": "veryfast", "g": str(rate)}
        vs.codec_context.thread_type = "FRAME"
        astream = out.add_stream("aac", rate=48000)
        for i in range(n):
            img = np.roll(frames[i % len(frames)], (i % 60) * 2, axis=1)
            vf = av.VideoFrame.from_ndarray(img, format="bgr24")
            vf.pts, vf.time_base = i, Fraction(1, rate)
            for pkt in vs.encode(vf):
                out.mux(pkt)
        for pkt in vs.encode(None):
            out.mux(pkt)
        write_tone(out, astream, seconds)
    return path


def common_args(ap: argparse.ArgumentParser) -> None:
    """``--device --seconds --size --width``, the same in every video benchmark."""
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seconds", type=float, default=60.0, help="clip length")
    ap.add_argument("--size", default="1920x1080")
    ap.add_argument("--width", type=int, default=128, help="inswapper replica width")
    ap.add_argument("--engine", choices=("neural", "classic"), default="neural",
                    help="classic: the offline engine on the CPU (no replicas)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="keep the clip and the replicas here and reuse them when there (one "
                         "device call runs several benchmarks on the same files); default: a "
                         "temporary folder")


def prepare(folder: Path, size: tuple[int, int], seconds: float, width: int,
            replicas: bool = True) -> tuple[Path, NeuralPaths | None]:
    """The clip and (unless not ``replicas``) the replicas in ``folder``, each announced with
    the time it took."""
    t = time.perf_counter()
    clip = folder / f"clip-{size[0]}x{size[1]}-{seconds:g}s.mp4"
    if not clip.is_file():
        make_clip(clip, size, seconds)
    print(f"(clip {size[0]}x{size[1]}, {seconds:.0f} s at 30 fps, ready in "
          f"{time.perf_counter() - t:.0f} s)", flush=True)
    return clip, build_replicas(folder, width) if replicas else None


def build_replicas(folder: Path, width: int = 128) -> NeuralPaths:
    """Full-size det_10g, w600k_r50, inswapper_128 and 2d106det replicas (random weights) in
    ``folder`` (the 106-point landmarker is what lets the pose cache reuse a neural face)."""
    from livefuse.testing.replica_landmark import build_landmark106_replica
    from livefuse.testing.replicas import build_arcface_replica, build_scrfd_replica
    from livefuse.testing.synthetic import build_synthetic_inswapper

    t = time.perf_counter()
    files = (folder / "det_10g.onnx", folder / "w600k_r50.onnx",
             folder / f"inswapper_128-w{width}.onnx", folder / "2d106det.onnx")
    builders = (build_scrfd_replica, build_arcface_replica,
                lambda f: build_synthetic_inswapper(f, width=width), build_landmark106_replica)
    for f, make in zip(files, builders, strict=True):
        if not f.is_file():
            make(f)
    paths = NeuralPaths(*files[:3], landmarker=files[3])
    print(f"(replicas built in {time.perf_counter() - t:.0f} s)", flush=True)
    return paths


def user_config(device: str, **changes: Any) -> EngineConfig:
    """``livefuse run``'s defaults for the neural engine on ``device``."""
    from dataclasses import replace

    return replace(EngineConfig(engine="neural", backend="torch", device=device,
                                face_selector="many"), **changes)


@dataclass(frozen=True)
class ReplicaEngine:
    """A picklable engine factory for batch workers: replicas + one scripted face, the frame
    index read from each ``process`` call (global in a chunk, so the face is where it would be
    in one run over the whole clip)."""

    paths: NeuralPaths
    config: EngineConfig
    size: tuple[int, int] = (1920, 1080)
    cache: CacheConfig | None = None

    def __call__(self) -> Any:
        engine, scripted = build(self.paths, self.config, self.cache, 1, self.size)
        engine.process = _indexed(engine.process, scripted)  # type: ignore[method-assign]
        return engine


@dataclass(frozen=True)
class ClassicEngine:
    """A picklable factory for the offline classic engine with the astronaut as the source."""

    config: EngineConfig
    cache: CacheConfig | None = None

    def __call__(self) -> Any:
        from livefuse.engine import Engine
        from livefuse.imaging import LoadedImage
        from livefuse.samples import astronaut

        engine = Engine(self.config, cache=self.cache)
        engine.set_source(LoadedImage(bgr=astronaut(), alpha=None, path=Path("astronaut.png")))
        return engine


def engine_alone_fps(factory: ReplicaEngine | ClassicEngine, frames: list[np.ndarray], n: int,
                     warmup: int = 20) -> float:
    """``Engine.process`` alone on frames in memory, the next frame staged while one is
    processed (as the live loop and the pipelined run do): frames per second."""
    engine = factory()
    staged = engine.stage(frames[0].copy())
    t0 = 0.0
    for i in range(warmup + n):
        if i == warmup:
            t0 = time.perf_counter()
        nxt = engine.stage(frames[(i + 1) % len(frames)].copy())
        engine.process(staged, index=i, t_capture_ns=i * 33_333_333, in_place=True)
        staged = nxt
    fps = n / (time.perf_counter() - t0)
    del engine, staged, nxt
    torch: Any = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()  # the batch's workers come next on the same GPU
    return fps


__all__ = ["ClassicEngine", "ReplicaEngine", "build_replicas", "common_args", "engine_alone_fps",
           "make_clip", "prepare", "user_config"]
