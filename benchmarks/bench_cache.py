"""Pose-similarity cache on the generated clip: hit rate, swap-stage speed-up, SSIM of the face.

The clip is ``livefuse.io.synthetic.motion_clip`` over one face of insightface's t1.jpg at
640x480 (a slow pan, zoom and roll). Every configuration runs the same frames through the classic
engine; the reference is the same engine with the cache off. SSIM (scikit-image, per colour
channel) is taken over the face's bbox padded by 25 %, against the uncached output.

Usage: python benchmarks/bench_cache.py [--frames 120]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
from skimage import data
from skimage.metrics import structural_similarity

from livefuse.cache import CacheStats
from livefuse.config import CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.imaging import LoadedImage, load_image
from livefuse.io.synthetic import motion_clip
from livefuse.samples import insightface_image
from livefuse.types import Frame, FramePacket


def clip(frames: int) -> list[Frame]:
    photo = load_image(insightface_image("t1.jpg")).bgr
    face = DlibFaceAnalyser().detect(photo)[2]
    cx, cy = (face.bbox[0] + face.bbox[2]) / 2, (face.bbox[1] + face.bbox[3]) / 2
    return list(motion_clip(photo, (640, 480), frames, centre=(float(cx), float(cy)),
                            face_px=face.width))


def run(frames: list[Frame], cache: CacheConfig, analyser: DlibFaceAnalyser,
        source: LoadedImage, passes: int = 3
        ) -> tuple[list[FramePacket], list[FramePacket], CacheStats, float, float]:
    """The uncached and the cached engine in lockstep, frame by frame, so that both see the
    same machine load (this machine is shared). Returns the last pass's packets, the cache
    counters of the last pass, and the mean swap-stage ms of each over all passes."""
    cfg = EngineConfig(detect_every=5, face_selector="one")
    ref_ms: list[float] = []
    ms: list[float] = []
    for _ in range(passes):
        ref = Engine(cfg, analyser=analyser, cache=CacheConfig(enabled=False))
        eng = Engine(cfg, analyser=analyser, cache=cache)
        ref.set_source(source)
        eng.set_source(source)
        ref_out, out = [], []
        for i, f in enumerate(frames):
            ref_out.append(ref.process(f, i))
            out.append(eng.process(f, i))
        ref_ms += [p.timings_ms["swap"] for p in ref_out]
        ms += [p.timings_ms["swap"] for p in out]
    return ref_out, out, eng.cache.stats, statistics.mean(ref_ms), statistics.mean(ms)


def face_ssim(a: Frame, b: Frame, bbox: np.ndarray) -> float:
    h, w = a.shape[:2]
    x0, y0, x1, y1 = bbox
    px, py = 0.25 * (x1 - x0), 0.25 * (y1 - y0)
    x0, y0 = max(int(x0 - px), 0), max(int(y0 - py), 0)
    x1, y1 = min(int(x1 + px), w), min(int(y1 + py), h)
    return float(structural_similarity(a[y0:y1, x0:x1], b[y0:y1, x0:x1], channel_axis=2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.8, 0.95])
    args = ap.parse_args()
    frames = clip(args.frames)
    analyser = DlibFaceAnalyser()
    src = np.ascontiguousarray(data.astronaut()[..., ::-1])
    source = LoadedImage(bgr=src, alpha=None, path=Path("astronaut.png"))
    run(frames[:10], CacheConfig(enabled=False), analyser, source, passes=1)  # warm-up
    print(f"clip: {len(frames)} frames 640x480, one face ~150 px, detect every 5 frames")
    print("swap ms = mean of the engine's swap stage (cache key + lookup + swap or re-warp + "
          "paste) over 3 passes, cached and uncached engines run in lockstep\n")
    print("| N | threshold | hit rate | forced refresh | miss | swap ms | uncached ms | speed-up | "
          "SSIM mean | SSIM min |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for thr in args.thresholds:
        for n in (1, 5, 10):
            cfg = CacheConfig(enabled=True, threshold=thr, refresh_every_n=n)
            ref, eng_out, st, ref_ms, ms = run(frames, cfg, analyser, source)
            total = st.hits + st.misses + st.forced_refreshes
            ss = [face_ssim(p.output, r.output, r.faces[0].bbox)
                  for p, r in zip(eng_out, ref, strict=True)
                  if r.faces and p.output is not None and r.output is not None]
            print(f"| {n} | {thr:.2f} | {st.hits / total:.0%} | {st.forced_refreshes / total:.0%} "
                  f"| {st.misses / total:.0%} | {ms:.2f} | {ref_ms:.2f} | {ref_ms / ms:.2f}x | "
                  f"{statistics.mean(ss):.4f} | {min(ss):.4f} |")


if __name__ == "__main__":
    main()
