"""CUDA graphs for the whole frame path, one recipe: the detector, the align and paste, the
swapper, the masks and the enhancer all capture and replay through a :class:`GraphCache`.

Why one helper (docs/BENCHMARKS.md, issue 17):

* **Ownership.** A graph reads and writes fixed addresses. Everything a graph touches (its
  static inputs, its outputs, the values it was built around, e.g. the detector's resize taps
  for one frame size) belongs to one :class:`Owner` (a frame size, a batch size), and an owner
  is evicted whole: a graph can never outlive a buffer it reads (the use-after-free that
  ``TorchScrfd`` had when its taps and its graphs were evicted by two different rules).
* **One memory pool.** Every graph of a device captures into one shared pool
  (``torch.cuda.graph_pool_handle``), so their intermediates share memory instead of each graph
  keeping a private pool. Outputs are copied (inside the graph) into buffers of the owner that
  live outside the pool, so a replay of one graph never overwrites another graph's results.
* **No stall on capture.** ``torch.cuda.graph`` empties the device and host caches before each
  capture (every later allocation then goes back to the driver); a capture here only waits for
  the device. A session captures its graphs up front anyway
  (:meth:`livefuse.engine.Engine.warm_up`), so the stream never meets a first use.
* **Testable without CUDA.** The bookkeeping (keys, owners, eviction, admission) is plain Python;
  the device part is a backend. :class:`EagerGraphs` is the CPU stand-in: a "graph" re-runs its
  function on the very tensors it was captured with, and an evicted owner's tensors are
  overwritten, as freed device memory is by its next user, so a stale graph shows up as a wrong
  answer in a CPU test.

Everything imports torch lazily. Used from one thread (the inference thread): graphs of one pool
replay one after another.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

Fn = Callable[..., tuple[Any, ...]]
"""A graph's function: static input tensors in, a tuple of output tensors out (may be empty)."""


class Graph(Protocol):
    """A captured function: :meth:`replay` recomputes :attr:`outputs` from the static inputs."""

    outputs: tuple[Any, ...]

    def replay(self) -> None: ...


