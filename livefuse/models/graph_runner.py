"""Run one ONNX graph on either backend: onnxruntime (host arrays) or PyTorch (device tensors).

The mask and enhancer models (:mod:`livefuse.swap.masks`, :mod:`livefuse.swap.enhance`) keep
their pre- and post-processing apart from the inference, which is one call here:

* :class:`OrtGraph` opens the file with :func:`livefuse.models.runtime.create_session` and runs
  ``float32`` host arrays; a graph whose batch axis is fixed (``1``) runs a batch face by face.
* :class:`TorchGraph` runs an ``nn.Module`` that takes and returns the graph's tensors in the same
  order: :class:`livefuse.models.onnx_torch.OnnxModule` built from the file (the default), or any
  module with the same signature (the random-weight replicas in tests). Weights are cast to fp16 or
  bf16 where the precision policy picks it, inputs are cast to the module's dtype, outputs come back
  as float32. On CUDA each batch size can be captured once in a CUDA graph and replayed.

The precision guard of the swapper holds here too (:mod:`livefuse.precision`): an fp16 or bf16
output that is not finite is computed again in fp32 and the runner stays in fp32 from then on
("fp32 (fallback)"). On host arrays the check is immediate; on device tensors it can be deferred
to the frame's one synchronisation (:meth:`TorchGraph.verify`), like the swapper's.

:func:`read_io` reads the graph's input and output names and shapes (no weights are loaded), so the
callers need not guess how a third-party export named its tensors.
Both runners are used from one thread (the inference thread); they are not thread-safe.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from livefuse.errors import LivefuseError
from livefuse.models.graph_cache import GraphCache, current_stream, make_graph_cache
from livefuse.precision import probe_device, resolve_precision

log = logging.getLogger(__name__)

Dim = int | str | None
"""A graph dimension: a size, a symbolic name, or ``None`` (unknown)."""


class GraphError(LivefuseError):
    """A model file does not have the inputs or outputs a caller needs."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"model '{path}': {problem}")


@dataclass(frozen=True)
class GraphIO:
    """Names and shapes of a graph's inputs and outputs, in graph order."""

    input_names: tuple[str, ...]
    input_shapes: tuple[tuple[Dim, ...], ...]
    output_names: tuple[str, ...]
    output_shapes: tuple[tuple[Dim, ...], ...]

    @property
    def fixed_batch(self) -> int | None:
        """The first input's batch size when the graph fixes it (``1`` for most exports)."""
        dim = self.input_shapes[0][0] if self.input_shapes and self.input_shapes[0] else None
        return dim if isinstance(dim, int) and dim > 0 else None


def read_io(path: str | Path) -> GraphIO:
    """The graph's inputs (initializers excluded) and outputs, read without the weights.

    Raises:
        GraphError: the file is missing or not an ONNX model.
    """
    import onnx

    p = Path(path)
    try:
        proto = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ... on bad files
        raise GraphError(p, f"not a readable ONNX model ({exc})") from exc
    inits = {t.name for t in proto.graph.initializer}

    def shape(v: Any) -> tuple[Dim, ...]:
        dims = v.type.tensor_type.shape.dim
        return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in dims)

    ins = [v for v in proto.graph.input if v.name not in inits]
    outs = list(proto.graph.output)
    return GraphIO(tuple(v.name for v in ins), tuple(shape(v) for v in ins),
                   tuple(v.name for v in outs), tuple(shape(v) for v in outs))


