"""Where a frame's time goes on the neural GPU path: torch.profiler over ``Engine.process`` at
1080p, one face, fp16, cache off (the replicas and scripted faces of ``bench_frame_path.py``).

Prints the top host-side ops by self CPU time and the CUDA kernels by device time, and how many
synchronisations and kernel launches one frame makes.

    python benchmarks/profile_frame_path.py --device cuda
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_frame_path import build, frames_for

from livefuse.config import CacheConfig, EngineConfig
from livefuse.swap.neural_engine import NeuralPaths
from livefuse.testing.replicas import build_arcface_replica, build_scrfd_replica
from livefuse.testing.synthetic import build_synthetic_inswapper


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--faces", type=int, default=1)
    ap.add_argument("--staged", action="store_true", help="stage frames before process")
    args = ap.parse_args()
    size = (1920, 1080)
    frames = frames_for(size, 8)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        paths = NeuralPaths(build_scrfd_replica(d / "det.onnx"),
                            build_arcface_replica(d / "rec.onnx"),
                            build_synthetic_inswapper(d / "sw.onnx", width=128))
        cfg = EngineConfig(engine="neural", backend="torch", precision="fp16",
                           device=args.device, face_selector="many", smooth=False,
                           rotation="off")
        engine, scripted = build(paths, cfg, CacheConfig(enabled=False), args.faces, size)
        for i in range(30):
            scripted.index = i
            engine.process(frames[i % 8], i, in_place=False)
        torch.cuda.synchronize()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                         if args.device.startswith("cuda") else [])
        with profile(activities=acts) as prof:
            for i in range(args.frames):
                scripted.index = 30 + i
                f = frames[i % 8]
                engine.process(engine.stage(f) if args.staged else f, 30 + i, in_place=True)
            torch.cuda.synchronize()
        ka = prof.key_averages()
        print(ka.table(sort_by="self_cpu_time_total", row_limit=30))
        if args.device.startswith("cuda"):
            print(ka.table(sort_by="self_cuda_time_total", row_limit=25))
        per = {e.key: e.count / args.frames for e in ka
               if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize",
                            "cudaEventSynchronize", "cudaLaunchKernel", "cudaGraphLaunch",
                            "cudaMemcpyAsync", "cudaStreamWaitEvent", "aten::item",
                            "aten::_local_scalar_dense")}
        print("per frame:", {k: round(v, 1) for k, v in sorted(per.items())})
    if args.device.startswith("cuda"):
        fp32_batches(args.device)


def fp32_batches(device: str) -> None:
    """The swapper alone in fp32 strict at batch 1 and 4, channels_last on and off."""
    import time

    import torch

    from livefuse.models.inswapper_torch import LoadedInswapper
    from livefuse.models.torch_runner import TorchRunner
    from livefuse.testing.synthetic import random_emap, random_inswapper

    loaded = LoadedInswapper(model=random_inswapper(128), emap=random_emap(0), path=Path("x"))
    latent = torch.nn.functional.normalize(torch.randn(1, 512), dim=1)
    for cl in (True, False):
        for fused in (frozenset({"first", "last", "adain"}), frozenset()):
            r = TorchRunner(loaded, device, "fp32", channels_last=cl, cuda_graph=True,
                            fused=fused)
            for b in (1, 4):
                x = torch.rand(b, 3, 128, 128, device=device)
                for _ in range(3):
                    r.infer_tensor(x, latent)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(10):
                    r.infer_tensor(x, latent)
                torch.cuda.synchronize()
                print(f"fp32 strict, channels_last={cl}, fused={bool(fused)}, batch {b}: "
                      f"{(time.perf_counter() - t) * 100:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
