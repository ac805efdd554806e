"""Which CUDA kernels the fastest swapper variant spends its time in (for the ≤ 1.0 ms goal).

torch.compile reduce-overhead + half + channels_last, full-size replica, batch 1; prints the top
kernels by total CUDA time over 50 calls (torch.profiler).

Usage: python benchmarks/profile_swapper.py [--width 128] [--mode reduce-overhead]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from livefuse.models.inswapper_torch import LoadedInswapper
from livefuse.swap.neural import TorchRunner
from livefuse.testing.synthetic import random_emap, random_inswapper


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--mode", default="max-autotune-no-cudagraphs",
                    help="torch.compile mode; CUDA graphs hide kernels from the profiler")
    args = ap.parse_args()
    loaded = LoadedInswapper(model=random_inswapper(args.width, 0), emap=random_emap(0),
                             path=Path("random"))
    runner = TorchRunner(loaded, "cuda", "fp16", channels_last=True, compile_mode=args.mode)
    t = torch.rand(1, 3, 128, 128, device="cuda")
    lat = torch.nn.functional.normalize(torch.randn(1, 512, device="cuda"), dim=1)
    for _ in range(20):
        runner.infer_tensor(t, lat)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            runner.infer_tensor(t, lat)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25,
                                    max_name_column_width=70))


if __name__ == "__main__":
    main()
