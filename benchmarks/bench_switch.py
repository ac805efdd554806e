"""How long a preset switch takes in a running session (issue 19 item 1).

A Session runs the classic engine on a one-face clip (livefuse.testing.guard_clip's first 24
frames, looped, paced at 30 fps) and switches between two presets with the same models, from
another thread at random moments (as the control API does). For each switch:

* *old frames*: frames handed to the sinks after the request that still carry the old preset
  (the frame in flight when the request came);
* *switch ms*: request -> the first frame with the new preset handed to the sinks;
* *commit ms*: request -> the switch was taken at a frame boundary (after the frame in flight,
  and for a cold photo after its detection).

Two rows: presets prepared beforehand (``Session.preload_presets``, as ``live --control-port``
does: the switch runs no detection) and cold (a photo file never prepared: the source face is
detected at the boundary and that frame waits for it). The engine's frame time is printed for
scale: "<= 1 frame" means the switch time stays within the frame in flight plus the next one.

Usage: python benchmarks/bench_switch.py [--switches 12] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from livefuse.bench import git_commit, machine
from livefuse.config import AppConfig, CaptureConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.imaging import load_image, save_image
from livefuse.io.sinks import CallbackSink
from livefuse.io.sources import FramesSource
from livefuse.presets import Preset, PresetSource, PresetStore
from livefuse.samples import astronaut, insightface_image
from livefuse.session import Session
from livefuse.testing.guard_clip import guard_clip

ENGINE = EngineConfig(face_selector="one", detect_every=3, rotation="off")


def run(switches: int, cold: bool, seed: int, folder: Path) -> dict[str, list[float]]:
    rng = random.Random(seed)
    store = PresetStore(folder / ("cold" if cold else "warm"))
    photos = [save_image(folder / "a.png", astronaut()),
              Path(shutil.copy(insightface_image("Tom_Hanks_54745.png"), folder / "b.png"))]
    for name, photo in zip(("A", "B"), photos, strict=True):
        store.save(Preset.of(name, AppConfig(engine=ENGINE), PresetSource(path=str(photo))))
    frames = guard_clip(load_image(insightface_image("t1.jpg")).bgr, frames=24).frames
    sent: list[int] = []
    analyser = DlibFaceAnalyser()
    session = Session(AppConfig(capture=CaptureConfig(kind="test pattern", width=640,
                                                      height=480)),
                      source_factory=lambda c: FramesSource(frames, fps=30.0),
                      engine_factory=lambda c: Engine(c.engine, analyser=analyser,
                                                      cache=c.cache),
                      presets=store)
    session.switch_preset("A")
    if not cold:
        session.preload_presets()
    session.start()
    runner = session.runner
    assert runner is not None
    # on the inference thread, right after each frame: the order against the commit is exact
    runner.set_sinks([*runner.sinks, CallbackSink(lambda f, t: sent.append(
        time.perf_counter_ns()))])
    out: dict[str, list[float]] = {"old": [], "switch": [], "commit": [], "stall": []}
    take = runner.switch
    committed: list[int] = []

    def timed(*a: Any, **k: Any) -> Any:
        # the future is resolved on the inference thread at the commit itself
        future = take(*a, **k)
        future.add_done_callback(lambda f: committed.append(time.perf_counter_ns()))
        return future

    runner.switch = timed  # type: ignore[method-assign]
    try:
        while len(sent) < 10:
            time.sleep(0.05)
        for i in range(switches):
            name = "B" if i % 2 == 0 else "A"
            if cold:  # a photo file never seen: its face is detected at the boundary
                photo = Path(shutil.copy(photos[i % 2 == 0], folder / f"cold{i}.png"))
                store.save(Preset.of(name, AppConfig(engine=ENGINE),
                                     PresetSource(path=str(photo))))
            time.sleep(rng.uniform(0.3, 0.8))
            committed.clear()
            t0 = time.perf_counter_ns()
            session.switch_preset(name)
            while not committed or not [t for t in sent if t > committed[0]]:
                time.sleep(0.002)
            before = [t for t in sent if t < committed[0]]
            first_new = next(t for t in sent if t > committed[0])
            out["old"].append(float(sum(1 for t in before if t > t0)))
            out["switch"].append((first_new - t0) / 1e6)
            out["commit"].append((committed[0] - t0) / 1e6)
            out["stall"].append((first_new - before[-1]) / 1e6)
        out["frame"] = list(np.diff(sent[5:]) / 1e6)
    finally:
        session.stop(2.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--switches", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"commit {git_commit()}, {machine()}; classic engine, 640x480 one-face clip at 30 fps, "
          f"presets with the same models, {args.switches} switches per row\n")
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(ENGINE)
        photo = load_image(save_image(Path(tmp) / "p.png", astronaut()))
        engine.use_source(engine.prepare_source(photo))
        t0 = time.perf_counter()
        for _ in range(1000):  # what the inference thread does at a preloaded switch
            engine.use_source(engine.prepare_source(photo))
        print(f"the commit itself (memoised prepare_source + use_source): "
              f"{(time.perf_counter() - t0) * 1e3:.0f} us\n")
        print("| presets | old frames after the request (max) | request -> commit ms p50 / "
              "max | request -> first new frame ms p50 / max | frame interval at the switch "
              "ms p50 / max | frame interval ms p50 |")
        print("|---|---:|---:|---:|---:|---:|")
        for cold in (False, True):
            r = run(args.switches, cold, args.seed, Path(tmp))
            print(f"| {'cold (never prepared)' if cold else 'preloaded'} | {max(r['old']):.0f} | "
                  f"{statistics.median(r['commit']):.0f} / {max(r['commit']):.0f} | "
                  f"{statistics.median(r['switch']):.0f} / {max(r['switch']):.0f} | "
                  f"{statistics.median(r['stall']):.0f} / {max(r['stall']):.0f} | "
                  f"{statistics.median(r['frame']):.0f} |")


if __name__ == "__main__":
    main()
