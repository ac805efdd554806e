"""Live-session test equipment: a stand-in engine (what :class:`livefuse.live.EngineLike` asks
for, every frame passed through unchanged, the photos it was given recorded) and a wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from livefuse.cache import PoseCache
from livefuse.config import CacheConfig, EngineConfig
from livefuse.imaging import LoadedImage
from livefuse.models.engine_choice import EngineChoice
from livefuse.types import Frame, FramePacket, StagedFrame


class PassEngine:
    """Frames through unchanged; ``apply`` takes every config in place unless ``rebuild``
    (then the runner must build a new engine for any change).

    Attributes:
        sources: ``(face_index, face)`` of each :meth:`set_source` call, in order.
        references: the reference photos set, in order.
    """

    def __init__(self, rebuild: bool = False) -> None:
        self.cache = PoseCache(CacheConfig(enabled=False))
        self.precision_in_use = "n/a (stub)"
        self.engine_choice = EngineChoice("classic", "classic", "a test engine")
        self.source_notes: tuple[str, ...] = ()
        self.reference_notes: tuple[str, ...] = ()
        self.rebuild = rebuild
        self.sources: list[tuple[int | None, Any]] = []
        self.references: list[LoadedImage] = []

    def set_source(self, image: LoadedImage, face_index: int | None = None,
                   face: Any = None) -> Any:
        self.sources.append((face_index, face))
        return face

    def set_reference(self, image: LoadedImage) -> None:
        self.references.append(image)

    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        return None

    def stage(self, frame: Frame) -> StagedFrame:
        return StagedFrame(host=frame)

    def apply(self, config: EngineConfig) -> bool:
        return not self.rebuild

    def set_cache(self, config: CacheConfig) -> None:
        pass

    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False, ahead: StagedFrame | None = None) -> FramePacket:
        host = frame.host if isinstance(frame, StagedFrame) else frame
        return FramePacket(index=index, t_capture_ns=t_capture_ns or 0, frame=host, output=host)


def wait_for(cond: Callable[[], object], timeout: float = 30.0) -> bool:
    """Poll ``cond`` every 20 ms until it is true (``True``) or ``timeout`` s pass (``False``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False
