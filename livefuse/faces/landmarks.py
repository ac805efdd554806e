"""The iBUG 300-W 68-point landmark scheme (Sagonas et al. 2013): index ranges and the 5 kps.

Kept apart from the dlib analyser so the swappers and the cache can use the scheme without
importing dlib.
"""

from __future__ import annotations

import numpy as np

from livefuse.types import FloatArray

JAW = slice(0, 17)
RIGHT_EYE = slice(36, 42)  # the subject's right eye: image-left
LEFT_EYE = slice(42, 48)
MOUTH_LEFT, MOUTH_RIGHT, NOSE_TIP = 48, 54, 30
INNER_MOUTH = slice(60, 68)


def kps_from_landmarks(lm: FloatArray) -> FloatArray:
    """5 InsightFace-order keypoints ``(5, 2) float32`` from 68 landmarks ``(68, 2)``."""
    return np.stack(
        [lm[RIGHT_EYE].mean(0), lm[LEFT_EYE].mean(0), lm[NOSE_TIP], lm[MOUTH_LEFT], lm[MOUTH_RIGHT]]
    ).astype(np.float32)


def mouth_open_ratio(lm: FloatArray) -> float:
    """How open the mouth is: the mean inner-lip gap (61-67, 62-66, 63-65) over the inner mouth
    width (60-64), from 68 landmarks; 0 closed, ~0.5 wide open (the cache's ``mouth_open``)."""
    p = np.asarray(lm, np.float64).reshape(-1, 2)
    width = float(np.linalg.norm(p[60] - p[64])) or 1.0
    gap = sum(float(np.linalg.norm(p[a] - p[b])) for a, b in ((61, 67), (62, 66), (63, 65)))
    return gap / (3.0 * width)
