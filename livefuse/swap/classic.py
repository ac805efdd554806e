"""The offline classic swapper: a landmark warp of the source face onto the target, the target's
own shading and skin colour under the source's detail, the target's inner mouth kept (and the
source's teeth left out), then a feathered or seamless (Poisson) blend.

The warp's destination is the *source's* face shape placed on the target by a similarity transform
(so the identity-carrying geometry of eyes, nose and brows is the source's), blended toward the
target's own landmarks only where pose and expression need it: the jaw line and the mouth. Pure
texture transfer onto the target's landmarks keeps the target's geometry and, measured with dlib's
128-d descriptors, stays closer to the target's identity than to the source's (design.md §6).

Shading and colour come from a frequency split in LAB (docs/CLASSIC.md): the output is the
target's low-pass (its light, shadows and skin colour) plus the warped source minus its own
low-pass (eyes, brows, lips, skin texture). Both low-passes are taken over skin only, with the
eyes, brows, nose wings and mouth left out, so the source's features keep their full contrast and
the target's features leave no ghost. A grey source has no chroma detail, so its skin takes the
target's colour. The swap covers the source's face only where the target's face is (the two
landmark hulls intersected), so a turned head keeps its own silhouette.
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
from livefuse.faces.landmarks import INNER_MOUTH, JAW, LEFT_EYE, RIGHT_EYE
from livefuse.swap.paste import translation
from livefuse.types import Face, FloatArray, Frame, Patch, StagedFrame

# Points that fix the similarity transform: brows, nose bridge and wings, eye corners.
# They move little with expression (iBUG 300-W indices).
_STABLE = np.r_[17:27, 27:36, 36:48]
_MOUTH = slice(48, 68)
_OUTER_LIPS = slice(48, 60)
# Regions left out of the shading estimate (iBUG 300-W): brows and eyes, grown by
# _FEATURE_GROW; nose wings and outer lips, grown by _MOUTH_GROW.
_EYES_AND_BROWS = (slice(17, 22), slice(22, 27), RIGHT_EYE, LEFT_EYE)
_NOSE_AND_LIPS = (slice(31, 36), _OUTER_LIPS)

# Sizes relative to the target's face size: the square root of its landmark hull's area in px
# (about 0.75 x a dlib box width). Chosen by the sweep in docs/CLASSIC.md on t1.jpg: lower cut-offs
# follow the target's shading more closely, higher ones keep more of the source.
_SHADING_SIGMA = 0.08  # Gaussian sigma of the shading/colour low-pass
_FEATURE_GROW = 0.05  # how far past its landmarks a brow or eye is left out of the low-pass
# ... and a nose wing or the lips: the skin between them holds the target's shadow under the
# nose, which a 0.05 grow left out, so the low-pass filled it with cheek light (upper lips 7-17 L
# paler than the target's; docs/CLASSIC.md). Brows and eyes keep 0.05: their surround carries
# identity (at 0.02-0.03 Monica's smallest margin over shifted pictures fell from 0.10 to
# 0.05-0.08).
_MOUTH_GROW = 0.01
_DETAIL_FADE = 0.05  # the source's detail fades out over this width inside its hull's edge
_FEATHER = 0.08  # Gaussian kernel of the blend ramp, centred on the mask's edge
_OVERSAMPLE = 1.5  # a target face is rendered at no more than this many times the source's size
_FEATURE_SOFTEN = 0.03  # Gaussian sigma that softens the edge of the source's feature weight
# Skin colour (issue 18; the sweeps are in docs/CLASSIC.md, measured with facecheck.py colour on
# astronaut -> t1.jpg): the target's colour is read at this finer scale, with its eyes and lips
# (grown by _COLOUR_GROW) left out; a grey patch is a few percent of the face wide.
_COLOUR_SIGMA = 0.025
_COLOUR_GROW = 0.01
_CURVE_BINS = 8  # lightness bins of the target's colour curve
_CURVE_SAMPLES = 4096  # skin pixels read for the curve
_DEEPEN = 0.4  # how far a pixel the swap makes darker follows the curve (1 overshoots: 1.07 chroma;
# 0.5 gave Monica 1.032 once the shadow under the nose stayed, _MOUTH_GROW)
_PALE = 0.1  # ... and one it makes lighter (more leaves pale patches beside the target's lips)
_MIN_DIM = 0.25  # the least share of the source's relief kept under a darker target's light
_SKIN_DETAIL = 0.3  # share of the source's own colour detail kept on the skin (1 on features)
# A target face whose skin chroma (95th percentile, 8-bit LAB units) is at most _GREY_CHROMA is a
# black-and-white picture (JPEG leaves 1-2 units): the source's colour detail is left out; from
# _COLOUR_CHROMA up all of it is kept (skin in colour photos: 10-30 units; t1.jpg's faces: 17-27)
_GREY_CHROMA = 3.0
_COLOUR_CHROMA = 8.0
# A target turned far from the camera (its nose tip near its far jaw line) takes the whole shape
# from its own landmarks, from none at _TURN_FROM of :func:`turned` to all at _TURN_FROM +
# _TURN_SPAN: a frontal source shape laid on a near-profile puts the source's far cheek and nose
# where the target shows its profile edge, a pale, flat strip (Joey in t1.jpg, docs/CLASSIC.md,
# "Turned faces"). t1.jpg's faces read 0.02-0.45 (frontal to three-quarter: unchanged), Monica
# 0.82 and Joey 1.03 upright; the fits of t1.jpg turned by 30-60 degrees read Joey 0.77-0.91,
# so the ramp ends at 0.8 and a turned photo gets the upright result (a new user's trial saw a
# frontal face on Joey at 60 degrees with the ramp at 0.6-0.95)
_TURN_FROM = 0.5
_TURN_SPAN = 0.3
_LOWPASS_SUPPORT = 0.3  # normalised-convolution weight under which a fine estimate falls back
# The source's skin relief at two fine scales (Gaussian sigmas of these fractions of the face,
# finest first) is brought to the target's contrast in each band, over skin, never raised and
# never cut below _RELIEF_MIN_GAIN: a hard-lit, sharp source photo pasted on a soft-lit target
# otherwise gives the skin a mottled, silvery sheen (docs/CLASSIC.md, "Relief")
_RELIEF_BANDS = (1 / 60, 1 / 25)
_RELIEF_MIN_GAIN = 0.3
# Specular highlights of the source (skin brighter than around it and paler in colour: the light's
# own colour, not the skin's) belong to the source photo's lighting; under the target's light they
# read as a silvery sheen. A pixel _SPECULAR_RISE L levels above the skin's low-pass whose chroma
# fell by _SPECULAR_SPAN of the low-pass's counts fully; its rise and paleness are cut by
# _SPECULAR_CUT (docs/CLASSIC.md, "Speculars")
_SPECULAR_RISE = 8.0
_SPECULAR_SPAN = 0.3
_SPECULAR_CUT = 0.8
# A 68-point fit of a smiling source puts its inner-lip points on its teeth, so the teeth reach
# into its lip band and would lay white lips on a target whose mouth is closed (Rachel in
# t1.jpg: lips 6 L levels lighter than her cheeks, medians; 54 darker in the original).
# Teeth show when the inner mouth is this many L levels (8-bit LAB) lighter than the lip band
# (medians): the astronaut's are 23 lighter; t1.jpg's six mouths, closed, dark or with
# shaded teeth, read -60 to +9 (docs/CLASSIC.md, "The mouth")
_TEETH_RISE = 15.0


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
        face_px: the square root of the area of the landmarks' hull, px (0: unknown).
        teeth: ``(h, w) uint8`` 255 on the teeth the source shows (:func:`source_teeth`), or
            ``None`` when it shows none.
    """

    crop: Frame
    landmarks: FloatArray
    triangles: npt.NDArray[np.int32]
    face: Face
    path: Path | None = None
    face_px: float = 0.0
    teeth: npt.NDArray[np.uint8] | None = None


