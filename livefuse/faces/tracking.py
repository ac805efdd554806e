"""Carrying target faces from frame to frame: detect every k frames, track in between, keep track
ids across detections, and coast a face the detector missed only while the tracker confirms it.

One :class:`FaceTracker` per engine, used on the inference thread only. The analyser does the
image work (``Analyser.track`` refits a face near its last position and confirms it is still a
face); this module holds the policy and the identities:

* :meth:`FaceTracker.carry`: between detections, every tracked face is moved by the analyser;
  if any is lost, the frame is detected instead.
* :meth:`FaceTracker.coast`: on a detection frame, a face of the previous frame that no detection
  continues (HOG misses turned heads) is kept for at most ``max_coast`` detection rounds, and
  only while the analyser confirms it; a face that left the picture is dropped at once, so its
  swap is never pasted onto the background. What a failed carry of the same frame found is used
  again rather than tracked a second time.
* :meth:`FaceTracker.commit`: the selected targets get the track ids of the faces they continue
  (greedy IoU matching, vetoed by embeddings that name different people) and become the faces
  carried to the next frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from livefuse.faces.analyser import Analyser, AnyFrame
from livefuse.types import Face, FloatArray

MATCH_IOU = 0.3
"""A detection continues a track when its bbox overlaps the track's this much (IoU)."""
MATCH_EMBEDDING = 0.6
"""dlib's same-person distance (its model card); a larger distance vetoes a match."""
MAX_COAST = 2
"""Detection rounds in a row a confirmed face may be missed by the detector and still kept."""


def iou(a: FloatArray, b: FloatArray) -> float:
    """Intersection over union of two ``(4,)`` x1, y1, x2, y2 boxes."""
    ix = max(0.0, min(float(a[2]), float(b[2])) - max(float(a[0]), float(b[0])))
    iy = max(0.0, min(float(a[3]), float(b[3])) - max(float(a[1]), float(b[1])))
    inter = ix * iy
    union = float((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])) - inter
    return inter / union if union > 0 else 0.0


def overlap(a: FloatArray, b: FloatArray) -> float:
    """Intersection over the smaller box's area of two ``(4,)`` x1, y1, x2, y2 boxes: 1 when one
    box lies inside the other, whatever their sizes."""
    ix = max(0.0, min(float(a[2]), float(b[2])) - max(float(a[0]), float(b[0])))
    iy = max(0.0, min(float(a[3]), float(b[3])) - max(float(a[1]), float(b[1])))
    small = min(float((a[2] - a[0]) * (a[3] - a[1])), float((b[2] - b[0]) * (b[3] - b[1])))
    return ix * iy / small if small > 0 else 0.0


def with_track_id(face: Face, track_id: int) -> Face:
    return replace(face, track_id=track_id)


