"""Where the fastest swapper variant's time goes, layer by layer (for the ≤ 1.0 ms/face goal).

1. The compiled port (default mode, half, channels_last; no CUDA graph so the profiler sees every
   kernel): CUDA time per kernel over 50 calls, grouped into convs, norms/pointwise and the rest.
2. Each conv layer alone at its batch-1 shape (fp16, channels_last), timed by CUDA-graph replay,
   with its achieved TFLOP/s: which layers are far from the chip's matrix rate.

Usage: python benchmarks/profile_layers.py [--width 128]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.models.fused_ops import FUSED_OPS
from livefuse.models.inswapper_torch import LoadedInswapper
from livefuse.swap.neural import TorchRunner
from livefuse.testing.synthetic import random_emap, random_inswapper


def graph_time_us(fn, reps: int = 200) -> float:  # type: ignore[no-untyped-def]
    """Median-free mean µs of ``fn`` per call: ``reps`` calls captured in one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) * 1e3 / reps)
    return best


def layer_table(model: torch.nn.Module) -> None:
    """Each conv alone at its real input shape."""
    shapes = []
    x = torch.zeros(1, 3, 128, 128, device="cuda", dtype=torch.half)
    hooks = []

    def hook(mod, inp, out):  # type: ignore[no-untyped-def]
        shapes.append((mod, tuple(inp[0].shape)))

    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod._lf_name = name  # type: ignore[assignment]
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        model(x.float().half(), torch.zeros(1, 512, device="cuda", dtype=torch.half))
    for h in hooks:
        h.remove()
    seen: dict[tuple, float] = {}
    total = 0.0
    print("| conv | input | out ch | kernel | GFLOP | µs | TFLOP/s |")
    print("|---|---|---:|---|---:|---:|---:|")
    for mod, shp in shapes:
        inp = torch.randn(shp, device="cuda", dtype=torch.half).to(
            memory_format=torch.channels_last)
        key = (shp, tuple(mod.weight.shape), mod.stride, mod.padding)
        if key not in seen:
            with torch.no_grad():
                seen[key] = graph_time_us(lambda m=mod, i=inp: m(i))
        us = seen[key]
        total += us
        with torch.no_grad():
            out = mod(inp)
        k = mod.weight.shape[1] * mod.weight.shape[2] * mod.weight.shape[3]
        gflop = 2 * out.shape[2] * out.shape[3] * out.shape[1] * k / 1e9
        print(f"| {mod._lf_name} | {shp[1]}×{shp[2]}×{shp[3]} | {out.shape[1]} | "
              f"{mod.weight.shape[2]}×{mod.weight.shape[3]}/s{mod.stride[0]} | {gflop:.1f} | "
              f"{us:.1f} | {gflop / us * 1e3:.0f} |")
    print(f"\nsum of conv layers alone: {total:.0f} µs")


def adain_table() -> None:
    """The fused norm kernel at the res-block shape for a few launch shapes, against Inductor's
    fusion of the torch reference."""
    from livefuse.models import fused_ops

    c = 1024
    y = torch.randn(1, c, 32, 32, device="cuda", dtype=torch.half).to(
        memory_format=torch.channels_last)
    st = torch.randn(1, 2 * c, device="cuda", dtype=torch.half)
    xp = torch.randn(1, c, 34, 34, device="cuda", dtype=torch.half).to(
        memory_format=torch.channels_last)
    r = xp[:, :, 1:-1, 1:-1]
    ref = torch.compile(fused_ops.adain_pad_reference)
    want = fused_ops.adain_pad_reference(y, st, 1e-8, False, r)
    print("\n| norm kernel (1×1024×32×32 fp16, residual) | µs | max |diff| |")
    print("|---|---:|---:|")
    us = graph_time_us(lambda: ref(y, st, 1e-8, False, r))
    print(f"| torch reference, compiled | {us:.1f} | "
          f"{(ref(y, st, 1e-8, False, r) - want).abs().max().item():.4f} |")
    kernel, launch = fused_ops._triton()
    for bc, nw in [(4, 2), (8, 2), (8, 4), (16, 4), (16, 8), (32, 8)]:
        us = graph_time_us(lambda b=bc, w=nw: launch(kernel, y, st, 1e-8, False, r, b, w))
        got = launch(kernel, y, st, 1e-8, False, r, bc, nw)
        print(f"| Triton, BLOCK_C {bc}, {nw} warps | {us:.1f} | "
              f"{(got - want).abs().max().item():.4f} |")


def kernel_profile(loaded: LoadedInswapper, fused: frozenset[str]) -> None:
    runner = TorchRunner(loaded, "cuda", "fp16", channels_last=True, compile_mode="default",
                         fused=fused)
    t = torch.rand(1, 3, 128, 128, device="cuda")
    lat = F.normalize(torch.randn(1, 512, device="cuda"), dim=1)
    for _ in range(20):
        runner.infer_tensor(t, lat)
    torch.cuda.synchronize()
    n = 50
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            runner.infer_tensor(t, lat)
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / n, e.count // n) for e in prof.key_averages()
            if e.device_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    print(f"\nGPU time per call (compiled default, half, CL, fused {sorted(fused)}; no graph): "
          f"{total:.0f} µs in {sum(r[2] for r in rows)} kernels")
    print("| kernel | µs/call | calls/call | % |")
    print("|---|---:|---:|---:|")
    for key, us, cnt in rows[:40]:
        print(f"| {key[:90]} | {us:.1f} | {cnt} | {100 * us / total:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--skip-layers", action="store_true", help="only the kernel profiles")
    args = ap.parse_args()
    model = random_inswapper(args.width, 0)
    loaded = LoadedInswapper(model=model, emap=random_emap(0), path=Path("random"))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}")
    if not args.skip_layers:
        half = random_inswapper(args.width, 0).cuda().half().to(
            memory_format=torch.channels_last)
        layer_table(half)
    adain_table()
    kernel_profile(loaded, frozenset())
    kernel_profile(loaded, FUSED_OPS)


if __name__ == "__main__":
    main()
