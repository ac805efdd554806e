"""An engine stand-in for batch and pipeline tests: fast, deterministic, picklable by reference.

It "swaps" one face per frame by writing a mark (the frame's index as a few pixel values in the
top-left corner) so a test can read back which frame went where, and it records the timestamps it
was given. Ray workers import it by name (it lives in the installed package, not in ``tests/``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from livefuse.types import Frame, FramePacket, StagedFrame


class _Renderer:
    device = "cpu"


class MarkingEngine:
    """What ``run_image``/``run_video`` use of an Engine, with no model: frame ``i`` gets
    ``i % 256`` written into an 8x8 corner block, and counts as one face found and swapped.

    Args:
        delay_s: sleep per frame (tests of cancellation need a job that takes a while).
    """

    renderer = _Renderer()
    source_notes: tuple[str, ...] = ()
    reference_notes: tuple[str, ...] = ()

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.times_ns: list[int] = []
        self.indices: list[int] = []
        self.tracked: list[int] = []  # the frames given to :meth:`track`

    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        return None

    def stage(self, frame: Frame) -> StagedFrame:
        return StagedFrame(host=frame)

    def reset_tracking(self) -> None:
        pass

    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False, ahead: StagedFrame | None = None) -> FramePacket:
        host = frame.host if isinstance(frame, StagedFrame) else frame
        out = host if in_place else host.copy()
        out[:8, :8] = index % 256
        if self.delay_s:
            time.sleep(self.delay_s)
        self.indices.append(index)
        self.times_ns.append(t_capture_ns if t_capture_ns is not None else -1)
        packet = FramePacket(index=index, t_capture_ns=t_capture_ns or 0, frame=host)
        packet.output, packet.found, packet.swapped = out, 1, 1
        packet.regions = [(0, 0, 8, 8)]
        return packet

    def track(self, frame: Frame | StagedFrame, index: int = 0,
              t_capture_ns: int | None = None) -> FramePacket:
        """As :meth:`livefuse.engine.Engine.track`: recorded in :attr:`tracked`, no mark."""
        host = frame.host if isinstance(frame, StagedFrame) else frame
        self.tracked.append(index)
        packet = FramePacket(index=index, t_capture_ns=t_capture_ns or 0, frame=host)
        packet.output, packet.found = host, 1
        return packet

    def process_image(self, frame: Frame) -> FramePacket:
        return self.process(np.ascontiguousarray(frame), strict=True)


def marking_engine() -> Any:
    """A picklable factory (``livefuse.testing.stub_engine.marking_engine``) for batch workers."""
    return MarkingEngine()


def slow_marking_engine() -> Any:
    """A factory for a MarkingEngine that takes 50 ms a frame."""
    return MarkingEngine(delay_s=0.05)


__all__ = ["MarkingEngine", "marking_engine", "slow_marking_engine"]
