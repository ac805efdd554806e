"""A shorter GIL switch interval while threads hand frames to each other.

Python's default switch interval is 5 ms: a thread that wakes (its queue got an item, the device
finished) waits up to that long for a thread busy in Python code to let go of the GIL. A live
session (capture ‖ inference) and a video job (decode ‖ stage ‖ process ‖ convert ‖ encode) hand
over at every frame, so both run with a shorter interval while they are running. The interval is
process-wide: the first holder saves the old value, the last one gives it back, so nested and
overlapping holders (a batch's jobs, a live session beside a video job) never cut each other's
short or leave it changed.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders: list[float] = []
_saved: float | None = None


def hold_switch_interval(seconds: float) -> Callable[[], None]:
    """Set the switch interval to at most ``seconds`` until the returned function is called
    (any thread; calling it again does nothing). With several holders the shortest interval
    asked for applies; the value from before the first is restored after the last."""
    global _saved
    with _lock:
        if not _holders:
            _saved = sys.getswitchinterval()
        _holders.append(seconds)
        sys.setswitchinterval(min(min(_holders), _saved if _saved is not None else seconds))
    done = threading.Event()

    def release() -> None:
        global _saved
        with _lock:
            if done.is_set():
                return
            done.set()
            _holders.remove(seconds)
            if _holders:
                sys.setswitchinterval(min(min(_holders), _saved if _saved is not None else 1.0))
            elif _saved is not None:
                sys.setswitchinterval(_saved)
                _saved = None
    return release


@contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    """:func:`hold_switch_interval` for the duration of a ``with`` block."""
    release = hold_switch_interval(seconds)
    try:
        yield
    finally:
        release()


__all__ = ["hold_switch_interval", "switch_interval"]