def source_teeth(crop: Frame, landmarks: FloatArray) -> npt.NDArray[np.uint8] | None:
    """Where a source face shows its teeth: ``(h, w) uint8``, 255 on them, or ``None`` when its
    inner mouth is not :data:`_TEETH_RISE` lighter than its lips (closed, or dark inside).

    The inner mouth (landmarks 60-67) grown into the outer lips' hull over the pixels lighter
    than halfway between the two medians, connected to it: the teeth a fit on them left in the
    lip band, not a lip's highlight elsewhere.

    Args:
        crop: ``(h, w, 3) uint8 BGR`` around the source face.
        landmarks: ``(68, 2) float32`` in ``crop`` coordinates (iBUG 300-W).
    """
    shape = crop.shape[:2]
    outer = np.zeros(shape, np.uint8)
    cv2.fillConvexPoly(outer, cv2.convexHull(np.round(landmarks[_OUTER_LIPS]).astype(np.int32)),
                       255)
    inner = np.zeros(shape, np.uint8)
    cv2.fillPoly(inner, [np.round(landmarks[INNER_MOUTH]).astype(np.int32)], 255)
    band = (outer > 0) & (inner == 0)
    if cv2.countNonZero(inner) < 10 or not band.any():
        return None
    light = np.asarray(cv2.cvtColor(crop, cv2.COLOR_BGR2LAB), np.float32)[..., 0]
    teeth_l, lips_l = float(np.median(light[inner > 0])), float(np.median(light[band]))
    if teeth_l - lips_l < _TEETH_RISE:
        return None
    lighter = ((light > (teeth_l + lips_l) / 2) & (outer > 0)) | (inner > 0)
    _, parts = cv2.connectedComponents(lighter.astype(np.uint8), connectivity=8)
    touching = np.unique(parts[inner > 0])
    found = np.isin(parts, touching[touching > 0]).astype(np.uint8) * 255
    # the gaps between teeth closed, and a pixel more: the fit's edge pixels are half lip
    round3 = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (3, 3))
    grown = cv2.dilate(cv2.morphologyEx(found, cv2.MORPH_CLOSE, round3), round3)
    return np.asarray(cv2.bitwise_and(grown, outer), np.uint8)


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
    return ClassicSource(crop=crop, landmarks=local, triangles=tri, face=face, path=path,
                         face_px=_hull_px(local), teeth=source_teeth(crop, local))


