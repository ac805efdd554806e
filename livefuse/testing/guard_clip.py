"""A scripted clip for the privacy guard, built from a real photo (insightface's ``t1.jpg``), with
the ground truth of where every face is (test and benchmark equipment).

Script (96 frames, 640x480, 30 fps): face A moves across the picture; frames 24..29 are detection
dropouts (:class:`DropoutAnalyser` finds nothing there although A is in plain view); A turns
away (rolls to 70 degrees while squeezing to 45 % of its width, as a head turning aside does)
over 36..47, stays turned until 55 and turns back by 59; from frame 64 face B (another person)
slides in from the right and stays, unswapped with ``face_selector='one'``.

:func:`unaltered_faces` is the measure: a face is shown *unaltered* in an output frame when at
least :data:`UNALTERED_FRACTION` of the pixels of its core (the detector's box of it, shrunk to
80 %) are within :data:`SAME_LEVELS` of the input frame in every channel. A swapped or
pixelated face is far below that; an untouched one is at 1.0 (the frames reach the engine as
they are: no codec in between).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from livefuse.faces.analyser import Analyser, AnyFrame, host_frame
from livefuse.types import Face, FloatArray, Frame

SIZE = (640, 480)
FRAMES = 96
DROPOUTS = range(24, 30)
SAME_LEVELS = 2
UNALTERED_FRACTION = 0.8
_SCALE = 1.3  # t1.jpg's faces are ~104 px wide: ~135 px here, well inside dlib HOG's range
# face boxes in t1.jpg (dlib HOG): A the most confident, B another person
_FACE_A = (65.0, 284.0, 169.0, 388.0)
_FACE_B = (734.0, 365.0, 837.0, 469.0)


@dataclass(frozen=True)
class GuardClip:
    """The frames and, per frame, the core polygon of every face in view.

    Attributes:
        frames: ``(480, 640, 3) uint8 BGR``; frame ``i`` carries ``i`` in its first pixels
            (:func:`frame_number`).
        faces: per frame, ``{"A" or "B": (4, 2) float32 polygon}`` for each face whose core is
            wholly inside the frame.
    """

    frames: list[Frame]
    faces: list[dict[str, FloatArray]]


def frame_number(frame: Frame) -> int:
    """The number :func:`guard_clip` wrote into a frame's first 4 pixels."""
    return int.from_bytes(frame[0, :4].tobytes()[:8], "little")


def _stamp(frame: Frame, n: int) -> None:
    frame[0, :4] = np.frombuffer(n.to_bytes(12, "little"), np.uint8).reshape(4, 3)


def _sprite(photo: Frame, box: tuple[float, ...]) -> tuple[Frame, FloatArray]:
    """The face with a margin, scaled by ``_SCALE``; and its core polygon in sprite px."""
    x1, y1, x2, y2 = box
    m = 0.45 * (x2 - x1)
    cx0, cy0, cx1, cy1 = int(x1 - m), int(y1 - m), int(x2 + m), int(y2 + m)
    crop = np.asarray(cv2.resize(photo[cy0:cy1, cx0:cx1], None, fx=_SCALE, fy=_SCALE,
                                 interpolation=cv2.INTER_CUBIC), dtype=np.uint8)
    s = 0.1 * (x2 - x1)  # the core: the box shrunk to 80 %
    core = np.array([[x1 + s, y1 + s], [x2 - s, y1 + s], [x2 - s, y2 - s], [x1 + s, y2 - s]],
                    np.float32)
    core = (core - np.array([cx0, cy0], np.float32)) * _SCALE
    return np.ascontiguousarray(crop), core


def _place(frame: Frame, sprite: Frame, core: FloatArray, centre: tuple[float, float],
           angle: float = 0.0, squeeze: float = 1.0) -> FloatArray:
    """Draw ``sprite`` turned by ``angle`` degrees and squeezed horizontally, centred at
    ``centre`` (feathered edge); returns the core polygon in frame px."""
    h, w = sprite.shape[:2]
    rot = cv2.getRotationMatrix2D((0.0, 0.0), angle, 1.0)
    m = rot @ np.array([[squeeze, 0, 0], [0, 1, 0], [0, 0, 1]], np.float64)
    m = m @ np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1]], np.float64)
    m[:, 2] += np.asarray(centre, np.float64)
    size = (frame.shape[1], frame.shape[0])
    warped = cv2.warpAffine(sprite, m, size, flags=cv2.INTER_LINEAR)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    edge = np.minimum(np.minimum(xx, w - 1 - xx), np.minimum(yy, h - 1 - yy))
    alpha = np.clip(edge / 12.0, 0.0, 1.0)
    a = cv2.warpAffine(alpha, m, size, flags=cv2.INTER_LINEAR)[..., None]
    frame[:] = np.clip(frame * (1 - a) + warped * a + 0.5, 0, 255).astype(np.uint8)
    return (core @ m[:, :2].T + m[:, 2]).astype(np.float32)


