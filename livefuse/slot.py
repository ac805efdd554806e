"""LatestSlot: a one-frame hand-off between two threads that never queues.

The producer (capture) always wins: ``put`` replaces a frame the consumer has not taken yet and
counts it as dropped, so a slow consumer lowers the frame rate but never grows a backlog or the
latency.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SlotClosed(Exception):
    """Raised by :meth:`LatestSlot.get` once the slot is closed and empty."""


class LatestSlot(Generic[T]):
    """Holds at most one item; thread-safe.

    Args:
        on_drop: called (on the putting thread, outside the lock) with an item that is replaced
            before anyone took it, or discarded by :meth:`close` (e.g. to free its buffer).

    Attributes:
        dropped: items replaced before anyone took them.
        put_count: items put in total.
    """

    def __init__(self, on_drop: Callable[[T], None] | None = None) -> None:
        self._on_drop = on_drop
        self._cond = threading.Condition()
        self._item: T | None = None
        self._full = False
        self._closed = False
        self.dropped = 0
        self.put_count = 0

    def put(self, item: T) -> None:
        """Store ``item``, replacing (and counting as dropped) any item not yet taken.

        Ignored after :meth:`close`.
        """
        dropped: T | None = None
        with self._cond:
            if self._closed:
                dropped = item
            else:
                if self._full:
                    self.dropped += 1
                    dropped = self._item
                self._item, self._full = item, True
                self.put_count += 1
                self._cond.notify()
        if dropped is not None and self._on_drop is not None:
            self._on_drop(dropped)

    def get(self, timeout: float | None = None) -> T | None:
        """Take the item, waiting up to ``timeout`` s (forever when ``None``).

        Returns:
            The item, or ``None`` on timeout.

        Raises:
            SlotClosed: the slot was closed (an item left in it is discarded).
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self._full or self._closed, timeout):
                return None
            if self._closed:
                raise SlotClosed
            item, self._item, self._full = self._item, None, False
            return item

    def close(self) -> None:
        """Wake every waiting ``get`` with :class:`SlotClosed`; later ``put`` calls are ignored."""
        with self._cond:
            self._closed = True
            dropped = self._item if self._full else None
            self._item, self._full = None, False
            self._cond.notify_all()
        if dropped is not None and self._on_drop is not None:
            self._on_drop(dropped)

    @property
    def closed(self) -> bool:
        return self._closed


__all__ = ["LatestSlot", "SlotClosed"]
