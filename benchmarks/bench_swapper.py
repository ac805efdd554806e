"""ms per face and peak memory of the inswapper port in several precisions, side by side.

Random weights with the released architecture (no real weights are needed for speed). Each variant
runs batch 1 on device-resident inputs; the time is the median wall time of N synchronised calls.
The last column is the mean |difference| to fp32 strict in 8-bit steps (LSB), so a fast variant
that computes something else shows up.

    python benchmarks/bench_swapper.py --width 128 --n 200          # full size, CUDA if present
    python benchmarks/bench_swapper.py --width 16 --n 5 --ort   # CPU: tiny replica + onnxruntime
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.models.fused_ops import FUSED_OPS
from livefuse.models.inswapper_torch import LoadedInswapper, parameter_count
from livefuse.swap.neural import TorchRunner
from livefuse.testing.synthetic import random_emap, random_inswapper

VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("fp32 strict", dict(precision="fp32", tf32=False)),
    ("fp32 + TF32", dict(precision="fp32", tf32=True)),
    ("fp16 autocast", dict(precision="fp16", fp16_mode="autocast")),
    ("fp16 .half()", dict(precision="fp16", fp16_mode="half")),
    ("half + channels_last", dict(precision="fp16", channels_last=True)),
    ("half + channels_last + CUDA graph", dict(precision="fp16", channels_last=True,
                                               cuda_graph=True)),
    ("compile reduce-overhead + half + CL", dict(precision="fp16", channels_last=True,
                                                 compile_mode="reduce-overhead")),
    ("compile max-autotune + half + CL", dict(precision="fp16", channels_last=True,
                                              compile_mode="max-autotune")),
    # Our own CUDA graph around a compiled function without Inductor's cudagraph trees: one
    # replay per call instead of Dynamo's guard checks + tree lookup on the CPU.
    ("compile default + half + CL + own CUDA graph",
     dict(precision="fp16", channels_last=True, compile_mode="default", cuda_graph=True)),
    ("compile max-autotune-no-cudagraphs + half + CL + own CUDA graph",
     dict(precision="fp16", channels_last=True, compile_mode="max-autotune-no-cudagraphs",
          cuda_graph=True)),
    # The fused formulations of livefuse.models.fused_ops (all, then subsets to attribute gains)
    ("compile default + half + CL + own CUDA graph + fused layers",
     dict(precision="fp16", channels_last=True, compile_mode="default", cuda_graph=True,
          fused=FUSED_OPS)),
    ("  … fused first + last conv only",
     dict(precision="fp16", channels_last=True, compile_mode="default", cuda_graph=True,
          fused=frozenset({"first", "last"}))),
    ("  … fused norms only",
     dict(precision="fp16", channels_last=True, compile_mode="default", cuda_graph=True,
          fused=frozenset({"adain"}))),
    ("half + CL + CUDA graph + fused layers (no compile)",
     dict(precision="fp16", channels_last=True, cuda_graph=True, fused=FUSED_OPS)),
]


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def bench(loaded: LoadedInswapper, device: str, opts: dict[str, Any], n: int, warmup: int,
          t: torch.Tensor, lat: torch.Tensor) -> tuple[float, float, np.ndarray, float]:
    dev = torch.device(device)
    gc.collect()
    before = 0.0
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        # Earlier variants in this process leave ~34 MiB behind (cuDNN plan caches); the peak
        # counted is this variant's own, above what was allocated when it started.
        before = torch.cuda.memory_allocated(dev) / 2**20
    t0 = time.perf_counter()
    runner = TorchRunner(loaded, device, **opts)
    out = None
    for _ in range(warmup):
        out = runner.infer_tensor(t, lat)
    _sync(dev)
    setup = time.perf_counter() - t0
    times = []
    for _ in range(n):
        a = time.perf_counter()
        out = runner.infer_tensor(t, lat)
        _sync(dev)
        times.append((time.perf_counter() - a) * 1e3)
    assert out is not None
    result = out.float().cpu().numpy()
    peak = torch.cuda.max_memory_allocated(dev) / 2**20 - before if dev.type == "cuda" \
        else float("nan")
    del runner, out
    return statistics.median(times), peak, result, setup


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=128, help="128 = released size")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", default="", help="comma-separated variant numbers (1-based)")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="let cuDNN time its conv algorithms (batch 1 shapes never change)")
    ap.add_argument("--ort", action="store_true", help="also onnxruntime CPU fp32 / fp16")
    ap.add_argument("--inductor", default="",
                    help="comma-separated torch._inductor.config flags to turn on for the "
                         "compile variants, e.g. freezing,coordinate_descent_tuning")
    args = ap.parse_args()
    for flag in filter(None, args.inductor.split(",")):
        import torch._inductor.config as inductor_config

        setattr(inductor_config, flag, True)
        print(f"# torch._inductor.config.{flag} = True")

    dev = torch.device(args.device)
    if dev.type == "cuda" and args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    model = random_inswapper(args.width, seed=0)
    loaded = LoadedInswapper(model=model, emap=random_emap(0), path=Path("random"))
    g = torch.Generator().manual_seed(0)
    t = torch.rand(1, 3, 128, 128, generator=g).to(dev)
    lat = torch.nn.functional.normalize(torch.randn(1, 512, generator=g), dim=1).to(dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    print(f"# inswapper port, width {args.width} ({parameter_count(model) / 1e6:.1f} M params), "
          f"batch 1, {name}, torch {torch.__version__}, median of {args.n}, "
          f"cudnn.benchmark={torch.backends.cudnn.benchmark}")
    print("| variant | ms/face | × vs fp32 strict | peak MiB | × mem vs fp32 | LSB vs fp32 "
          "| setup s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    chosen = {int(i) for i in args.only.split(",") if i}
    base_ms = base_mem = None
    ref: np.ndarray | None = None
    for i, (label, opts) in enumerate(VARIANTS, 1):
        if chosen and i not in chosen:
            continue
        # CUDA-only variants; torch's CPU fp16 convs are ~50x slower than fp32 (not a CPU path)
        if dev.type != "cuda" and not chosen and (
                opts.get("cuda_graph") or opts.get("compile_mode") or opts.get("tf32")
                or opts["precision"] != "fp32"):
            continue
        try:
            ms, peak, out, setup = bench(loaded, args.device, opts, args.n, args.warmup, t, lat)
        except Exception as exc:  # a variant that does not run here is reported, not fatal
            print(f"| {label} | failed: {type(exc).__name__}: {str(exc)[:80]} | | | | | |")
            continue
        if base_ms is None:
            base_ms, base_mem, ref = ms, peak, out
        assert ref is not None and base_mem is not None
        lsb = float(np.abs(out - ref).mean() * 255)
        print(f"| {label} | {ms:.3f} | {base_ms / ms:.2f} | {peak:.0f} | "
              f"{peak / base_mem if base_mem == base_mem else float('nan'):.2f} | {lsb:.3f} "
              f"| {setup:.1f} |", flush=True)
    if args.ort:
        _bench_ort(model, args.n, ref)
    return 0


def _bench_ort(model: torch.nn.Module, n: int, ref: np.ndarray | None) -> None:
    from livefuse.models.runtime import create_session, ensure_fp16_model
    from livefuse.testing.synthetic import export_inswapper

    g = torch.Generator().manual_seed(0)
    t = torch.rand(1, 3, 128, 128, generator=g).numpy()
    lat = torch.nn.functional.normalize(torch.randn(1, 512, generator=g), dim=1).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        path = export_inswapper(model, random_emap(0), Path(tmp) / "m.onnx")  # type: ignore[arg-type]
        for label, p in [("onnxruntime CPU fp32", path),
                         ("onnxruntime CPU fp16 copy", ensure_fp16_model(path))]:
            sess = create_session(p, ["cpu"])
            feeds = {"target": t, "source": lat}
            sess.run(feeds)
            times = []
            out = None
            for _ in range(n):
                a = time.perf_counter()
                out = sess.run(feeds)[0]
                times.append((time.perf_counter() - a) * 1e3)
            lsb = float(np.abs(out - ref).mean() * 255) if ref is not None else float("nan")
            print(f"| {label} | {statistics.median(times):.3f} | | | | {lsb:.3f} | |")


if __name__ == "__main__":
    sys.exit(main())
