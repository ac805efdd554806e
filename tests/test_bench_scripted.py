"""The benchmarks' scripted analyser (benchmarks/bench_frame_path.py) under ``--rotation auto``,
the default of ``run``: it must answer a frame the sweep turned with no face, as a real detector
answers an upright face turned. When it answered the script at every turn, the engine saw eight
faces at eight places, every frame swept every turn, and the GPU table read 25 fps for ~190."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

bench = pytest.importorskip("bench_frame_path")

from livefuse.faces.rotation import ANGLES, SweepPacer, detect_rotated  # noqa: E402
from livefuse.types import Face  # noqa: E402


class CountingDetector:
    """The inner analyser: counts detector passes, finds nothing itself."""

    def __init__(self) -> None:
        self.calls = 0

    def detect(self, frame: Any, upsample: int | None = None) -> list[Face]:
        self.calls += 1
        return []


def test_turned_frames_get_no_scripted_face_and_only_the_first_frame_sweeps() -> None:
    inner = CountingDetector()
    scripted = bench.ScriptedAnalyser(inner, bench.script((640, 360), 1))
    frame = np.zeros((360, 640, 3), np.uint8)
    pacer = SweepPacer()
    per_frame = []
    for i in range(6):
        scripted.index = i
        before = inner.calls
        faces = detect_rotated(scripted.detect, frame, "auto", pacer=pacer, index=i)
        per_frame.append(inner.calls - before)
        assert len(faces) == 1 and faces[0].angle == 0
    # the first frame: upright and every turn; then the upright pass alone
    assert per_frame == [1 + len(ANGLES)] + [1] * 5
    assert pacer.turns == ()
