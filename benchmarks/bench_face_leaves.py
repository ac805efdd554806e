"""The frame where faces leave, on the classic engine (CPU): t1.jpg at 720p with its six faces
for two frames, then an empty wall, so that every face leaves on a tracked frame (detect every
3). Prints the median ms of that frame and the tracker calls it made (faces asked per call).

    python benchmarks/bench_face_leaves.py                 # this tree
    PYTHONPATH=/path/to/other/tree python benchmarks/bench_face_leaves.py

The frame's policy (carry, detect, coast) is the same on the GPU path, where each tracker
call is a device round trip (docs/BENCHMARKS.md §12.7).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage, load_image
from livefuse.samples import astronaut, insightface_image


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=12)
    args = ap.parse_args()
    t1 = np.asarray(cv2.resize(load_image(insightface_image("t1.jpg")).bgr, (1280, 720)),
                    np.uint8)
    wall = np.full_like(t1, (60, 90, 120))
    eng = Engine(EngineConfig(detect_every=3, face_selector="many", smooth=False))
    eng.set_source(LoadedImage(bgr=astronaut(), alpha=None, path=Path("astronaut.png")))
    calls: list[int] = []
    inner = eng.analyser.track

    def counted(frame: Any, faces: Any) -> Any:
        calls.append(len(faces))
        return inner(frame, faces)

    eng.analyser.track = counted  # type: ignore[method-assign]
    leaving: list[tuple[float, list[int]]] = []
    i = 0
    for cycle in range(args.cycles):
        for k, frame in enumerate((t1, t1, wall)):
            n0 = len(calls)
            t0 = time.perf_counter()
            eng.process(frame, i, t_capture_ns=i * 33_333_333)
            ms = (time.perf_counter() - t0) * 1e3
            if k == 2 and cycle >= 2:  # the first cycles warm up
                leaving.append((ms, calls[n0:]))
            i += 1
    print(f"leaving frame: {statistics.median(ms for ms, _ in leaving):.1f} ms median over "
          f"{len(leaving)}; tracker calls on it (faces asked): {leaving[-1][1]}")


if __name__ == "__main__":
    main()
