"""What the privacy guard adds to a frame (issue 19 item 3).

1. The guard alone (``PrivacyGuard.apply``) on 720p and 1080p frames: off, blur (one unswapped
   face and one lost face pixelated), hold (a good frame kept: one frame copy; a held frame
   sent).
2. The whole frame on the scripted guard clip (livefuse.testing.guard_clip: dropouts, a face
   turning away, a second person), the classic engine with ``live``'s defaults (detect every 3),
   Engine.process then the guard, one frame after another: off vs blur vs hold. With the guard
   on the detector runs on every frame (a face entering between detections would show), so
   this row is the guard's real price; the guard's own share is printed beside it. Rounds are
   interleaved (off, blur, hold, off, ...) and the figures are per frame over all rounds.

Usage: python benchmarks/bench_guard.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from livefuse.bench import git_commit, machine
from livefuse.config import AppConfig, EngineConfig, GuardConfig
from livefuse.engine import Engine
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.guard import PrivacyGuard
from livefuse.imaging import load_image
from livefuse.samples import astronaut, insightface_image
from livefuse.testing.guard_clip import DropoutAnalyser, guard_clip
from livefuse.types import Face


def _face(x: float, y: float, w: float, tid: int) -> Face:
    return Face(bbox=np.array([x, y, x + w, y + w], np.float32),
                kps=np.zeros((5, 2), np.float32), track_id=tid)


def _stats(ms: list[float]) -> str:
    a = np.array(ms)
    return (f"{a.min():.3f} | {np.median(a):.3f} | {np.percentile(a, 99):.3f} | "
            f"{a.max():.3f}")


def guard_alone(n: int = 300) -> None:
    # min is the guard's own cost; the median and the tail carry this machine's load (OpenCV's
    # resize runs on its thread pool, which waits for the slowest thread)
    print("| guard alone | min ms | median ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for w, h in ((1280, 720), (1920, 1080)):
        frame = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
        face_w = h / 4
        for mode, swapped, unswapped in (
                ("off", [_face(w / 4, h / 3, face_w, 1)], [_face(w / 2, h / 3, face_w, -1)]),
                ("blur", [], [_face(w / 2, h / 3, face_w, -1)]),
                ("hold, good frame (kept)", [_face(w / 4, h / 3, face_w, 1)], []),
                ("hold, held frame", [], [_face(w / 2, h / 3, face_w, -1)])):
            guard = PrivacyGuard(GuardConfig(mode=mode.split(",")[0],  # type: ignore[arg-type]
                                             hold_frames=600))
            guard.apply(frame.copy(), [_face(w / 4, h / 3, face_w, 1)], [])  # swapped once
            times = []
            for _ in range(n):
                f = frame.copy()
                t0 = time.perf_counter_ns()
                guard.apply(f, swapped, unswapped)
                times.append((time.perf_counter_ns() - t0) / 1e6)
            what = mode + (" (1 unswapped + 1 lost face)" if mode == "blur" else "")
            print(f"| {w}x{h} {what} | {_stats(times)} |")


def whole_frame(rounds: int) -> None:
    clip = guard_clip(load_image(insightface_image("t1.jpg")).bgr)
    analyser = DropoutAnalyser(DlibFaceAnalyser())
    from livefuse.imaging import LoadedImage

    source = LoadedImage(bgr=astronaut(), alpha=None, path=__import__("pathlib").Path("a.png"))
    base = AppConfig(engine=EngineConfig(face_selector="one", detect_every=3, rotation="off"))
    times: dict[str, list[float]] = {"off": [], "blur": [], "hold": []}
    own: dict[str, list[float]] = {"off": [], "blur": [], "hold": []}
    for _ in range(rounds):
        for mode in times:
            cfg = AppConfig(engine=base.engine, guard=GuardConfig(mode=mode))  # type: ignore
            engine = Engine(cfg.effective_engine(), analyser=analyser, cache=cfg.cache)
            engine.set_source(source)
            guard = PrivacyGuard(cfg.guard)
            t_cap = time.perf_counter_ns()
            for frame in clip.frames:
                f = frame.copy()
                t0 = time.perf_counter_ns()
                packet = engine.process(f, t_capture_ns=t_cap, in_place=True)
                t1 = time.perf_counter_ns()
                assert packet.output is not None
                guard.apply(packet.output, [x for x in packet.faces if not any(
                    x is u for u in packet.unswapped)], packet.unswapped)
                t2 = time.perf_counter_ns()
                times[mode].append((t2 - t0) / 1e6)
                own[mode].append((t2 - t1) / 1e6)
                t_cap += 33_333_333
    off = statistics.mean(times["off"])
    print("\n| whole frame, guard clip 640x480 | detect every | mean ms | p95 ms | p99 ms | "
          "max ms | x off (mean) | the guard's own ms (mean / max) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for mode, ms in times.items():
        a = np.array(ms)
        print(f"| {mode} | {3 if mode == 'off' else 1} | {a.mean():.1f} | "
              f"{np.percentile(a, 95):.1f} | {np.percentile(a, 99):.1f} | {a.max():.1f} | "
              f"{a.mean() / off:.2f} | {statistics.mean(own[mode]):.2f} / "
              f"{max(own[mode]):.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"commit {git_commit()}, {machine()}\n")
    guard_alone()
    whole_frame(args.rounds)


if __name__ == "__main__":
    main()
