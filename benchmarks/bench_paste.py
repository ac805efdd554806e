"""Paste-back at 1080p: livefuse's bbox-local paste vs insightface's INSwapper.get(paste_back=True).

Same synthetic model (random weights, inswapper signature) and same face for both. insightface's
paste cost is taken as get(paste_back=True) minus get(paste_back=False) on the same inputs; ours is
paste_back() alone, and the whole align + infer + paste of NeuralSwapper.swap beside
INSwapper.get(paste_back=True). With CUDA, the GPU paste (grid_sample) on a device-resident frame.

    python benchmarks/bench_paste.py --n 30
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.swap.neural import NeuralSwapper
from livefuse.swap.paste import align_crop, arcface_affine, paste_back
from livefuse.testing.synthetic import build_synthetic_inswapper, face_kps


def median_ms(fn: Callable[[], object], n: int, sync: Callable[[], None] = lambda: None) -> float:
    fn()
    sync()
    out = []
    for _ in range(n):
        a = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - a) * 1e3)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--face-px", type=float, default=110.0, help="eye distance in px")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    frame = np.asarray(cv2.GaussianBlur(noise, (0, 0), 3), np.uint8)
    e = rng.standard_normal(512).astype(np.float32)
    face = SimpleNamespace(kps=face_kps(960, 500, args.face_px, 10.0),
                           normed_embedding=e / np.linalg.norm(e))
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = build_synthetic_inswapper(Path(tmp) / "tiny.onnx", width=8)
        sw = NeuralSwapper(path, backend="onnxruntime", precision="fp32")
        latent = sw.prepare_source(face.normed_embedding)
        m = arcface_affine(face.kps)
        fake = sw.swap_aligned(align_crop(frame, m), latent)
        work = frame.copy()
        ours_paste = median_ms(lambda: paste_back(work, fake, m), args.n)
        ours_full = median_ms(lambda: sw.swap(frame.copy(), face, latent), args.n)  # type: ignore[arg-type]
        copy_ms = median_ms(frame.copy, args.n)
        try:
            from insightface.model_zoo.inswapper import INSwapper
        except ImportError:
            INSwapper = None
        if INSwapper is not None:
            ref = INSwapper(model_file=str(path))
            full = median_ms(lambda: ref.get(frame, face, face, paste_back=True), args.n)
            bare = median_ms(lambda: ref.get(frame, face, face, paste_back=False), args.n)
            rows += [("insightface paste-back (get(True) - get(False))", full - bare),
                     ("insightface INSwapper.get(paste_back=True)", full)]
        rows += [("livefuse paste_back (bbox-local, CPU)", ours_paste),
                 ("livefuse NeuralSwapper.swap incl. frame copy", ours_full),
                 ("(frame.copy() alone, included above)", copy_ms)]
        _gpu_rows(rows, frame, fake, m, args.n)
    print(f"# paste-back at 1920x1080, one face ({args.face_px:.0f} px eye distance), "
          f"synthetic width-8 model, median of {args.n}")
    print("| what | ms | × vs insightface paste |")
    print("|---|---:|---:|")
    base = rows[0][1] if rows and rows[0][0].startswith("insightface paste") else None
    for label, ms in rows:
        ratio = f"{base / ms:.1f}" if base and "livefuse" in label and "paste" in label else ""
        print(f"| {label} | {ms:.3f} | {ratio} |")
    return 0


def _gpu_rows(rows: list[tuple[str, float]], frame: np.ndarray, fake: np.ndarray,
              m: np.ndarray, n: int) -> None:
    try:
        import torch
    except ImportError:
        return
    if not torch.cuda.is_available():
        return
    from livefuse.swap.paste import align_crop_torch, paste_back_torch

    dev = torch.device("cuda")
    frame_t = torch.from_numpy(frame).to(dev)
    fake_t = torch.from_numpy(fake[:, :, ::-1].copy()).permute(2, 0, 1)[None].float().to(dev) / 255
    mask_t = None
    sync = torch.cuda.synchronize
    rows.append(("livefuse paste_back_torch (GPU, frame resident)",
                 median_ms(lambda: paste_back_torch(frame_t, fake_t, m, mask_t), n, sync)))
    rows.append(("livefuse align_crop_torch (GPU)",
                 median_ms(lambda: align_crop_torch(frame_t, m), n, sync)))
    rows.append(("1080p frame up + down (pinned: no)",
                 median_ms(lambda: torch.from_numpy(frame).to(dev).cpu(), n, sync)))


if __name__ == "__main__":
    sys.exit(main())
