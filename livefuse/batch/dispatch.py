"""The dispatcher: units to idle workers, results back as they finish, VRAM admission on the way.

It drives any :class:`WorkerPool` (Ray actors, or worker threads in this process) the same way:
each idle worker gets one unit at a time, so a unit never waits behind another one on a busy
worker while a second worker idles, and every hand-out is a moment to check the GPU.

VRAM admission: Ray counts GPUs, not the memory in use on them, so several engines on one GPU, or
another program on it, can fill it. Before a unit goes to a worker on a GPU, that GPU's memory is
read (the worker's ``torch.cuda.mem_get_info``, or an injected reader) and put through livefuse's
own guard, :func:`livefuse.swap.neural.check_vram`, at its 85 % limit: a GPU above it gets no new
work until it frees, while workers on other GPUs carry on. When every worker is held back and
none is busy, the dispatcher waits up to ``admission_timeout_s`` and then fails what is left with
the guard's message.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from livefuse.batch.plan import Unit
from livefuse.batch.worker import UnitResult, WorkerStats

GpuKey = tuple[str, str]
"""``(node, GPU id)``: one physical GPU of a cluster."""
VramReader = Callable[[GpuKey, str], "tuple[int, int] | None"]
"""``(gpu, worker) -> (free, total)`` bytes, or ``None`` when it cannot be read."""
ADMISSION_TIMEOUT_S = 120.0


class WorkerLost(Exception):
    """A worker died while running a unit (its process crashed or was killed)."""


class WorkerPool(Protocol):
    """Workers the dispatcher hands units to (:mod:`livefuse.batch.executor` builds them)."""

    description: str
    """For the summary: ``Ray (embedded local cluster): 4 workers, 0.25 GPU each``."""

    def names(self) -> list[str]: ...

    def prepare(self) -> None:
        """Build every worker's engine now.

        Raises:
            LivefuseError: the engine cannot be built (a missing model, no face in the source).
        """
        ...

    def submit(self, worker: str, unit: Unit) -> Hashable:
        """Start ``unit`` on ``worker`` (idle); returns a handle for :meth:`wait`."""
        ...

    def wait(self, handles: Sequence[Hashable], timeout: float) -> list[Hashable]:
        """The handles among ``handles`` that have finished, waiting up to ``timeout`` s."""
        ...

    def result(self, handle: Hashable) -> UnitResult:
        """A finished unit's result.

        Raises:
            WorkerLost: the worker died running it.
        """
        ...

    def gpu(self, worker: str) -> GpuKey | None:
        """The GPU ``worker`` runs on, or ``None`` for a CPU worker."""
        ...

    def mem_info(self, worker: str) -> tuple[int, int] | None:
        """``(free, total)`` bytes of ``worker``'s GPU (asked while the worker is idle)."""
        ...

    def frames_done(self) -> int:
        """Frames written so far by every worker."""
        ...

    def stats(self) -> list[WorkerStats]: ...

    def cancel(self) -> None:
        """Stop every worker now (Ctrl-C); units in flight are abandoned."""
        ...

    def close(self) -> None: ...


