"""TorchRunner: the PyTorch inswapper port on one device in one precision, batched.

Per frame the port runs on every face of the frame as one batch: ``(N, 3, 128, 128)`` aligned
crops and the source's style vectors (computed once per source face and broadcast over the
batch). On CUDA each batch size gets its own captured CUDA graph (batch 1-8; larger batches are
split), so a frame with 4 faces is one graph replay, not four. The graphs go through
:class:`~livefuse.models.graph_cache.GraphCache` (one entry per batch size: its static input and
its graph), in the device's shared graph memory pool.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from livefuse.models.graph_cache import GraphCache, make_graph_cache
from livefuse.types import FloatArray

if TYPE_CHECKING:
    from livefuse.models.inswapper_torch import LoadedInswapper

log = logging.getLogger(__name__)

MAX_GRAPH_BATCH = 8
"""Largest batch one CUDA graph takes; more faces in a frame run in several replays."""


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    import torch

    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def debug_stage(stage: str, arr: Any) -> None:
    """Log an array's dtype, shape (and CUDA memory) at DEBUG."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    mem = ""
    dev = getattr(arr, "device", None)
    if dev is not None and getattr(dev, "type", "") == "cuda":
        import torch

        mem = f", cuda allocated {torch.cuda.memory_allocated(dev) / 2**20:.1f} MiB"
    log.debug("%s: %s %s%s", stage, getattr(arr, "dtype", type(arr)),
              tuple(getattr(arr, "shape", ())), mem)


