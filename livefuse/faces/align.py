"""Face alignment maths: the ArcFace 5-point template and least-squares similarity transforms.

Kept below both the analysers and the renderers (they all align faces the same way).
"""

from __future__ import annotations

import numpy as np

from livefuse.types import Affine, FloatArray

ARCFACE_DST = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
     [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)
"""ArcFace 5-point template for 112×112 crops (insightface ``utils/face_align.py``)."""

FFHQ_512 = np.array(
    [[192.98138, 239.94708], [318.90277, 240.1936], [256.63416, 314.01935],
     [201.26117, 371.41043], [313.08905, 371.15118]], dtype=np.float32)
"""The FFHQ 5-point template for 512×512 crops (eyes, nose tip, mouth corners; image-left first)
that GFPGAN/GPEN/CodeFormer are trained on (facexlib's ``face_template``; FaceFusion's
``ffhq_512`` is the same points divided by 512)."""


def umeyama(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity (rotation, uniform scale, translation; no reflection) taking
    ``src`` ``(N, d)`` to ``dst``, as a ``(d+1, d+1)`` matrix (Umeyama, IEEE TPAMI 13(4), 1991)."""
    n, d = src.shape
    if d == 2:
        return _similarity_2d(src, dst)
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s0, d0 = src - mu_s, dst - mu_d
    cov = d0.T @ s0 / n
    sign = np.ones(d)
    if np.linalg.det(cov) < 0:
        sign[-1] = -1
    u, sv, vt = np.linalg.svd(cov)
    r = u @ np.diag(sign) @ vt
    var_s = (s0 ** 2).sum() / n
    scale = (sv * sign).sum() / var_s if var_s > 0 else 1.0
    t = np.eye(d + 1)
    t[:d, :d] = scale * r
    t[:d, d] = mu_d - scale * (r @ mu_s)
    return t


def _similarity_2d(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """:func:`umeyama` in the plane, in closed form: with the points as complex numbers the
    least-squares ``scale · rotation`` is ``Σ conj(s)·d / Σ |s|²`` of the centred points (the
    same minimiser; no SVD: this runs for every face of every frame)."""
    s = np.asarray(src, np.float64)
    d = np.asarray(dst, np.float64)
    ms = s.sum(0) / len(s)
    md = d.sum(0) / len(d)
    sx, sy = (s - ms).T
    dx, dy = (d - md).T
    var = float(sx @ sx + sy @ sy)
    if var > 0:
        a = float(sx @ dx + sy @ dy) / var
        b = float(sx @ dy - sy @ dx) / var
    else:
        a, b = 1.0, 0.0
    t = np.eye(3)
    t[0, 0], t[0, 1], t[1, 0], t[1, 1] = a, -b, b, a
    t[0, 2] = md[0] - (a * ms[0] - b * ms[1])
    t[1, 2] = md[1] - (b * ms[0] + a * ms[1])
    return t


def arcface_affine(kps: FloatArray, size: int = 128) -> Affine:
    """Affine matrix ``(2, 3) float64`` mapping frame px to a ``size``×``size`` aligned crop.

    Sizes that are multiples of 112 scale the template; others (128) scale by size/128 and shift
    x by 8·size/128, as insightface's ``estimate_norm`` does, so crops match its own.
    """
    if size % 112 == 0:
        ratio, diff_x = size / 112.0, 0.0
    else:
        ratio, diff_x = size / 128.0, 8.0 * size / 128.0
    dst = ARCFACE_DST.astype(np.float64) * ratio
    dst[:, 0] += diff_x
    return umeyama(np.asarray(kps, np.float64).reshape(5, 2), dst)[:2]


def ffhq_affine(kps: FloatArray, size: int = 512) -> Affine:
    """Affine ``(2, 3) float64`` mapping frame px to a ``size``×``size`` FFHQ-aligned crop (the
    enhancers' input): least-squares similarity of the 5 kps onto :data:`FFHQ_512` × size / 512."""
    dst = FFHQ_512.astype(np.float64) * (size / 512.0)
    return umeyama(np.asarray(kps, np.float64).reshape(5, 2), dst)[:2]


def similarity(src: FloatArray, dst: FloatArray) -> Affine:
    """Least-squares similarity transform ``(2, 3) float64`` taking points ``src`` to ``dst``
    (both ``(N, 2)``, N >= 2)."""
    return umeyama(np.asarray(src, np.float64), np.asarray(dst, np.float64))[:2]


__all__ = ["ARCFACE_DST", "FFHQ_512", "arcface_affine", "ffhq_affine", "similarity", "umeyama"]
