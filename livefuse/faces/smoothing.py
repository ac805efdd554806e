"""Steady landmarks: a One-Euro filter per tracked face on its bbox, kps and landmarks.

Detector and landmark noise makes a still face's swap shimmer by a pixel or two from frame to
frame. The One-Euro filter (Casiez, Roussel & Vogel, CHI 2012) is a first-order low-pass whose
cut-off rises with the speed of the signal: heavy smoothing while the face is still, little lag
while it moves. Time comes from the frames' capture timestamps, so a dropped frame is a longer
step, not a faster motion.

Tuning (``benchmarks/bench_smoothing.py``, docs/BENCHMARKS.md): on a still face at 720p dlib's kps
jitter by ~0.8-1.5 px std; with :data:`MIN_CUTOFF_HZ` and :data:`BETA` below it falls under
0.5 px, and on the demo clip's pan/zoom/roll the filtered kps trail the raw ones by less than one
frame.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from livefuse.types import Face, FloatArray

MIN_CUTOFF_HZ = 1.0
"""Cut-off frequency for a still signal (Hz); lower = steadier, more lag when starting to move."""
BETA = 0.05
"""Speed coefficient: how fast the cut-off rises with the points' speed (per px/s)."""
D_CUTOFF_HZ = 1.0
"""Cut-off of the speed estimate itself (Casiez et al.'s recommended 1 Hz)."""


def _alpha(cutoff_hz: float, dt: float) -> float:
    tau = 1.0 / (2.0 * math.pi * cutoff_hz)
    return 1.0 / (1.0 + tau / dt)


class OneEuro:
    """The One-Euro filter on an array of any shape (each element filtered on its own; the
    speed that sets the cut-off is the mean absolute speed of the array, so a face's points
    share one cut-off and move together)."""

    def __init__(self, min_cutoff: float = MIN_CUTOFF_HZ, beta: float = BETA,
                 d_cutoff: float = D_CUTOFF_HZ) -> None:
        self.min_cutoff, self.beta, self.d_cutoff = min_cutoff, beta, d_cutoff
        self._x: np.ndarray | None = None
        self._dx = 0.0
        self._t: float | None = None

    def __call__(self, x: np.ndarray, t: float) -> np.ndarray:
        """Filter ``x`` observed at time ``t`` (s); returns the filtered value (float32)."""
        x = np.asarray(x, np.float64)
        if self._x is None or self._t is None or t <= self._t or self._x.shape != x.shape:
            self._x, self._t, self._dx = x, t, 0.0
            return x.astype(np.float32)
        dt = t - self._t
        speed = float(np.abs(x - self._x).mean()) / dt
        self._dx += _alpha(self.d_cutoff, dt) * (speed - self._dx)
        cutoff = self.min_cutoff + self.beta * self._dx
        self._x = self._x + _alpha(cutoff, dt) * (x - self._x)
        self._t = t
        return self._x.astype(np.float32)


class FaceSmoother:
    """One set of filters per track id: bbox, kps and landmarks of each tracked face.

    Untracked faces (``track_id < 0``) pass unchanged; a track that disappears is forgotten.
    """

    def __init__(self, min_cutoff: float = MIN_CUTOFF_HZ, beta: float = BETA) -> None:
        self.min_cutoff, self.beta = min_cutoff, beta
        self._filters: dict[int, tuple[OneEuro, OneEuro, OneEuro]] = {}

    def reset(self) -> None:
        self._filters.clear()

    def __call__(self, faces: Sequence[Face], t_s: float) -> list[Face]:
        out = []
        alive = set()
        for f in faces:
            if f.track_id < 0:
                out.append(f)
                continue
            alive.add(f.track_id)
            fb, fk, fl = self._filters.setdefault(
                f.track_id, tuple(OneEuro(self.min_cutoff, self.beta) for _ in range(3)))  # type: ignore[arg-type]
            lm: FloatArray | None = None if f.landmarks is None else fl(f.landmarks, t_s)
            out.append(replace(f, bbox=fb(f.bbox, t_s), kps=fk(f.kps, t_s), landmarks=lm))
        for tid in [t for t in self._filters if t not in alive]:
            del self._filters[tid]
        return out


__all__ = ["BETA", "MIN_CUTOFF_HZ", "FaceSmoother", "OneEuro"]
