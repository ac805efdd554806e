"""Which faces to use: the source face of a photo, and the target faces of a frame."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

from livefuse.config import FaceSelector
from livefuse.errors import FaceIndexError, NoFaceError
from livefuse.types import Face, FloatArray, Frame


class Analyser(Protocol):
    def detect(self, frame: Frame, upsample: int | None = None) -> list[Face]: ...
    def embed(self, frame: Frame, face: Face) -> FloatArray: ...


_MIN_SIDE = 320  # px: small crops are upscaled to this before the retry


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


def pick_source_face(faces: list[Face], path: Path | None, index: int | None = None) -> Face:
    """The source face of a photo.

    With several faces and no ``index``, the largest bbox wins; ties go to the left-most
    (faces arrive sorted left to right). ``index`` counts left to right from 0.

    Raises:
        NoFaceError: no face at all. FaceIndexError: ``index`` out of range.
    """
    if not faces:
        raise NoFaceError(path, "source")
    if index is not None:
        if not 0 <= index < len(faces):
            raise FaceIndexError(index, len(faces), path)
        return faces[index]
    return max(faces, key=lambda f: (f.area, -float(f.bbox[0])))


def select_targets(faces: list[Face], selector: FaceSelector, index: int | None = None,
                   reference: FloatArray | None = None, path: Path | None = None) -> list[Face]:
    """Target faces to swap.

    Args:
        faces: detected faces, left to right.
        selector: ``one`` (the largest, or ``index`` counted left to right), ``many`` (all), or
            ``reference`` (the face whose ``embedding`` is nearest to ``reference``).
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
        with_emb = [(f, f.embedding) for f in faces if f.embedding is not None]
        if not with_emb:
            return []
        return [min(with_emb, key=lambda fe: float(np.linalg.norm(fe[1] - reference)))[0]]
    if index is not None:
        if index >= len(faces):
            raise FaceIndexError(index, len(faces), path)
        return [faces[index]]
    return [max(faces, key=lambda f: f.area)]
