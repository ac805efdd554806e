"""End-to-end live throughput and latency on the classic engine.

A test-pattern-free, realistic input: the motion clip over one face of t1.jpg, produced by an
ImageSource-like paced source at 30 fps (like a webcam), through LiveRunner with the cache on and
off, for 640x480 and 1280x720. Latency = sink send time - capture time.

Usage: python benchmarks/bench_live.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from skimage import data

from livefuse.config import AppConfig, CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage, load_image
from livefuse.io.sinks import CallbackSink
from livefuse.io.sources import FramesSource
from livefuse.io.synthetic import motion_clip
from livefuse.live import LiveRunner
from livefuse.samples import insightface_image


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    photo = load_image(insightface_image("t1.jpg")).bgr
    face = LoadedImage(bgr=np.ascontiguousarray(data.astronaut()[..., ::-1]), alpha=None,
                       path=Path("astronaut.png"))
    print(f"classic engine, detect every 3 frames, source paced at 30 fps, {args.seconds:.0f} s "
          "per row\n")
    print("| size | cache | input fps | processed fps | latency p50 ms | latency p95 ms | "
          "swap ms | track ms | detect ms | dropped |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size, face_w in (((640, 480), 150.0), ((1280, 720), 220.0)):
        frames = list(motion_clip(photo, size, 90, centre=(514.0, 362.0), face_px=125.0,
                                  face_width=face_w))
        for cache_on in (False, True):
            cfg = AppConfig(EngineConfig(detect_every=3, face_selector="one"),
                            CacheConfig(enabled=cache_on, threshold=0.8, refresh_every_n=5))
            runner = LiveRunner(Engine(cfg.engine, cache=cfg.cache), FramesSource(frames),
                                [CallbackSink(lambda f, t: None)], cfg, source_face=face)
            runner.start()
            time.sleep(args.seconds)
            s = runner.metrics.snapshot()
            runner.stop()
            st = s.stage_ms
            print(f"| {size[0]}x{size[1]} | {'on' if cache_on else 'off'} | "
                  f"{s.frames_in / args.seconds:.1f} | {s.frames_processed / args.seconds:.1f} | "
                  f"{s.latency_p50_ms:.1f} | {s.latency_p95_ms:.1f} | "
                  f"{st.get('render', 0) + st.get('paste', 0):.1f} | "
                  f"{st.get('track', 0):.1f} | {st.get('detect', 0):.1f} | "
                  f"{sum(s.dropped.values())} |")


if __name__ == "__main__":
    main()
