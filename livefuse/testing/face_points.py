"""Scripted face geometry in insightface's 106-point scheme, with a mouth that opens and eyes
that blink: the stand-in for a trained landmark model in tests and benchmarks (random-weight
replicas do not see real mouths).

The layout follows :mod:`livefuse.faces.landmarks106` (regions, corners, chin); positions are
those of an average frontal face in units of the distance between the eye centres.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import numpy.typing as npt

from livefuse.faces import landmarks106 as L

LIP = 0.12
"""Thickness of each lip, eye distances."""
MOUTH_WIDTH = 0.9
EYE_WIDTH = 0.5


def _eye(centre_x: float, opening: float) -> npt.NDArray[np.float64]:
    """10 points: the image-left corner at index 2 of the region and the image-right one at 6
    (outer corners 35 and 93, :data:`L.EYE_OUTER`), 4 upper-lid, 3 lower-lid points, the
    centre."""
    w, h = EYE_WIDTH, opening * EYE_WIDTH
    xs_up, xs_lo = (-0.15, -0.05, 0.05, 0.15), (-0.1, 0.0, 0.1)
    profile = lambda x: 1.0 - (2 * x / w) ** 2  # noqa: E731  (lids: parabolas through corners)
    up = [(x, -h / 2 * profile(x) / profile(0.05)) for x in xs_up]
    lo = [(x, h / 2 * profile(x)) for x in xs_lo]
    pts = [lo[0], up[0], (-w / 2, 0.0), up[1], lo[1], up[2], (w / 2, 0.0), lo[2], up[3],
           (0.0, 0.0)]
    return np.array(pts, np.float64) + np.array([centre_x, 0.0])


def _mouth(gap: float, centre_y: float) -> npt.NDArray[np.float64]:
    """20 points: corners at 0 and 9 of the region (52 and 61), outer and inner lips; the upper
    lip stays, the lower lip drops with ``gap``."""
    half = MOUTH_WIDTH / 2
    xs5, xs4 = np.linspace(-0.3, 0.3, 5), np.linspace(-0.25, 0.25, 4)
    outer_up = [(x, -LIP) for x in xs5]
    inner_up = [(x, 0.0) for x in xs4]
    inner_lo = [(x, gap) for x in xs4]
    outer_lo = [(x, gap + LIP) for x in xs5]
    rest = outer_up + inner_up + inner_lo + outer_lo  # 18 points
    pts = [(-half, gap / 2), *rest[:8], (half, gap / 2), *rest[8:]]
    return np.array(pts, np.float64) + np.array([0.0, centre_y])


def unit_face_106(mouth_gap: float = 0.0, eye_open: float = 0.32) -> npt.NDArray[np.float64]:
    """``(106, 2)`` points of a frontal face, eye centres at (±0.5, 0), y down (a new array).

    Args:
        mouth_gap: inner-lip gap in eye distances (0 closed, ~0.4 wide open).
        eye_open: lid opening over eye width (~0.32 open, < 0.1 closed).
    """
    # memoised: benchmarks script every frame's landmarks, and building the shape (0.3 ms) was
    # counted in the engine's host CPU per frame
    return _unit_face_106(float(mouth_gap), float(eye_open)).copy()


@lru_cache(maxsize=256)
def _unit_face_106(mouth_gap: float, eye_open: float) -> npt.NDArray[np.float64]:
    p = np.zeros((L.COUNT, 2), np.float64)
    t = np.linspace(0.0, np.pi, 17)
    left = np.stack([-0.95 * np.cos(t[:16]) * 1.0, 0.2 + 1.35 * np.sin(t[:16])], 1)
    contour = np.concatenate([[[0.0, 1.55]], left[::-1][:16], left[::-1][:16] * (-1, 1)])
    p[L.CONTOUR] = contour[:33]
    p[L.EYE_A] = _eye(-0.5, eye_open)
    p[L.EYE_B] = _eye(0.5, eye_open)
    brow_x = np.linspace(-0.3, 0.3, 9)
    p[L.BROW_A] = np.stack([brow_x - 0.5, -0.3 - 0.05 * np.cos(brow_x * 4)], 1)
    p[L.BROW_B] = np.stack([brow_x + 0.5, -0.3 - 0.05 * np.cos(brow_x * 4)], 1)
    nose_y = np.linspace(0.0, 0.6, 15)
    p[L.NOSE] = np.stack([0.12 * np.sin(np.arange(15)), nose_y], 1)
    p[L.NOSE_TIP[0]] = (0.0, 0.65)
    p[L.NOSE_TIP[1]] = (0.0, 0.55)
    p[L.MOUTH] = _mouth(mouth_gap, 1.05)
    return p


def face_points_106(cx: float, cy: float, eye_distance: float, angle_deg: float = 0.0,
                    mouth_gap: float = 0.0, eye_open: float = 0.32) -> npt.NDArray[np.float32]:
    """:func:`unit_face_106` placed in a frame: eye midpoint at (cx, cy) px, scaled to
    ``eye_distance`` px, rolled by ``angle_deg``; ``(106, 2) float32``."""
    a = np.deg2rad(angle_deg)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    pts = unit_face_106(mouth_gap, eye_open) * eye_distance @ rot.T + (cx, cy)
    return pts.astype(np.float32)


def points_at_kps(kps: npt.ArrayLike, mouth_gap: float = 0.0,
                  eye_open: float = 0.32) -> npt.NDArray[np.float32]:
    """:func:`face_points_106` placed on a face's InsightFace-order kps (its eye centres)."""
    k = np.asarray(kps, np.float64)
    d = k[1] - k[0]
    centre = (k[0] + k[1]) / 2
    return face_points_106(float(centre[0]), float(centre[1]), float(np.hypot(*d)),
                           float(np.degrees(np.arctan2(d[1], d[0]))), mouth_gap, eye_open)


def kps_of_106(points: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """InsightFace-order kps ``(5, 2) float32`` of scripted 106 points: eye centres, the nose
    tip, the mouth corners."""
    p = np.asarray(points, np.float64)
    return np.stack([p[L.EYE_A].mean(0), p[L.EYE_B].mean(0), p[list(L.NOSE_TIP)].mean(0),
                     p[L.MOUTH_CORNERS[0]], p[L.MOUTH_CORNERS[1]]]).astype(np.float32)


__all__ = ["face_points_106", "kps_of_106", "points_at_kps", "unit_face_106"]
