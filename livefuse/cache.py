"""The pose-similarity cache: reuse a face's swap result while its pose and expression stay close.

Pure policy, no GPU and no swapper inside: the :class:`~livefuse.engine.Engine` computes a
:class:`PoseKey` per tracked face, asks :meth:`PoseCache.lookup`, and either re-warps the cached
result with the current frame's affine (a hit) or swaps afresh and calls :meth:`PoseCache.store`.
See design.md section 4.

What the key holds, and why: the swapper's output depends on the target's face shape once
translation, scale and in-plane rotation are removed (those the re-warp reproduces), on the head's
out-of-plane pose, on how open the mouth and eyes are, and on the lighting (the colour transfer
matches the target's colours). Roll is recorded but not compared: it is in-plane, and the
re-warp with the current similarity transform carries it.

The key means the same on both engines: the classic engine's 68 landmarks and the neural
engine's 106 (insightface's 2d106det, run on the tracked faces by
:mod:`livefuse.faces.landmarker`) both give the shape, the pose and the mouth and eye openness.
A face known only by its 5 kps shows neither expression nor pose, so its key cannot tell a stale
mouth: such a face is never served from the cache (every lookup is a miss).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from livefuse.config import CacheConfig
from livefuse.faces import landmarks106 as L106
from livefuse.faces.landmarks import mouth_open_ratio
from livefuse.types import Face, FloatArray, Frame

# Tolerances of the similarity score (one "sigma" per component): how far a component may move
# before the cached swap visibly lags. dlib's frame-to-frame landmark noise on a still face is
# about 0.03 shape units (~1.5 px on a 150-px face), 2-3 degrees of yaw/pitch and 0.03 of
# the openness ratios (measured on the motion clip of benchmarks/bench_cache.py); a real blink
# moves eye_open by ~0.15 and speech moves mouth_open by 0.1-0.4.
SHAPE_SIGMA = 0.06  # RMS landmark offset, in units of the face's RMS radius
POSE_SIGMA_DEG = 10.0  # yaw / pitch
OPENNESS_SIGMA = 0.12  # mouth-open and eye-open ratios
COLOUR_SIGMA = 12.0  # mean BGR of the face crop, 0..255 levels

# A generic 3D face (mm) for the head pose, in the iBUG 68-point indices it stands for:
# nose tip 30, chin 8, eye outer corners 36/45, mouth corners 48/54. Values from the widely used
# "head pose estimation" generic model (Mallick, LearnOpenCV 2016).
_MODEL_3D = np.array([
    (0.0, 0.0, 0.0),
    (0.0, -330.0, -65.0),
    (-225.0, 170.0, -135.0),
    (225.0, 170.0, -135.0),
    (-150.0, -150.0, -125.0),
    (150.0, -150.0, -125.0),
], np.float64)
_MODEL_IDX = [30, 8, 36, 45, 48, 54]


@dataclass(frozen=True)
class PoseKey:
    """What the swap result of one face depends on, in one frame.

    Attributes:
        shape: ``(N, 2) float32`` landmarks (68 or 106) or kps (5) with translation, scale and
            in-plane rotation removed (centred, unit RMS radius, eye line horizontal).
        yaw, pitch, roll: head pose in degrees (a weak-perspective fit of a generic 3D face,
            corrected for the line of sight: :func:`_head_pose`; zeros when only kps are
            known).
        mouth_open: inner-lip gap / mouth width (0 closed, ~0.5 wide open); with 106 landmarks
            the mouth region's height over its width, whose changes are the gap's changes (see
            :func:`livefuse.faces.landmarks106.region_openness`).
        eye_open: mean eye aspect ratio (Soukupová & Čech 2016; ~0.3 open, < 0.15 closed); with
            106 landmarks each eye region's height over its width.
        colour: ``(3,) float32`` mean BGR of the face bbox.
        sees_expression: landmarks gave the pose and openness (``False``: 5 kps only, the
            cache never reuses such a face).
    """

    shape: FloatArray
    yaw: float
    pitch: float
    roll: float
    mouth_open: float
    eye_open: float
    colour: FloatArray
    sees_expression: bool = True


def _normalise(points: FloatArray, left_eye: FloatArray, right_eye: FloatArray) -> FloatArray:
    c = points.mean(0)
    d = right_eye - left_eye
    angle = math.atan2(float(d[1]), float(d[0]))
    ca, sa = math.cos(-angle), math.sin(-angle)
    rot = np.array([[ca, -sa], [sa, ca]], np.float32)
    p = (points - c) @ rot.T
    radius = float(np.sqrt((p ** 2).sum(1).mean())) or 1.0
    return (p / radius).astype(np.float32)


# _MODEL_3D centred, and the rows of its least-squares pseudo-inverse: the weak-perspective
# fit of :func:`_head_pose` is then one weighted sum of the image points (no solver per frame)
_MODEL_CENTRED = _MODEL_3D - _MODEL_3D.mean(0)
_MODEL_PINV: tuple[tuple[float, float, float], ...] = tuple(
    tuple(row) for row in (_MODEL_CENTRED @ np.linalg.inv(_MODEL_CENTRED.T @ _MODEL_CENTRED))
    .tolist())


def _head_pose(points: npt.NDArray[np.floating[Any]] | Sequence[Sequence[float]],
               size: tuple[int, int]) -> tuple[float, float, float]:
    """Yaw, pitch, roll (degrees) from the 6 image points of :data:`_MODEL_3D`, in its order.

    A weak-perspective (scaled orthographic) fit, corrected for the line of sight: the 2×3
    linear map that takes the centred model onto the centred image points in the least-squares
    sense gives the first two rows of the rotation (made orthonormal; the third is their cross
    product), which is then turned from the line of sight through the points' centroid onto the
    optical axis of a camera whose focal length is the frame width (the camera ``solvePnP`` was
    given here before). Closed form, in Python floats: 12-15 µs on the 2-core machine, where
    OpenCV's SQPnP took 46-139 µs on the faces of t1.jpg (its iterations depend on the points).
    Against SQPnP on perspective projections of the model (yaw ±60°, pitch ±35°, roll ±40°,
    faces of 10-60 % of a 1080p frame's height anywhere in it, 0.5 px noise): median 1.6° /
    1.4° / 0.6° apart, 95th percentile under 5° (``tests/test_cache.py``); the key compares a
    face with itself a few frames earlier through this same function, and its pose tolerance is
    :data:`POSE_SIGMA_DEG`.
    """
    pts = points.tolist() if isinstance(points, np.ndarray) else [list(p) for p in points]
    n = len(pts)
    mx = sum(p[0] for p in pts) / n
    my = sum(p[1] for p in pts) / n
    a0x = a0y = a0z = a1x = a1y = a1z = 0.0
    for (x, y), (px, py, pz) in zip(pts, _MODEL_PINV, strict=True):
        x -= mx
        y -= my
        a0x += x * px
        a0y += x * py
        a0z += x * pz
        a1x += y * px
        a1y += y * py
        a1z += y * pz
    n0 = math.sqrt(a0x * a0x + a0y * a0y + a0z * a0z)
    n1 = math.sqrt(a1x * a1x + a1y * a1y + a1z * a1z)
    if not (n0 > 0 and n1 > 0 and math.isfinite(n0 + n1)):
        return 0.0, 0.0, 0.0
    e1 = (a0x / n0, a0y / n0, a0z / n0)
    e2 = (a1x / n1, a1y / n1, a1z / n1)
    # orthonormal rows, the correction split between them
    c = (e1[0] * e2[0] + e1[1] * e2[1] + e1[2] * e2[2]) / 2
    r1 = [e1[i] - c * e2[i] for i in range(3)]
    r2 = [e2[i] - c * e1[i] for i in range(3)]
    k1, k2 = math.sqrt(sum(v * v for v in r1)), math.sqrt(sum(v * v for v in r2))
    r1, r2 = [v / k1 for v in r1], [v / k2 for v in r2]
    r3 = [r1[1] * r2[2] - r1[2] * r2[1], r1[2] * r2[0] - r1[0] * r2[2],
          r1[0] * r2[1] - r1[1] * r2[0]]
    # the rotation that takes the optical axis onto the line of sight through the centroid
    w, h = size
    vx, vy = (mx - w / 2) / w, (my - h / 2) / w
    off = math.hypot(vx, vy)
    if off > 1e-12:
        norm = math.sqrt(off * off + 1.0)
        cos_t, sin_t = 1.0 / norm, off / norm
        kx, ky = -vy / off, vx / off
        one_c = 1.0 - cos_t
        rv = ((cos_t + kx * kx * one_c, kx * ky * one_c, ky * sin_t),
              (kx * ky * one_c, cos_t + ky * ky * one_c, -kx * sin_t),
              (-ky * sin_t, kx * sin_t, cos_t))
        rows = (r1, r2, r3)
        r1, r2, r3 = ([sum(rv[i][k] * rows[k][j] for k in range(3)) for j in range(3)]
                      for i in range(3))
    pitch = math.degrees(math.atan2(r3[1], r3[2]))
    yaw = math.degrees(math.atan2(-r3[0], math.hypot(r1[0], r2[0])))
    roll = math.degrees(math.atan2(r2[0], r1[0]))
    # The generic model has y up, images y down: fold pitch into (-90, 90].
    if pitch > 90:
        pitch -= 180
    elif pitch < -90:
        pitch += 180
    return yaw, pitch, roll


def _dist(a: FloatArray, b: FloatArray) -> float:
    return float(np.linalg.norm(a - b))


# The 106-point regions the key reads openness from, and the head-pose points in _MODEL_3D's
# order with the nose tip standing in as the first (its two points are averaged).
_OPENNESS_106 = (L106.MOUTH, L106.EYE_A, L106.EYE_B)


def _normalise_64(p: npt.NDArray[np.float64], left: tuple[float, float],
                  right: tuple[float, float]) -> FloatArray:
    """:func:`_normalise` of float64 points whose eye centres are already Python floats (the
    106-point key's path: the same values within float32 rounding, in fewer numpy calls)."""
    c = p.sum(0) * (1.0 / len(p))
    angle = math.atan2(right[1] - left[1], right[0] - left[0])
    ca, sa = math.cos(angle), math.sin(angle)
    q = (p - c) @ np.array([[ca, -sa], [sa, ca]])  # rotated by -angle: the eye line level
    radius = math.sqrt(float(np.einsum("ij,ij->", q, q)) / len(p)) or 1.0
    return (q * (1.0 / radius)).astype(np.float32)


# the regions the key reads openness from, as (start, stop) rows: the mouth, then each eye
_OPENNESS_ROWS = tuple((r.start, r.stop) for r in _OPENNESS_106)


def _key_106(lm: FloatArray, kps: FloatArray, size: tuple[int, int], colour: FloatArray
             ) -> PoseKey:
    """The key from insightface's 106 landmarks: each region read as a point set, the
    image-left eye and mouth corner told apart by the detector's kps (see
    :mod:`livefuse.faces.landmarks106`).

    Written with few numpy calls (the key runs on every cached frame of the live loop, where
    each call's overhead is host CPU the streamer's game does not get: 0.32-0.43 ms a frame on
    the H200's host before this form, docs/BENCHMARKS.md §12.5); the openness values equal
    :func:`livefuse.faces.landmarks106.region_openness`'s."""
    p = np.asarray(lm, np.float64)
    (ax, ay), (bx, by) = (p[L106.EYE_A].sum(0) * 0.1).tolist(), (p[L106.EYE_B].sum(0) * 0.1
                                                                 ).tolist()
    (k0x, k0y), (k1x, k1y), _, (k3x, k3y), _ = np.asarray(kps, np.float64).tolist()
    a_left = (math.hypot(ax - k0x, ay - k0y) + math.hypot(bx - k1x, by - k1y)
              <= math.hypot(ax - k1x, ay - k1y) + math.hypot(bx - k0x, by - k0y))
    left, right = ((ax, ay), (bx, by)) if a_left else ((bx, by), (ax, ay))
    o0, o1 = L106.EYE_OUTER if a_left else L106.EYE_OUTER[::-1]
    c0, c1 = L106.MOUTH_CORNERS
    (c0x, c0y), (c1x, c1y) = p[c0].tolist(), p[c1].tolist()
    if math.hypot(c0x - k3x, c0y - k3y) > math.hypot(c1x - k3x, c1y - k3y):
        c0, c1 = c1, c0
    pose_points = p[[L106.NOSE_TIP[0], L106.CHIN, o0, o1, c0, c1]]
    pose_points[0] = (p[L106.NOSE_TIP[0]] + p[L106.NOSE_TIP[1]]) * 0.5
    yaw, pitch, roll = _head_pose(pose_points, size)
    dx, dy = right[0] - left[0], right[1] - left[1]
    norm = math.hypot(dx, dy) or 1.0
    ux, uy = dx / norm, dy / norm
    # along the eye line and across it: each region's extents in one projection
    proj = p @ np.array([[ux, -uy], [uy, ux]])
    openness = []
    for start, stop in _OPENNESS_ROWS:
        r = proj[start:stop]
        (x1, y1), (x0, y0) = r.max(0).tolist(), r.min(0).tolist()
        openness.append((y1 - y0) / (x1 - x0) if x1 > x0 else 0.0)
    mouth_open, eye_open = openness[0], (openness[1] + openness[2]) / 2
    return PoseKey(_normalise_64(p, left, right), yaw, pitch, roll, mouth_open, eye_open, colour)


def _mean_colour(crop: Frame) -> FloatArray:
    """``(3,) float32`` mean BGR of ``crop``, read on at most about 64 of its rows (a 1080p
    close-up's box has ~500; the key's colour tolerance, :data:`COLOUR_SIGMA`, is 12 levels)."""
    if not crop.size:
        return np.zeros(3, np.float32)
    step = max(1, crop.shape[0] // 64)
    return np.array(cv2.mean(crop[::step])[:3], np.float32)


def pose_key(frame: Frame, face: Face) -> PoseKey:
    """Compute the cache key of ``face`` in ``frame`` (``(H, W, 3) uint8 BGR``).

    Uses the 68 landmarks when present (classic analyser), else the 106 landmarks (the neural
    engine's landmarker), else the 5 kps: pose and openness then read 0 and the key says it
    does not see the expression (:attr:`PoseKey.sees_expression`).
    """
    h, w = frame.shape[:2]
    x0, y0, x1, y1 = (int(v) for v in np.clip(face.bbox, 0, [w, h, w, h]))
    colour = _mean_colour(frame[y0:y1, x0:x1])
    lm = face.landmarks
    lm106 = face.landmarks_106
    if lm is None and lm106 is not None and np.isfinite(lm106).all():
        return _key_106(lm106, face.kps, (w, h), colour)
    if lm is None:
        shape = _normalise(face.kps, face.kps[0], face.kps[1])
        return PoseKey(shape, 0.0, 0.0, 0.0, 0.0, 0.0, colour, sees_expression=False)
    shape = _normalise(lm, lm[36:42].mean(0), lm[42:48].mean(0))
    yaw, pitch, roll = _head_pose(lm[_MODEL_IDX], (w, h))
    mouth_open = mouth_open_ratio(lm)
    ears = []
    for e in (lm[36:42], lm[42:48]):
        ears.append((_dist(e[1], e[5]) + _dist(e[2], e[4])) / (2 * (_dist(e[0], e[3]) or 1.0)))
    return PoseKey(shape, yaw, pitch, roll, mouth_open, float(np.mean(ears)), colour)


def similarity(a: PoseKey, b: PoseKey) -> float:
    """Similarity of two keys in 0..1 (1 = identical): ``exp(-0.5 * sum((d_i / sigma_i)^2))``.

    Components and tolerances: the module constants ``*_SIGMA``. Roll does not count. A key
    with a non-finite component (e.g. NaN landmarks) matches nothing: 0.
    """
    if a.shape.shape != b.shape.shape:
        return 0.0
    shape_rms = float(np.sqrt(((a.shape - b.shape) ** 2).sum(1).mean()))
    z = ((shape_rms / SHAPE_SIGMA) ** 2
         + ((a.yaw - b.yaw) / POSE_SIGMA_DEG) ** 2
         + ((a.pitch - b.pitch) / POSE_SIGMA_DEG) ** 2
         + ((a.mouth_open - b.mouth_open) / OPENNESS_SIGMA) ** 2
         + ((a.eye_open - b.eye_open) / OPENNESS_SIGMA) ** 2
         + (_dist(a.colour, b.colour) / COLOUR_SIGMA) ** 2)
    return math.exp(-0.5 * z) if math.isfinite(z) else 0.0  # a broken key never matches


@dataclass
class _Entry:
    key: PoseKey
    value: Any
    age: int = 0


@dataclass(frozen=True)
class CacheStats:
    """Counters since the cache was built (never reset by invalidation)."""

    hits: int = 0
    misses: int = 0
    forced_refreshes: int = 0
    invalidations: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses + self.forced_refreshes
        return self.hits / total if total else 0.0


class PoseCache:
    """Per-track store of one swap result each, with the reuse policy of design.md section 4.

    A lookup is a *hit* when the entry's key scores ``>= config.threshold`` against the current
    key and the entry has served fewer than ``config.refresh_every_n`` frames (the frame it was
    stored on counts as the first); otherwise it is a *forced refresh* (entry too old) or a
    *miss* (no entry, the key moved, or a key that does not see the expression). With
    ``refresh_every_n=1`` every lookup is a forced refresh or a miss. A disabled cache always
    misses and counts nothing.

    Not thread-safe: one owner (the Engine on the inference thread).
    """

    def __init__(self, config: CacheConfig | None = None) -> None:
        self.config = (config or CacheConfig()).validate()
        self._entries: dict[int, _Entry] = {}
        self._hits = self._misses = self._forced = self._invalidations = 0

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def apply(self, config: CacheConfig) -> None:
        """Take new settings; any change drops every entry."""
        config = config.validate()
        if config != self.config:
            self.config = config
            self.invalidate()

    def invalidate(self, track_id: int | None = None) -> None:
        """Drop one track's entry, or all entries (new source face, engine settings change)."""
        if track_id is None:
            if self._entries:
                self._invalidations += 1
            self._entries.clear()
        elif self._entries.pop(track_id, None) is not None:
            self._invalidations += 1

    def retain(self, track_ids: set[int]) -> None:
        """Drop the entries of tracks no longer present (lost track)."""
        for tid in [t for t in self._entries if t not in track_ids]:
            self.invalidate(tid)

    def lookup(self, track_id: int, key: PoseKey) -> Any | None:
        """The cached value to reuse for ``track_id``, or ``None`` (then swap and :meth:`store`)."""
        if not self.config.enabled:
            return None
        e = self._entries.get(track_id)
        if e is None or track_id < 0 or not key.sees_expression:
            self._misses += 1
            return None
        if e.age >= self.config.refresh_every_n:
            self._forced += 1
            return None
        if similarity(e.key, key) < self.config.threshold:
            self._misses += 1
            return None
        e.age += 1
        self._hits += 1
        return e.value

    def store(self, track_id: int, key: PoseKey, value: Any) -> None:
        """Keep a fresh swap result; untracked faces (``track_id < 0``) and keys that do not
        see the expression are not kept."""
        if self.config.enabled and track_id >= 0 and key.sees_expression:
            self._entries[track_id] = _Entry(key, value, age=1)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def stats(self) -> CacheStats:
        return CacheStats(self._hits, self._misses, self._forced, self._invalidations)


__all__ = ["CacheStats", "PoseCache", "PoseKey", "pose_key", "similarity"]
