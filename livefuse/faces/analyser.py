"""The face analyser's contract, shared by dlib's analyser and the SCRFD + ArcFace analysers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

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

    def reset(self) -> None:
        """Forget per-stream state (a new video or source starts): what the analyser finds in a
        stream then does not depend on what it saw before (e.g. a batch's earlier items)."""
        ...


@runtime_checkable
class DetectsAhead(Protocol):
    """An analyser that can start detecting a staged frame before that frame's turn (the SCRFD
    analyser on the GPU path): a video job queues frame n+1's detection on the device behind
    frame n's swap, so it runs while the host finishes frame n. Called on the inference thread.
    """

    def detect_ahead(self, frame: StagedFrame) -> None:
        """Queue the detection of ``frame`` (staged, not yet processed) without waiting; the
        next ``detect`` of that same frame object reads it, any other call drops it."""
        ...


class Landmarker(Protocol):
    """Adds landmarks to faces already found: the classic analyser's 68 points, deferred until
    the engine chose the faces it will swap (the renderer needs them), or the neural engine's
    106 points (:mod:`livefuse.faces.landmarker`, the pose cache's expression and pose input).
    Called on the inference thread."""

    def landmarks(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face]:
        """``faces`` with landmarks filled in, all faces in one batch; same order, every other
        field kept."""
        ...


def landmarks_of(landmarker: Landmarker | None, frame: AnyFrame,
                 faces: Sequence[Face]) -> list[Face]:
    """``faces`` with landmarks from ``landmarker`` for those that lack the 68 points (a face
    that has the classic engine's 68 landmarks keeps them); unchanged without a landmarker."""
    todo = [i for i, f in enumerate(faces) if f.landmarks is None]
    if landmarker is None or not todo:
        return list(faces)
    out = list(faces)
    for i, f in zip(todo, landmarker.landmarks(frame, [faces[i] for i in todo]), strict=True):
        out[i] = f
    return out


__all__ = ["Analyser", "AnyFrame", "DetectsAhead", "Landmarker", "host_frame", "landmarks_of"]
