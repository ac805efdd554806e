"""Pictures turned by any angle, as an editor turns them ("expand": a canvas that holds the whole
picture, black corners), and back: the tilted-face tests and benchmarks/tilted_faces.py."""

from __future__ import annotations

import cv2
import numpy as np

from livefuse.types import Frame


def turned(image: Frame, degrees: float) -> tuple[Frame, np.ndarray]:
    """``image`` turned clockwise by ``degrees`` on a canvas that holds all of it, and the
    ``(2, 3)`` affine that did it."""
    h, w = image.shape[:2]
    t = np.radians(degrees)
    size = (int(np.ceil(w * abs(np.cos(t)) + h * abs(np.sin(t)))),
            int(np.ceil(w * abs(np.sin(t)) + h * abs(np.cos(t)))))
    m = cv2.getRotationMatrix2D(((w - 1) / 2, (h - 1) / 2), -degrees, 1.0)
    m[:, 2] += np.array([(size[0] - w) / 2, (size[1] - h) / 2])
    return np.asarray(cv2.warpAffine(image, m, size, flags=cv2.INTER_CUBIC), np.uint8), m


def turned_back(image: Frame, m: np.ndarray, shape: tuple[int, ...]) -> Frame:
    """A picture :func:`turned` by ``m`` brought back to the original's ``shape``."""
    return np.asarray(cv2.warpAffine(image, cv2.invertAffineTransform(m), shape[1::-1],
                                     flags=cv2.INTER_CUBIC), np.uint8)


__all__ = ["turned", "turned_back"]
