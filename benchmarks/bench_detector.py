"""ms per call of face detection (SCRFD det_10g) and recognition (ArcFace w600k_r50): insightface
on onnxruntime (CPU) against livefuse's PyTorch ports on ``--device``.

Random-weight replicas with the released architectures at full size (``livefuse.testing.replicas``;
no real weights are needed for speed). The frame is 1920x1080 with the photos of insightface's
t1.jpg and the astronaut; torch rows take it already on the device (one upload is not counted),
insightface takes the numpy frame. Times are medians of ``--n`` calls after ``--warmup`` calls,
synchronised on CUDA. "found" is the number of faces (or embeddings) a row returned, so a fast
row that computes something else shows up; "cos" is the worst cosine to insightface's embedding.

    python benchmarks/bench_detector.py --device cuda --n 200      # an NVIDIA GPU
    python benchmarks/bench_detector.py --device cpu --n 10        # CPU only
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

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.faces.arcface_torch import TorchArcFace
from livefuse.faces.scrfd_torch import TorchScrfd
from livefuse.testing.replicas import (
    build_arcface_replica,
    build_scrfd_replica,
    calibration_frames,
)


def median_ms(fn: Callable[[], object], n: int, warmup: int, sync: Callable[[], None]) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(n):
        a = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - a) * 1e3)
    return statistics.median(times)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _machine(device: torch.device) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out = f"{cpu}, {os.cpu_count()} logical CPUs, torch {torch.__version__} " \
          f"({torch.get_num_threads()} threads)"
    if device.type == "cuda":
        out += f", {torch.cuda.get_device_name(device)}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ort-threads", type=int, default=0,
                    help="onnxruntime intra-op threads (0 = its default, all cores)")
    ap.add_argument("--models", type=Path, default=None,
                    help="folder with det_10g.onnx / w600k_r50.onnx (built there if missing)")
    args = ap.parse_args()

    import onnxruntime as ort
    from insightface.model_zoo.arcface_onnx import ArcFaceONNX
    from insightface.model_zoo.scrfd import SCRFD
    from insightface.utils import face_align

    dev = torch.device(args.device)
    folder = args.models or Path(tempfile.mkdtemp(prefix="livefuse-bench-"))
    det_path, rec_path = folder / "det_10g.onnx", folder / "w600k_r50.onnx"
    if not det_path.is_file():
        build_scrfd_replica(det_path, seed=2)
    if not rec_path.is_file():
        build_arcface_replica(rec_path)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.ort_threads

    def session(p: Path) -> ort.InferenceSession:
        return ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"])

    frame = calibration_frames()[2]
    frame_t = torch.from_numpy(frame).to(dev)
    print(f"# commit {_commit()}; {_machine(dev)}; onnxruntime {ort.__version__} "
          f"(intra-op threads {args.ort_threads or 'default'})")
    print(f"# 1920x1080 frame, detector input 640x640, median of {args.n} after {args.warmup}")
    print("| what | runs on | ms/call | × vs insightface | found |")
    print("|---|---|---:|---:|---:|")

    ref = SCRFD(model_file=str(det_path), session=session(det_path))
    ref.prepare(-1, input_size=(640, 640), det_thresh=0.5)
    ref_dets, ref_kps = ref.detect(frame, input_size=(640, 640))
    base = median_ms(lambda: ref.detect(frame, input_size=(640, 640)), args.n, args.warmup,
                     lambda: None)
    print(f"| SCRFD detect: insightface | onnxruntime CPU | {base:.2f} | 1.00 | {len(ref_dets)} |")

    variants = [("fp32", False), ("fp16", False)]
    if dev.type == "cuda":
        variants.append(("fp16", True))
    detectors = {}
    for precision, graph in variants:
        d = detectors[precision, graph] = TorchScrfd(det_path, device=dev, precision=precision,
                                                     cuda_graph=graph)
        found = len(d.detect(frame_t))
        ms = median_ms(lambda d=d: d.detect(frame_t), args.n, args.warmup, sync)
        label = f"{precision} {'CUDA graph' if graph else 'eager'}"
        print(f"| SCRFD detect: TorchScrfd {label} | {dev} | {ms:.2f} | {base / ms:.2f} | "
              f"{found} |")

    # the regions on the fastest configuration: fp16 in a CUDA graph, fp32 on the CPU
    fastest = detectors["fp16", True] if dev.type == "cuda" else detectors["fp32", False]
    boxes = ref_dets[:, :4] if len(ref_dets) else np.array([[900, 400, 1100, 650]], np.float32)
    for k in (1, 4):
        rects = [tuple(float(v) for v in boxes[i % len(boxes)] + (-40, -40, 40, 40))
                 for i in range(k)]
        found = sum(r is not None for r in fastest.detect_regions(frame_t, rects))
        ms = median_ms(lambda r=rects: fastest.detect_regions(frame_t, r), args.n, args.warmup,
                       sync)
        print(f"| SCRFD detect_regions, {k} region(s) of 192x192: {fastest.runtime} | {dev} | "
              f"{ms:.2f} | {base / ms:.2f} | {found} |")

    kps = ref_kps if ref_kps is not None and len(ref_kps) else np.array(
        [[[950, 480], [1010, 478], [980, 520], [955, 560], [1005, 558]]], np.float32)
    rec = ArcFaceONNX(model_file=str(rec_path), session=session(rec_path))
    for k in (1, 4):
        faces = np.stack([kps[i % len(kps)] for i in range(k)]).astype(np.float32)

        def insight(faces: np.ndarray = faces) -> np.ndarray:
            return np.asarray(rec.get_feat([face_align.norm_crop(frame, f) for f in faces]))

        ref_feat = insight()
        ref_feat = ref_feat / np.linalg.norm(ref_feat, axis=1, keepdims=True)
        base_r = median_ms(insight, args.n, args.warmup, lambda: None)
        print(f"| ArcFace {k} face(s), norm_crop + get_feat: insightface | onnxruntime CPU | "
              f"{base_r:.2f} | 1.00 | {k} |")
        faces_t = torch.from_numpy(faces).to(dev)
        for precision in ("fp32", "fp16"):
            m = TorchArcFace(rec_path, device=dev, precision=precision)
            emb = m.embed(frame_t, faces_t)
            cos = float((emb.float().cpu().numpy() * ref_feat).sum(1).min())
            ms = median_ms(lambda m=m, f=faces_t: m.embed(frame_t, f), args.n, args.warmup,
                           sync)
            print(f"| ArcFace {k} face(s), align + embed: TorchArcFace {precision} | {dev} | "
                  f"{ms:.2f} | {base_r / ms:.2f} | {len(emb)} (cos {cos:.4f}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