class TorchRunner:
    """The PyTorch port on one device in one precision.

    Args:
        loaded: the port as read by :func:`~livefuse.models.inswapper_torch.load_inswapper_onnx`
            (copied, the original is not changed).
        device: ``cpu`` or ``cuda[:N]``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        fp16_mode: ``half`` casts the weights (half the memory); ``autocast`` keeps fp32 weights and
            runs convs in fp16 through ``torch.autocast``.
        tf32: allow TF32 tensor cores for fp32 convs and matmuls (``False`` = fp32 strict).
        channels_last: NHWC memory format (faster tensor-core convs).
        cuda_graph: capture the forward into a CUDA graph per batch size and replay it (CUDA only).
        compile_mode: ``torch.compile`` mode (e.g. ``reduce-overhead``), or ``None``.
        fused: layers to run through their fused formulations (a subset of
            :data:`~livefuse.models.fused_ops.FUSED_OPS`; see
            :meth:`~livefuse.models.inswapper_torch.InSwapper128.enable_fused`).
        graphs: a graph cache to use instead of ``cuda_graph``'s (tests: an
            :class:`~livefuse.models.graph_cache.EagerGraphs` one on the CPU).

    Not thread-safe: one inference thread.
    """

    def __init__(self, loaded: LoadedInswapper, device: str = "cpu", precision: str = "fp32", *,
                 fp16_mode: Literal["half", "autocast"] = "half", tf32: bool = False,
                 channels_last: bool = False, cuda_graph: bool = False,
                 compile_mode: str | None = None, fused: frozenset[str] = frozenset(),
                 graphs: GraphCache | None = None) -> None:
        import torch

        self.precision = precision
        self.device = torch.device(device)
        self.tf32 = tf32
        self.low = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
        self.autocast = self.low is not None and fp16_mode == "autocast"
        model = copy.deepcopy(loaded.model).eval()
        if fused:
            model.enable_fused(fused)
        self.fused = frozenset(fused)
        self.in_dtype = torch.float32
        if self.low is not None and not self.autocast:
            # cast before the move, so the device never holds an fp32 copy (peak memory)
            model = model.to(self.low)
            self.in_dtype = self.low
        model = model.to(self.device)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        if channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.model = model
        # The style vectors depend on the source latent only: computed once per source (see
        # InSwapper128.styles), the per-frame graph is convs and norms.
        self._fn: Callable[..., Any] = model.forward_styled
        if compile_mode:
            self._fn = torch.compile(model.forward_styled, mode=compile_mode)
        self._styles: Any = None
        self._styles_key: tuple[Any, ...] | None = None
        self._graphs = graphs if graphs is not None else make_graph_cache(self.device, cuda_graph)
        self.cuda_graph = self._graphs is not None

    def _contexts(self) -> Any:
        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        stack.enter_context(_tf32(self.tf32))
        if self.autocast:
            assert self.low is not None
            stack.enter_context(torch.autocast(self.device.type, dtype=self.low))
        return stack

    def _forward(self, target: Any, styles: Any) -> Any:
        with self._contexts():
            return self._fn(target, styles.expand(-1, target.shape[0], -1))

    def styles_for(self, latent: Any) -> Any:
        """The model's style vectors ``(12, 1, 2C)`` for ``latent`` ``(1, 512)``, recomputed only
        when the latent changes (a CPU latent is compared by value, a device tensor by identity
        and version). They are kept in one buffer, updated in place: captured graphs read it."""
        import torch

        if latent.device.type == "cpu":
            key: tuple[Any, ...] = ("cpu", latent.numpy().tobytes())
        else:
            key = ("dev", latent.data_ptr(), latent._version, tuple(latent.shape))
        if key != self._styles_key:
            with self._contexts():
                styles = self.model.styles(latent.to(self.device, self.in_dtype))
            if self._styles is not None and self._styles.shape == styles.shape:
                self._styles.copy_(styles)
            else:
                self._styles = torch.empty_like(styles).copy_(styles)
            self._styles_key = key
        return self._styles

    def _convert(self, target: Any) -> Any:
        return target.to(self.device, self.in_dtype).contiguous(memory_format=self.memory_format)

    def infer_tensor(self, target: Any, latent: Any) -> Any:
        """Tensors: ``(N, 3, 128, 128)`` float RGB in [0, 1] (any device) and ``(1, 512)`` latent
        → ``(N, 3, 128, 128)`` output on the runner's device, in its dtype.

        With a CUDA graph the returned tensor is the graph's output for that batch size: copy it
        before the next call with the same batch size.
        """
        import torch

        styles = self.styles_for(latent)
        debug_stage("swap input", target)
        n = int(target.shape[0])
        if self._graphs is None:
            out = self._forward(self._convert(target), styles)
        elif n > 1 and self.low is None and not self.tf32:
            # fp32 strict: cuDNN's kernels for a batch of 4 took 418 ms on an H200 against
            # 14 ms for one face (docs/BENCHMARKS.md §7), so faces run one at a time
            out = torch.cat([self.infer_tensor(target[i:i + 1], latent).clone()
                             for i in range(n)])
        elif n > MAX_GRAPH_BATCH:
            parts = [self.infer_tensor(target[i:i + MAX_GRAPH_BATCH], latent).clone()
                     for i in range(0, n, MAX_GRAPH_BATCH)]
            out = torch.cat(parts)
        else:
            owner = self._graphs.owner(n)
            st = owner.buffer("target", (n, *target.shape[1:]), self.in_dtype,
                              memory_format=self.memory_format)
            # one copy kernel moves, casts and re-lays the input: at batch 1 every launch counts
            st.copy_(target)
            out = owner.run("swap", lambda x: (self._forward(x, styles),), (st,), warmup=3)[0]
        debug_stage("swap output", out)
        return out

    def infer(self, target: FloatArray, latent: FloatArray) -> FloatArray:
        """Host arrays: ``(N, 3, 128, 128)`` float32 and ``(1, 512)`` → ``(N, 3, 128, 128)``
        float32."""
        import torch

        out = self.infer_tensor(torch.from_numpy(np.ascontiguousarray(target)),
                                torch.from_numpy(np.ascontiguousarray(latent)))
        result: FloatArray = out.float().cpu().numpy()
        return result


__all__ = ["MAX_GRAPH_BATCH", "TorchRunner", "debug_stage"]
