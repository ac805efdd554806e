"""GPU time per frame of the three neural models at batch 1, 2, 4 and 8: what batching frames
through the engine could save (issue 16: a pipeline that takes one frame at a time is capped by
`Engine.process` alone, so the lever left for offline `run` is several frames per model call).

Full-size architectures with PyTorch's default init (speed does not depend on the weights), fp16,
channels_last, in eval mode; each batch timed eagerly and as one CUDA graph replay, median of N
synchronised calls. The engine itself runs one frame at a time; this prints what a batch would
cost, not what the engine does.

    python benchmarks/bench_batch_scaling.py --device cuda --n 50
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.models.inswapper_torch import InSwapper128
from livefuse.testing.replicas import IResNet50, Scrfd10g


def _timed(fn: Callable[[], object], n: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _graphed(fn: Callable[[], object]) -> Callable[[], object]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batches", default="1,2,4,8")
    args = ap.parse_args()
    if not torch.cuda.is_available() or not args.device.startswith("cuda"):
        print("needs a CUDA device")
        return 2
    dev = torch.device(args.device)
    batches = [int(b) for b in args.batches.split(",")]
    models: list[tuple[str, torch.nn.Module, Callable[[int], tuple[torch.Tensor, ...]]]] = [
        ("SCRFD-10GF @640", Scrfd10g(), lambda b: (torch.randn(b, 3, 640, 640),)),
        ("inswapper_128", InSwapper128(width=128),
         lambda b: (torch.rand(b, 3, 128, 128), torch.randn(b, 512))),
        ("ArcFace R50 @112", IResNet50(), lambda b: (torch.randn(b, 3, 112, 112),)),
    ]
    print(f"# {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, fp16, "
          f"channels_last, median of {args.n}")
    print("| model | batch | eager ms/call | eager ms/frame | graph ms/call | graph ms/frame "
          "| graph ms/frame vs batch 1 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, model, make in models:
        model = model.to(dev).half().eval()
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        first = None
        for b in batches:
            inputs = [x.to(dev).half() for x in make(b)]
            inputs = [x.to(memory_format=torch.channels_last) if x.ndim == 4 else x
                      for x in inputs]

            def call(m: torch.nn.Module = model, xs: list[torch.Tensor] = inputs) -> object:
                with torch.no_grad():
                    return m(*xs)

            eager = _timed(call, args.n, args.warmup)
            graph = _timed(_graphed(call), args.n, args.warmup)
            per = graph / b
            first = per if first is None else first
            print(f"| {name} | {b} | {eager:.3f} | {eager / b:.3f} | {graph:.3f} | {per:.3f} "
                  f"| {per / first:.2f} |", flush=True)
        del model
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
