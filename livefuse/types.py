"""The values that travel through the frame path.

Conventions used everywhere in livefuse:

* a **frame** is ``(H, W, 3) uint8 BGR`` (OpenCV order), C-contiguous;
* coordinates are ``float32`` pixels, x to the right, y down;
* **kps** are the 5 keypoints in InsightFace order: image-left eye, image-right eye, nose tip,
  image-left mouth corner, image-right mouth corner (``(5, 2) float32``);
* **landmarks** are the 68 iBUG-300W points (``(68, 2) float32``) when the classic engine
  produced the face; **landmarks_106** are insightface's 2d106det points (``(106, 2) float32``,
  :mod:`livefuse.faces.landmarks106`) when the neural engine's landmarker ran on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

Frame = npt.NDArray[np.uint8]
"""``(H, W, 3) uint8 BGR`` image."""

FloatArray = npt.NDArray[np.float32]
Affine = npt.NDArray[np.float64]
"""``(2, 3) float64`` affine matrix, frame px → the coordinates of an aligned crop or patch."""
Blend = Literal["feather", "seamless"]


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
        template: the analyser's appearance template of the face at its last detection (dlib:
            ``(32, 32) float32`` grey aligned crop, zero mean, unit norm), which confirms a
            tracked face is still a face; ``None`` when the analyser confirms otherwise.
        angle: the frame rotation (degrees clockwise, a multiple of 45) the detector found the
            face at (:mod:`livefuse.faces.rotation`); 0 for a face found upright, however
            rolled it is (CenterFace finds faces rolled up to 60-90 degrees directly).
        landmarks_106: ``(106, 2) float32`` insightface 2d106det landmarks in frame px (the
            neural engine's landmarker fills them in for the pose cache), or ``None``.
    """

    bbox: FloatArray
    kps: FloatArray
    score: float = 1.0
    landmarks: FloatArray | None = None
    embedding: FloatArray | None = None
    track_id: int = -1
    template: FloatArray | None = None
    angle: int = 0
    landmarks_106: FloatArray | None = None

    @property
    def width(self) -> float:
        return float(self.bbox[2] - self.bbox[0])

    @property
    def height(self) -> float:
        return float(self.bbox[3] - self.bbox[1])

    @property
    def area(self) -> float:
        return max(self.width, 0.0) * max(self.height, 0.0)


@dataclass(eq=False)
class StagedFrame:
    """One frame on the host and, on the GPU path, on the device too (uploaded once).

    Attributes:
        host: ``(H, W, 3) uint8 BGR``; never modified by the engine.
        device: the same frame as an ``(H, W, 3) uint8`` torch tensor on the GPU, or ``None`` on
            the CPU path. Filled by :class:`livefuse.swap.gpu_frame.FrameStager`, on the capture
            thread in a live session (so the upload of frame n+1 overlaps the GPU work on n).
        ready: a ``torch.cuda.Event`` the device copy is complete at (``None``: already complete).
        release: called once the engine is done with ``device`` (returns its pinned buffer).
        graphs: the stager's graph-cache entry of this frame size
            (:class:`livefuse.models.graph_cache.Owner`) once ``device`` is its static work frame
            (after ``FrameStager.wait``): the align and paste then replay CUDA graphs bound to
            it. ``None`` elsewhere.
    """

    host: Frame
    device: Any = None
    ready: Any = None
    release: Any = None
    graphs: Any = None


@dataclass(frozen=True, eq=False)
class Patch:
    """A rendered face before paste-back: an image in its own coordinates, an alpha, and the
    affine matrix from frame px to those coordinates.

    The classic renderer makes bbox-local patches (the affine is a translation); the neural one
    makes the swapped aligned crop (the affine is the ArcFace alignment). One paste-back and one
    cache re-warp (:mod:`livefuse.swap.paste`) serve both.

    Attributes:
        image: ``(h, w, 3) uint8 BGR`` on the host, or on the GPU path a ``(3, h, w)`` float
            tensor, RGB in [0, 1] (the swapper's own output).
        alpha: ``(h, w) float32`` blend weight in [0, 1] (a host array or a device tensor).
        affine: frame px → patch px.
        blend: ``feather`` (alpha blend) or ``seamless`` (Poisson clone inside ``alpha >= 0.5``;
            host patches only).
    """

    image: Any
    alpha: Any
    affine: Affine
    blend: Blend = "feather"

    @property
    def on_device(self) -> bool:
        return not isinstance(self.image, np.ndarray)


@dataclass(frozen=True, eq=False)
class SkippedFace:
    """A face (or a detection) of a frame that was not swapped, and why, in words for the user.

    Attributes:
        bbox: ``(4,) float32`` x1, y1, x2, y2 in frame px.
        reason: e.g. "too small to swap (14 px wide)", "not selected (face selector 'one')".
        angle: the frame rotation it was found at (degrees clockwise).
        score: the detector's confidence.
    """

    bbox: FloatArray
    reason: str
    angle: int = 0
    score: float = 0.0


@dataclass
class FramePacket:
    """One frame's journey through the engine.

    Attributes:
        index: frame number from the source, starting at 0.
        t_capture_ns: ``time.perf_counter_ns()`` when the frame was captured.
        frame: the input frame ``(H, W, 3) uint8 BGR``; never modified.
        faces: the target faces of this frame (detected or tracked, then selected).
        found: how many faces the frame held before selection (``faces`` may be fewer, e.g.
            with ``face_selector='one'``).
        output: the swapped frame, same shape and dtype as ``frame``.
        swapped: how many faces were swapped into ``output``.
        timings_ms: per-stage wall time in ms (``detect``, ``swap``, ``paste``, ...).
        detected: ``True`` when the detector ran on this frame (``False`` when tracked).
        cache_hits: how many of the swapped faces came from the pose-similarity cache.
        unswapped: faces found in this frame and left as they are: not selected (another
            person with ``face_selector='one'``), or selected but not rendered (mostly outside
            the frame). The privacy guard hides them. Empty on frames that were only tracked.
        skipped: the faces counted in ``found`` that were not swapped, with why.
        dropped: detections not counted as faces (a turned detection over a face found
            upright, or one whose landmarks do not fit its box), with why.
        regions: ``(x0, y0, x1, y1)`` px, end-exclusive, of every part of ``output`` that
            differs from ``frame``: outside them the two are equal (a video job re-encodes
            only these, and copies the rest from the decoded input).
    """

    index: int
    t_capture_ns: int
    frame: Frame
    faces: list[Face] = field(default_factory=list)
    found: int = 0
    output: Frame | None = None
    swapped: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    detected: bool = False
    cache_hits: int = 0
    unswapped: list[Face] = field(default_factory=list)
    skipped: list[SkippedFace] = field(default_factory=list)
    dropped: list[SkippedFace] = field(default_factory=list)
    regions: list[tuple[int, int, int, int]] = field(default_factory=list)
