"""Issue 18's speed goals, before and after, side by side in one run (docs/BENCHMARKS.md).

Two source trees (``--base``, e.g. a checkout of main, and this one) each run the same child
measurements in their own process with their own ``livefuse`` first on the path, alternately,
``--rounds`` times, so a loaded machine slows both alike; the table gives every round and the
new/base ratio of the medians.

* ``engine``: ``Engine.process`` on 720p frames held in memory (the demo clip: camera motion over
  t1.jpg, the largest face 220 px wide), one face, the live defaults (detect every 3rd frame,
  face selector ``one``, rotation off, landmark smoothing on, the pose cache on at 0.8 /
  refresh 5): frames processed per second, ms per frame p50/p95, the process's CPU time per
  frame (all its threads: the figure a shared machine disturbs least), and each stage's mean
  ms.
* ``live``: the same frames through ``LiveRunner`` from a source paced at 30 fps (a webcam) to a
  sink, for ``--seconds``: processed fps and the capture-to-send latency p50/p95/p99/max.
* ``detect``: one detection pass at 720p (HOG at upsample 0 in the base tree; the classic
  analyser's default in the new one), median ms.

Usage (both trees need their dependencies installed in this interpreter)::

    git -C /path/to/livefuse worktree add /tmp/livefuse-main main   # or any checkout of main
    python benchmarks/ab_issue18.py --base /tmp/livefuse-main --rounds 3

A child on its own: ``python benchmarks/ab_issue18.py --child engine`` (prints one JSON line).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
SIZE, FACE_W = (1280, 720), 220.0


def _clip(frames: int) -> list[Any]:
    from livefuse.imaging import load_image
    from livefuse.io.synthetic import motion_clip
    from livefuse.samples import insightface_image

    photo = load_image(insightface_image("t1.jpg")).bgr
    # Ross in t1.jpg (the clip's centre and his face size in the photo), as benchmarks/bench_live
    return list(motion_clip(photo, SIZE, frames, centre=(514.0, 362.0), face_px=125.0,
                            face_width=FACE_W))


def _source() -> Any:
    import numpy as np
    from skimage import data

    from livefuse.imaging import LoadedImage

    return LoadedImage(bgr=np.ascontiguousarray(data.astronaut()[..., ::-1]), alpha=None,
                       path=Path("astronaut.png"))


def _configs() -> tuple[Any, Any]:
    from livefuse.config import CacheConfig, EngineConfig

    return (EngineConfig(detect_every=3, face_selector="one", rotation="off"),
            CacheConfig(enabled=True, threshold=0.8, refresh_every_n=5))


def child_engine(frames: int) -> dict[str, Any]:
    from livefuse.engine import Engine

    clip = _clip(frames)
    cfg, cache = _configs()
    engine = Engine(cfg, cache=cache)
    engine.set_source(_source())
    for i, f in enumerate(clip[:6]):  # warm-up: first detections, caches, onnxruntime plans
        engine.process(f, index=i, t_capture_ns=i * 33_333_333)
    engine.reset_tracking()
    engine.invalidate()
    per: list[float] = []
    cpu: list[float] = []
    stages: dict[str, list[float]] = {}
    swapped = 0
    t0 = time.perf_counter()
    for i, f in enumerate(clip):
        a, c = time.perf_counter(), time.process_time()
        p = engine.process(f, index=i, t_capture_ns=i * 33_333_333)
        per.append((time.perf_counter() - a) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
        swapped += p.swapped
        for k in ("detect", "track", "render", "paste"):
            stages.setdefault(k, []).append(p.timings_ms.get(k, 0.0))
    wall = time.perf_counter() - t0
    return {"fps": len(clip) / wall, "p50": statistics.median(per),
            "p95": float(sorted(per)[int(0.95 * (len(per) - 1))]),
            "cpu": statistics.mean(cpu),
            "swapped": swapped / len(clip),
            **{k: statistics.mean(v) for k, v in stages.items()}}


def child_live(seconds: float) -> dict[str, Any]:
    import numpy as np

    from livefuse.config import AppConfig
    from livefuse.engine import Engine
    from livefuse.io.sinks import CallbackSink
    from livefuse.io.sources import FramesSource
    from livefuse.live import LiveRunner

    cfg, cache = _configs()
    lat: list[float] = []

    def sent(frame: Any, t_capture_ns: int) -> None:
        lat.append((time.perf_counter_ns() - t_capture_ns) / 1e6)

    runner = LiveRunner(Engine(cfg, cache=cache), FramesSource(_clip(90), fps=30.0),
                        [CallbackSink(sent)], AppConfig(cfg, cache), source_face=_source())
    runner.start()
    time.sleep(2.0)  # warm-up, not measured
    lat.clear()
    t0 = time.perf_counter()
    time.sleep(seconds)
    n = len(lat)
    wall = time.perf_counter() - t0
    runner.stop()
    window = np.array(lat[:n])
    return {"fps": n / wall, "p50": float(np.percentile(window, 50)),
            "p95": float(np.percentile(window, 95)), "p99": float(np.percentile(window, 99)),
            "max": float(window.max())}


def child_detect(n: int) -> dict[str, Any]:
    import cv2

    from livefuse.faces.dlib_analyser import DlibFaceAnalyser

    frame = _clip(1)[0]
    analyser = DlibFaceAnalyser()
    name = getattr(analyser, "detector", "hog")
    if name == "hog":  # the base tree: HOG's own pass, as the analyser runs it
        import dlib

        hog = dlib.get_frontal_face_detector()
        gray = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)

        def run() -> object:
            return hog.run(gray, 0)
    else:
        net = analyser._centerface
        assert net is not None

        def run() -> object:
            return net.detect(frame)
    run()
    times = []
    for _ in range(n):
        a = time.perf_counter()
        run()
        times.append((time.perf_counter() - a) * 1e3)
    return {"detector": name, "ms": statistics.median(times)}


def _run_child(tree: Path, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind,
           "--frames", str(args.frames), "--seconds", str(args.seconds)]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _commit(tree: Path) -> str:
    try:
        return subprocess.check_output(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                                       text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, help="the old tree (e.g. a checkout of main)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frames", type=int, default=90)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--child", choices=("engine", "live", "detect"))
    args = ap.parse_args()
    if args.child:
        fn = {"engine": lambda: child_engine(args.frames), "live": lambda: child_live(
            args.seconds), "detect": lambda: child_detect(20)}[args.child]
        print(json.dumps(fn()))
        return
    if args.base is None:
        ap.error("--base is required (or --child)")
    trees = {"base": args.base.resolve(), "new": HERE}
    print(f"# issue 18 A/B: base {_commit(trees['base'])} vs new {_commit(trees['new'])}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start, "
          f"{args.rounds} rounds, 720p, one face, live defaults")
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for kind in ("detect", "engine", "live"):
            for name in (("base", "new") if r % 2 == 0 else ("new", "base")):
                res = _run_child(trees[name], kind, args)
                results.setdefault((kind, name), []).append(res)
                print(f"round {r} {kind:6s} {name:4s} " + " ".join(
                    f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in res.items()), flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}\n")
    print("| measure | base (median of rounds) | new | new / base |")
    print("|---|---|---|---|")
    rows = [("detect", "ms", "detection pass at 720p, ms"),
            ("engine", "fps", "720p frames processed per second"),
            ("engine", "p50", "ms per frame p50"), ("engine", "p95", "ms per frame p95"),
            ("engine", "cpu", "CPU ms per frame (all threads; less sensitive to load)"),
            ("engine", "detect", "detect stage, mean ms per frame"),
            ("engine", "track", "track stage, mean ms per frame"),
            ("engine", "render", "render stage, mean ms per frame"),
            ("engine", "paste", "paste stage, mean ms per frame"),
            ("live", "fps", "live: frames sent per second"),
            ("live", "p50", "live latency p50 ms"), ("live", "p95", "live latency p95 ms"),
            ("live", "p99", "live latency p99 ms"), ("live", "max", "live latency max ms")]
    for kind, key, label in rows:
        b = statistics.median(x[key] for x in results[(kind, "base")])
        n = statistics.median(x[key] for x in results[(kind, "new")])
        print(f"| {label} | {b:.1f} | {n:.1f} | {n / b if b else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
