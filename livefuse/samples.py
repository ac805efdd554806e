"""Real photos that ship inside installed packages, for the demo, benchmarks and tests.

* ``t1.jpg`` (1280x886, six faces) and ``Tom_Hanks_54745.png`` (112x112 grey crop) from
  insightface's ``data/images``;
* the astronaut (Eileen Collins, NASA, public domain) from ``skimage.data.astronaut()``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from livefuse.types import Frame


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
