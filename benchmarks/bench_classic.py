"""Classic engine fps on the demo clip (t1.jpg with camera motion), one face and all faces.

Usage: python benchmarks/bench_classic.py [--frames 120]

Prints one table: resolution x detection interval x face selection -> fps and stage ms.
Times Engine.process only (decode/encode excluded) on frames held in memory.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import load_image
from livefuse.io.synthetic import motion_clip
from livefuse.samples import astronaut, insightface_image


def commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       cwd=os.path.dirname(os.path.abspath(__file__)),
                                       stderr=subprocess.DEVNULL).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=120)
    args = ap.parse_args()
    photo = load_image(insightface_image("t1.jpg")).bgr
    probe = Engine(EngineConfig())
    face = max(probe.analyser.detect(photo), key=lambda f: f.area)
    centre = (float(face.bbox[0] + face.bbox[2]) / 2, float(face.bbox[1] + face.bbox[3]) / 2)
    print(f"# classic engine, commit {commit()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, {args.frames} frames per row")
    print(f"{'size':>9} {'detect every':>12} {'faces':>6} {'fps':>7} {'ms/frame p50':>12} "
          f"{'detect ms':>9} {'track ms':>8} {'swap ms':>7}")
    for size, face_w in (((640, 480), 150), ((1280, 720), 220)):
        frames = list(motion_clip(photo, size, args.frames, centre=centre, face_px=face.width,
                                  face_width=face_w))
        for k in (1, 3, 5):
            for selector in ("one", "many"):
                engine = Engine(EngineConfig(detect_every=k, face_selector=selector),
                                analyser=probe.analyser)
                engine.set_source(load_image_bgr_source())
                per, det, trk, swp, nfaces = [], [], [], [], []
                t_all = time.perf_counter()
                for i, f in enumerate(frames):
                    t0 = time.perf_counter()
                    p = engine.process(f, index=i)
                    per.append((time.perf_counter() - t0) * 1e3)
                    det.append(p.timings_ms.get("detect", 0.0))
                    trk.append(p.timings_ms.get("track", 0.0))
                    swp.append(p.timings_ms["swap"])
                    nfaces.append(p.swapped)
                fps = len(frames) / (time.perf_counter() - t_all)
                print(f"{size[0]}x{size[1]:<4} {k:>12} {statistics.mean(nfaces):>6.1f} "
                      f"{fps:>7.1f} {statistics.median(per):>12.1f} {statistics.mean(det):>9.1f} "
                      f"{statistics.mean(trk):>8.1f} {statistics.mean(swp):>7.1f}")


def load_image_bgr_source():  # type: ignore[no-untyped-def]
    import tempfile
    from pathlib import Path

    from livefuse.imaging import save_image

    path = Path(tempfile.gettempdir()) / "livefuse_bench_astronaut.png"
    if not path.exists():
        save_image(path, astronaut())
    return load_image(path)


if __name__ == "__main__":
    main()
