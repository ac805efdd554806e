"""Host frame buffers lent to the capture, so a camera writes each frame straight into memory the
GPU can read without a further copy.

Staging a frame from pageable memory costs a 6 MB copy into pinned memory per 1080p frame
(0.9-1.2 ms of host CPU on the H200's host, docs/BENCHMARKS.md §12.3): more than the rest of the
stage. A capture that decodes into a lent pinned buffer skips it. A lent buffer's lifetime is
its users': it is lent again only when no reference to the array handed out is left (a view
keeps its base alive, so views count too) and the last upload from it has completed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from livefuse.types import Frame


@dataclass(eq=False)
class LentBuffer:
    """One pooled host buffer.

    Attributes:
        tensor: the ``(H, W, 3) uint8`` host tensor (pinned on CUDA) that uploads read from.
        uploaded: an event-like object (``query() -> bool``) of the last upload from it, or
            ``None``.
    """

    tensor: Any
    uploaded: Any = None
    _ref: weakref.ReferenceType[np.ndarray] | None = field(default=None, repr=False)

    def free(self) -> bool:
        if self._ref is not None and self._ref() is not None:
            return False
        return self.uploaded is None or bool(self.uploaded.query())


class HostBufferPool:
    """Buffers of one or more frame sizes, lent to one writer (the capture thread) and read by
    the stager. Thread-safe.

    Args:
        alloc: makes a host tensor of a shape (``torch.empty(shape, dtype=torch.uint8,
            pin_memory=True)`` on CUDA).
        limit: buffers per frame size. Past it :meth:`lend` returns ``None`` and the caller uses
            its own memory (the stage then copies, as for any other frame).
    """

    def __init__(self, alloc: Callable[[tuple[int, ...]], Any], limit: int) -> None:
        self._alloc = alloc
        self.limit = limit
        self._by_shape: dict[tuple[int, ...], list[LentBuffer]] = {}
        self._by_address: dict[int, LentBuffer] = {}
        self._lock = threading.Lock()
        self.lent = 0
        self.refused = 0

    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        """A ``shape`` ``uint8`` array to write a frame into, or ``None`` when every buffer of
        that size is still in use. Its content is undefined (an earlier frame)."""
        with self._lock:
            ring = self._by_shape.setdefault(tuple(shape), [])
            buf = next((b for b in ring if b.free()), None)
            if buf is None:
                if len(ring) >= self.limit:
                    self.refused += 1
                    return None
                buf = LentBuffer(self._alloc(tuple(shape)))
                ring.append(buf)
            arr: Frame = buf.tensor.numpy()  # a new array object over the same memory
            buf._ref = weakref.ref(arr)
            buf.uploaded = None
            self._by_address[arr.ctypes.data] = buf
            self.lent += 1
            return arr

    def owner(self, frame: Frame) -> LentBuffer | None:
        """The buffer ``frame`` is, when it is the very array :meth:`lend` handed out (not a
        view, not another array over the same memory), else ``None``."""
        with self._lock:
            buf = self._by_address.get(frame.ctypes.data)
            if buf is None or buf._ref is None or buf._ref() is not frame:
                return None
            return buf

    def __len__(self) -> int:
        return sum(len(ring) for ring in self._by_shape.values())


__all__ = ["HostBufferPool", "LentBuffer"]