class OrtGraph:
    """A graph on onnxruntime: float32 host arrays in, float32 host arrays out.

    Args:
        path: the .onnx file.
        providers: execution providers, in priority order (see
            :func:`livefuse.models.runtime.create_session`).
        threads: intra-op threads for the CPU provider.

    Raises:
        ProviderError: onnxruntime cannot open the file.
    """

    backend = "onnxruntime"

    def __init__(self, path: str | Path, providers: Sequence[str] = ("cpu",),
                 threads: int | None = None) -> None:
        from livefuse.models.runtime import create_session

        self.path = Path(path)
        self.session = create_session(self.path, providers, threads=threads)
        ins = self.session.session.get_inputs()
        outs = self.session.session.get_outputs()
        self.io = GraphIO(tuple(i.name for i in ins), tuple(tuple(i.shape) for i in ins),
                          tuple(o.name for o in outs), tuple(tuple(o.shape) for o in outs))
        self.precision = "fp32"

    @property
    def fallback(self) -> bool:
        return self.session.fallback

    @property
    def precision_in_use(self) -> str:
        return self.precision

    def verify(self) -> bool:
        """onnxruntime runs the file as it is: nothing is deferred, nothing to retry."""
        return True

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """All outputs for a batch ``inputs[0].shape[0]`` (other inputs are fed whole)."""
        n = int(inputs[0].shape[0])
        step = self.io.fixed_batch or n
        parts: list[list[np.ndarray]] = []
        for i in range(0, n, max(step, 1)):
            feeds = {name: np.ascontiguousarray(a[i:i + step] if k == 0 else a, np.float32)
                     for k, (name, a) in enumerate(zip(self.io.input_names, inputs, strict=False))}
            parts.append(self.session.run(feeds))
        if len(parts) == 1:
            return [np.asarray(o, np.float32) for o in parts[0]]
        return [np.concatenate([p[j] for p in parts]).astype(np.float32, copy=False)
                for j in range(len(parts[0]))]


def load_onnx_module(path: str | Path) -> Any:
    """The graph in ``path`` as a PyTorch module (:class:`livefuse.models.onnx_torch.OnnxModule`).

    Imported lazily: the torch path needs torch and that module, the onnxruntime path neither.

    Raises:
        GraphError: ``livefuse.models.onnx_torch`` is not available.
    """
    try:
        from livefuse.models.onnx_torch import (  # type: ignore[import-not-found,unused-ignore]
            OnnxModule,
        )
    except ImportError as exc:
        raise GraphError(path, "the torch backend runs ONNX files through "
                         "livefuse.models.onnx_torch, which is not available "
                         f"({exc}); use the onnxruntime backend") from exc
    return OnnxModule(str(path))


