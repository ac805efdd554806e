"""Aligned crops and paste-back for the neural swapper.

* :func:`arcface_affine` gives the affine matrix that maps a face's 5 kps onto the ArcFace
  template scaled to the crop size, as insightface's ``face_align.estimate_norm`` does (template:
  insightface ``utils/face_align.py``; least-squares similarity: Umeyama, IEEE TPAMI 13(4), 1991).
* :func:`paste_back` writes the swapped crop into the frame touching only the face's bounding
  region: the crop and a feathered mask made once in aligned space are warped with the inverse
  affine into a bbox-local ROI, clipped to the frame (faces partly outside the frame work).
* :func:`align_crop_torch` / :func:`paste_back_torch` do the same with ``grid_sample`` on a frame
  that is already on the GPU, so a frame goes up once and comes down once.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from livefuse.types import FloatArray, Frame

if TYPE_CHECKING:
    import torch

ARCFACE_DST = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
     [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)
"""ArcFace 5-point template for 112×112 crops (insightface ``utils/face_align.py``)."""

Affine = npt.NDArray[np.float64]
"""``(2, 3) float64`` affine matrix, frame px → aligned-crop px."""


def _umeyama(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity (rotation, uniform scale, translation) taking src to dst, (3, 3)."""
    n, d = src.shape
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s0, d0 = src - mu_s, dst - mu_d
    cov = d0.T @ s0 / n
    sign = np.ones(d)
    if np.linalg.det(cov) < 0:
        sign[-1] = -1
    u, sv, vt = np.linalg.svd(cov)
    r = u @ np.diag(sign) @ vt
    var_s = (s0 ** 2).sum() / n
    scale = (sv * sign).sum() / var_s
    t = np.eye(d + 1)
    t[:d, :d] = scale * r
    t[:d, d] = mu_d - scale * (r @ mu_s)
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
    return _umeyama(np.asarray(kps, np.float64).reshape(5, 2), dst)[:2]


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


