"""Faces lying on their side or upside down: detect on the frame turned by 90°, 180° or 270° and
map the faces back.

Face detectors (dlib's HOG, SCRFD) are trained on upright faces and miss a face turned by more
than ~45°. A photo taken with the phone on its side, or a streamer lying down, then gets no swap.
:func:`detect_rotated` tries the detector on the turned frame and maps bbox, kps and landmarks
back to the frame's own coordinates; the face keeps its semantic point order (left eye first in
the face's own frame), so alignment and the renderers work unchanged, and ``Face.angle`` says at
which turn it was found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

import cv2
import numpy as np

from livefuse.faces.analyser import AnyFrame, host_frame
from livefuse.faces.tracking import iou
from livefuse.types import Face, FloatArray, StagedFrame

RotationMode = Literal["off", "auto", "always"]
"""``off``: upright only; ``auto``: the turned frames only when no face is found upright;
``always``: every angle at every detection (4x the detector's cost)."""
ANGLES = (90, 180, 270)
_CV_ROTATE = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180,
              270: cv2.ROTATE_90_COUNTERCLOCKWISE}
_DUPLICATE_IOU = 0.5  # a face found at two angles (tilted ~45°) is one face


def rotate_frame(frame: AnyFrame, angle: int) -> AnyFrame:
    """``frame`` turned clockwise by ``angle`` (90, 180, 270); a staged frame is turned on the
    host and, when it has one, on the device."""
    host = np.ascontiguousarray(cv2.rotate(host_frame(frame), _CV_ROTATE[angle]), np.uint8)
    if not isinstance(frame, StagedFrame):
        return host
    device = None
    if frame.device is not None:
        import torch

        # torch.rot90 turns counter-clockwise for positive k
        device = torch.rot90(frame.device, k=-(angle // 90), dims=(0, 1)).contiguous()
    return StagedFrame(host=host, device=device)


def unrotate_points(points: FloatArray, angle: int, size: tuple[int, int]) -> FloatArray:
    """Points ``(N, 2)`` of the frame turned clockwise by ``angle`` mapped back to the frame,
    whose ``size`` is ``(width, height)``."""
    w, h = size
    x, y = points[:, 0], points[:, 1]
    # cv2.rotate's pixel mapping (pixel centres on integers): 90 cw sends (x, y) to
    # (h - 1 - y, x), so the turned frame's (x', y') comes from (y', h - 1 - x').
    if angle == 90:
        out = np.stack([y, h - 1 - x], 1)
    elif angle == 180:
        out = np.stack([w - 1 - x, h - 1 - y], 1)
    elif angle == 270:
        out = np.stack([w - 1 - y, x], 1)
    else:
        out = np.stack([x, y], 1)
    return out.astype(np.float32)


def unrotate_face(face: Face, angle: int, size: tuple[int, int]) -> Face:
    """A face found on the frame turned by ``angle`` in the frame's own coordinates."""
    b = face.bbox
    corners = unrotate_points(np.array([[b[0], b[1]], [b[2], b[1]], [b[0], b[3]], [b[2], b[3]]],
                                       np.float32), angle, size)
    bbox = np.array([*corners.min(0), *corners.max(0)], np.float32)
    lm = None if face.landmarks is None else unrotate_points(face.landmarks, angle, size)
    return replace(face, bbox=bbox, kps=unrotate_points(face.kps, angle, size), landmarks=lm,
                   angle=angle)


def detect_rotated(detect: Callable[[AnyFrame], list[Face]], frame: AnyFrame,
                   mode: RotationMode, upright: Sequence[Face] | None = None) -> list[Face]:
    """Faces at any of the four quarter turns, per ``mode`` (see :data:`RotationMode`).

    Args:
        detect: the analyser's detector.
        upright: the upright detections when the caller already has them.

    Returns:
        Faces in ``frame`` coordinates, left to right; a face found at two angles counts once
        (the higher score wins).
    """
    faces = list(upright) if upright is not None else detect(frame)
    if mode == "off" or (mode == "auto" and faces):
        return faces
    h, w = host_frame(frame).shape[:2]
    for angle in ANGLES:
        turned = rotate_frame(frame, angle)
        for f in detect(turned):
            back = unrotate_face(f, angle, (w, h))
            same = [g for g in faces if iou(g.bbox, back.bbox) >= _DUPLICATE_IOU]
            if not same:
                faces.append(back)
            elif all(back.score > g.score for g in same):
                faces = [g for g in faces if g not in same] + [back]
        if mode == "auto" and faces:
            break
    faces.sort(key=lambda f: float(f.bbox[0] + f.bbox[2]))
    return faces


__all__ = ["ANGLES", "RotationMode", "detect_rotated", "rotate_frame", "unrotate_face",
           "unrotate_points"]
