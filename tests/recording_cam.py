"""A pyvirtualcam backend that keeps every frame it is sent, for the live and GUI tests.

pyvirtualcam's backend registry is global to the process, so each test module registers its own
subclass under its own name (:func:`recording_backend`): one module's frames never land in
another's list.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyvirtualcam


class RecordingBackend:
    """Keeps each frame as sent (the sink sends BGR), reshaped to (height, width, 3) uint8."""

    name: ClassVar[str] = "recording"
    frames: ClassVar[list[np.ndarray]] = []
    size: ClassVar[tuple[int, int]] = (0, 0)

    def __init__(self, *, width: int, height: int, fps: float, fourcc: int,
                 device: str | None, **kw: Any) -> None:
        type(self).size = (width, height)
        self._fourcc = fourcc

    def close(self) -> None:
        pass

    def send(self, frame: np.ndarray) -> None:
        w, h = type(self).size
        type(self).frames.append(frame.reshape(h, w, 3).copy())

    def device(self) -> str:
        return self.name

    def native_fourcc(self) -> int | None:
        return self._fourcc


def recording_backend(name: str) -> type[RecordingBackend]:
    """Register and return a RecordingBackend subclass named ``name`` with its own frame list."""
    cls = type(f"RecordingBackend_{name}", (RecordingBackend,),
               {"name": name, "frames": [], "size": (0, 0)})
    pyvirtualcam.register_backend(name, cls)
    return cls
