"""The offline classic swapper: a landmark warp of the source face onto the target, LAB colour
transfer, the target's inner mouth kept, then a feathered or seamless (Poisson) blend.

The warp's destination is the *source's* face shape placed on the target by a similarity transform
(so the identity-carrying geometry of eyes, nose and brows is the source's), blended toward the
target's own landmarks only where pose and expression need it: the jaw line and the mouth. Pure
texture transfer onto the target's landmarks keeps the target's geometry and, measured with dlib's
128-d descriptors, stays closer to the target's identity than to the source's (design.md §6).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
from scipy.spatial import Delaunay

from livefuse.config import EngineConfig
from livefuse.faces.landmarks import INNER_MOUTH, JAW
from livefuse.swap.paste import translation
from livefuse.types import Face, FloatArray, Frame, Patch, StagedFrame

# Points that fix the similarity transform: brows, nose bridge and wings, eye corners.
# They move little with expression (iBUG 300-W indices).
_STABLE = np.r_[17:27, 27:36, 36:48]
_MOUTH = slice(48, 68)


@dataclass(frozen=True)
class ClassicSource:
    """A source face prepared once: its crop, landmarks in crop coordinates, and triangles.

    Attributes:
        crop: ``(h, w, 3) uint8 BGR`` region around the source face.
        landmarks: ``(68, 2) float32`` in ``crop`` coordinates.
        triangles: ``(T, 3) int32`` landmark indices of a Delaunay triangulation with
            zero-area triangles removed.
        face: the source face in its photo's coordinates.
        path: the photo it came from, when known.
    """

    crop: Frame
    landmarks: FloatArray
    triangles: npt.NDArray[np.int32]
    face: Face
    path: Path | None = None


def prepare_source(image: Frame, face: Face, path: Path | None = None) -> ClassicSource:
    """Cut the source face out of its photo and triangulate its landmarks (done once per source).

    Raises:
        ValueError: the face has no 68-point landmarks (it did not come from the classic analyser).
    """
    if face.landmarks is None:
        raise ValueError("the classic swapper needs 68-point landmarks on the source face")
    lm = face.landmarks
    h, w = image.shape[:2]
    x0, y0 = np.floor(lm.min(0)).astype(int) - 4
    x1, y1 = np.ceil(lm.max(0)).astype(int) + 5
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    crop = np.ascontiguousarray(image[y0:y1, x0:x1])
    local = (lm - np.array([x0, y0], np.float32)).astype(np.float32)
    tri = Delaunay(local.astype(np.float64)).simplices.astype(np.int32)
    p = local[tri]
    e1, e2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]
    area = np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
    # Coincident inner-lip points make degenerate triangles; they add nothing and slow the warp.
    tri = tri[area > 0.5]
    return ClassicSource(crop=crop, landmarks=local, triangles=tri, face=face, path=path)


def destination_shape(src_lm: FloatArray, tgt_lm: FloatArray, jaw_from_target: float,
                      mouth_from_target: float) -> FloatArray:
    """Where the source's 68 landmarks go on the target, ``(68, 2) float32``.

    The source shape is placed by a least-squares similarity transform fitted on the stable
    points, then the jaw and mouth are pulled toward the target's by the given weights (0..1).
    """
    m, _ = cv2.estimateAffinePartial2D(src_lm[_STABLE], tgt_lm[_STABLE], method=cv2.LMEDS)
    if m is None:  # degenerate fit: fall back to the target's own shape
        return tgt_lm.copy()
    dst = cv2.transform(src_lm[None], m)[0]
    dst[JAW] += jaw_from_target * (tgt_lm[JAW] - dst[JAW])
    dst[_MOUTH] += mouth_from_target * (tgt_lm[_MOUTH] - dst[_MOUTH])
    return dst.astype(np.float32)


def _piecewise_affine_maps(src_pts: FloatArray, dst_pts: FloatArray,
                           triangles: npt.NDArray[np.int32], size: tuple[int, int]
                           ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.uint8]]:
    """Remap tables that pull each destination pixel from its triangle's source location.

    One label raster + a gather of per-triangle inverse affines replaces a per-triangle
    ``warpAffine`` loop: one ``cv2.remap`` for the whole face.
    """
    w, h = size
    labels = np.full((h, w), -1, np.int32)
    d = dst_pts[triangles]  # (T, 3, 2)
    s = src_pts[triangles]
    for t in range(len(triangles)):
        cv2.fillConvexPoly(labels, np.round(d[t]).astype(np.int32), int(t))
    inside = labels >= 0
    # Affine dst->src per triangle: solve [x y 1] @ A = [u v].
    ones = np.ones((len(triangles), 3, 1), np.float64)
    dh = np.concatenate([d.astype(np.float64), ones], axis=2)  # (T, 3, 3)
    det = np.linalg.det(dh)
    ok = np.abs(det) > 1e-6
    aff = np.zeros((len(triangles), 3, 2), np.float64)
    aff[ok] = np.linalg.solve(dh[ok], s[ok].astype(np.float64))
    ys, xs = np.nonzero(inside)
    a = aff[labels[ys, xs]]
    map_x = np.full((h, w), -1.0, np.float32)
    map_y = np.full((h, w), -1.0, np.float32)
    map_x[ys, xs] = xs * a[:, 0, 0] + ys * a[:, 1, 0] + a[:, 2, 0]
    map_y[ys, xs] = xs * a[:, 0, 1] + ys * a[:, 1, 1] + a[:, 2, 1]
    return map_x, map_y, inside.astype(np.uint8) * 255


_GREY_CHROMA_STD = 1.0  # LAB a/b std (8-bit units) below which a source counts as greyscale


def transfer_colour_lab(src: Frame, ref: Frame, mask: npt.NDArray[np.bool_]) -> Frame:
    """Reinhard et al. 2001 colour transfer: ``src``'s LAB mean/std matched to ``ref`` in ``mask``.

    Args:
        src, ref: ``(h, w, 3) uint8 BGR`` of the same size.
        mask: ``(h, w) bool`` pixels whose statistics count.

    A greyscale source (a/b std < 1) keeps its lightness and takes ``ref``'s per-pixel chroma.

    Returns:
        ``src`` recoloured, ``(h, w, 3) uint8 BGR``.
    """
    if mask.sum() < 16:
        return src
    s = cv2.cvtColor(src, cv2.COLOR_BGR2LAB).astype(np.float32)
    r = cv2.cvtColor(ref, cv2.COLOR_BGR2LAB).astype(np.float32)
    sm, ss = s[mask].mean(0), s[mask].std(0) + 1e-3
    rm, rs = r[mask].mean(0), r[mask].std(0) + 1e-3
    gain = np.clip(rs / ss, 0.5, 2.0)  # a grey source must not blow up the chroma channels
    out = (s - sm) * gain + rm
    if ss[1] < _GREY_CHROMA_STD and ss[2] < _GREY_CHROMA_STD:
        # A grey source has no colour to transfer: keep its lightness and take the target's own
        # per-pixel chroma, so the skin keeps its natural variation instead of a flat tint.
        out[..., 1:] = r[..., 1:]
    return cv2.cvtColor(np.clip(out, 0, 255).astype(np.uint8), cv2.COLOR_LAB2BGR)


class ClassicSwapper:
    """The classic renderer: warp a prepared source face onto target faces, bbox-local.

    Cost is proportional to the face's area, not the frame's: only the region around the
    target face is read (3-6 ms per 150-px face on one core). Paste-back is
    :func:`livefuse.swap.paste.paste` (shared by every renderer).
    """

    device = "cpu"
    precision_in_use = "n/a (classic engine)"

    def __init__(self, config: EngineConfig) -> None:
        self.config = config

    def configure(self, config: EngineConfig) -> None:
        """Take new mouth, jaw and blend settings (between frames)."""
        self.config = config

    @staticmethod
    def prepare(image: Frame, face: Face, path: Path | None = None) -> ClassicSource:
        """The source face prepared once (:func:`prepare_source`)."""
        return prepare_source(image, face, path)

    def render(self, frame: StagedFrame, faces: Sequence[Face],
               source: ClassicSource) -> list[Patch | None]:
        """Render the source face for each target face of ``frame`` (read only).

        Returns:
            Per face a bbox-local :class:`~livefuse.types.Patch` (``image (h, w, 3) uint8 BGR``,
            ``alpha (h, w) float32``, a translation affine), or ``None`` when the face lies
            (almost) outside the frame or has no 68-point landmarks.
        """
        return [self.render_one(frame.host, f, source) for f in faces]

    def render_one(self, frame: Frame, target: Face, source: ClassicSource) -> Patch | None:
        """Warp and recolour the source face for one ``target`` (see :meth:`render`)."""
        if target.landmarks is None:
            return None
        cfg = self.config
        dst = destination_shape(source.landmarks, target.landmarks, cfg.jaw_from_target,
                                cfg.mouth_from_target)
        h, w = frame.shape[:2]
        both = np.vstack([dst, target.landmarks])
        pad = 0.12 * float(np.ptp(both[:, 0]) + np.ptp(both[:, 1])) / 2
        x0 = max(int(both[:, 0].min() - pad), 0)
        y0 = max(int(both[:, 1].min() - pad), 0)
        x1 = min(int(both[:, 0].max() + pad) + 1, w)
        y1 = min(int(both[:, 1].max() + pad) + 1, h)
        if x1 - x0 < 8 or y1 - y0 < 8:
            return None
        roi = frame[y0:y1, x0:x1]
        local = dst - np.array([x0, y0], np.float32)
        map_x, map_y, covered = _piecewise_affine_maps(
            source.landmarks, local, source.triangles, (x1 - x0, y1 - y0))
        warped = cv2.remap(source.crop, map_x, map_y, cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE).astype(np.uint8, copy=False)

        mask = np.zeros(roi.shape[:2], np.uint8)
        cv2.fillConvexPoly(mask, cv2.convexHull(np.round(local).astype(np.int32)), 255)
        mask &= covered
        tgt_local = target.landmarks - np.array([x0, y0], np.float32)
        if cfg.keep_mouth:
            cv2.fillPoly(mask, [np.round(tgt_local[INNER_MOUTH]).astype(np.int32)], 0)
        face_px = float(np.sqrt(max(mask.sum() / 255.0, 1.0)))
        if face_px < 6:
            return None
        # Statistics from the inner face only: the hull's rim can hold hair or background.
        e = max(3, int(face_px * 0.1)) | 1
        inner = cv2.erode(mask, np.ones((e, e), np.uint8)) > 0
        warped = transfer_colour_lab(warped, roi, inner if inner.sum() > 64 else mask > 0)
        alpha = _feather_alpha(mask, face_px) if cfg.blend == "feather" else mask
        return Patch(image=warped, alpha=alpha.astype(np.float32) * np.float32(1.0 / 255.0),
                     affine=translation(x0, y0), blend=cfg.blend)


def _feather_alpha(mask: npt.NDArray[np.uint8], face_px: float) -> npt.NDArray[np.uint8]:
    k = max(3, int(face_px * 0.08)) | 1
    soft = cv2.erode(mask, np.ones((k // 2 + 1, k // 2 + 1), np.uint8))
    return cv2.GaussianBlur(soft, (k, k), 0).astype(np.uint8, copy=False)