class GraphBackend(Protocol):
    """Where graphs are captured: :class:`CudaGraphs` on a CUDA device, :class:`EagerGraphs` on
    the CPU (tests)."""

    device: Any

    def capture(self, fn: Fn, inputs: tuple[Any, ...], warm_inputs: tuple[Any, ...],
                warmup: int) -> Graph:
        """Run ``fn(*warm_inputs)`` ``warmup`` times, then capture ``fn(*inputs)``."""
        ...

    def staging(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A host tensor small parameters are written into before their copy up."""
        ...

    def copy_up(self, host: Any, dev: Any, token: Any = None) -> Any:
        """Queue the copy of ``host`` into ``dev`` without a host sync; returns a token whose
        ``synchronize()`` waits until ``host`` may be written again (``None``: at once). The
        previous copy's ``token``, already waited for, may be reused."""
        ...

    def free(self, tensors: Iterable[Any]) -> None:
        """An owner's tensors are dropped (the CPU stand-in overwrites them)."""
        ...


# ------------------------------------------------------------------------------------- CUDA

@dataclass
class _Shared:
    """One device's capture resources, shared by every :class:`CudaGraphs` of it."""

    pool: Any
    warm_stream: Any
    capture_stream: Any
    keeper: Any


_SHARED: dict[int, _Shared] = {}
_SHARED_LOCK = threading.Lock()
_CAPTURED = [0]


def cuda_captures() -> int:
    """CUDA graphs captured in this process so far, by every cache (benchmarks: none should be
    captured once a session has warmed up)."""
    return _CAPTURED[0]


def _shared(device: torch.device) -> _Shared:
    """The device's graph memory pool, its warm-up and capture streams (torch asks that graphs
    sharing a pool be captured on one stream), made once per process."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    with _SHARED_LOCK:
        found = _SHARED.get(index)
        if found is not None:
            return found
        with torch.cuda.device(index):
            pool = torch.cuda.graph_pool_handle()
            capture = torch.cuda.Stream()
            # A pool whose last graph died is released by the allocator and cannot be captured
            # into again under the same handle: a one-kernel graph keeps it alive for good.
            keep = torch.zeros(1, device=device)
            keeper = torch.cuda.CUDAGraph()
            torch.cuda.synchronize(device)
            with torch.cuda.stream(capture):
                keeper.capture_begin(pool=pool, capture_error_mode="thread_local")
                try:
                    keep.add_(1)
                finally:
                    keeper.capture_end()
            found = _SHARED[index] = _Shared(pool, torch.cuda.Stream(), capture, (keeper, keep))
        return found


class _CudaGraph:
    def __init__(self, graph: Any, outputs: tuple[Any, ...]) -> None:
        self.graph = graph
        self.outputs = outputs

    def replay(self) -> None:
        self.graph.replay()


class CudaGraphs:
    """The CUDA backend: one shared pool and capture stream per device (see the module
    docstring); ``torch.cuda.CUDAGraph`` captures in ``thread_local`` mode, so a live session's
    capture thread keeps uploading frames on its own stream while a graph is captured."""

    def __init__(self, device: Any) -> None:
        import torch

        dev = torch.device(device)
        if dev.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {dev}")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        self._shared = _shared(dev)

    def capture(self, fn: Fn, inputs: tuple[Any, ...], warm_inputs: tuple[Any, ...],
                warmup: int) -> Graph:
        import torch

        shared = self._shared
        current = torch.cuda.current_stream(self.device)
        shared.warm_stream.wait_stream(current)
        result: tuple[Any, ...] = ()
        with torch.cuda.stream(shared.warm_stream):
            for _ in range(max(warmup, 1)):
                result = fn(*warm_inputs)
        current.wait_stream(shared.warm_stream)
        # outputs live outside the shared pool: another graph's replay never overwrites them
        outputs = tuple(torch.empty_like(r) for r in result)
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device)
        with torch.cuda.stream(shared.capture_stream):
            graph.capture_begin(pool=shared.pool, capture_error_mode="thread_local")
            try:
                for out, r in zip(outputs, fn(*inputs), strict=True):
                    out.copy_(r)
            finally:
                graph.capture_end()
        _CAPTURED[0] += 1
        return _CudaGraph(graph, outputs)

    def staging(self, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        return torch.empty(shape, dtype=dtype, pin_memory=True)

    def copy_up(self, host: Any, dev: Any, token: Any = None) -> Any:
        import torch

        dev.copy_(host, non_blocking=True)
        # one event per parameter, recorded again (a new one each frame is host CPU too)
        done = token if token is not None else torch.cuda.Event()
        done.record(current_stream(self.device))
        return done

    def free(self, tensors: Iterable[Any]) -> None:
        pass


# --------------------------------------------------------------------------- CPU stand-in

class _EagerGraph:
    def __init__(self, fn: Fn, inputs: tuple[Any, ...], outputs: tuple[Any, ...]) -> None:
        self.fn, self.inputs, self.outputs = fn, inputs, outputs

    def replay(self) -> None:
        for out, r in zip(self.outputs, self.fn(*self.inputs), strict=True):
            out.copy_(r)


class EagerGraphs:
    """The CPU stand-in of :class:`CudaGraphs` (tests): the same static inputs, owned outputs
    and warm-up runs, and a replay re-runs the function on the tensors it was captured with.

    Freed tensors are overwritten with :attr:`poison` (freed device memory is overwritten by its
    next user), so a graph replayed after one of its buffers was evicted gives a wrong answer
    instead of a lucky right one. ``warmup`` caps the warm-up runs (nothing to plan on the CPU;
    ``None``: as many as asked).
    """

    def __init__(self, device: Any = "cpu", poison: float = 77.0, warmup: int | None = 1) -> None:
        import torch

        self.device = torch.device(device)
        self.poison = poison
        self.warmup = warmup
        self.captures = 0
        self.freed = 0

    def capture(self, fn: Fn, inputs: tuple[Any, ...], warm_inputs: tuple[Any, ...],
                warmup: int) -> Graph:
        import torch

        result: tuple[Any, ...] = ()
        runs = warmup if self.warmup is None else min(warmup, self.warmup)
        for _ in range(max(runs, 1)):
            result = fn(*warm_inputs)
        self.captures += 1
        # like a CUDA capture, nothing runs now: the caller's first replay computes
        return _EagerGraph(fn, inputs, tuple(torch.empty_like(r) for r in result))

    def staging(self, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        return torch.empty(shape, dtype=dtype)

    def copy_up(self, host: Any, dev: Any, token: Any = None) -> Any:
        dev.copy_(host)
        return None

    def free(self, tensors: Iterable[Any]) -> None:
        for t in tensors:
            t.fill_(int(self.poison) if not t.is_floating_point() else self.poison)
            self.freed += 1


# ------------------------------------------------------------------------------ bookkeeping

def _tensors_in(value: Any) -> list[Any]:
    """The tensors a kept value holds (a tensor, a sequence of them, or an object's fields)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    fields = getattr(value, "__dict__", None)
    if fields is None:
        return []
    return [t for v in fields.values() if isinstance(v, (torch.Tensor, tuple, list))
            for t in _tensors_in(v)]


class Owner:
    """Everything one key of a :class:`GraphCache` holds: static buffers, kept values (e.g. a
    frame size's resize taps), small parameter uploads and the graphs built on them. Evicted as
    one: :attr:`alive` is then ``False`` and every call raises."""

    def __init__(self, cache: GraphCache, key: Hashable) -> None:
        self.key = key
        self._cache = cache
        self._buffers: dict[Hashable, Any] = {}
        self._values: dict[Hashable, Any] = {}
        self._params: dict[Hashable, list[Any]] = {}
        self._graphs: dict[Hashable, Graph] = {}
        self.alive = True

    @property
    def device(self) -> Any:
        return self._cache.backend.device

    @property
    def graphs(self) -> tuple[Hashable, ...]:
        """Keys of the graphs captured so far."""
        return tuple(self._graphs)

    def _check(self) -> None:
        if not self.alive:
            raise RuntimeError(f"graph cache entry {self.key!r} was evicted")

    def buffer(self, name: Hashable, shape: Sequence[int], dtype: Any,
               memory_format: Any = None) -> Any:
        """A static device tensor of this owner (made once per name, shape, dtype and layout;
        contents undefined until written)."""
        import torch

        self._check()
        key = (name, tuple(int(s) for s in shape), dtype, memory_format)
        t = self._buffers.get(key)
        if t is None:
            t = torch.empty(tuple(shape), dtype=dtype, device=self.device)
            if memory_format is not None:
                t = t.contiguous(memory_format=memory_format)
            self._buffers[key] = t
        return t

    def value(self, name: Hashable, make: Callable[[], Any]) -> Any:
        """A value kept with this owner (made by ``make`` on first use); its tensors are freed
        with the owner."""
        self._check()
        if name not in self._values:
            self._values[name] = make()
        return self._values[name]

    def params(self, name: Hashable, values: np.ndarray) -> Any:
        """``values`` in a static device tensor of this owner, copied from a staging buffer
        without a host sync (a graph reads it at every replay)."""
        import torch

        self._check()
        arr = np.ascontiguousarray(values)
        entry = self._params.get(name)
        # the host copy's numpy view tells shape and dtype without a torch call per frame
        if entry is None or entry[3].shape != arr.shape or entry[3].dtype != arr.dtype:
            dtype = torch.from_numpy(arr[:0]).dtype
            backend = self._cache.backend
            host = backend.staging(arr.shape, dtype)
            entry = [host, torch.empty(arr.shape, dtype=dtype, device=self.device), None,
                     host.numpy()]
            self._params[name] = entry
        host, dev, token, host_np = entry
        if token is not None:
            token.synchronize()  # the last copy out of ``host`` is done (at once in practice)
        host_np[...] = arr
        entry[2] = self._cache.backend.copy_up(host, dev, token)
        return dev

    def run(self, key: Hashable, fn: Fn, inputs: Sequence[Any], *, mutates: int | None = None,
            warmup: int = 1) -> tuple[Any, ...]:
        """Replay ``fn(*inputs)`` as a graph, captured at the first call of ``key``.

        Args:
            fn: graph-capturable (static shapes, no host syncs); inputs are this owner's
                buffers (or tensors that outlive it), and so is every tensor ``fn`` closes over.
            mutates: index of an input ``fn`` writes in place: its warm-up runs write a scratch
                copy instead.
            warmup: eager runs before the capture (3 for networks: cuDNN plans its kernels).

        Returns:
            The graph's outputs: this owner's tensors, overwritten by the next replay of ``key``.
        """
        self._check()
        graph = self._graphs.get(key)
        if graph is None:
            ins = tuple(inputs)
            warm = list(ins)
            if mutates is not None:
                t = ins[mutates]
                warm[mutates] = self.buffer(("scratch", mutates), tuple(t.shape), t.dtype)
            graph = self._cache.backend.capture(fn, ins, tuple(warm), warmup)
            self._graphs[key] = graph
            self._cache.captures += 1
        graph.replay()
        return graph.outputs

    def _release(self) -> None:
        tensors: list[Any] = list(self._buffers.values())
        for v in self._values.values():
            tensors += _tensors_in(v)
        for host, dev, _, _ in self._params.values():
            tensors += [host, dev]
        for g in self._graphs.values():
            tensors += list(g.outputs)
        self._graphs.clear()
        self._buffers.clear()
        self._values.clear()
        self._params.clear()
        self.alive = False
        self._cache.backend.free(tensors)


class GraphCache:
    """Owners of graphs and static buffers, by key (a frame size, a batch size), least recently
    used evicted first.

    Args:
        backend: :class:`CudaGraphs` or :class:`EagerGraphs`.
        max_owners: keys kept; ``None`` = no limit (keys from a small fixed set, e.g. batch sizes).
        capture_after: a key gets an owner (and graphs) at its n-th :meth:`admit`; before that
            the caller runs eagerly. 2 keeps one-off sizes (a source photo, a rotated retry) from
            evicting the stream's own frame size and capturing graphs never replayed.
    """

    def __init__(self, backend: GraphBackend, max_owners: int | None = None,
                 capture_after: int = 1) -> None:
        self.backend = backend
        self.max_owners = max_owners
        self.capture_after = max(int(capture_after), 1)
        self._owners: OrderedDict[Hashable, Owner] = OrderedDict()
        self._uses: OrderedDict[Hashable, int] = OrderedDict()
        self.captures = 0
        self.evictions = 0

    @property
    def keys(self) -> tuple[Hashable, ...]:
        """Keys with an owner, least recently used first."""
        return tuple(self._owners)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._owners

    def admit(self, key: Hashable) -> bool:
        """Count a use of ``key``: ``True`` when it has (or now gets) an owner."""
        if key in self._owners:
            return True
        n = self._uses.pop(key, 0) + 1
        self._uses[key] = n
        while len(self._uses) > 64:
            self._uses.popitem(last=False)
        return n >= self.capture_after

    def owner(self, key: Hashable) -> Owner:
        """The owner of ``key`` (made on first use; the least recently used beyond
        ``max_owners`` is evicted with everything it holds)."""
        found = self._owners.get(key)
        if found is not None:
            self._owners.move_to_end(key)
            return found
        found = self._owners[key] = Owner(self, key)
        while self.max_owners is not None and len(self._owners) > self.max_owners:
            self.evict(next(iter(self._owners)))
        return found

    def evict(self, key: Hashable) -> None:
        """Drop ``key``'s owner: its graphs, buffers and values together."""
        found = self._owners.pop(key, None)
        if found is not None:
            found._release()
            self.evictions += 1

    def clear(self) -> None:
        for key in list(self._owners):
            self.evict(key)


def make_graph_cache(device: Any, enabled: bool, max_owners: int | None = None,
                     capture_after: int = 1) -> GraphCache | None:
    """A :class:`GraphCache` on :class:`CudaGraphs` when ``enabled`` and ``device`` is CUDA,
    else ``None`` (the caller runs eagerly)."""
    import torch

    if not enabled or torch.device(device).type != "cuda":
        return None
    return GraphCache(CudaGraphs(device), max_owners, capture_after)


# --------------------------------------------------------------------------------- buckets

def bucket(value: float, steps: Sequence[int]) -> int:
    """The smallest of ``steps`` (ascending) that is ≥ ``value``; past the last, ``value``
    rounded up to a multiple of the last step."""
    for s in steps:
        if value <= s:
            return int(s)
    top = int(steps[-1])
    return int(-(-int(np.ceil(value)) // top) * top)


def ladder(start: int, stop: int, ratio: float, multiple: int) -> tuple[int, ...]:
    """Sizes from ``start`` to at least ``stop``, each about ``ratio`` times the last, rounded
    up to a multiple of ``multiple``."""
    out = [int(start)]
    while out[-1] < stop:
        out.append(int(-(-int(np.ceil(out[-1] * ratio)) // multiple) * multiple))
    return tuple(out)


# ------------------------------------------------------------------------------ host waits

_WAIT = threading.local()


def current_stream(device: Any) -> Any:
    """``torch.cuda.current_stream(device)`` for the calling thread, made once per thread and
    stream: the public call resolves the device and builds a new ``Stream`` in Python each time
    (8 times a frame on the live path; 78 ms over 2,420 calls under cProfile on the H200's
    host, docs/BENCHMARKS.md §12.6), while the stream's raw id is one C call, compared here
    against the cached one (a ``torch.cuda.stream`` context or a graph capture changes it, and
    a new object is made).

    Args:
        device: a CUDA ``torch.device`` with an index, or the index itself.
    """
    import torch

    index = device if isinstance(device, int) else device.index
    raw = _raw_stream(index)
    streams = getattr(_WAIT, "streams", None)
    if streams is None:
        streams = _WAIT.streams = {}
    hit = streams.get(index)
    if hit is not None and hit[0] == raw and raw is not None:
        return hit[1]
    stream = torch.cuda.current_stream(index)
    streams[index] = (raw, stream)
    return stream


def _raw_stream(index: int) -> Any:
    """The current stream's ``(id, device index, device type)`` (torch's own binding, which
    ``torch.cuda.current_stream`` reads); ``None`` where this torch build lacks it."""
    import torch

    get = getattr(torch._C, "_cuda_getCurrentStream", None)
    return None if get is None else get(index)


def host_wait(device: Any) -> None:
    """Block the calling thread until the work queued on ``device``'s current stream is done,
    without spinning: a stream sync busy-waits a CPU core for the whole GPU time (the host CPU
    figure of docs/BENCHMARKS.md counted it), a blocking event sleeps in the driver."""
    mark = stream_mark(device)
    if mark is not None:
        mark.synchronize()


def stream_mark(device: Any) -> Any:
    """A point on ``device``'s current stream: a blocking ``torch.cuda.Event`` recorded there
    now (``mark.synchronize()`` then waits for the work queued before it, not for work queued
    after it); ``None`` off CUDA. One event per thread and device, reused: take the mark's wait
    before the next mark is made on the same thread."""
    import torch

    dev = device if isinstance(device, torch.device) else torch.device(device)
    if dev.type != "cuda":
        return None
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    events = getattr(_WAIT, "events", None)
    if events is None:
        events = _WAIT.events = {}
    ev = events.get(dev.index)
    if ev is None:
        ev = events[dev.index] = torch.cuda.Event(blocking=True)
    ev.record(current_stream(dev))
    return ev


__all__ = ["CudaGraphs", "EagerGraphs", "Graph", "GraphBackend", "GraphCache", "Owner", "bucket",
           "cuda_captures", "current_stream", "host_wait", "ladder", "make_graph_cache",
           "stream_mark"]
