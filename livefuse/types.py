"""The values that travel through the frame path.

Conventions used everywhere in livefuse:

* a **frame** is ``(H, W, 3) uint8 BGR`` (OpenCV order), C-contiguous;
* coordinates are ``float32`` pixels, x to the right, y down;
* **kps** are the 5 keypoints in InsightFace order: image-left eye, image-right eye, nose tip,
  image-left mouth corner, image-right mouth corner (``(5, 2) float32``);
* **landmarks** are the 68 iBUG-300W points (``(68, 2) float32``) when the classic engine
  produced the face.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Frame = npt.NDArray[np.uint8]
"""``(H, W, 3) uint8 BGR`` image."""

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class Face:
    """One detected face.

    Attributes:
        bbox: ``(4,) float32`` x1, y1, x2, y2 in px.
        kps: ``(5, 2) float32`` keypoints, InsightFace order (see module docstring).
        score: detector confidence; dlib's HOG margin for the classic detector.
        landmarks: ``(68, 2) float32`` iBUG-300W landmarks, or ``None``.
        embedding: identity embedding (``(128,)`` dlib or ``(512,)`` ArcFace, float32), or ``None``.
        track_id: identity kept across frames by the tracker; ``-1`` when untracked.
    """

    bbox: FloatArray
    kps: FloatArray
    score: float = 1.0
    landmarks: FloatArray | None = None
    embedding: FloatArray | None = None
    track_id: int = -1

    @property
    def width(self) -> float:
        return float(self.bbox[2] - self.bbox[0])

    @property
    def height(self) -> float:
        return float(self.bbox[3] - self.bbox[1])

    @property
    def area(self) -> float:
        return max(self.width, 0.0) * max(self.height, 0.0)


@dataclass
class FramePacket:
    """One frame's journey through the engine.

    Attributes:
        index: frame number from the source, starting at 0.
        t_capture_ns: ``time.perf_counter_ns()`` when the frame was captured.
        frame: the input frame ``(H, W, 3) uint8 BGR``; never modified.
        faces: target faces found (detected or tracked) in this frame.
        output: the swapped frame, same shape and dtype as ``frame``.
        swapped: how many faces were swapped into ``output``.
        timings_ms: per-stage wall time in ms (``detect``, ``swap``, ``paste``, ...).
        detected: ``True`` when the detector ran on this frame (``False`` when tracked).
    """

    index: int
    t_capture_ns: int
    frame: Frame
    faces: list[Face] = field(default_factory=list)
    output: Frame | None = None
    swapped: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    detected: bool = False
