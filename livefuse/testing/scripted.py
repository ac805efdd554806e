"""A scripted analyser and landmarker: faces whose expression a test or benchmark dictates.

Random-weight replicas do not see real mouths, so the pose cache's behaviour on a talking face
is tested with faces given frame by frame. :class:`ScriptedLandmarker` can wrap a real
landmarker, which then runs in full on every call (its cost and its wiring are real) before its
answer is replaced by the scripted points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from livefuse.faces.analyser import AnyFrame
from livefuse.faces.landmarker import Landmarker
from livefuse.testing.face_points import points_at_kps
from livefuse.types import Face, FloatArray, Frame

FacesAt = Callable[[int], list[Face]]


class ScriptedFaces:
    """An analyser whose ``detect`` and ``track`` answer ``faces_at(index)``; set :attr:`index`
    before each frame. ``embed`` returns a fixed unit vector (one identity)."""

    def __init__(self, faces_at: FacesAt, dim: int = 512) -> None:
        self.faces_at, self.index = faces_at, 0
        self._emb = np.full(dim, dim ** -0.5, np.float32)

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        return self.faces_at(self.index)

    def track(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face | None]:
        now = self.faces_at(self.index)
        return [replace(now[i], track_id=f.track_id) if i < len(now) else None
                for i, f in enumerate(faces)]

    def embed(self, frame: Frame, face: Face) -> FloatArray:
        return self._emb.copy()

    def reset(self) -> None:
        pass


class ScriptedLandmarker:
    """Gives each face the 106 landmarks ``points_at(index)[i]`` (faces in order), or with
    ``points_at=None`` a still, neutral face on each face's kps; runs ``inner`` first when given
    (a real landmarker, for its cost). Set :attr:`index` before each frame."""

    def __init__(self, points_at: Callable[[int], list[Any]] | None,
                 inner: Landmarker | None = None) -> None:
        self.points_at, self.inner, self.index = points_at, inner, 0
        self.calls = 0

    def landmarks(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face]:
        self.calls += 1
        if self.inner is not None:
            self.inner.landmarks(frame, faces)
        pts = [points_at_kps(f.kps) for f in faces] if self.points_at is None else \
            self.points_at(self.index)
        return [replace(f, landmarks_106=np.asarray(pts[i], np.float32))
                for i, f in enumerate(faces)]


__all__ = ["ScriptedFaces", "ScriptedLandmarker"]
