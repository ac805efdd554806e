"""Steady landmarks and detect-or-track accuracy with the classic (dlib) analyser, on CPU.

Prints three tables (issue 11 item 4, issue 9 item 4's measure applied to the dlib tracker):

- jitter: a still face at 720p (t1.jpg's face, upscaled, with sensor noise sigma 6): the std of
  each kps point and of each bbox corner over frames 10..40, averaged, in px; One-Euro off/on;
- lag: a 720p pan/zoom/roll clip; the time shift (frames) that best aligns the filtered kps
  trajectory with the raw one;
- tracking error: the same clip with detect-every k vs detection on every frame: mean and max of
  the per-frame mean kps distance, in px.

Usage: python benchmarks/bench_tracking.py [--frames 40]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
from pathlib import Path

import cv2
import numpy as np

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.faces.smoothing import lag_frames
from livefuse.imaging import LoadedImage, load_image
from livefuse.io.synthetic import motion_clip
from livefuse.samples import astronaut, insightface_image
from livefuse.types import Frame

FRAME_NS = 33_333_333


def _engine(analyser: DlibFaceAnalyser, **kw: object) -> Engine:
    eng = Engine(EngineConfig(face_selector="one", **kw), analyser=analyser)  # type: ignore[arg-type]
    eng.set_source(LoadedImage(bgr=astronaut(), alpha=None, path=Path("astronaut.png")))
    return eng


def _track(eng: Engine, frames: list[Frame]) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    kps, boxes, detected = [], [], []
    for i, f in enumerate(frames):
        p = eng.process(f, i, t_capture_ns=i * FRAME_NS)
        if len(p.faces) != 1:
            raise SystemExit(f"frame {i}: {len(p.faces)} faces, expected 1")
        kps.append(p.faces[0].kps)
        boxes.append(p.faces[0].bbox)
        detected.append(p.detected)
    return np.array(kps), np.array(boxes), detected


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=40, help="frames of the still clip")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"# tracking and smoothing, dlib analyser, commit {commit}, {platform.machine()}")
    analyser = DlibFaceAnalyser()
    t1 = load_image(insightface_image("t1.jpg")).bgr

    base = np.asarray(cv2.resize(t1[200:500, 400:700], (720, 720),
                                 interpolation=cv2.INTER_CUBIC), np.uint8)
    base = np.ascontiguousarray(np.pad(base, ((0, 0), (280, 280), (0, 0)), mode="edge"))
    rng = np.random.default_rng(1)
    still = [np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)
             for _ in range(args.frames)]
    print("\n| still face, 720p | kps jitter px | bbox jitter px |\n|---|---:|---:|")
    for smooth in (False, True):
        kps, boxes, _ = _track(_engine(analyser, smooth=smooth), still)
        print(f"| One-Euro {'on' if smooth else 'off'} | {kps[10:].std(0).mean():.2f} | "
              f"{boxes[10:].std(0).mean():.2f} |")

    clip = list(motion_clip(t1, (1280, 720), 30, centre=(514.0, 362.0), face_px=125.0,
                            face_width=170.0))
    raw, _, _ = _track(_engine(analyser, smooth=False), clip)
    smooth_kps, _, _ = _track(_engine(analyser, smooth=True), clip)
    lag = lag_frames(raw, smooth_kps)
    print(f"\nmoving face, 720p, {len(clip)} frames: One-Euro lag {lag:.2f} frames "
          "(best-aligning time shift)")

    print("\n| detect every | frames tracked | mean kps error px | max px |\n|---:|---:|---:|---:|")
    for k in (2, 3, 5):
        kps, _, detected = _track(_engine(analyser, smooth=False, detect_every=k), clip)
        err = np.linalg.norm(raw - kps, axis=2).mean(1)
        print(f"| {k} | {detected.count(False)}/{len(clip)} | {err.mean():.2f} | "
              f"{err.max():.2f} |")


if __name__ == "__main__":
    main()
