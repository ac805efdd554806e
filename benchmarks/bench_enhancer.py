"""ms per face of the face enhancer and the masks, in fp32/fp16, eager and inside a CUDA graph.

Random weights with the released architectures (no real weights are needed for speed):

* enhancer: the GFPGAN v1.4 architecture (:class:`livefuse.testing.replicas_masks.GFPGANReplica`,
  ``--width 1`` = full size, 84 M parameters in the graph) on ``(N, 3, 512, 512)`` device crops;
* occluder (XSeg signature, 256 px) and parser (BiSeNet signature, 512 px) replicas through
  :class:`~livefuse.swap.masks.Occluder` / :class:`~livefuse.swap.masks.FaceParser` on the
  renderer's ``(N, 3, 128, 128)`` device crops, pre- and post-processing included. These replicas
  are small stand-ins, not the real networks' cost (XSeg ~70 MB, BiSeNet-34 ~94 MB of weights):
  read their rows as the plumbing's overhead.

By default the modules run directly (eager PyTorch); ``--onnx-module`` exports each replica to
ONNX first and runs it through ``livefuse.models.onnx_torch.OnnxModule``, the path the real files
take. The time is the median wall time of ``--n`` synchronised calls after ``--warmup`` calls.

    python benchmarks/bench_enhancer.py --device cuda --n 100              # the lead's H200 run
    python benchmarks/bench_enhancer.py --device cpu --width 0.125 --n 3   # CPU smoke test

Importable without CUDA (nothing touches the GPU before ``main``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.models.graph_runner import TorchGraph
from livefuse.swap.masks import FaceParser, Occluder
from livefuse.testing import replicas_masks as R


def git_commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       stderr=subprocess.DEVNULL,
                                       cwd=Path(__file__).resolve().parent).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    # not livefuse.bench's: that pulls the whole engine (PyAV, platformdirs) onto the GPU host
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str, n: int, warmup: int) -> float:
    """Median ms of ``n`` synchronised calls of ``fn`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def _peak_mib(device: str) -> str:
    if not device.startswith("cuda"):
        return "-"
    import torch

    return f"{torch.cuda.max_memory_allocated() / 2**20:,.0f}"


def _reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cpu or cuda[:N] (default cuda)")
    ap.add_argument("--precisions", default="fp32,fp16", help="comma list of fp32, fp16, bf16")
    ap.add_argument("--modes", default="eager,graph", help="eager and/or graph (CUDA graph)")
    ap.add_argument("--faces", type=int, default=1, help="faces per batch (default 1)")
    ap.add_argument("--width", type=float, default=1.0, help="GFPGAN width (1 = full size)")
    ap.add_argument("--n", type=int, default=50, help="timed calls per row")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--onnx-module", action="store_true",
                    help="run the exported replicas through OnnxModule instead of the modules")
    ap.add_argument("--skip-masks", action="store_true")
    args = ap.parse_args(argv)

    import torch

    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("CUDA is not available: run with --device cpu", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") \
        else "CPU"
    print(f"livefuse {git_commit()} | {machine()} | torch {torch.__version__} | {name}")
    modes = [m for m in args.modes.split(",") if m]
    if not device.startswith("cuda"):
        modes = [m for m in modes if m != "graph"] or ["eager"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-enhancer-"))
    gfpgan = R.random_gfpgan(args.width)
    print(f"GFPGAN-architecture replica: width {args.width}, "
          f"{R.count_parameters(gfpgan) - R.count_parameters(gfpgan.style_mlp):,} parameters "
          f"in the graph; batch {args.faces}; median of {args.n} calls\n")
    files: dict[str, Path] = {}
    if args.onnx_module:
        files = {"enhancer": R.export_gfpgan(gfpgan, tmp / "gfpgan.onnx"),
                 "occluder": R.export_xseg(R.random_xseg(0), tmp / "xseg.onnx"),
                 "parser": R.export_bisenet(R.random_bisenet(0), tmp / "bisenet.onnx")}
    gen = torch.Generator().manual_seed(0)
    x512 = (torch.rand(args.faces, 3, 512, 512, generator=gen) * 2 - 1).to(device)
    x128 = torch.rand(args.faces, 3, 128, 128, generator=gen).to(device)

    header = f"{'model':<28} {'precision':<9} {'mode':<6} {'ms/batch':>9} {'ms/face':>8} " \
             f"{'peak MiB':>9}"
    print(header)
    print("-" * len(header))
    for precision in [p for p in args.precisions.split(",") if p]:
        for mode in modes:
            graph = mode == "graph"
            rows: list[tuple[str, Callable[[], Any]]] = []
            _reset_peak(device)
            if args.onnx_module:
                # the exported graph's batch is fixed at 1, like the released file's
                enh = TorchGraph(path=files["enhancer"], device=device, precision=precision,
                                 cuda_graph=graph)
            else:
                enh = TorchGraph(R.random_gfpgan(args.width), io=R.GFPGAN_IO, device=device,
                                 precision=precision, cuda_graph=graph, max_batch=args.faces)
            rows.append(("enhancer (GFPGAN 1.4 arch)", lambda e=enh: e.run_tensors(x512)))
            if not args.skip_masks:
                kw: dict[str, Any] = dict(device=device, precision=precision, cuda_graph=graph)
                if args.onnx_module:
                    occ = Occluder(files["occluder"], "torch", **kw)
                    par = FaceParser(files["parser"], "torch", **kw)
                else:
                    occ = Occluder(None, "torch", module=R.random_xseg(0), io=R.XSEG_IO, **kw)
                    par = FaceParser(None, "torch", module=R.random_bisenet(0),
                                     io=R.BISENET_IO, **kw)
                rows.append(("occluder (XSeg replica)", lambda o=occ: o.masks(x128)))
                rows.append(("parser (BiSeNet replica)", lambda p=par: p.region_masks(x128)))
            for label, fn in rows:
                try:
                    ms = timed(fn, device, args.n, args.warmup)
                except Exception as exc:  # a precision or capture the device refuses
                    print(f"{label:<28} {precision:<9} {mode:<6} failed: {exc}")
                    continue
                print(f"{label:<28} {precision:<9} {mode:<6} {ms:>9.2f} "
                      f"{ms / args.faces:>8.2f} {_peak_mib(device):>9}")
            del rows
    out = np.asarray(TorchGraph(R.random_gfpgan(args.width), io=R.GFPGAN_IO, device=device,
                                precision="fp32").run_tensors(x512[:1])[0].float().cpu())
    print(f"\nenhancer output range (fp32, unclipped): [{out.min():.2f}, {out.max():.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