class TorchGraph:
    """A graph as a PyTorch module on one device in one precision.

    Args:
        module: an ``nn.Module`` whose ``forward(*inputs)`` returns a tensor or a tuple of tensors
            in the graph's output order; ``None`` builds :func:`load_onnx_module` from ``path``.
        path: the .onnx file (read for its :class:`GraphIO`; loaded when ``module`` is ``None``).
        io: the graph's names and shapes when there is no file (a replica module in tests).
        device: ``cpu`` or ``cuda[:N]``.
        precision: ``auto`` (fp16 on CUDA devices of compute capability >= 7.0, else fp32; see
            :func:`livefuse.precision.resolve_precision`), ``fp32``, ``fp16`` or ``bf16``.
        cuda_graph: capture each batch size's forward in a CUDA graph and replay it (CUDA only;
            the module must be capturable: static shapes, no host syncs).
        max_batch: largest batch one call runs at once (a fixed-batch graph: its batch size).
        graphs: a graph cache to use instead of ``cuda_graph``'s (tests: an
            :class:`~livefuse.models.graph_cache.EagerGraphs` one on the CPU).
    """

    backend = "torch"

    def __init__(self, module: Any = None, *, path: str | Path | None = None,
                 io: GraphIO | None = None, device: str = "cpu", precision: str = "auto",
                 cuda_graph: bool = False, max_batch: int | None = None,
                 graphs: GraphCache | None = None) -> None:
        import torch

        if module is None and path is None:
            raise ValueError("TorchGraph needs a module or a model path")
        self.path = Path(path) if path is not None else None
        self.io = io if io is not None else (read_io(self.path) if self.path else None)
        self.device = torch.device(device)
        self.precision, self.precision_reason = resolve_precision(precision, probe_device(device))
        mod = module if module is not None else load_onnx_module(self.path)  # type: ignore[arg-type]
        # the fp32 fallback needs the fp32 weights: reloaded from the file, or (a module given
        # without one) a host copy kept from now
        self._fp32_module = copy.deepcopy(mod).cpu() \
            if self.precision != "fp32" and module is not None else None
        fixed = self.io.fixed_batch if self.io is not None else None
        self.max_batch = max_batch or fixed or 8
        self._cuda_graph = cuda_graph
        self._given_graphs = graphs
        self.fallbacks = 0
        self._latched = False
        self._pending: list[tuple[Any, Any]] = []
        self._load(mod, self.precision, graphs)

    def _load(self, mod: Any, precision: str, graphs: GraphCache | None) -> None:
        import torch

        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
        # cast before the move: the device never holds an fp32 copy of an fp16 model
        self.module = mod.eval().to(self.dtype).to(self.device)
        self._graphs = graphs if graphs is not None else make_graph_cache(self.device,
                                                                          self._cuda_graph)
        self.cuda_graph = self._graphs is not None

    @property
    def fallback(self) -> bool:
        return False

    @property
    def graphs(self) -> GraphCache | None:
        """The graph cache its batches replay from, ``None`` when it runs eagerly."""
        return self._graphs

    @property
    def precision_in_use(self) -> str:
        """``fp16``, ``bf16``, ``fp32``, or ``fp32 (fallback)`` after the guard latched."""
        return "fp32 (fallback)" if self._latched else self.precision

    @property
    def guarded(self) -> bool:
        """Whether outputs are checked (a low precision still in use)."""
        return not self._latched and self.precision != "fp32"

    @property
    def generation(self) -> int:
        """Changes whenever :attr:`module` is replaced (a precision latch): a graph a caller
        captured around :meth:`forward` is valid for one generation only (the replaced module's
        weights are freed)."""
        return int(self.fallbacks)

    def forward(self, *xs: Any) -> tuple[Any, ...]:
        """The module now in use on ``xs`` (already in :attr:`dtype` on the device): no graph
        of this runner, no guard. For a caller that captures it inside a graph of its own,
        keyed by :attr:`generation`, and checks the outputs itself."""
        return self._forward(*xs)

    def _forward(self, *xs: Any) -> tuple[Any, ...]:
        import torch

        with torch.inference_mode():
            out = self.module(*xs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def _run_chunk(self, xs: tuple[Any, ...]) -> tuple[Any, ...]:
        if self._graphs is None:
            return self._forward(*xs)
        owner = self._graphs.owner(int(xs[0].shape[0]))
        static = tuple(owner.buffer(("input", k), tuple(x.shape), x.dtype)
                       for k, x in enumerate(xs))
        for st, x in zip(static, xs, strict=True):
            st.copy_(x)
        return owner.run("forward", self._forward, static, warmup=2)

    def _run_all(self, inputs: Sequence[Any]) -> list[Any]:
        import torch

        xs = tuple(torch.as_tensor(x).to(self.device, self.dtype) for x in inputs)
        n = int(xs[0].shape[0])
        step = max(self.max_batch, 1)
        chunks = [self._run_chunk((xs[0][i:i + step], *xs[1:])) for i in range(0, n, step)]
        if len(chunks) == 1:
            return [o.float() for o in chunks[0]]
        return [torch.cat([c[j] for c in chunks]).float() for j in range(len(chunks[0]))]

    def _latch(self, reason: str) -> None:
        self.fallbacks += 1
        name = self.path.name if self.path is not None else type(self.module).__name__
        log.warning("%s output of %s was %s: computing it again in fp32 and staying in fp32 from "
                    "now on (fallback #%d)", self.precision, name, reason, self.fallbacks)
        self._latched = True
        self._pending.clear()
        mod = self._fp32_module if self._fp32_module is not None else \
            load_onnx_module(self.path)  # type: ignore[arg-type]
        self._fp32_module = None
        self.module = None
        if self._given_graphs is not None:
            self._given_graphs.clear()  # its graphs ran the low-precision module
        self._load(mod, "fp32", self._given_graphs)

    def run_tensors(self, *inputs: Any, deferred: bool = False,
                    read_by_caller: bool = False) -> list[Any]:
        """Tensors (any device, any float dtype) → the graph's outputs, float32 on the device.

        The first input's axis 0 is the batch; larger batches than :attr:`max_batch` run in
        chunks. Other inputs are passed whole to every chunk. With a CUDA graph an output is
        overwritten by the next call with the same batch size.

        Args:
            deferred: (a low precision) do not wait for the guard's verdict: the caller calls
                :meth:`verify` after its next synchronisation and redoes the work if it says so.
                Otherwise a non-finite output is computed again in fp32 here (one host sync).
            read_by_caller: (a low precision) the caller brings the outputs to the host anyway
                and checks them there: on a non-finite one it runs the inputs again without
                this flag, which latches fp32 (no reduction on the device, no second read-back
                on every good run).
        """
        outs = self._run_all(inputs)
        if not self.guarded or read_by_caller:
            return outs
        if deferred:
            self._defer(outs)
            return outs
        if not all(bool(o.isfinite().all()) for o in outs):
            self._latch("non-finite")
            outs = self._run_all(inputs)
        return outs

    def _defer(self, outs: Sequence[Any]) -> None:
        import torch

        total = torch.stack([o.sum() for o in outs]).sum()  # NaN or inf iff an output has one
        cuda = total.device.type == "cuda"
        host = torch.empty((), dtype=total.dtype, pin_memory=cuda)
        host.copy_(total, non_blocking=cuda)
        done = None
        if cuda:
            done = torch.cuda.Event()
            done.record(current_stream(total.device))
        self._pending.append((host, done))
        if len(self._pending) > 16:  # nobody verifies: judge the oldest now rather than grow
            self.verify()

    def verify(self) -> bool:
        """The verdict on the deferred outputs since the last call: ``True`` when all were
        finite (or nothing was pending); ``False`` when one was not: the runner has latched to
        fp32 and that work must be done again."""
        pending, self._pending = self._pending, []
        bad = False
        for host, done in pending:
            if done is not None:
                done.synchronize()  # at once after the frame's download
            bad = bad or not math.isfinite(float(host))
        if bad:
            self._latch("non-finite")
        return not bad

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Host arrays in and out (float32), like :meth:`OrtGraph.run`; the guard checks them
        at once."""
        import torch

        outs = self.run_tensors(*(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs))
        return [o.cpu().numpy() for o in outs]


Runner = OrtGraph | TorchGraph


def make_runner(path: str | Path | None, backend: str = "torch", *, device: str = "cpu",
                precision: str = "auto", module: Any = None, io: GraphIO | None = None,
                providers: Sequence[str] | None = None, threads: int | None = None,
                cuda_graph: bool = False) -> Runner:
    """One of the two runners for ``path``.

    Args:
        backend: ``torch`` or ``onnxruntime``.
        module: (torch) a module to run instead of loading ``path`` through ``OnnxModule``.
        providers: (onnxruntime) default ``cuda`` then ``cpu`` on a CUDA device, else ``cpu``.

    Raises:
        ValueError: unknown backend, or neither a path nor (torch) a module.
        ProviderError / GraphError: the file cannot be opened.
    """
    if backend == "onnxruntime":
        if path is None:
            raise ValueError("the onnxruntime backend needs a model file")
        if providers is None:
            providers = ("cuda", "cpu") if device.startswith("cuda") else ("cpu",)
        return OrtGraph(path, providers, threads=threads)
    if backend == "torch":
        return TorchGraph(module, path=path, io=io, device=device, precision=precision,
                          cuda_graph=cuda_graph)
    raise ValueError(f"backend {backend!r} is not one of torch, onnxruntime")


__all__ = ["Dim", "GraphError", "GraphIO", "OrtGraph", "Runner", "TorchGraph", "load_onnx_module",
           "make_runner", "read_io"]
