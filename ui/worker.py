"""Work off the GUI thread, results back on it.

* :func:`run_async`: one independent job on Qt's thread pool (load a photo, read metrics, list
  cameras); ``done(result)`` or ``failed(exception)`` arrive on the GUI thread.
* :class:`SerialWorker`: jobs that must run one after another, in the order given, on one
  thread of their own: every call into the live session (start, stop, apply, a new source face)
  goes there, so the session has one controlling thread and the GUI thread never waits for a
  thread join, a camera switch or a face detection.

At quit, :func:`wait_for_jobs` and :meth:`SerialWorker.close` make sure no worker still runs
Python code that reports to Qt objects while they are being destroyed.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal


class _Signals(QObject):
    done = Signal(object)
    failed = Signal(object)


class _Job(QRunnable):
    def __init__(self, fn: Callable[[], Any], signals: _Signals) -> None:
        super().__init__()
        self.fn = fn
        self.signals = signals

    def run(self) -> None:
        try:
            result = self.fn()
        except BaseException as exc:  # every failure goes back to the GUI as a value
            self.signals.failed.emit(exc)
            return
        self.signals.done.emit(result)


_live: set[_Signals] = set()  # keeps each job's signal object alive until it has reported


def run_async(fn: Callable[[], Any], done: Callable[[Any], None],
              failed: Callable[[BaseException], None] | None = None,
              pool: QThreadPool | None = None) -> None:
    """Run ``fn()`` on ``pool`` (the global pool by default); call ``done`` or ``failed`` on the
    thread that called this (the GUI thread), through queued signals."""
    signals = _Signals()
    _live.add(signals)

    def _finish() -> None:
        _live.discard(signals)
        signals.deleteLater()

    signals.done.connect(done)
    if failed is not None:
        signals.failed.connect(failed)
    signals.done.connect(_finish)
    signals.failed.connect(_finish)
    (pool or QThreadPool.globalInstance()).start(_Job(fn, signals))


def wait_for_jobs(timeout_ms: int = 5000) -> bool:
    """Wait until the global pool's jobs have ended (GUI thread, at quit: a job still running
    while Qt tears down would report to destroyed objects). ``True`` when all ended."""
    return bool(QThreadPool.globalInstance().waitForDone(timeout_ms))


class SerialWorker(QObject):
    """One thread that runs submitted jobs one at a time, first in first out.

    :meth:`submit` and :meth:`close` are called on the GUI thread; the jobs run on the worker's
    thread; ``done``/``failed`` are called back on the GUI thread.

    Attributes:
        pending: jobs submitted whose callbacks have not run yet (GUI thread).
    """

    _finished = Signal(object)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], Any, Any] | None] = \
            queue.SimpleQueue()
        self._closed = False
        self.pending = 0
        self._finished.connect(self._deliver)  # queued: emitted on the worker thread
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any], done: Callable[[Any], None] | None = None,
               failed: Callable[[BaseException], None] | None = None) -> bool:
        """Queue ``fn``; ``False`` (and nothing queued) once closed."""
        if self._closed:
            return False
        self.pending += 1
        self._queue.put((fn, done, failed))
        return True

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, done, failed = item
            try:
                result, error = fn(), None
            except Exception as exc:  # reported to the GUI; the worker keeps serving
                result, error = None, exc
            self._finished.emit((done, failed, result, error))

    def _deliver(self, payload: tuple[Any, Any, Any, BaseException | None]) -> None:
        done, failed, result, error = payload
        self.pending -= 1
        if self._closed:  # quitting: the callbacks' widgets may be half torn down
            return
        if error is None:
            if done is not None:
                done(result)
        elif failed is not None:
            failed(error)

    def close(self, timeout: float = 5.0) -> bool:
        """Run what is queued, then end the thread; waits up to ``timeout`` s (GUI thread, at
        quit). Callbacks of jobs that end meanwhile are dropped. ``True`` when it ended."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()


__all__ = ["SerialWorker", "run_async", "wait_for_jobs"]
