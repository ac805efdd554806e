"""Aligned crops, the one paste-back and the one cache re-warp, on the host (OpenCV).

* :func:`arcface_affine` gives the affine matrix that maps a face's 5 kps onto the ArcFace
  template scaled to the crop size, as insightface's ``face_align.estimate_norm`` does (template:
  insightface ``utils/face_align.py``; least-squares similarity: Umeyama, IEEE TPAMI 13(4), 1991).
* :func:`paste` writes any renderer's :class:`~livefuse.types.Patch` into the frame, touching only
  the region the patch covers: the patch and its alpha are warped with the inverse of the patch's
  affine into a bbox-local ROI, clipped to the frame (faces partly outside the frame work), then
  alpha-blended (or Poisson-cloned for ``blend='seamless'``). A patch whose affine is an integer
  translation (the classic renderer's) is sliced instead of resampled.
* :func:`rewarp` moves a cached patch onto the face's current position by composing its affine
  with the similarity transform between the face's alignment points then and now: no pixels are
  resampled until the paste, so a cache hit costs one resample like a miss does, and a cache hit
  and a miss go through the same blend (turning the cache on does not change how faces look).

The GPU versions (batched align, batched paste) live in :mod:`livefuse.swap.gpu_frame`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import cv2
import numpy as np

from livefuse.faces.align import ARCFACE_DST, arcface_affine, similarity
from livefuse.types import Affine, FloatArray, Frame, Patch

Roi = tuple[int, int, int, int]
"""``(x0, y0, x1, y1)`` px of a frame region, end-exclusive."""


def translation(x0: float, y0: float) -> Affine:
    """The affine of a bbox-local patch whose top-left corner sits at frame px ``(x0, y0)``."""
    return np.array([[1.0, 0.0, -x0], [0.0, 1.0, -y0]], np.float64)


def _h(m: Affine) -> np.ndarray:
    return np.vstack([m, [0.0, 0.0, 1.0]])


def align_crop(frame: Frame, affine: Affine, size: int = 128) -> Frame:
    """The aligned crop ``(size, size, 3) uint8 BGR`` (black outside the frame)."""
    return np.asarray(cv2.warpAffine(frame, affine, (size, size), borderValue=0.0), np.uint8)


@lru_cache(maxsize=8)
def feather_mask(size: int = 128, margin: float = 0.06, blur: float = 0.06) -> FloatArray:
    """Feathered blend mask ``(size, size) float32`` in aligned space, 0 at the border, 1 inside.

    ``margin`` (fraction of size) is cut off at every side, then a Gaussian of kernel ``blur``
    (fraction of size) softens the edge. The values follow insightface's paste-back (erode by
    1/10 of the face size, blur by 1/20), expressed in aligned space so the mask is made once.
    Read-only: do not modify the returned array.
    """
    m = max(1, round(margin * size))
    k = max(1, round(blur * size))
    mask = np.zeros((size, size), np.float32)
    mask[m + k:size - m - k, m + k:size - m - k] = 1.0
    mask = np.clip(cv2.GaussianBlur(mask, (2 * k + 1, 2 * k + 1), 0), 0.0, 1.0).astype(np.float32)
    mask.setflags(write=False)
    return mask


def patch_roi(affine: Affine, patch_size: tuple[int, int], frame_shape: tuple[int, ...]) -> Roi:
    """``(x0, y0, x1, y1)`` of the frame region a patch of ``patch_size = (w, h)`` covers, clipped
    to the frame; empty (``x1 <= x0`` or ``y1 <= y0``) when it lies wholly outside."""
    pw, ph = patch_size
    inv = cv2.invertAffineTransform(affine)
    corners = np.array([[0, 0, 1], [pw, 0, 1], [0, ph, 1], [pw, ph, 1]], np.float64)
    pts = corners @ inv.T
    h, w = frame_shape[:2]
    x0 = max(int(np.floor(pts[:, 0].min())) - 1, 0)
    y0 = max(int(np.floor(pts[:, 1].min())) - 1, 0)
    x1 = min(int(np.ceil(pts[:, 0].max())) + 2, w)
    y1 = min(int(np.ceil(pts[:, 1].max())) + 2, h)
    return x0, y0, x1, y1


def paste_roi(affine: Affine, size: int, frame_shape: tuple[int, ...]) -> Roi:
    """:func:`patch_roi` of a ``size``×``size`` aligned crop."""
    return patch_roi(affine, (size, size), frame_shape)


def _integer_shift(m: Affine) -> tuple[int, int] | None:
    """``(dx, dy)`` when ``m`` is a pure integer translation, else ``None``."""
    if not np.allclose(m[:, :2], np.eye(2), atol=1e-9):
        return None
    t = m[:, 2]
    if not np.allclose(t, np.round(t), atol=1e-6):
        return None
    return round(float(t[0])), round(float(t[1]))


def _blend(roi: Frame, fake: Frame, alpha: FloatArray) -> None:
    out = roi.astype(np.float32)
    out += alpha[..., None] * (fake.astype(np.float32) - out)
    np.rint(out, out=out)
    roi[...] = out.astype(np.uint8)


def _seamless(roi: Frame, fake: Frame, alpha: FloatArray) -> None:
    mask = np.where(alpha >= 0.5, 255, 0).astype(np.uint8)
    # seamlessClone needs the mask clear of the patch border; shrink it by 2 px.
    mask[:2, :] = 0
    mask[-2:, :] = 0
    mask[:, :2] = 0
    mask[:, -2:] = 0
    x, y, bw, bh = cv2.boundingRect(mask)
    if bw < 4 or bh < 4:
        return
    centre = (x + bw // 2, y + bh // 2)
    roi[...] = cv2.seamlessClone(fake[y:y + bh, x:x + bw], roi, mask[y:y + bh, x:x + bw],
                                 centre, cv2.NORMAL_CLONE)


def paste(frame: Frame, patch: Patch) -> Roi | None:
    """Blend one host patch into ``frame`` in place, touching only the region it covers.

    Args:
        frame: ``(H, W, 3) uint8 BGR``, modified in place.
        patch: ``image (h, w, 3) uint8 BGR``, ``alpha (h, w) float32`` in [0, 1], and its affine.

    Returns:
        The ROI ``(x0, y0, x1, y1)`` written, or ``None`` when the patch lies outside the frame
        (or covers less than 4 px in either direction).
    """
    ph, pw = patch.alpha.shape[:2]
    x0, y0, x1, y1 = patch_roi(patch.affine, (pw, ph), frame.shape)
    if x1 - x0 < 4 or y1 - y0 < 4:
        return None
    inv = np.asarray(cv2.invertAffineTransform(patch.affine), np.float64)
    inv[:, 2] -= (x0, y0)
    shift = _integer_shift(inv)
    dsize = (x1 - x0, y1 - y0)
    if shift is not None:  # a bbox-local patch: a slice, no resampling
        fake = np.zeros((dsize[1], dsize[0], 3), np.uint8)
        alpha = np.zeros((dsize[1], dsize[0]), np.float32)
        dx, dy = shift
        sx0, sy0 = max(-dx, 0), max(-dy, 0)
        sx1, sy1 = min(pw, dsize[0] - dx), min(ph, dsize[1] - dy)
        if sx1 <= sx0 or sy1 <= sy0:
            return None
        fake[sy0 + dy:sy1 + dy, sx0 + dx:sx1 + dx] = patch.image[sy0:sy1, sx0:sx1]
        alpha[sy0 + dy:sy1 + dy, sx0 + dx:sx1 + dx] = patch.alpha[sy0:sy1, sx0:sx1]
    else:
        fake = np.asarray(cv2.warpAffine(patch.image, inv, dsize, flags=cv2.INTER_LINEAR,
                                         borderMode=cv2.BORDER_REPLICATE), np.uint8)
        alpha = np.asarray(cv2.warpAffine(patch.alpha, inv, dsize, flags=cv2.INTER_LINEAR,
                                          borderValue=0.0), np.float32)
    roi = frame[y0:y1, x0:x1]
    if patch.blend == "seamless":
        _seamless(roi, fake, alpha)
    else:
        _blend(roi, fake, alpha)
    return x0, y0, x1, y1


def paste_all(frame: Frame, patches: Sequence[Patch | None]) -> list[Roi | None]:
    """:func:`paste` each patch in order (later faces over earlier ones); ``None`` entries are
    skipped. Returns the ROI written per patch."""
    return [None if p is None else paste(frame, p) for p in patches]


def paste_back(frame: Frame, crop: Frame, affine: Affine,
               mask: FloatArray | None = None) -> Roi | None:
    """Paste a swapped aligned ``crop`` ``(S, S, 3) uint8 BGR`` with the feathered mask
    (:func:`feather_mask` by default): :func:`paste` of the equivalent patch."""
    mask = feather_mask(crop.shape[0]) if mask is None else mask
    return paste(frame, Patch(image=crop, alpha=mask, affine=affine))


def rewarp(patch: Patch, points_then: FloatArray, points_now: FloatArray) -> Patch:
    """Move a cached patch onto the face's current position.

    Args:
        patch: the patch stored when the face was rendered (host or device; pixels untouched).
        points_then, points_now: ``(N, 2)`` the face's alignment points then and now (kps, or the
            classic analyser's brow/eye/nose landmarks); their least-squares similarity
            transform carries the patch along.

    Returns:
        The same pixels with the composed affine (patch ∘ then-from-now), ``(2, 3) float64``.

    Worked out in Python floats (the similarity in the complex form of
    :func:`~livefuse.faces.align.similarity`, its inverse in closed form): a cache hit runs this
    for every face of every frame, and numpy's per-call overhead on 3×3 matrices was most of
    its 39 µs on the 2-core machine (now 11 µs; the same values within 1e-12).
    """
    src = np.asarray(points_then, np.float64).tolist()
    dst = np.asarray(points_now, np.float64).tolist()
    n = len(src)
    msx = sum(p[0] for p in src) / n
    msy = sum(p[1] for p in src) / n
    mdx = sum(p[0] for p in dst) / n
    mdy = sum(p[1] for p in dst) / n
    var = dot = cross = 0.0
    for (sx, sy), (dx, dy) in zip(src, dst, strict=True):
        sx, sy, dx, dy = sx - msx, sy - msy, dx - mdx, dy - mdy
        var += sx * sx + sy * sy
        dot += sx * dx + sy * dy
        cross += sx * dy - sy * dx
    a, b = (dot / var, cross / var) if var > 0 else (1.0, 0.0)
    # then -> now is x' = [[a, -b], [b, a]] x + t; its inverse is [[a, b], [-b, a]] / (a² + b²)
    tx, ty = mdx - (a * msx - b * msy), mdy - (b * msx + a * msy)
    k = a * a + b * b
    ia, ib = a / k, b / k
    itx, ity = -(ia * tx + ib * ty), -(-ib * tx + ia * ty)
    (p00, p01, p02), (p10, p11, p12) = np.asarray(patch.affine, np.float64).tolist()
    affine = np.array([[p00 * ia - p01 * ib, p00 * ib + p01 * ia, p00 * itx + p01 * ity + p02],
                       [p10 * ia - p11 * ib, p10 * ib + p11 * ia, p10 * itx + p11 * ity + p12]])
    return Patch(image=patch.image, alpha=patch.alpha, affine=affine, blend=patch.blend)


__all__ = ["ARCFACE_DST", "Roi", "align_crop", "arcface_affine", "feather_mask", "paste",
           "paste_all", "paste_back", "paste_roi", "patch_roi", "rewarp", "similarity",
           "translation"]
