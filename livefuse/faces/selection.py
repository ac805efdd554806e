"""Which faces to use: the source face of a photo, and the target faces of a frame."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

from livefuse.config import FaceSelector
from livefuse.errors import (
    MIN_FACE_PX,
    SHARP_FACE_PX,
    FaceIndexError,
    FaceTooSmallError,
    NoFaceError,
)
from livefuse.types import Face, FloatArray, Frame


class Analyser(Protocol):
    def detect(self, frame: Frame, upsample: int | None = None) -> list[Face]: ...
    def embed(self, frame: Frame, face: Face) -> FloatArray: ...


_MIN_SIDE = 320  # px: small crops are upscaled to this before the retry

SAME_PERSON_DISTANCE: dict[int, float] = {128: 0.6, 512: float(np.sqrt(2 * 0.6))}
"""The largest Euclidean distance between two embeddings of one person, by embedding size.
dlib's 128-d descriptor: 0.6, the threshold dlib gives for its face recognition model. ArcFace's
L2-normalised 512-d embedding: a cosine distance of 0.6 (FaceFusion's default reference face
distance), which is sqrt(2 * 0.6) = 1.10 between unit vectors. Other sizes have no limit."""


def embedding_distance(a: FloatArray, b: FloatArray) -> float:
    """Euclidean distance between two identity embeddings of the same kind."""
    return float(np.linalg.norm(np.asarray(a, np.float32) - np.asarray(b, np.float32)))


def same_person_limit(embedding: FloatArray) -> float:
    """:data:`SAME_PERSON_DISTANCE` for this embedding's size (``inf`` when unknown)."""
    return SAME_PERSON_DISTANCE.get(int(np.asarray(embedding).shape[-1]), float("inf"))


