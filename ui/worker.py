"""Run a callable on Qt's thread pool and get its result back on the GUI thread.

The GUI never loads files, detects faces or opens devices itself: it hands the job here and gets
``done(result)`` or ``failed(exception)`` through a queued signal.
"""

from __future__ import annotations

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


__all__ = ["run_async"]
