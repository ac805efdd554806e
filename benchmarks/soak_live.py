"""Soak: a long LiveRunner session, measuring RSS growth (the issue's bound: < 50 MB over
50,000 frames).

The source is unpaced (frames as fast as the engine takes them) so many frames fit in little
time; the classic engine with the cache on runs on the motion clip. RSS is sampled after a
warm-up of 500 frames and at the end.

Usage: python benchmarks/soak_live.py [--frames 50000] [--max-seconds 300]
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from pathlib import Path

import numpy as np
import psutil
from skimage import data

from livefuse.config import AppConfig, CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage, load_image
from livefuse.io.sinks import CallbackSink
from livefuse.io.sources import SourceInfo
from livefuse.io.synthetic import motion_clip
from livefuse.live import LiveRunner
from livefuse.samples import insightface_image
from livefuse.types import Frame


class FastClip:
    """The clip looped as fast as it is read (``live``: not paced by the capture thread)."""

    live = True

    def __init__(self, frames: list[Frame]) -> None:
        self.frames = frames
        self._it = itertools.cycle(frames)

    def open(self) -> SourceInfo:
        h, w = self.frames[0].shape[:2]
        return SourceInfo(w, h, 1000.0, "fast clip")

    def read(self, out: Frame | None = None) -> Frame | None:
        time.sleep(0.002)  # a camera hands frames at a finite rate; keeps one core for inference
        src = next(self._it)
        f = out if out is not None and out.shape == src.shape else src.copy()
        if f is out:
            np.copyto(f, src)
        f[0, 0, 0] ^= 1  # never bit-identical: not a stale buffer
        return f

    def close(self) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=50_000)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--cycles", type=int, default=200)
    args = ap.parse_args()
    photo = load_image(insightface_image("t1.jpg")).bgr
    frames = list(motion_clip(photo, (640, 480), 90, centre=(514.0, 362.0), face_px=125.0))
    face = LoadedImage(bgr=np.ascontiguousarray(data.astronaut()[..., ::-1]), alpha=None,
                       path=Path("astronaut.png"))
    cfg = AppConfig(EngineConfig(detect_every=3, face_selector="one"),
                    CacheConfig(threshold=0.8, refresh_every_n=5))
    proc = psutil.Process()
    cycle_engine = Engine(cfg.engine, cache=cfg.cache)
    before = {t.ident for t in threading.enumerate()}
    cycler = LiveRunner(cycle_engine, FastClip(frames), [CallbackSink(lambda f, t: None)], cfg,
                        source_face=face)
    t_c = time.monotonic()
    slow_stops = 0
    for _ in range(args.cycles):
        cycler.start()
        time.sleep(0.02)
        slow_stops += not cycler.stop(1.0)
    left = [t.name for t in threading.enumerate() if t.ident not in before]
    print(f"start/stop cycles: {args.cycles} in {time.monotonic() - t_c:.1f} s, stops over 1 s: "
          f"{slow_stops}, threads left: {len(left)} {left}\n")
    runner = LiveRunner(Engine(cfg.engine, cache=cfg.cache), FastClip(frames),
                        [CallbackSink(lambda f, t: None)], cfg, source_face=face)
    runner.start()
    t0 = time.monotonic()
    rss0 = None
    samples = []
    while True:
        time.sleep(1.0)
        n = runner.frames_out
        if rss0 is None and n >= 500:
            rss0, n0, t_warm = proc.memory_info().rss / 2**20, n, time.monotonic()
        if rss0 is not None:
            samples.append((n, proc.memory_info().rss / 2**20))
        if n >= args.frames or time.monotonic() - t0 > args.max_seconds:
            break
    runner.stop()
    n_end, rss_end = samples[-1]
    assert rss0 is not None
    print(f"| frames | seconds | fps | RSS after warm-up MiB | RSS at end MiB | growth MiB | "
          f"max RSS MiB |\n|---|---|---|---|---|---|---|\n| {n_end - n0} | "
          f"{time.monotonic() - t_warm:.0f} | {(n_end - n0) / (time.monotonic() - t_warm):.1f} | "
          f"{rss0:.1f} | {rss_end:.1f} | {rss_end - rss0:+.1f} | "
          f"{max(r for _, r in samples):.1f} |")


if __name__ == "__main__":
    main()