class Dispatcher:
    """Hands units to the pool's idle workers and reports results as they finish.

    Args:
        pool: the workers.
        vram_limit: the guard's fraction (``livefuse.swap.neural.VRAM_LIMIT``, 0.85).
        vram: reads a GPU's memory; by default the pool asks the worker.
        on_status: one line when a GPU is held back or released.
        poll_s: how long one wait for results lasts.
        admission_timeout_s: how long every worker may stay held back, with none busy, before
            the units left fail.
    """

    def __init__(self, pool: WorkerPool, vram_limit: float | None = None,
                 vram: VramReader | None = None,
                 on_status: Callable[[str], None] = lambda s: None, poll_s: float = 0.25,
                 admission_timeout_s: float = ADMISSION_TIMEOUT_S) -> None:
        from livefuse.swap.neural import VRAM_LIMIT

        self.pool = pool
        self.vram_limit = VRAM_LIMIT if vram_limit is None else vram_limit
        self.vram = vram or (lambda gpu, worker: pool.mem_info(worker))
        self.on_status, self.poll_s = on_status, poll_s
        self.admission_timeout_s = admission_timeout_s
        self.held: dict[GpuKey, str] = {}
        self.assigned: dict[str, list[Unit]] = {}

    def _full(self, workers: Sequence[str]) -> set[GpuKey]:
        """The GPUs among ``workers``' that are above the VRAM limit now."""
        from livefuse.swap.neural import VramError, check_vram

        full: set[GpuKey] = set()
        seen: set[GpuKey] = set()
        for w in workers:
            gpu = self.pool.gpu(w)
            if gpu is None or gpu in seen:
                continue
            seen.add(gpu)
            info = self.vram(gpu, w)
            if info is None:
                continue
            label = f"GPU {gpu[1]}" + ("" if gpu[0] == "local" else f" on node {gpu[0][:8]}")
            try:
                check_vram(label, self.vram_limit, mem_get_info=functools.partial(_same, info))
            except VramError as exc:
                full.add(gpu)
                msg = str(exc)
                if gpu not in self.held:
                    self.on_status(f"{msg}: no new work for it until it frees")
                self.held[gpu] = msg
                continue
            if gpu in self.held:
                del self.held[gpu]
                self.on_status(f"{label}: memory back under {self.vram_limit:.0%}; work resumes")
        return full

    def run(self, units: Sequence[Unit], on_result: Callable[[UnitResult], None],
            on_tick: Callable[[], None] = lambda: None) -> None:
        """Run every unit; ``on_result`` gets each result as it finishes (units the guard kept
        out, or whose worker died, get a failed result). Returns when all are done.

        Raises:
            KeyboardInterrupt: passed on (the caller cancels the pool).
        """
        pending = deque(units)
        idle = list(self.pool.names())
        busy: dict[Hashable, tuple[str, Unit]] = {}
        held_since: float | None = None
        while pending or busy:
            if pending and idle:
                full = self._full(idle)
                for w in [w for w in idle if self.pool.gpu(w) not in full]:
                    if not pending:
                        break
                    unit = pending.popleft()
                    busy[self.pool.submit(w, unit)] = (w, unit)
                    self.assigned.setdefault(w, []).append(unit)
                    idle.remove(w)
            if not busy:
                if not idle:  # every worker died
                    self._fail(pending, on_result, "every worker died; see the errors above")
                    return
                held_since = held_since or time.monotonic()
                if time.monotonic() - held_since > self.admission_timeout_s:
                    why = "; ".join(self.held.values()) or "GPU memory above the limit"
                    self._fail(pending, on_result, f"not run: {why} for "
                               f"{self.admission_timeout_s:.0f} s")
                    return
                on_tick()
                time.sleep(self.poll_s)
                continue
            held_since = None
            for h in self.pool.wait(list(busy), self.poll_s):
                w, unit = busy.pop(h)
                try:
                    result = self.pool.result(h)
                except WorkerLost as exc:
                    result = UnitResult(unit, ok=False, worker=w,
                                        message=f"'{unit.item.input}': worker {w} died: {exc}")
                else:
                    idle.append(w)
                on_result(result)
            on_tick()

    @staticmethod
    def _fail(units: deque[Unit], on_result: Callable[[UnitResult], None], why: str) -> None:
        while units:
            unit = units.popleft()
            on_result(UnitResult(unit, ok=False, message=f"'{unit.item.input}': {why}"))


def _same(info: tuple[int, int]) -> tuple[int, int]:
    return info


def worker_names(n: int) -> list[str]:
    return [f"w{i}" for i in range(n)]


__all__ = ["ADMISSION_TIMEOUT_S", "Dispatcher", "GpuKey", "VramReader", "WorkerLost",
           "WorkerPool", "worker_names"]
