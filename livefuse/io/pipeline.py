"""A chain of stages on their own threads with bounded queues between them (design.md §8).

A video job is decode ‖ stage/upload ‖ ``Engine.process`` ‖ convert ‖ encode: each stage works on
frame n while the next one works on frame n-1, so the job runs at the pace of its slowest stage
instead of the sum of all of them. The queues are bounded (back-pressure: a fast decoder waits
for a slow encoder instead of filling memory) and FIFO, so every item arrives at the end in the
order it left the source: the output is the one the same stages give called one after another
(:func:`run_chain` with ``threaded=False``), which is how the tests compare the two.

Items wrapped in :class:`Passthrough` (a video job's audio packets) skip the stages and reach the
sink in their place in the order.

Stopping: the first error in any stage, or an exception in the calling thread (Ctrl-C, or the
SIGTERM the CLI turns into one), stops every thread: each waits on its queue with a short timeout
and checks a shared stop flag, so none is left blocked on a full or empty queue. The error is
raised in the calling thread once every thread has ended.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from livefuse.gil import hold_switch_interval

_POLL_S = 0.05  # how often a blocked thread looks at the stop flag
CHAIN_SWITCH_INTERVAL_S = 0.0005
"""The GIL switch interval while a threaded chain runs (Python's default is 5 ms): each stage
wakes when its queue gets an item and would otherwise wait up to 5 ms for a stage busy in Python
to yield (:mod:`livefuse.gil`)."""


@dataclass(frozen=True)
class Passthrough:
    """An item that goes from the source to the sink untouched by the stages."""

    payload: Any


@dataclass(frozen=True)
class Stage:
    """One step of a chain.

    Attributes:
        name: shown in timings and error messages (``decode``, ``process``...).
        fn: ``item -> item``; called on the stage's own thread, one item at a time, in order.
        depth: capacity of the queue in front of this stage (its input).
    """

    name: str
    fn: Callable[[Any], Any]
    depth: int = 4
    ahead: Callable[[Any, Any], Any] | None = None
    """``(item, following) -> item``, called instead of ``fn`` on a threaded chain:
    ``following`` is the item this stage gets next (not a :class:`Passthrough`) when it is
    already in the stage's queue, else ``None`` (it is never waited for). The processing stage
    starts the next frame's detection with it. The serial chain calls ``fn``."""


@dataclass
class ChainStats:
    """Seconds each stage spent working (not waiting), by stage name (``source``, the stages,
    ``sink``): the busiest stage is the chain's ceiling."""

    busy_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0

    def add(self, name: str, seconds: float) -> None:
        self.busy_s[name] = self.busy_s.get(name, 0.0) + seconds


class Cancelled(Exception):
    """The chain's ``cancel`` event was set (another thread asked the job to stop)."""


class _Stopped(Exception):
    """Internal: the chain was stopped while this thread waited."""


class _End:
    """Internal: the source is exhausted."""


_END = _End()


class _Chain:
    def __init__(self, stages: Sequence[Stage], sink_depth: int) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.failed_stage = ""
        self._lock = threading.Lock()
        depths = [s.depth for s in stages] + [sink_depth]
        self.queues: list[queue.Queue[Any]] = [queue.Queue(maxsize=max(1, d)) for d in depths]

    def fail(self, stage: str, exc: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error, self.failed_stage = exc, stage
        self.stop.set()

    def put(self, q: queue.Queue[Any], item: Any) -> None:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                q.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def get(self, q: queue.Queue[Any]) -> Any:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                continue


def run_chain(source: Iterable[Any], stages: Sequence[Stage], sink: Callable[[Any], None], *,
              threaded: bool = True, sink_depth: int = 4, stats: ChainStats | None = None,
              name: str = "livefuse", cancel: threading.Event | None = None) -> None:
    """Drive every item of ``source`` through ``stages`` into ``sink``.

    Args:
        source: iterated on its own thread (``threaded``) or the caller's.
        stages: applied in order to every item that is not a :class:`Passthrough`.
        sink: receives every item, in the source's order, on its own thread.
        threaded: ``False`` runs everything on the calling thread, one item at a time (the
            serial reference the threaded chain must equal).
        sink_depth: capacity of the queue in front of the sink.
        stats: filled with each stage's busy time.
        name: thread name prefix.
        cancel: set from any thread to stop the chain; it then raises :class:`Cancelled`.

    Raises:
        Cancelled: ``cancel`` was set before the source was exhausted.
        BaseException: the first error raised by the source, a stage or the sink (re-raised
            here, on the calling thread), or whatever interrupted the calling thread.
    """
    stats = stats if stats is not None else ChainStats()
    t_start = time.perf_counter()
    try:
        if not threaded:
            _serial(source, stages, sink, stats, cancel)
        else:
            _threaded(source, stages, sink, sink_depth, stats, name, cancel)
    finally:
        stats.wall_s = time.perf_counter() - t_start


def _timed(stats: ChainStats, name: str, fn: Callable[[Any], Any], item: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return fn(item)
    finally:
        stats.add(name, time.perf_counter() - t0)


def _serial(source: Iterable[Any], stages: Sequence[Stage], sink: Callable[[Any], None],
            stats: ChainStats, cancel: threading.Event | None) -> None:
    it = iter(source)
    while True:
        if cancel is not None and cancel.is_set():
            raise Cancelled
        t0 = time.perf_counter()
        item = next(it, _END)
        stats.add("source", time.perf_counter() - t0)
        if item is _END:
            return
        if not isinstance(item, Passthrough):
            for stage in stages:
                item = _timed(stats, stage.name, stage.fn, item)
        _timed(stats, "sink", sink, item)


def _threaded(source: Iterable[Any], stages: Sequence[Stage], sink: Callable[[Any], None],
              sink_depth: int, stats: ChainStats, name: str,
              cancel: threading.Event | None) -> None:
    chain = _Chain(stages, sink_depth)
    lock = threading.Lock()
    release_switch = hold_switch_interval(CHAIN_SWITCH_INTERVAL_S)

    def add(stage: str, seconds: float) -> None:
        with lock:
            stats.add(stage, seconds)

    def run_source() -> None:
        q = chain.queues[0]
        try:
            it = iter(source)
            while True:
                t0 = time.perf_counter()
                item = next(it, _END)
                add("source", time.perf_counter() - t0)
                chain.put(q, item)
                if item is _END:
                    return
        except _Stopped:
            return
        except BaseException as exc:
            chain.fail("source", exc)

    def run_stage(k: int) -> None:
        stage, q_in, q_out = stages[k], chain.queues[k], chain.queues[k + 1]
        held: deque[Any] = deque()  # taken from q_in to look ahead, in their order
        try:
            while True:
                item = held.popleft() if held else chain.get(q_in)
                if item is not _END and not isinstance(item, Passthrough):
                    t0 = time.perf_counter()
                    if stage.ahead is not None:
                        item = stage.ahead(item, _following(q_in, held))
                    else:
                        item = stage.fn(item)
                    add(stage.name, time.perf_counter() - t0)
                chain.put(q_out, item)
                if item is _END:
                    return
        except _Stopped:
            return
        except BaseException as exc:
            chain.fail(stage.name, exc)

    def run_sink() -> None:
        q = chain.queues[-1]
        try:
            while True:
                item = chain.get(q)
                if item is _END:
                    return
                t0 = time.perf_counter()
                sink(item)
                add("sink", time.perf_counter() - t0)
        except _Stopped:
            return
        except BaseException as exc:
            chain.fail("sink", exc)

    threads = [_ChainThread(target=run_source, name=f"{name}-source", daemon=True)]
    threads += [_ChainThread(target=run_stage, args=(k,), name=f"{name}-{s.name}",
                             daemon=True) for k, s in enumerate(stages)]
    threads.append(_ChainThread(target=run_sink, name=f"{name}-sink", daemon=True))
    try:
        for t in threads:  # inside the try: Ctrl-C while starting stops those already started
            t.start()
        for t in threads:
            # a join with a timeout in a loop: the calling thread stays responsive to signals
            while t.is_alive():
                t.join(0.2)
                if cancel is not None and cancel.is_set():
                    raise Cancelled
                if chain.stop.is_set():
                    break
    except BaseException as exc:
        chain.fail("caller", exc)
        raise
    finally:
        try:
            _join_started(threads, chain)
        finally:
            release_switch()
    if chain.error is not None:
        raise chain.error


def _following(q: queue.Queue[Any], held: deque[Any]) -> Any:
    """The next item of the stream that is not a :class:`Passthrough`, if it is already in
    ``held`` or ``q`` (what is taken from ``q`` to find it is appended to ``held``, in order);
    ``None`` when it has not arrived yet or the stream ends first."""
    for item in held:
        if not isinstance(item, Passthrough):
            return None if item is _END else item
    while True:
        try:
            item = q.get_nowait()
        except queue.Empty:
            return None
        held.append(item)
        if not isinstance(item, Passthrough):
            return None if item is _END else item


class _ChainThread(threading.Thread):
    """A chain's thread, with an event set when its function has returned.

    :func:`_join_started` waits on that event, not on ``join``/``is_alive``: on CPython 3.11 a
    Ctrl-C that lands inside ``Thread.join`` releases the joined thread's own state lock and marks
    it stopped while it still runs (``_wait_for_tstate_lock``'s bpo-45274 branch finds the lock
    held, by the running thread, and takes that as its own), so the chain returned with a thread
    still decoding (seen once on CI's 2 cores).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.ended.set()


def _join_started(threads: Sequence[_ChainThread], chain: _Chain) -> None:
    """Wait until every started thread of the chain has returned from its function, even
    through a Ctrl-C that lands while they wind down (a signal raised out of one join left the
    others running past the call; the first such interrupt is raised once all have ended)."""
    late: BaseException | None = None
    pending = list(threads)
    while pending:
        # the test as well as the wait inside the try: a signal can land on either
        try:
            if pending[0].ident is not None and not pending[0].ended.is_set():
                pending[0].ended.wait()
            else:
                pending.pop(0)
        except BaseException as exc:
            chain.fail("caller", exc)
            late = late or exc
    for t in threads:  # each has returned: what is left of a thread ends in microseconds
        if t.ident is not None:
            try:
                t.join(1.0)
            except BaseException as exc:
                late = late or exc
    if late is not None:
        raise late


__all__ = ["Cancelled", "ChainStats", "Passthrough", "Stage", "run_chain"]
