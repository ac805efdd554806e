"""Real photos that ship inside installed packages, for the demo, benchmarks and tests.

* ``t1.jpg`` (1280x886, six faces) and ``Tom_Hanks_54745.png`` (112x112 grey crop) from
  insightface's ``data/images``;
* the astronaut (Eileen Collins, NASA, public domain) from ``skimage.data.astronaut()``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from livefuse.types import Face, Frame

_FRONTAL = 0.25  # nose within this share of the eye distance of the eyes' midpoint (along them)


def clip_face(faces: list[Face], shape: tuple[int, ...]) -> Face:
    """The face a demo or benchmark clip of a ``shape`` photo is centred on: the largest of the
    faces that look at the camera and have a face's width of picture on every side (room for the
    clip's camera motion), else the largest. On t1.jpg that is Ross, whatever the detector:
    "largest" alone is a near tie between Ross and Rachel (at the picture's left edge), and
    CenterFace's box makes Joey's near-profile the largest.

    Raises:
        ValueError: ``faces`` is empty.
    """
    h, w = shape[:2]

    def suits(f: Face) -> bool:
        eyes = (f.kps[0] + f.kps[1]) / 2
        along = f.kps[1] - f.kps[0]
        d = float(np.hypot(*along)) or 1.0
        frontal = abs(float((f.kps[2] - eyes) @ along)) / (d * d) < _FRONTAL
        x0, y0, x1, y1 = (float(v) for v in f.bbox)
        room = x0 - f.width >= 0 and y0 - f.height >= 0 and x1 + f.width <= w and \
            y1 + f.height <= h
        return frontal and room

    return max(faces, key=lambda f: (suits(f), f.area))


def insightface_image(name: str) -> Path:
    """Path of a photo in insightface's ``data/images`` (located without importing insightface).

    Raises:
        FileNotFoundError: insightface or the photo is not installed.
    """
    spec = importlib.util.find_spec("insightface")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("insightface is not installed: pip install insightface")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "images" / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed insightface")
    return path


def astronaut() -> Frame:
    """``skimage.data.astronaut()`` as ``(512, 512, 3) uint8 BGR``."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut()[..., ::-1])