def _hull_px(points: FloatArray) -> float:
    """The square root of the area of the points' convex hull, px."""
    return float(np.sqrt(max(cv2.contourArea(cv2.convexHull(points.astype(np.float32))), 1.0)))


def turned(landmarks: FloatArray) -> float:
    """How far a face is turned aside, from its ``(68, 2)`` landmarks (iBUG 300-W): 0 frontal,
    about 1 when the nose tip lies on the far jaw line (a near-profile).

    Along the eye line (so roll does not count): the difference of the nose tip's distances to
    the two ends of the jaw line (points 0 and 16) over their sum, unsigned.
    """
    eyes = landmarks[42:48].mean(axis=0) - landmarks[36:42].mean(axis=0)
    norm = float(np.hypot(eyes[0], eyes[1]))
    if norm < 1e-6:
        return 0.0
    u = eyes / norm
    nose = float(landmarks[30] @ u)
    near, far = nose - float(landmarks[0] @ u), float(landmarks[16] @ u) - nose
    return abs(near - far) / max(near + far, 1e-6)


def destination_shape(src_lm: FloatArray, tgt_lm: FloatArray, jaw_from_target: float,
                      mouth_from_target: float) -> FloatArray:
    """Where the source's 68 landmarks go on the target, ``(68, 2) float32``.

    The source shape is placed by a least-squares similarity transform fitted on the stable
    points, then the jaw and mouth are pulled toward the target's by the given weights (0..1),
    and on a target turned far aside (:func:`turned` past :data:`_TURN_FROM`) the whole shape
    toward the target's.
    """
    m, _ = cv2.estimateAffinePartial2D(src_lm[_STABLE], tgt_lm[_STABLE], method=cv2.LMEDS)
    if m is None:  # degenerate fit: fall back to the target's own shape
        return tgt_lm.copy()
    dst = cv2.transform(src_lm[None], m)[0]
    dst[JAW] += jaw_from_target * (tgt_lm[JAW] - dst[JAW])
    dst[_MOUTH] += mouth_from_target * (tgt_lm[_MOUTH] - dst[_MOUTH])
    aside = min(max((turned(tgt_lm) - _TURN_FROM) / _TURN_SPAN, 0.0), 1.0)
    dst += aside * (tgt_lm - dst)
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


def _face_size(mask: npt.NDArray[np.uint8]) -> float:
    """The square root of the mask's area, px: the unit of every size in the relighting."""
    return float(np.sqrt(max(cv2.countNonZero(mask), 1)))


