"""insightface's 106-point landmark scheme (the ``2d106det`` model of buffalo_l): index ranges.

The index meaning is insightface's mark-up (``alignment/coordinate_reg``, "2d106markup"), as
public projects that run the released file use it: the face contour 0-32 (0 the chin), one eye
33-42 and the other 87-96 (10 points each: corners, lids, centre), brows 43-51 and 97-105, nose
72-86, mouth 52-71 (20 points, outer and inner lips, corners 52 and 61). Within a region the
order is by point name, not along the outline, so livefuse reads each region as a point set
(its extents, see :func:`region_openness`), never by a single point's position in the list,
and tells the image-left eye from the image-right one by the detector's kps.

Kept apart from the landmarker so the cache can use the scheme without torch or onnxruntime.
"""

from __future__ import annotations

import numpy as np

from livefuse.types import FloatArray

COUNT = 106
CHIN = 0
CONTOUR = slice(0, 33)
EYE_A = slice(33, 43)
EYE_B = slice(87, 97)
BROW_A = slice(43, 52)
BROW_B = slice(97, 106)
MOUTH = slice(52, 72)
NOSE = slice(72, 87)
NOSE_TIP = (80, 86)
"""The point under the nose tip and the one above it; their midpoint stands for the tip."""
MOUTH_CORNERS = (52, 61)
EYE_OUTER = (35, 93)
"""Outer corners of the eyes :data:`EYE_A` and :data:`EYE_B`."""


def region_openness(points: FloatArray, axis: FloatArray) -> float:
    """How open a mouth or an eye is, from its region's points: the region's extent across
    ``axis`` over its extent along it, both in px (0 for a flat line).

    ``axis`` is the face's eye line (a unit vector), so the measure does not change with roll.
    For the mouth region the extent across is the lips' thickness plus the inner-lip gap, so a
    change of it is the change of the gap over the mouth width: what the 68-point key's
    ``mouth_open`` measures (it divides by the inner mouth width, ~0.9 of the outer one). For an
    eye it is the lid opening over the eye width, which an eye aspect ratio measures at two
    columns.
    """
    p = np.asarray(points, np.float64).reshape(-1, 2)
    a = np.asarray(axis, np.float64)
    along = p @ a
    across = p @ np.array([-a[1], a[0]])
    width = float(along.max() - along.min())
    return float(across.max() - across.min()) / width if width > 0 else 0.0


__all__ = ["BROW_A", "BROW_B", "CHIN", "CONTOUR", "COUNT", "EYE_A", "EYE_B", "EYE_OUTER", "MOUTH",
           "MOUTH_CORNERS", "NOSE", "NOSE_TIP", "region_openness"]
