"""A clip as a camera that gives its next frame only once the last one reached the sink (or
``turn`` was released otherwise): every frame goes through the live session in order, none is
dropped, and a sink knows which input frame it got (``current``)."""

from __future__ import annotations

import threading

from livefuse.io.sources import EndOfStream, SourceInfo
from livefuse.types import Frame


class LockstepSource:
    """The source; the sink calls ``turn.release()`` after each frame."""

    live = False

    def __init__(self, frames: list[Frame]) -> None:
        self.frames, self.current, self.opens = frames, -1, 0
        self.turn = threading.Semaphore(1)

    def open(self) -> SourceInfo:
        self.opens += 1
        h, w = self.frames[0].shape[:2]
        return SourceInfo(w, h, 1000.0, "lockstep clip")

    def read(self, out: Frame | None = None) -> Frame | None:
        self.turn.acquire(timeout=10)
        if self.current + 1 >= len(self.frames):
            raise EndOfStream
        self.current += 1
        return self.frames[self.current].copy()

    def close(self) -> None:
        pass
