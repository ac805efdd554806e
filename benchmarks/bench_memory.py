"""Where the swapper's peak GPU memory goes: weights vs activations + cuDNN workspace.

Prints, per precision, the memory held by the weights alone and the peak during one forward
(``torch.cuda.max_memory_allocated``), full-size replica, batch 1. Run it once as is and once with
``CUDNN_CONV_WSCAP_DBG=<MiB>`` (cuDNN's workspace cap) to see the workspace's share.

Usage: python benchmarks/bench_memory.py [--width 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from livefuse.models.inswapper_torch import LoadedInswapper
from livefuse.swap.neural import TorchRunner
from livefuse.testing.synthetic import random_emap, random_inswapper


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=128)
    args = ap.parse_args()
    dev = torch.device("cuda")
    loaded = LoadedInswapper(model=random_inswapper(args.width, 0), emap=random_emap(0),
                             path=Path("random"))
    t = torch.rand(1, 3, 128, 128, device=dev)
    lat = torch.nn.functional.normalize(torch.randn(1, 512, device=dev), dim=1)
    print(f"# CUDNN_CONV_WSCAP_DBG={os.environ.get('CUDNN_CONV_WSCAP_DBG', 'unset')}")
    print("| precision | parameter bytes MiB | allocated after load MiB | peak MiB | "
          "peak - allocated MiB | × peak vs fp32 | ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = None
    for precision, cl in (("fp32", False), ("fp16", False), ("fp16", True)):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        residue = torch.cuda.memory_allocated(dev) / 2**20  # left by the variants before
        runner = TorchRunner(loaded, "cuda", precision, channels_last=cl)
        weights = torch.cuda.memory_allocated(dev) / 2**20 - residue
        params = sum(p.numel() * p.element_size() for p in runner.model.parameters()) / 2**20
        torch.cuda.reset_peak_memory_stats(dev)
        for _ in range(5):
            runner.infer_tensor(t, lat)
        torch.cuda.synchronize()
        times = []
        for _ in range(50):
            a = time.perf_counter()
            runner.infer_tensor(t, lat)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - a) * 1e3)
        peak = torch.cuda.max_memory_allocated(dev) / 2**20 - residue
        base = base or peak
        name = precision + (" + channels_last" if cl else "")
        print(f"| {name} | {params:.0f} | {weights:.0f} | {peak:.0f} | {peak - weights:.0f} | "
              f"{peak / base:.2f} | {statistics.median(times):.2f} |", flush=True)
        del runner


if __name__ == "__main__":
    main()