def detect_robust(analyser: Analyser, image: Frame) -> list[Face]:
    """Detect faces in a still photo, retrying harder when the plain pass finds none.

    Retries in order: pyramid upsampling once; then the photo padded by 40 % on each side
    (edge pixels replicated, for tightly cropped faces whose chin touches the border) and
    upscaled so its short side is at least 320 px, with upsampling. Coordinates are mapped back.
    """
    faces = analyser.detect(image)
    if faces:
        return faces
    faces = analyser.detect(image, upsample=1)
    if faces:
        return faces
    h, w = image.shape[:2]
    pad = int(0.4 * max(h, w))
    padded = cv2.copyMakeBorder(image, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
    scale = max(1.0, _MIN_SIDE / min(padded.shape[:2]))
    big = np.asarray(cv2.resize(padded, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC),
                     dtype=np.uint8)
    found = analyser.detect(big, upsample=1)
    off = np.array([pad, pad], np.float32)
    out = []
    for f in found:
        lm = None if f.landmarks is None else (f.landmarks / scale - off).astype(np.float32)
        out.append(Face(bbox=(f.bbox / scale - np.tile(off, 2)).astype(np.float32),
                        kps=(f.kps / scale - off).astype(np.float32), score=f.score,
                        landmarks=lm))
    return out


# --- the source face: plausibility, confidence, notes -------------------------------------------
#
# The bounds below are in units of the eye distance ``d`` (between the two eye keypoints) and are
# measured in the face's own frame: x along the eye line (image-left eye -> image-right eye), y
# perpendicular to it, pointing from the eyes toward the mouth, so a tilted (rolled) head passes.
# "Measured" ranges are from dlib's faces (HOG + 68-point landmarks, kps derived from them) in
# t1.jpg, the astronaut (colour and grey JPEG), Tom_Hanks_54745.png (upscaled 3x), each also
# mirrored and rotated by -40..40 degrees in 10-degree steps: 139 real faces, 15 false detections
# (badges and patches on the astronaut's suit). "Template" is insightface's 5-point ArcFace
# template (arcface_dst, 112 px): d = 35.2 px, nose 0.57 d and mouth 1.16 d below the eye line,
# mouth 0.83 d wide. "Rigid model": that template with the nose tip 0.45 d and the mouth 0.15 d
# in front of the eye plane, turned in 3-D. The bounds are wider than anything measured: they
# reject a mislabelled or non-face detection (mouth above the eyes, mirrored mouth, collapsed
# points), not an unusual face.
_EYES_PER_BOX = (0.15, 0.8)  # d / bbox width; measured 0.23..0.52
_MOUTH_WIDTH = (0.3, 2.0)  # mouth-corner distance / d; measured 0.55..1.20; template 0.83
_NOSE_DROP = (0.1, 1.6)  # nose tip below the eye line / d; measured 0.25..1.04; template 0.57
_MOUTH_DROP = (0.5, 2.6)  # mouth centre below the eye line / d; measured 0.76..2.03; template 1.16
# Nose drop / mouth drop: measured 0.32..0.86, template 0.49; the rigid model tilted chin-up by
# 39 degrees gives 0.2, past what a frontal detector finds. The 15 false detections measure
# 0.14..0.62 (the mission patch 0.22): geometry rejects only the worst of them; the confidence
# rule below does the rest.
_NOSE_FRACTION_MIN = 0.2
# |nose| and |mouth centre| along the eye line from the eyes' midpoint / d: measured <= 0.57 and
# <= 0.27; 1.0 is the rigid model turned ~65 degrees, a profile.
_LATERAL = 1.0
_KPS_BOX_MARGIN = 0.25  # kps within the bbox grown by this x its size per side; measured: inside
# 68 landmarks (dlib only): brows above the eye line (every brow point measured >= 0.07 d above),
# the chin (point 8) below the mouth, the jaw from point 0 to 16 running along +x for at least
# one d (measured >= 1.96 d), every point within the bbox grown by half its size per side
# (measured <= 0.24 outside).
_JAW_MIN_WIDTH = 1.0
_LANDMARK_BOX_MARGIN = 0.5
SCORE_RATIO = 0.1
"""The detection policy, for source, reference and target images and for every detection pass
on a video frame (:func:`drop_weak`): a detection scoring under this fraction of the best
detection of the same image or frame is dropped. dlib's HOG scores are SVM margins (0 = the
detection threshold): the astronaut's mission patch scores 0.000 (JPEG quality 92), 0.016 (the
same JPEG with an EXIF rotation) and 0.012 (grey) beside her face's 1.43..1.51 (at most 1.1 %),
while the weakest real face of t1.jpg scores 0.478 beside 2.494 (19 %). On the rotated copies
measured below, this drops 2 of the false detections and 6 real faces that dlib barely found
(0.03..0.16 beside 1.8..3.2). SCRFD's scores are probabilities above its 0.5 threshold, so the
ratio is >= 0.5 and this never drops an SCRFD face."""


def drop_weak(faces: Sequence[Face]) -> tuple[list[Face], list[Face]]:
    """The one detection policy (see :data:`SCORE_RATIO`): the detections of one image or
    frame that score at least ``SCORE_RATIO`` x the best of them, and the ones dropped (both in
    their given order)."""
    best = max((f.score for f in faces), default=0.0)
    if best <= 0:
        return list(faces), []
    kept = [f for f in faces if f.score >= SCORE_RATIO * best]
    return kept, [f for f in faces if f.score < SCORE_RATIO * best]
_SMALL_FACE_PX = SHARP_FACE_PX  # bbox width under which a note warns the swap will look soft
# Under this fraction of MIN_FACE_PX the source face is refused: a 22 px astronaut face (found
# by the upsampling retry) turned all six faces of t1.jpg into smudges; at 0.5 (40 px, where
# dlib's once-upsampled detector stops) the swap is soft but still a face.
_TOO_SMALL = 0.5
# LAB a/b standard deviation (8-bit units) inside the face box under which the photo carries no
# usable colour (greyscale, or one tint such as sepia); the colour astronaut measures 3.6 / 5.2,
# the faces of t1.jpg 7.6..12.9, grey photos 0.
_MONOCHROME_AB_STD = 1.5


@dataclass(frozen=True)
class SourceChoice:
    """The face of a source photo to swap in, and what the user should be told about it.

    Attributes:
        face: the chosen source face.
        index: its index in ``candidates`` (left to right from 0).
        candidates: the detections that passed the sanity check and the confidence rule, sorted
            left to right by bbox centre.
        notes: one-line messages for the user (printed by the CLI, shown by the app).
    """

    face: Face
    index: int
    candidates: list[Face]
    notes: tuple[str, ...]


def _outside(value: float, bounds: tuple[float, float]) -> bool:
    return not bounds[0] <= value <= bounds[1]


def plausible_face(face: Face) -> str | None:
    """Whether a detection's keypoints (and 68 landmarks, when present) are laid out like a face.

    Works for dlib's faces (5 kps from the 68 landmarks) and SCRFD's (5 kps, no landmarks). The
    checks run in the face's own frame (see the bounds above), so any roll passes.

    Returns:
        ``None`` for a plausible face, else a short reason (e.g. "the mouth is above the eyes").
    """
    box = face.bbox.astype(np.float64)
    kps = face.kps.astype(np.float64)
    bw, bh = float(box[2] - box[0]), float(box[3] - box[1])
    if not (np.isfinite(box).all() and np.isfinite(kps).all()) or bw <= 0 or bh <= 0:
        return "the box or keypoints are degenerate"
    margin = _KPS_BOX_MARGIN * np.array([bw, bh])
    if (kps < box[:2] - margin).any() or (kps > box[2:] + margin).any():
        return "the keypoints lie outside the face box"
    left_eye, right_eye, nose, mouth_l, mouth_r = kps
    d = float(np.linalg.norm(right_eye - left_eye))
    if d < 1.0 or _outside(d / bw, _EYES_PER_BOX):
        return "the eye distance does not fit the face box"
    ux = (right_eye - left_eye) / d
    frame = np.stack([ux, np.array([-ux[1], ux[0]])], axis=1)  # columns: x, y in the face frame
    eyes = (left_eye + right_eye) / 2
    nose_x, nose_y = (nose - eyes) @ frame / d
    mouth_x, mouth_y = ((mouth_l + mouth_r) / 2 - eyes) @ frame / d
    mouth_w = float((mouth_r - mouth_l) @ ux) / d
    if mouth_w <= 0:
        return "the mouth corners are mirrored relative to the eyes"
    if nose_y <= 0 or mouth_y <= 0:
        return "the nose or mouth is above the eyes"
    if nose_y >= mouth_y:
        return "the nose is not above the mouth"
    if (_outside(nose_y, _NOSE_DROP) or _outside(mouth_y, _MOUTH_DROP)
            or nose_y / mouth_y < _NOSE_FRACTION_MIN):
        return "the eyes, nose and mouth are not spaced like a face"
    if _outside(mouth_w, _MOUTH_WIDTH):
        return "the mouth width does not fit the eye distance"
    if max(abs(nose_x), abs(mouth_x)) > _LATERAL:
        return "the nose or mouth is off to the side of the eyes"
    if face.landmarks is not None:
        lm = (face.landmarks.astype(np.float64) - eyes) @ frame / d
        if lm[17:27, 1].mean() >= 0:
            return "the brows are not above the eyes"
        if lm[8, 1] <= mouth_y:
            return "the chin is not below the mouth"
        if lm[16, 0] - lm[0, 0] < _JAW_MIN_WIDTH:
            return "the jaw line is collapsed or mirrored"
        lm_margin = _LANDMARK_BOX_MARGIN * np.array([bw, bh])
        raw = face.landmarks.astype(np.float64)
        if (raw < box[:2] - lm_margin).any() or (raw > box[2:] + lm_margin).any():
            return "the landmarks lie outside the face box"
    return None


def _screen(faces: list[Face]) -> tuple[list[Face], list[str]]:
    """Candidates (plausible and confident enough, left to right) and why the others were not."""
    plausible, dropped = [], []
    for f in faces:
        why = plausible_face(f)
        if why is None:
            plausible.append(f)
        else:
            dropped.append(why)
    candidates, weak = drop_weak(plausible)
    best = max((f.score for f in plausible), default=0.0)
    dropped += [f"score {f.score:.2f}, under {SCORE_RATIO:g} x the best face's {best:.2f}"
                for f in weak]
    candidates.sort(key=lambda f: float(f.bbox[0] + f.bbox[2]))
    return candidates, dropped


def _monochrome(image: Frame, face: Face) -> bool:
    h, w = image.shape[:2]
    x0, y0 = max(int(face.bbox[0]), 0), max(int(face.bbox[1]), 0)
    x1, y1 = min(int(np.ceil(face.bbox[2])), w), min(int(np.ceil(face.bbox[3])), h)
    if x1 - x0 < 2 or y1 - y0 < 2:
        return False
    lab = cv2.cvtColor(np.ascontiguousarray(image[y0:y1, x0:x1]), cv2.COLOR_BGR2LAB)
    ab_std = lab[..., 1:].reshape(-1, 2).astype(np.float32).std(axis=0)
    return bool((ab_std < _MONOCHROME_AB_STD).all())


def choose_source_face(faces: list[Face], image: Frame, path: Path | None,
                       index: int | None = None) -> SourceChoice:
    """Choose the face of a source photo to swap in.

    Detections that are not laid out like a face (:func:`plausible_face`) or score under a tenth
    of the best plausible one are dropped; of the rest (the candidates, left to right), the most
    confident is chosen (ties: the left-most), or the one ``index`` names.

    Args:
        faces: the photo's detections (any order), from dlib or SCRFD.
        image: the photo, ``(H, W, 3) uint8 BGR``; only read to tell whether it has colour.
        path: the photo's file, named in errors; ``None`` when it has none.
        index: a candidate, counted left to right from 0; ``None``: the most confident.

    Returns:
        The choice, with notes: which face is used when there are several and how to pick
        another, detections ignored, a tiny face (bbox under 100 px wide), a greyscale photo.

    Raises:
        NoFaceError: no candidate (the message says when detections were rejected and why).
        FaceIndexError: ``index`` is outside ``0..len(candidates) - 1``.
        FaceTooSmallError: the chosen face is under 40 px wide (half of ``MIN_FACE_PX``).
    """
    candidates, dropped = _screen(faces)
    if not candidates:
        rejected = None
        if dropped:
            n = len(dropped)
            rejected = (f"{n} detection{'s' if n > 1 else ''} rejected as implausible: "
                        + "; ".join(dict.fromkeys(dropped)))
        raise NoFaceError(path, "source", rejected=rejected)
    if index is not None:
        if not 0 <= index < len(candidates):
            raise FaceIndexError(index, len(candidates), path)
        chosen, why = index, "as chosen"
    else:
        chosen = max(range(len(candidates)), key=lambda i: (candidates[i].score, -i))
        why = "the most confident"
    face = candidates[chosen]
    if face.width < MIN_FACE_PX * _TOO_SMALL:
        raise FaceTooSmallError(path, face.width)
    notes = []
    if len(candidates) > 1:
        notes.append(f"the source photo holds {len(candidates)} faces; using face {chosen} "
                     f"(left to right from 0; {why}); choose another with --source-face-index N "
                     "(CLI) or the face list (app)")
    if dropped:
        n = len(dropped)
        notes.append(f"ignored {n} detection{'s' if n > 1 else ''} in the source photo "
                     f"({'; '.join(dict.fromkeys(dropped))})")
    if face.width < _SMALL_FACE_PX:
        notes.append(f"the source face is {face.width:.0f} px wide (under {_SMALL_FACE_PX} px): "
                     "the swap will look soft; a larger photo of the face gives a sharper one")
    if _monochrome(image, face):
        notes.append("the source photo is greyscale: skin colour will come from the target")
    return SourceChoice(face=face, index=chosen, candidates=candidates, notes=tuple(notes))


def select_targets(faces: list[Face], selector: FaceSelector, index: int | None = None,
                   reference: FloatArray | None = None, path: Path | None = None) -> list[Face]:
    """Target faces to swap.

    Args:
        faces: detected faces, left to right.
        selector: ``one`` (the largest, or ``index`` counted left to right), ``many`` (all), or
            ``reference`` (the face whose ``embedding`` is nearest to ``reference``, if it is
            the same person: within :data:`SAME_PERSON_DISTANCE`; else none, so that a frame
            without the reference person swaps nobody instead of someone else).
        index: face index for ``one``.
        reference: embedding of the reference face for ``reference``.

    Raises:
        FaceIndexError: ``index`` is outside the faces found (only when faces were found).
        ValueError: ``reference`` selection without a reference embedding.
    """
    if not faces:
        return []
    if selector == "many":
        return list(faces)
    if selector == "reference":
        if reference is None:
            raise ValueError("face selector 'reference' needs a reference face")
        with_emb = [(f, embedding_distance(f.embedding, reference)) for f in faces
                    if f.embedding is not None]
        if not with_emb:
            return []
        face, distance = min(with_emb, key=lambda fd: fd[1])
        return [face] if distance <= same_person_limit(reference) else []
    if index is not None:
        if index >= len(faces):
            raise FaceIndexError(index, len(faces), path)
        return [faces[index]]
    return [max(faces, key=lambda f: f.area)]