def _background(rng: np.random.Generator) -> Frame:
    w, h = SIZE
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    base = np.stack([90 + 40 * x + 0 * y, 110 + 30 * y + 0 * x, 120 + 20 * x * y], -1)
    noise = cv2.GaussianBlur(rng.normal(0, 6, (h, w, 3)).astype(np.float32), (0, 0), 3)
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _a_pose(i: int) -> tuple[float, float, float, float]:
    """Face A's centre x, y, roll (degrees) and squeeze at frame ``i``."""
    x = 200.0 + 2.5 * min(i, 40)
    turn = 0.0
    if 36 <= i < 48:
        turn = (i - 35) / 12
    elif 48 <= i < 56:
        turn = 1.0
    elif 56 <= i < 60:
        turn = 1.0 - (i - 55) / 4
    return x, 250.0, 70.0 * turn, 1.0 - 0.55 * turn


def guard_clip(photo: Frame, frames: int = FRAMES, seed: int = 0) -> GuardClip:
    """The scripted clip (see the module docstring) from ``photo`` (insightface's t1.jpg)."""
    rng = np.random.default_rng(seed)
    background = _background(rng)
    a, a_core = _sprite(photo, _FACE_A)
    b, b_core = _sprite(photo, _FACE_B)
    w, h = SIZE
    out, truth = [], []
    for i in range(frames):
        frame = background.copy()
        faces: dict[str, FloatArray] = {}
        x, y, angle, squeeze = _a_pose(i)
        faces["A"] = _place(frame, a, a_core, (x, y), angle, squeeze)
        if i >= 64:
            bx = max(470.0, 740.0 - 40.0 * (i - 64))
            faces["B"] = _place(frame, b, b_core, (bx, 260.0))
        _stamp(frame, i)
        out.append(frame)
        truth.append({k: p for k, p in faces.items()
                      if p[:, 0].min() >= 0 and p[:, 0].max() < w and p[:, 1].min() >= 0
                      and p[:, 1].max() < h})
    return GuardClip(out, truth)


def same_fraction(output: Frame, source: Frame, polygon: FloatArray) -> float:
    """The fraction of pixels inside ``polygon`` within :data:`SAME_LEVELS` of ``source`` in
    every channel."""
    mask = np.zeros(source.shape[:2], np.uint8)
    cv2.fillPoly(mask, [np.round(polygon).astype(np.int32)], 1)
    inside = mask.astype(bool)
    if not inside.any():
        return 0.0
    diff = np.abs(output.astype(np.int16) - source.astype(np.int16)).max(axis=2)
    return float((diff[inside] <= SAME_LEVELS).mean())


def unaltered_faces(output: Frame, source: Frame, faces: dict[str, FloatArray]) -> list[str]:
    """The faces of ``faces`` that ``output`` shows as they are in ``source`` (see the module
    docstring)."""
    return [k for k, p in faces.items()
            if same_fraction(output, source, p) >= UNALTERED_FRACTION]


class DropoutAnalyser:
    """Wraps an analyser: on the clip's :data:`DROPOUTS` frames it finds no face and confirms
    none (a detector and a tracker that both lose a face in plain view)."""

    def __init__(self, inner: Analyser, dropouts: Sequence[int] = DROPOUTS) -> None:
        self.inner, self.dropouts = inner, set(dropouts)

    def _out(self, frame: AnyFrame) -> bool:
        return frame_number(host_frame(frame)) in self.dropouts

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        return [] if self._out(frame) else self.inner.detect(frame, upsample)

    def track(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face | None]:
        return [None] * len(faces) if self._out(frame) else self.inner.track(frame, faces)

    def embed(self, frame: Frame, face: Face) -> FloatArray:
        return self.inner.embed(frame, face)

    def reset(self) -> None:
        self.inner.reset()


__all__ = ["DROPOUTS", "FRAMES", "SAME_LEVELS", "UNALTERED_FRACTION", "DropoutAnalyser",
           "GuardClip", "frame_number", "guard_clip", "same_fraction", "unaltered_faces"]