def _hull_mask(points: FloatArray, shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
    mask = np.zeros(shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, cv2.convexHull(np.round(points).astype(np.int32)), 255)
    return mask


def _parts_mask(landmarks: FloatArray, parts: Sequence[slice], shape: tuple[int, ...],
                grow_px: float) -> npt.NDArray[np.uint8]:
    """``(h, w) uint8`` 255 on the hulls of the landmark ``parts``, each grown by ``grow_px``."""
    mask = np.zeros(shape[:2], np.uint8)
    for part in parts:
        cv2.fillConvexPoly(mask, cv2.convexHull(np.round(landmarks[part]).astype(np.int32)), 255)
    g = 2 * round(grow_px) + 1
    if g == 1:
        return mask
    return np.asarray(cv2.dilate(mask, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (g, g))),
                      np.uint8)


def _skin_weight(hull: npt.NDArray[np.uint8], landmarks: FloatArray, face_px: float
                 ) -> npt.NDArray[np.float32]:
    """``(h, w) float32`` 1 on the face's skin: its hull without brows and eyes (grown by
    ``_FEATURE_GROW * face_px``), nose wings and lips (grown by ``_MOUTH_GROW * face_px``); falls
    back to the whole hull when the features cover most of it (a tiny face)."""
    features = (_parts_mask(landmarks, _EYES_AND_BROWS, hull.shape, _FEATURE_GROW * face_px)
                | _parts_mask(landmarks, _NOSE_AND_LIPS, hull.shape, _MOUTH_GROW * face_px))
    skin = hull & ~features
    if cv2.countNonZero(skin) < cv2.countNonZero(hull) // 4:
        skin = hull
    return skin.astype(np.float32) * np.float32(1.0 / 255.0)


_EYES_AND_LIPS = (RIGHT_EYE, LEFT_EYE, _OUTER_LIPS)


def face_weights(source_hull: npt.NDArray[np.uint8], source_lm: FloatArray,
                 target_hull: npt.NDArray[np.uint8], target_lm: FloatArray,
                 alpha: npt.NDArray[np.uint8], face_px: float) -> FaceWeights:
    """The :class:`FaceWeights` of one swap from both hulls and landmark sets (ROI coordinates)
    and the blend ``alpha`` (uint8)."""
    unit = np.float32(1.0 / 255.0)
    source_skin = _skin_weight(source_hull, source_lm, face_px)
    features = np.clip(source_hull.astype(np.float32) * unit - source_skin, 0.0, 1.0)
    features = np.asarray(cv2.GaussianBlur(features, (0, 0), max(1.0, _FEATURE_SOFTEN * face_px)),
                          np.float32)
    fade_px = max(1.0, _DETAIL_FADE * face_px)
    inside = cv2.distanceTransform(source_hull, cv2.DIST_L2, 3)
    fade = np.minimum(inside * np.float32(1.0 / fade_px), np.float32(1.0)).astype(np.float32)
    eyes_lips = _parts_mask(target_lm, _EYES_AND_LIPS, target_hull.shape, _COLOUR_GROW * face_px)
    colour = (target_hull & ~eyes_lips).astype(np.float32) * unit
    return FaceWeights(source_skin=source_skin, source_features=features, fade=fade,
                       target_skin=_skin_weight(target_hull, target_lm, face_px),
                       target_colour=colour, target_face=colour * alpha.astype(np.float32) * unit)