class FaceTracker:
    """Detect-or-track policy and track identities for one stream of frames.

    Args:
        detect_every: run the detector every k frames, track in between (1 = every frame).
        max_coast: see :data:`MAX_COAST`.
    """

    def __init__(self, detect_every: int = 1, max_coast: int = MAX_COAST) -> None:
        self.detect_every = max(1, int(detect_every))
        self.max_coast = max_coast
        self._next_id = 0
        self.reset()

    def reset(self) -> None:
        """Forget every face (a new video, a new source, a still image)."""
        self._carried: list[Face] = []
        self._previous: list[Face] = []
        self._coasting: dict[int, int] = {}
        self._since_detect = 0
        # this frame's failed carry: the frame and what the analyser made of each carried face
        self._tried: tuple[AnyFrame, dict[int, Face | None]] | None = None

    @property
    def previous(self) -> list[Face]:
        """The targets of the last frame."""
        return list(self._previous)

    def detects_next(self) -> bool:
        """Whether the next frame will be detected whatever it holds (no face carried, or k
        frames since the last detection): then its detection can start before this frame's
        work is done (:meth:`Engine.process`'s ``ahead``). A frame whose tracking loses a face
        is detected too, but that is known only from the frame."""
        return (not self._carried or self._since_detect >= self.detect_every
                or any(f.angle for f in self._carried))

    def carry(self, frame: AnyFrame, analyser: Analyser) -> list[Face] | None:
        """The carried faces moved into ``frame``, or ``None`` when this frame must be detected
        (no faces carried, k frames since the last detection, or a face was lost)."""
        if self.detects_next():  # analysers refit upright faces only: turned ones are detected
            return None
        moved = analyser.track(frame, self._carried)
        if any(f is None for f in moved):
            # kept for :meth:`coast` on this frame: the faces it would track again are these
            self._tried = (frame, {id(p): m for p, m in zip(self._carried, moved, strict=True)})
            return None
        return [f for f in moved if f is not None]

    @staticmethod
    def same_face(prev: Face, face: Face) -> float:
        """IoU of the boxes, or 0 when both carry embeddings that name different people."""
        if prev.embedding is not None and face.embedding is not None and \
                prev.embedding.shape == face.embedding.shape and \
                float(np.linalg.norm(prev.embedding - face.embedding)) > MATCH_EMBEDDING:
            return 0.0
        return iou(prev.bbox, face.bbox)

    def coast(self, frame: AnyFrame, analyser: Analyser, detected: Sequence[Face]) -> list[Face]:
        """``detected`` plus the previous frame's targets that no detection continues, tracked
        into ``frame`` and confirmed by the analyser, while each has missed fewer than
        ``max_coast`` detection rounds in a row. Sorted left to right."""
        out = list(detected)
        lost = [p for p in self._previous
                if not any(self.same_face(p, f) >= MATCH_IOU for f in detected)
                and self._coasting.get(p.track_id, 0) < self.max_coast and not p.angle]
        coasting: dict[int, int] = {}
        # a face that :meth:`carry` just tracked in this same frame is not tracked again: when a
        # face leaves, the frame's carry, detection and coast were three device round trips
        # (15-17 ms on the H200 against a p95 of 7, docs/BENCHMARKS.md §12.7)
        tried = self._tried[1] if self._tried is not None and self._tried[0] is frame else {}
        self._tried = None
        todo = [p for p in lost if id(p) not in tried]
        fresh = dict(zip((id(p) for p in todo), analyser.track(frame, todo) if todo else [],
                         strict=True))
        for prev in lost:
            moved = tried[id(prev)] if id(prev) in tried else fresh[id(prev)]
            if moved is not None:
                out.append(moved)
                coasting[prev.track_id] = self._coasting.get(prev.track_id, 0) + 1
        self._coasting = coasting
        out.sort(key=lambda f: float(f.bbox[0] + f.bbox[2]))
        return out

    def continuing(self, faces: Sequence[Face]) -> Face | None:
        """With one previous target: the face that continues it (so a bigger face walking in
        does not steal a single-face swap), if any."""
        if len(self._previous) != 1 or not faces:
            return None
        prev = self._previous[0]
        best = max(faces, key=lambda f: self.same_face(prev, f))
        return best if self.same_face(prev, best) >= MATCH_IOU else None

    def _with_ids(self, faces: Sequence[Face]) -> list[Face]:
        pairs = sorted(((self.same_face(p, f), i, j) for i, p in enumerate(self._previous)
                        for j, f in enumerate(faces)), reverse=True)
        ids: dict[int, int] = {}
        used: set[int] = set()
        for score, i, j in pairs:
            if score < MATCH_IOU:
                break
            if i not in used and j not in ids:
                ids[j] = self._previous[i].track_id
                used.add(i)
        out = []
        for j, f in enumerate(faces):
            tid = ids.get(j)
            if tid is None:
                tid = self._next_id
                self._next_id += 1
            out.append(with_track_id(f, tid))
        return out

    def commit(self, targets: Sequence[Face], detected: bool) -> list[Face]:
        """Record this frame's targets; after a detection they get track ids. Returns them."""
        out = self._with_ids(targets) if detected else list(targets)
        self._tried = None
        if detected:
            self._since_detect = 0
        self._since_detect += 1
        self._previous = out
        self._carried = out if self.detect_every > 1 else []
        return out


__all__ = ["MATCH_EMBEDDING", "MATCH_IOU", "MAX_COAST", "FaceTracker", "iou", "overlap",
           "with_track_id"]
