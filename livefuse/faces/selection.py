"""Which faces to use: the source face of a photo, and the target faces of a frame."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class SourceChoice:
    """The face of a source photo to swap in, and what the user should be told about it.

    Attributes:
        face: the chosen source face.
        index: its index in ``candidates`` (left to right from 0).
        candidates: the faces to choose from, sorted left to right by bbox centre.
        notes: one-line messages for the user.
    """

    face: Face
    index: int
    candidates: list[Face]
    notes: tuple[str, ...]


def choose_source_face(faces: list[Face], image: Frame, path: Path | None,
                       index: int | None = None) -> SourceChoice:
    """Choose the face of a source photo to swap in.

    Temporary stand-in with the final signature, so the app can use it now: every detection is
    a candidate, the largest wins (ties: the left-most), no notes. The classic branch replaces
    it with the confidence rule, the landmark sanity check and the notes.

    Raises:
        NoFaceError: no face. FaceIndexError: ``index`` outside ``0..len(candidates) - 1``.
    """
    if not faces:
        raise NoFaceError(path, "source")
    candidates = sorted(faces, key=lambda f: float(f.bbox[0] + f.bbox[2]))
    if index is None:
        index = max(range(len(candidates)), key=lambda i: (candidates[i].area, -i))
    elif not 0 <= index < len(candidates):
        raise FaceIndexError(index, len(candidates), path)
    return SourceChoice(face=candidates[index], index=index, candidates=candidates, notes=())


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