def masked_lowpass(image: npt.NDArray[np.float32], weight: npt.NDArray[np.float32],
                   sigma: float, fallback: npt.NDArray[np.float32] | None = None,
                   min_sigma: float = 3.0) -> npt.NDArray[np.float32]:
    """Gaussian low-pass of ``image`` that only reads pixels where ``weight`` > 0.

    Normalised convolution (Knutsson & Westin 1993): ``G*(image*weight) / G*weight``, so skin next
    to hair or background is not pulled toward them, and the result extends smoothly past the
    weighted region. Computed at a reduced scale where ``sigma`` allows (the result is smooth).

    Args:
        image: ``(h, w, c) float32``.
        weight: ``(h, w) float32`` in 0..1.
        sigma: Gaussian sigma in px (full scale).
        fallback: ``(h, w, c) float32`` taken where few weighted pixels lie near (blended in as
            the local weight falls under :data:`_LOWPASS_SUPPORT`); without it the result is 0
            where no weighted pixel lies within a few sigma.
        min_sigma: the smallest sigma (px) the reduced scale may leave.

    Returns:
        ``(h, w, c) float32``.
    """
    h, w = weight.shape
    # sigma >= 3 px after downscaling keeps the Gaussian well sampled (a smooth estimate may
    # take less: the fine colour pass runs at 1.5)
    f = max(1, int(sigma / min_sigma))
    num = image * weight[..., None]
    den = weight
    if f > 1:
        size = (max(w // f, 1), max(h // f, 1))
        num = np.asarray(cv2.resize(num, size, interpolation=cv2.INTER_AREA), np.float32)
        den = np.asarray(cv2.resize(den, size, interpolation=cv2.INTER_AREA), np.float32)
    s = sigma * num.shape[1] / w
    num = np.asarray(cv2.GaussianBlur(num, (0, 0), s), np.float32)
    den = np.asarray(cv2.GaussianBlur(den, (0, 0), s), np.float32)
    small = np.asarray(num / np.maximum(den, np.float32(1e-4))[..., None], np.float32)
    if fallback is not None:  # blended at the reduced scale: the result is smooth either way
        back = fallback if f == 1 else np.asarray(
            cv2.resize(fallback, small.shape[1::-1], interpolation=cv2.INTER_AREA), np.float32)
        support = np.minimum(den * np.float32(1.0 / _LOWPASS_SUPPORT), np.float32(1.0))
        small = np.asarray(back + support[..., None] * (small - back), np.float32)
    if f == 1:
        return small
    return np.asarray(cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR), np.float32)


@dataclass(frozen=True)
class FaceWeights:
    """Per-pixel weights of one swap, ``(h, w) float32`` in 0..1 in the ROI's coordinates.

    Attributes:
        source_skin: the warped source's skin (hull without brows, eyes, nose wings and lips).
        source_features: the warped source's brows, eyes, nose wings and lips (softened).
        fade: 1 inside the source hull, falling to 0 at its edge (:data:`_DETAIL_FADE`).
        target_skin: the target's skin, as ``source_skin``.
        target_colour: the target's face hull without its eyes and lips: where its colour is
            read at the fine scale (nose and brows included, so the skin next to them keeps the
            target's own colour).
        target_face: the target's face as a viewer sees its colour: the hull without eyes and
            lips, weighted by the blend ``alpha``.
    """

    source_skin: npt.NDArray[np.float32]
    source_features: npt.NDArray[np.float32]
    fade: npt.NDArray[np.float32]
    target_skin: npt.NDArray[np.float32]
    target_colour: npt.NDArray[np.float32]
    target_face: npt.NDArray[np.float32]


def colour_curve(lab: npt.NDArray[np.float32], weight: npt.NDArray[np.float32],
                 bins: int = _CURVE_BINS) -> tuple[npt.NDArray[np.float32],
                                                   npt.NDArray[np.float32]] | None:
    """The target skin's colour as a function of its lightness: ``(knots_L (n,), knots_ab
    (n, 2))``, the median a/b of ``bins`` equal-count lightness bins of the pixels where
    ``weight`` > 0.5, or ``None`` with too few pixels.

    On a face, colour and lightness go together: a highlight is pale, a shadow is deeper in
    colour. The swap's lightness differs from the target's where the source's own relief
    lands, and the target's colour at that spot belongs to the target's lightness there (a
    pale highlight under the source's shadow reads as a grey patch); the curve says how the
    colour changes with the lightness on this face.
    """
    pix = lab[::2, ::2][weight[::2, ::2] > 0.5]  # medians of bins: a sample is enough
    if len(pix) < 4 * bins:
        return None
    pix = pix[::max(1, len(pix) // _CURVE_SAMPLES)]
    pix = pix[np.argsort(pix[:, 0], kind="stable")]
    n = len(pix) // bins * bins
    chunks = pix[len(pix) - n:].reshape(bins, -1, 3)
    med = np.median(chunks, axis=1).astype(np.float32)
    return med[:, 0], med[:, 1:]


def _curve_table(curve: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]
                 ) -> npt.NDArray[np.float32]:
    """The curve at every 8-bit lightness, ``(256, 2) float32``: a lookup instead of an
    interpolation per pixel."""
    knots, ab = curve
    levels = np.arange(256, dtype=np.float32)
    return np.stack([np.interp(levels, knots, ab[:, k]) for k in range(2)],
                    axis=-1).astype(np.float32)


def match_relief(src_l: npt.NDArray[np.float32], tgt_l: npt.NDArray[np.float32],
                 weights: FaceWeights, face_px: float) -> npt.NDArray[np.float32]:
    """The source's lightness ``(h, w) float32`` with its skin relief in each band of
    :data:`_RELIEF_BANDS` scaled to the target's (standard deviations over each one's skin; the
    gain stays within [:data:`_RELIEF_MIN_GAIN`, 1]); its features (eyes, brows, nose wings,
    lips) keep all of theirs."""
    out = np.empty_like(src_l)
    src_rest, tgt_rest = src_l, tgt_l
    src_skin, tgt_skin = weights.source_skin > 0.5, weights.target_skin > 0.5
    bands = []
    for frac in _RELIEF_BANDS:
        sigma = max(frac * face_px, 0.5)
        s_low = np.asarray(cv2.GaussianBlur(src_rest, (0, 0), sigma), np.float32)
        t_low = np.asarray(cv2.GaussianBlur(tgt_rest, (0, 0), sigma), np.float32)
        bands.append((src_rest - s_low, tgt_rest - t_low))
        src_rest, tgt_rest = s_low, t_low
    out[:] = src_rest
    for s_band, t_band in bands:
        if src_skin.any() and tgt_skin.any():
            spread = float(s_band[src_skin].std())
            gain = float(np.clip(float(t_band[tgt_skin].std()) / max(spread, 1e-3),
                                 _RELIEF_MIN_GAIN, 1.0))
        else:
            gain = 1.0
        out += s_band * (gain + (1.0 - gain) * weights.source_features)
    return out


def soften_speculars(src: npt.NDArray[np.float32], low: npt.NDArray[np.float32],
                     weights: FaceWeights, face_px: float) -> npt.NDArray[np.float32]:
    """Cut the source's specular highlights on its skin, in place, and return their weight.

    Args:
        src: ``(h, w, 3) float32`` the warped source in 8-bit-scaled Lab (a/b centred on 128).
        low: its skin low-pass (:func:`masked_lowpass`), same layout.
        weights: where its skin and features are (features are left alone).
        face_px: the face size in px (the weight is smoothed over 1/60 of it).

    Returns:
        ``(h, w) float32`` in [0, 1]: how much each pixel counted as specular.
    """
    # cv2's per-pixel maths: the numpy form of the same took 2.5 ms on a 160-px patch
    chroma = cv2.magnitude(src[..., 1] - 128.0, src[..., 2] - 128.0)
    around = np.maximum(cv2.magnitude(low[..., 1] - 128.0, low[..., 2] - 128.0), 1.0)
    pale = (around - chroma) / (around * _SPECULAR_SPAN)
    rise = (src[..., 0] - low[..., 0]) * (1.0 / _SPECULAR_RISE)
    spec = np.minimum(np.maximum(pale, 0.0, out=pale), 1.0, out=pale)
    spec *= np.minimum(np.maximum(rise, 0.0, out=rise), 1.0, out=rise)
    spec = np.asarray(cv2.GaussianBlur(spec, (0, 0), max(face_px / 60, 0.5)), np.float32)
    spec *= 1.0 - weights.source_features
    keep = 1.0 - _SPECULAR_CUT * spec
    src -= low
    src *= keep[..., None]
    src += low
    return spec


def target_colourfulness(lab: npt.NDArray[np.float32], weight: npt.NDArray[np.float32]
                         ) -> float:
    """How much of the source's own colour detail the swap may carry, 0..1, from the target
    face's colour: the 95th percentile of its chroma (a/b distance from neutral, 8-bit LAB
    units, where ``weight`` > 0.5) mapped from :data:`_GREY_CHROMA` (0: a black-and-white
    picture stays black and white, pink lips and blue eye whites would be the only colour in
    it) to :data:`_COLOUR_CHROMA` (1: any colour photo's skin)."""
    sel = weight > 0.5
    if not sel.any():
        return 1.0
    ab = lab[sel][:, 1:] - np.float32(128.0)
    chroma = float(np.percentile(np.sqrt((ab * ab).sum(1)), 95))
    return float(np.clip((chroma - _GREY_CHROMA) / (_COLOUR_CHROMA - _GREY_CHROMA), 0.0, 1.0))


def relight(warped: Frame, roi: Frame, weights: FaceWeights, face_px: float) -> Frame:
    """The warped source face under the target's shading and colour (docs/CLASSIC.md).

    * Lightness: ``lowpass(target) + fade * (source - lowpass(source))``, both low-passes over
      skin only (:func:`masked_lowpass`, sigma = ``_SHADING_SIGMA * face_px``), then shifted so
      that the face's mean lightness, as blended, is the target's. The source's fine skin relief
      is first brought to the target's contrast (:func:`match_relief`), and its specular
      highlights are cut (:func:`soften_speculars`).
    * Colour (a/b): the target's own colour at a fine scale (sigma = ``_COLOUR_SIGMA *
      face_px``, its eyes and lips left out), corrected along the target's colour curve
      (:func:`colour_curve`) for the lightness the source's relief gives each pixel: fully
      where the swap is darker (:data:`_DEEPEN`), a little where it is lighter
      (:data:`_PALE`). The source's own colour detail is added on its features (eyes, brows,
      lips) and only :data:`_SKIN_DETAIL` of it on the skin. A grey source has no colour
      detail: its skin takes the target's colour.

    Args:
        warped, roi: ``(h, w, 3) uint8 BGR`` source warped onto the target, and the target.
        weights: where each face's skin and features are.
        face_px: the target's face size in px.

    Returns:
        ``(h, w, 3) uint8 BGR``.
    """
    w = weights
    sigma = _SHADING_SIGMA * face_px
    src = np.asarray(cv2.cvtColor(warped, cv2.COLOR_BGR2LAB), np.float32)
    tgt = np.asarray(cv2.cvtColor(roi, cv2.COLOR_BGR2LAB), np.float32)
    soften_speculars(src, masked_lowpass(src, w.source_skin, sigma), w, face_px)
    src[..., 0] = match_relief(np.ascontiguousarray(src[..., 0]),
                               np.ascontiguousarray(tgt[..., 0]), w, face_px)
    src_low = masked_lowpass(src, w.source_skin, sigma)
    low = masked_lowpass(tgt, w.target_skin, sigma)
    # the source's relief is light it reflects: under the target's dimmer light it is dimmer
    # (a dark target showed the source's eyelids and eye whites glowing); never raised
    dim = np.clip(low[..., 0] / np.maximum(src_low[..., 0], 1.0), _MIN_DIM, 1.0)
    detail = (src - src_low) * (w.fade * dim)[..., None]
    out = np.empty_like(src)
    out[..., 0] = low[..., 0] + detail[..., 0]
    total = float(w.target_face.sum())
    if total > 0:
        out[..., 0] += float(((tgt[..., 0] - out[..., 0]) * w.target_face).sum()) / total
    fine = masked_lowpass(tgt, w.target_colour, _COLOUR_SIGMA * face_px, fallback=low,
                          min_sigma=1.5)
    ab = np.ascontiguousarray(fine[..., 1:])
    curve = colour_curve(tgt, w.target_colour)
    if curve is not None:
        # lightness from the target's light and the source's skin relief (its features keep
        # their own colour detail below), clipped to the range the curve was measured on
        lo, hi = float(curve[0][0]), float(curve[0][-1])
        now = np.clip(low[..., 0] + detail[..., 0] * (1.0 - w.source_features) + 0.5, lo, hi)
        was = np.clip(fine[..., 0] + 0.5, lo, hi)
        now8, was8 = now.astype(np.uint8), was.astype(np.uint8)
        table = _curve_table(curve)
        gain = np.where(now8 < was8, np.float32(_DEEPEN), np.float32(_PALE))
        for k in (0, 1):  # cv2.LUT: one table lookup per 8-bit lightness, per channel
            t = np.ascontiguousarray(table[:, k])
            ab[..., k] += (cv2.LUT(now8, t) - cv2.LUT(was8, t)) * gain
    keep = (_SKIN_DETAIL + (1.0 - _SKIN_DETAIL) * w.source_features) * target_colourfulness(
        tgt, w.target_colour)
    out[..., 1:] = ab + detail[..., 1:] * keep[..., None]
    return np.asarray(cv2.cvtColor(np.clip(out + 0.5, 0, 255).astype(np.uint8),
                                   cv2.COLOR_LAB2BGR), np.uint8)


class ClassicSwapper:
    """The classic renderer: warp a prepared source face onto target faces, bbox-local.

    Cost is proportional to the face's area, not the frame's: only the region around the
    target face is read (about 3.5 ms per 107-px face and 7.5 ms per 160-px face on one core;
    docs/CLASSIC.md). Paste-back is :func:`livefuse.swap.paste.paste` (shared by every renderer).
    """

    device = "cpu"
    precision_in_use = "n/a (classic engine)"
    precision_reason = "OpenCV and dlib in float32 on the CPU"

    def __init__(self, config: EngineConfig) -> None:
        self.config = config

    def configure(self, config: EngineConfig) -> None:
        """Take new mouth, jaw and blend settings (between frames)."""
        self.config = config

    @staticmethod
    def prepare(image: Frame, face: Face, path: Path | None = None) -> ClassicSource:
        """The source face prepared once (:func:`prepare_source`)."""
        return prepare_source(image, face, path)

    @staticmethod
    def verify() -> bool:
        """The classic renderer has no precision to guard."""
        return True

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
        """Warp the source face onto one ``target`` and relight it (see :meth:`render`)."""
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
        # a face much larger than the source is rendered at a scale that still oversamples the
        # source _OVERSAMPLE times (finer holds no more of the source's detail) and the patch
        # is carried at that scale: the paste's one resample brings it to the frame
        scale = 1.0 if source.face_px <= 0 else \
            min(1.0, _OVERSAMPLE * source.face_px / _hull_px(target.landmarks))
        to_patch = translation(x0, y0)
        if scale < 1.0:
            size = (max(8, round((x1 - x0) * scale)), max(8, round((y1 - y0) * scale)))
            roi = np.asarray(cv2.resize(roi, size, interpolation=cv2.INTER_AREA), np.uint8)
            sx, sy = size[0] / (x1 - x0), size[1] / (y1 - y0)
            # pixel centres as cv2.resize maps them: x' = (x + 0.5) * s - 0.5
            to_patch = np.array([[sx, 0.0, -sx * x0 + 0.5 * sx - 0.5],
                                 [0.0, sy, -sy * y0 + 0.5 * sy - 0.5]], np.float64)
        local = (dst @ to_patch[:, :2].T + to_patch[:, 2]).astype(np.float32)
        map_x, map_y, covered = _piecewise_affine_maps(
            source.landmarks, local, source.triangles, (roi.shape[1], roi.shape[0]))
        warped = cv2.remap(source.crop, map_x, map_y, cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REPLICATE).astype(np.uint8, copy=False)

        source_hull = _hull_mask(local, roi.shape) & covered
        tgt_local = (target.landmarks @ to_patch[:, :2].T + to_patch[:, 2]).astype(np.float32)
        target_hull = _hull_mask(tgt_local, roi.shape)
        face_px = _face_size(target_hull)
        if face_px < 6:
            return None
        # Only where both faces are: past the target's hull (the far cheek of a turned head) the
        # source would cover hair or background.
        mask = source_hull & target_hull
        if cfg.keep_mouth:
            cv2.fillPoly(mask, [np.round(tgt_local[INNER_MOUTH]).astype(np.int32)], 0)
            if source.teeth is not None:  # the source's mouth is never pasted either
                teeth = cv2.remap(source.teeth, map_x, map_y, cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_CONSTANT, borderValue=0)
                mask[teeth > 127] = 0
        if cv2.countNonZero(mask) < 36:
            return None
        alpha = _feather_alpha(mask, face_px) if cfg.blend == "feather" else mask
        face = relight(warped, roi, face_weights(source_hull, local, target_hull, tgt_local,
                                                 alpha, face_px), face_px)
        return Patch(image=face, alpha=alpha.astype(np.float32) * np.float32(1.0 / 255.0),
                     affine=to_patch, blend=cfg.blend)


def _feather_alpha(mask: npt.NDArray[np.uint8], face_px: float) -> npt.NDArray[np.uint8]:
    """The blend weight: ``mask`` blurred, 0.5 on its edge. Centred rather than inside the mask:
    an eroded mask shrinks the source face by half the ramp all round, and its outline carries
    identity (docs/CLASSIC.md)."""
    k = max(3, int(face_px * _FEATHER)) | 1
    return np.asarray(cv2.GaussianBlur(mask, (k, k), 0), np.uint8)
