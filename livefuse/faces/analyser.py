"""The face analyser's contract, shared by dlib's analyser and the SCRFD + ArcFace analysers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from livefuse.types import Face, FloatArray, Frame, StagedFrame

AnyFrame = Frame | StagedFrame
"""What the detector and the tracker take: a host frame, or a frame staged on the GPU."""


def host_frame(frame: AnyFrame) -> Frame:
    """The ``(H, W, 3) uint8 BGR`` host array of ``frame``."""
    return frame.host if isinstance(frame, StagedFrame) else frame


class Analyser(Protocol):
    """Finds faces, carries them between detections, and embeds them.

    ``detect`` and ``track`` run on the inference thread (or a worker for still photos);
    analysers are not thread-safe unless they say so.
    """

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        """Faces in ``frame``, left to right by bbox centre (bbox, kps, score; dlib adds the 68
        landmarks). ``upsample``: pyramid steps for small faces (each doubles the input)."""
        ...

    def track(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face | None]:
        """Each face moved to its place in ``frame`` (same ``track_id``), or ``None`` where it is
        no longer confirmed there (it left the picture, or what is there is not a face)."""
        ...

    def embed(self, frame: Frame, face: Face) -> FloatArray:
        """Identity embedding of ``face`` (dlib ``(128,)``, ArcFace ``(512,)``, float32)."""
        ...


class Landmarker(Protocol):
    """Adds landmarks to faces already found, after the engine chose which it will use (the
    classic analyser's 68 points, deferred so that faces not swapped are not fitted)."""

    def landmarks(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face]:
        """``faces`` with landmarks where they had none; same order, other fields kept."""
        ...


def landmarks_of(landmarker: Landmarker | None, frame: AnyFrame,
                 faces: Sequence[Face]) -> list[Face]:
    """``faces`` with landmarks from ``landmarker`` for those that lack them; unchanged without a
    landmarker or when none lacks them."""
    if landmarker is None or all(f.landmarks is not None for f in faces):
        return list(faces)
    return landmarker.landmarks(frame, faces)


__all__ = ["Analyser", "AnyFrame", "Landmarker", "host_frame", "landmarks_of"]