def paste_roi(affine: Affine, size: int, frame_shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """``(x0, y0, x1, y1)`` of the frame region covered by the crop, clipped to the frame.

    Empty (x1 <= x0 or y1 <= y0) when the face lies wholly outside the frame.
    """
    inv = cv2.invertAffineTransform(affine)
    corners = np.array([[0, 0, 1], [size, 0, 1], [0, size, 1], [size, size, 1]], np.float64)
    pts = corners @ inv.T
    h, w = frame_shape[:2]
    x0 = max(int(np.floor(pts[:, 0].min())) - 1, 0)
    y0 = max(int(np.floor(pts[:, 1].min())) - 1, 0)
    x1 = min(int(np.ceil(pts[:, 0].max())) + 2, w)
    y1 = min(int(np.ceil(pts[:, 1].max())) + 2, h)
    return x0, y0, x1, y1


def paste_back(frame: Frame, crop: Frame, affine: Affine,
               mask: FloatArray | None = None) -> tuple[int, int, int, int] | None:
    """Blend the swapped ``crop`` into ``frame`` in place, touching only the face's ROI.

    Args:
        frame: ``(H, W, 3) uint8 BGR``, modified in place.
        crop: ``(S, S, 3) uint8 BGR`` swapped aligned crop.
        affine: ``(2, 3)`` frame → crop matrix the crop was aligned with.
        mask: ``(S, S) float32`` blend mask in aligned space (default :func:`feather_mask`).

    Returns:
        The ROI ``(x0, y0, x1, y1)`` written, or ``None`` when the face is outside the frame.
    """
    size = crop.shape[0]
    if mask is None:
        mask = feather_mask(size)
    x0, y0, x1, y1 = paste_roi(affine, size, frame.shape)
    if x1 <= x0 or y1 <= y0:
        return None
    inv = cv2.invertAffineTransform(affine)
    inv[:, 2] -= (x0, y0)
    dsize = (x1 - x0, y1 - y0)
    fake = cv2.warpAffine(crop, inv, dsize, flags=cv2.INTER_LINEAR, borderValue=0.0)
    alpha = cv2.warpAffine(mask, inv, dsize, flags=cv2.INTER_LINEAR, borderValue=0.0)
    roi = frame[y0:y1, x0:x1]
    a = alpha[..., None]
    out = roi.astype(np.float32)
    out += a * (fake.astype(np.float32) - out)
    np.rint(out, out=out)
    roi[...] = out.astype(np.uint8)
    return x0, y0, x1, y1


# ----------------------------------------------------------------------------------- torch / GPU

def _grid(affine_out_to_in: np.ndarray, out_w: int, out_h: int, in_w: int, in_h: int,
          x_off: float, y_off: float, device: torch.device) -> torch.Tensor:
    """Sampling grid ``(1, out_h, out_w, 2)`` for ``grid_sample(align_corners=False)``."""
    import torch

    m = torch.as_tensor(affine_out_to_in, dtype=torch.float32, device=device)
    ys = torch.arange(out_h, device=device, dtype=torch.float32) + y_off
    xs = torch.arange(out_w, device=device, dtype=torch.float32) + x_off
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    sx = m[0, 0] * gx + m[0, 1] * gy + m[0, 2]
    sy = m[1, 0] * gx + m[1, 1] * gy + m[1, 2]
    # pixel centres: px p ↔ normalised (2p + 1) / n - 1
    return torch.stack(((2 * sx + 1) / in_w - 1, (2 * sy + 1) / in_h - 1), dim=-1)[None]


def align_crop_torch(frame_t: torch.Tensor, affine: Affine, size: int = 128) -> torch.Tensor:
    """Aligned crop from a frame already on the device.

    Args:
        frame_t: ``(H, W, 3) uint8 BGR`` tensor.
        affine: ``(2, 3)`` frame → crop matrix.

    Returns:
        ``(1, 3, size, size) float32`` RGB in [0, 1] (the swapper's input), zeros outside.
    """
    import torch.nn.functional as F

    h, w = frame_t.shape[:2]
    inv = cv2.invertAffineTransform(affine)
    grid = _grid(inv, size, size, w, h, 0.0, 0.0, frame_t.device)
    src = frame_t.flip(-1).permute(2, 0, 1)[None].float().div_(255.0)
    return F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def paste_back_torch(frame_t: torch.Tensor, crop_rgb: torch.Tensor, affine: Affine,
                     mask_t: torch.Tensor | None = None) -> tuple[int, int, int, int] | None:
    """GPU paste-back: blend ``crop_rgb`` into ``frame_t`` in place within the face's ROI.

    Args:
        frame_t: ``(H, W, 3) uint8 BGR`` tensor on the device, modified in place.
        crop_rgb: ``(1, 3, S, S)`` float RGB in [0, 1] (the swapper's output, any float dtype).
        affine: ``(2, 3)`` frame → crop matrix.
        mask_t: ``(S, S)`` float32 mask on the device (default :func:`feather_mask` uploaded).

    Returns:
        The ROI written, or ``None`` when the face is outside the frame.
    """
    import torch
    import torch.nn.functional as F

    size = crop_rgb.shape[-1]
    x0, y0, x1, y1 = paste_roi(affine, size, tuple(frame_t.shape))
    if x1 <= x0 or y1 <= y0:
        return None
    if mask_t is None:
        mask_t = torch.from_numpy(np.array(feather_mask(size))).to(frame_t.device)
    src = torch.cat((crop_rgb.float().flip(1) * 255.0, mask_t.float()[None, None]), dim=1)
    grid = _grid(np.asarray(affine, np.float64), x1 - x0, y1 - y0, size, size, float(x0),
                 float(y0), frame_t.device)
    warped = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros",
                           align_corners=False)[0]
    fake, alpha = warped[:3].permute(1, 2, 0), warped[3, ..., None]
    roi = frame_t[y0:y1, x0:x1]
    out = roi.float()
    out = out + alpha * (fake - out)
    roi.copy_(out.round_().clamp_(0, 255).to(torch.uint8))
    return x0, y0, x1, y1
