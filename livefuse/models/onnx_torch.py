"""Run an ONNX image model with PyTorch ops: a small structural graph runner.

:class:`OnnxModule` reads an ``.onnx`` file, keeps its initializers as torch buffers (they follow
``.to(device, dtype)``) and executes the graph's nodes in topological order with torch ops. It
exists because the maintained converter (onnx2torch) needs torchvision, which does not import
beside the CPU torch our CI uses (design.md §5, §7).

How a call runs
    The first call with a given set of input shapes *plans* the graph for those shapes: every
    value that depends only on initializers, ``Constant`` nodes and input *shapes* (the
    ``Shape → Gather → Unsqueeze → Concat → Reshape`` chains of exported models, Resize
    sizes, Slice bounds, ...) is evaluated once on the CPU, and the shape of every other value is
    worked out on torch's ``meta`` device. What is left is a list of tensor ops whose non-tensor
    arguments are python ints and floats: ``forward`` does no host work beyond dispatching them,
    never reads a value back (no host sync) and can be captured in a CUDA graph once each input
    shape has been seen (warm up first). Nodes whose inputs are all constants are folded once at
    load time. Plans are kept per input-shape signature.

Precision
    Float tensors of every width in the file compute in the module's float dtype: float32 after
    loading, float16 after ``.half()``, bfloat16 after ``.to(torch.bfloat16)``. ``Cast`` to any
    float type yields that dtype; integer and bool tensors stay exact. Where float16 would
    overflow or lose the result, these ops compute internally in float32 and cast back:
    BatchNormalization with non-constant statistics, InstanceNormalization,
    LayerNormalization, GroupNormalization, Softmax, LogSoftmax, ReduceMean, ReduceSum,
    ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSumExp, ReduceProd. BatchNormalization with
    constant statistics (every exported eval-mode network) becomes one per-channel
    ``x * a + b`` whose ``a`` and ``b`` are computed in float64 when planned. Exp, Pow and the
    rest run in the module dtype: a value beyond 65504 is ``inf`` in float16, as on any fp16
    runtime.

Errors
    Every problem with the file is an :class:`OnnxModelError` naming the file; a node the runner
    cannot execute (unsupported op, attribute, data-dependent shape) is an :class:`OnnxOpError`
    naming the file, the node and its op. Both are found when loading or planning, not halfway
    through a later call.

Thread safety: planning (the first call with a new input shape) adds to the module and briefly
switches its cast dtype, so it must not overlap any other call: warm every input shape up from one
thread first. Planned calls only read the module and may then run concurrently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from livefuse.errors import ConfigError, LivefuseError

__all__ = ["PRECISIONS", "SUPPORTED_OPS", "OnnxModelError", "OnnxModule", "OnnxOpError",
           "TorchRuntime", "precision_dtype", "to_device"]

HOST_COPY_MAX = 4096
"""Float constants with at most this many elements are also kept on the host, so that shape
computations reading them fold at plan time; integer and bool constants always are."""


class OnnxModelError(LivefuseError):
    """An ONNX file is missing, unreadable or not a graph this runner can execute."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"ONNX model '{path}': {problem}")


class OnnxOpError(OnnxModelError):
    """One node of the graph cannot be executed (unsupported op or attribute, a shape that
    depends on the data, inputs that do not fit)."""

    def __init__(self, path: str | Path, node: str, op: str, problem: str) -> None:
        self.node = node
        self.op = op
        super().__init__(path, f"node '{node}' ({op}): {problem}")


# ----------------------------------------------------------------------------------- dtypes

PRECISIONS: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16,
                                      "bf16": torch.bfloat16}


def precision_dtype(precision: str) -> torch.dtype:
    """``fp32`` / ``fp16`` / ``bf16`` → the torch dtype.

    Raises:
        ConfigError: another name.
    """
    try:
        return PRECISIONS[precision]
    except KeyError:
        raise ConfigError(f"precision={precision!r} is not one of "
                          f"{', '.join(PRECISIONS)}") from None


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device`` without a host sync: a CPU tensor goes to a CUDA device through
    pinned memory and an asynchronous copy (a copy from pageable memory waits for the stream)."""
    if t.device == device:
        return t
    if t.device.type == "cpu" and device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@dataclass(frozen=True)
class TorchRuntime:
    """Where a torch model runs, for ``livefuse doctor`` and logs.

    Attributes:
        device: e.g. ``cuda:0`` or ``cpu``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        cuda_graph: whether calls replay a captured CUDA graph.
    """

    device: str
    precision: str
    cuda_graph: bool = False

    def __str__(self) -> str:
        return f"{self.device} {self.precision}" + (", CUDA graph" if self.cuda_graph else "")


_ONNX_DTYPES: dict[int, torch.dtype] = {
    1: torch.float32, 2: torch.uint8, 3: torch.int8, 5: torch.int16, 6: torch.int32,
    7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64, 16: torch.bfloat16,
}
"""onnx ``TensorProto.DataType`` → torch dtype (onnx/onnx.proto3)."""

PLAN_DTYPE = torch.float32
"""The float dtype of every float value while a graph is planned and folded."""


def _torch_dtype(code: int) -> torch.dtype | None:
    dt = _ONNX_DTYPES.get(int(code))
    if dt is not None and dt.is_floating_point:
        return PLAN_DTYPE
    return dt


class _State:
    """What the op closures read at run time: the float dtype (module's or the plan dtype)."""

    def __init__(self) -> None:
        self.float_dtype: torch.dtype = PLAN_DTYPE


# ----------------------------------------------------------------------------------- graph model

@dataclass
class _Node:
    label: str
    op: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]


@dataclass
class _Val:
    """A value while planning: its shape and dtype (a meta tensor) and, when it is known before
    the data arrives, its CPU value."""

    meta: torch.Tensor
    host: torch.Tensor | None = None


@dataclass
class _Impl:
    """A node made executable.

    ``fn(*[inputs[i] for i in uses], *extra)`` computes the node's outputs (a tensor or a tuple);
    ``extra`` are constants the builder derived from host-known inputs (they become buffers).
    """

    fn: Callable[..., Any]
    uses: tuple[int, ...]
    extra: tuple[torch.Tensor, ...] = ()


class _Ctx:
    """One node being built: its attributes, its opset and a way to fail with a clear error."""

    def __init__(self, path: Path, node: _Node, opset: int, state: _State) -> None:
        self.path = path
        self.node = node
        self.opset = opset
        self.state = state

    def attr(self, key: str, default: Any = None) -> Any:
        return self.node.attrs.get(key, default)

    def fail(self, problem: str) -> OnnxOpError:
        return OnnxOpError(self.path, self.node.label, self.node.op, problem)

    def host(self, v: _Val | None, what: str) -> torch.Tensor | None:
        if v is None:
            return None
        if v.host is None:
            raise self.fail(f"{what} is computed from the data at run time; only values that "
                            "fold to constants (initializers, shapes) are supported here")
        return v.host

    def ints(self, v: _Val | None, what: str) -> list[int] | None:
        h = self.host(v, what)
        return None if h is None else [int(i) for i in h.reshape(-1).tolist()]

    def floats(self, v: _Val | None, what: str) -> list[float] | None:
        h = self.host(v, what)
        return None if h is None else [float(i) for i in h.reshape(-1).tolist()]

    def float_dtype(self) -> torch.dtype:
        return self.state.float_dtype


_Builder = Callable[[_Ctx, list["_Val | None"]], _Impl]
_OPS: dict[str, _Builder] = {}


def _op(*names: str) -> Callable[[_Builder], _Builder]:
    def register(fn: _Builder) -> _Builder:
        for n in names:
            _OPS[n] = fn
        return fn
    return register


def _at(ins: list[_Val | None], i: int) -> _Val | None:
    return ins[i] if i < len(ins) else None


def _need(c: _Ctx, ins: list[_Val | None], i: int) -> _Val:
    v = _at(ins, i)
    if v is None:
        raise c.fail(f"input #{i} is required")
    return v


def _shape(v: _Val) -> list[int]:
    return [int(s) for s in v.meta.shape]


def _axis(c: _Ctx, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise c.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


# ----------------------------------------------------------------------------------- elementwise

def _is_float(v: _Val) -> bool:
    return v.meta.dtype.is_floating_point


_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "Relu": F.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Exp": torch.exp,
    "Log": torch.log, "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal, "Neg": torch.neg,
    "Abs": torch.abs, "Floor": torch.floor, "Ceil": torch.ceil, "Round": torch.round,
    "Erf": torch.erf, "Sin": torch.sin, "Cos": torch.cos, "Sign": torch.sign,
    "Softplus": F.softplus, "Softsign": F.softsign, "HardSwish": F.hardswish, "Mish": F.mish,
    "Not": torch.logical_not, "IsNaN": torch.isnan, "IsInf": torch.isinf,
    "Identity": lambda x: x,
}


@_op(*_UNARY)
def _unary(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    _need(c, ins, 0)
    return _Impl(_UNARY[c.node.op], (0,))


@_op("Dropout")
def _dropout(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    # inference: identity, and an all-true mask when the graph asks for one
    if len(c.node.outputs) > 1 and c.node.outputs[1]:
        return _Impl(lambda x: (x, torch.ones_like(x, dtype=torch.bool)), (0,))
    return _Impl(lambda x: x, (0,))


@_op("LeakyRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid", "Gelu")
def _activation(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    op = c.node.op
    if op == "LeakyRelu":
        a = float(c.attr("alpha", 0.01))
        return _Impl(lambda x: F.leaky_relu(x, a), (0,))
    if op == "Elu":
        a = float(c.attr("alpha", 1.0))
        return _Impl(lambda x: F.elu(x, a), (0,))
    if op == "Celu":
        a = float(c.attr("alpha", 1.0))
        return _Impl(lambda x: F.celu(x, a), (0,))
    if op == "Selu":
        # defaults from the ONNX operator spec
        a = float(c.attr("alpha", 1.67326319217681884765625))
        g = float(c.attr("gamma", 1.05070102214813232421875))
        return _Impl(lambda x: g * torch.where(x > 0, x, a * (torch.exp(x) - 1)), (0,))
    if op == "ThresholdedRelu":
        a = float(c.attr("alpha", 1.0))
        return _Impl(lambda x: torch.where(x > a, x, torch.zeros_like(x)), (0,))
    if op == "HardSigmoid":
        a, b = float(c.attr("alpha", 0.2)), float(c.attr("beta", 0.5))
        return _Impl(lambda x: torch.clamp(x * a + b, 0.0, 1.0), (0,))
    approx = c.attr("approximate", "none")
    return _Impl(lambda x: F.gelu(x, approximate=approx), (0,))


@_op("PRelu")
def _prelu(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    # ONNX broadcasts the slope against X numpy-style (an exported nn.PReLU has (C, 1, 1))
    return _Impl(lambda x, s: torch.where(x >= 0, x, x * s), (0, 1))


@_op("Clip")
def _clip(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    if c.opset < 11:
        lo, hi = float(c.attr("min", -math.inf)), float(c.attr("max", math.inf))
        return _Impl(lambda x: torch.clamp(x, lo, hi), (0,))
    bounds = [_at(ins, 1), _at(ins, 2)]
    if all(b is None or b.host is not None for b in bounds):
        lo_v, hi_v = (None if b is None else b.host.reshape(()).item()  # type: ignore[union-attr]
                      for b in bounds)
        return _Impl(lambda x: torch.clamp(x, lo_v, hi_v), (0,))
    uses = tuple(i for i in (0, 1, 2) if _at(ins, i) is not None)
    has_lo, has_hi = bounds[0] is not None, bounds[1] is not None

    def clip(x: torch.Tensor, *b: torch.Tensor) -> torch.Tensor:
        lo_t = b[0] if has_lo else None
        hi_t = b[-1] if has_hi else None
        return torch.clamp(x, lo_t, hi_t)
    return _Impl(clip, uses)


def _int_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.div(a, b, rounding_mode="trunc")  # ONNX integer Div truncates toward zero


_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul,
    "Equal": torch.eq, "Greater": torch.gt, "Less": torch.lt, "GreaterOrEqual": torch.ge,
    "LessOrEqual": torch.le, "And": torch.logical_and, "Or": torch.logical_or,
    "Xor": torch.logical_xor,
}


@_op(*_BINARY, "Div", "Pow", "Mod")
def _binary(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    a, b = _need(c, ins, 0), _need(c, ins, 1)
    op = c.node.op
    if op == "Div":
        return _Impl(torch.div if _is_float(a) else _int_div, (0, 1))
    if op == "Mod":
        fmod = int(c.attr("fmod", 0))
        return _Impl(torch.fmod if fmod else torch.remainder, (0, 1))
    if op == "Pow":
        if b.host is not None and b.host.numel() == 1 and _is_float(a):
            e = float(b.host.reshape(()).item())
            if e == 2.0:
                return _Impl(lambda x: x * x, (0,))
            return _Impl(lambda x: torch.pow(x, e), (0,))
        if a.meta.dtype != b.meta.dtype:
            return _Impl(lambda x, y: torch.pow(x, y).to(x.dtype), (0, 1))
        return _Impl(torch.pow, (0, 1))
    return _Impl(_BINARY[op], (0, 1))


@_op("Max", "Min", "Sum", "Mean")
def _variadic(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    n = len(ins)
    op = c.node.op
    pairs: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add, "Mean": torch.add}
    pair = pairs[op]

    def run(*xs: torch.Tensor) -> torch.Tensor:
        out = xs[0]
        for x in xs[1:]:
            out = pair(out, x)
        return out / n if op == "Mean" else out
    return _Impl(run, tuple(range(n)))


@_op("Where")
def _where(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    return _Impl(torch.where, (0, 1, 2))


# ----------------------------------------------------------------------------------- conv / pool

def _spatial_pads(c: _Ctx, in_sizes: Sequence[int], kernel: Sequence[int],
                  strides: Sequence[int], dilations: Sequence[int]) -> list[int]:
    """``pads`` (begin..., end...) for the node, resolving ``auto_pad``."""
    k = len(kernel)
    auto = c.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(c.attr("pads", [0] * (2 * k)))
        if len(pads) != 2 * k:
            raise c.fail(f"pads {pads} do not match {k} spatial dims")
        return pads
    if auto == "VALID":
        return [0] * (2 * k)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise c.fail(f"auto_pad '{auto}' is not supported")
    begin, end = [], []
    for size, ker, s, d in zip(in_sizes, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max((out - 1) * s + (ker - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def _torch_pad(pads: Sequence[int]) -> list[int]:
    """ONNX (begin..., end...) over the trailing spatial dims → F.pad order (last dim first)."""
    k = len(pads) // 2
    out: list[int] = []
    for i in reversed(range(k)):
        out += [pads[i], pads[i + k]]
    return out


_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@_op("Conv")
def _conv(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x, w = _need(c, ins, 0), _need(c, ins, 1)
    k = len(_shape(w)) - 2
    if k not in _CONV:
        raise c.fail(f"{k}-d convolution is not supported")
    kernel = list(c.attr("kernel_shape", _shape(w)[2:]))
    strides = list(c.attr("strides", [1] * k))
    dil = list(c.attr("dilations", [1] * k))
    groups = int(c.attr("group", 1))
    pads = _spatial_pads(c, _shape(x)[2:], kernel, strides, dil)
    conv = _CONV[k]
    sym = pads[:k] == pads[k:]
    padding = pads[:k] if sym else [0] * k
    pre = None if sym else _torch_pad(pads)
    has_b = _at(ins, 2) is not None

    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        if pre is not None:
            x = F.pad(x, pre)
        return conv(x, w, b, strides, padding, dil, groups)
    return _Impl(run, (0, 1, 2) if has_b else (0, 1))


@_op("ConvTranspose")
def _conv_transpose(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x, w = _need(c, ins, 0), _need(c, ins, 1)
    k = len(_shape(w)) - 2
    if k not in _CONV_T:
        raise c.fail(f"{k}-d transposed convolution is not supported")
    kernel = list(c.attr("kernel_shape", _shape(w)[2:]))
    strides = list(c.attr("strides", [1] * k))
    dil = list(c.attr("dilations", [1] * k))
    groups = int(c.attr("group", 1))
    out_pad = list(c.attr("output_padding", [0] * k))
    in_sizes = _shape(x)[2:]
    full = [s * (i - 1) + op + (ker - 1) * d + 1
            for i, s, op, ker, d in zip(in_sizes, strides, out_pad, kernel, dil, strict=True)]
    auto = c.attr("auto_pad", "NOTSET")
    out_shape = c.attr("output_shape")
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(out_shape)[-k:] if out_shape is not None else \
            [i * s for i, s in zip(in_sizes, strides, strict=True)]
        total = [f - t for f, t in zip(full, target, strict=True)]
        if any(t < 0 for t in total):
            raise c.fail(f"output_shape {target} is larger than the full output {full}")
        if auto == "SAME_UPPER":
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            pads = [t - t // 2 for t in total] + [t // 2 for t in total]
    elif auto == "VALID":
        pads = [0] * (2 * k)
    else:
        pads = list(c.attr("pads", [0] * (2 * k)))
    conv = _CONV_T[k]
    sym = pads[:k] == pads[k:]
    has_b = _at(ins, 2) is not None
    crop = tuple(slice(None) for _ in range(2)) + tuple(
        slice(b, f - e) for b, e, f in zip(pads[:k], pads[k:], full, strict=True))

    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        if sym:
            return conv(x, w, b, strides, pads[:k], out_pad, groups, dil)
        return conv(x, w, b, strides, 0, out_pad, groups, dil)[crop]
    return _Impl(run, (0, 1, 2) if has_b else (0, 1))


_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


@_op("MaxPool", "AveragePool")
def _pool(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    if len(c.node.outputs) > 1 and c.node.outputs[1]:
        raise c.fail("the Indices output is not supported")
    kernel = list(c.attr("kernel_shape"))
    k = len(kernel)
    if k not in _MAX_POOL:
        raise c.fail(f"{k}-d pooling is not supported")
    strides = list(c.attr("strides", [1] * k))
    dil = list(c.attr("dilations", [1] * k))
    pads = _spatial_pads(c, _shape(x)[2:], kernel, strides, dil)
    ceil = bool(c.attr("ceil_mode", 0))
    sym = pads[:k] == pads[k:] and all(p <= kk // 2 for p, kk in zip(pads[:k], kernel,
                                                                       strict=True))
    if c.node.op == "MaxPool":
        mp = _MAX_POOL[k]
        if int(c.attr("storage_order", 0)):
            raise c.fail("storage_order=1 is not supported")
        if sym:
            return _Impl(lambda t: mp(t, kernel, strides, pads[:k], dil, ceil), (0,))
        pre = _torch_pad(pads)
        return _Impl(lambda t: mp(F.pad(t, pre, value=-math.inf), kernel, strides, 0, dil,
                                  ceil), (0,))
    if any(d != 1 for d in dil):
        raise c.fail("dilated AveragePool is not supported")
    ap = _AVG_POOL[k]
    include = bool(c.attr("count_include_pad", 0))
    if sym or not any(pads):
        return _Impl(lambda t: ap(t, kernel, strides, pads[:k], ceil, include), (0,))
    pre = _torch_pad(pads)
    if include:
        return _Impl(lambda t: ap(F.pad(t, pre), kernel, strides, 0, ceil, True), (0,))

    def avg_excluding_pads(t: torch.Tensor) -> torch.Tensor:
        # window mean over real pixels only: pooled data over pooled validity
        ones = torch.ones_like(t[:1, :1])
        num = ap(F.pad(t, pre), kernel, strides, 0, ceil, True)
        den = ap(F.pad(ones, pre), kernel, strides, 0, ceil, True)
        return num / den
    return _Impl(avg_excluding_pads, (0,))


@_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    dims = tuple(range(2, len(_shape(_need(c, ins, 0)))))
    if c.node.op == "GlobalAveragePool":
        return _Impl(lambda t: t.mean(dim=dims, keepdim=True), (0,))
    return _Impl(lambda t: t.amax(dim=dims, keepdim=True), (0,))


# ----------------------------------------------------------------------------------- norms

def _channel_shape(rank: int, n: int) -> list[int]:
    return [n] + [1] * max(rank - 2, 0)


@_op("BatchNormalization")
def _batch_norm(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    if int(c.attr("training_mode", 0)) or any(o for o in c.node.outputs[1:]):
        raise c.fail("training mode (running statistics outputs) is not supported")
    eps = float(c.attr("epsilon", 1e-5))
    rank = len(_shape(x))
    params = [_need(c, ins, i) for i in (1, 2, 3, 4)]
    if all(p.host is not None for p in params):
        g, b, m, v = (p.host.double() for p in params)  # type: ignore[union-attr]
        a = g / torch.sqrt(v + eps)
        shift = b - m * a
        cs = _channel_shape(rank, a.numel())
        return _Impl(lambda t, s, h: t * s + h, (0,),
                     (a.float().reshape(cs), shift.float().reshape(cs)))

    def bn32(t: torch.Tensor, g: torch.Tensor, b: torch.Tensor, m: torch.Tensor,
             v: torch.Tensor) -> torch.Tensor:
        y = F.batch_norm(t.float(), m.float(), v.float(), g.float(), b.float(), False, 0.0, eps)
        return y.to(t.dtype)
    return _Impl(bn32, (0, 1, 2, 3, 4))


@_op("InstanceNormalization")
def _instance_norm(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    eps = float(c.attr("epsilon", 1e-5))

    def run(t: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = F.instance_norm(t.float(), weight=g.float(), bias=b.float(), eps=eps)
        return y.to(t.dtype)
    return _Impl(run, (0, 1, 2))


@_op("LayerNormalization")
def _layer_norm(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    if any(o for o in c.node.outputs[1:]):
        raise c.fail("the Mean / InvStdDev outputs are not supported")
    rank = len(_shape(x))
    axis = _axis(c, int(c.attr("axis", -1)), rank)
    eps = float(c.attr("epsilon", 1e-5))
    norm_shape = _shape(x)[axis:]
    has_b = _at(ins, 2) is not None

    def run(t: torch.Tensor, g: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        y = F.layer_norm(t.float(), norm_shape, eps=eps) * g.float()
        if b is not None:
            y = y + b.float()
        return y.to(t.dtype)
    return _Impl(run, (0, 1, 2) if has_b else (0, 1))


@_op("GroupNormalization")
def _group_norm(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    groups = int(c.attr("num_groups"))
    eps = float(c.attr("epsilon", 1e-5))
    shape = _shape(x)
    channels = shape[1]
    per_group = _shape(_need(c, ins, 1))[0] == groups and groups != channels
    cs = _channel_shape(len(shape), channels)

    def run(t: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = F.group_norm(t.float(), groups, eps=eps)
        if per_group:  # opset 18 scales per group, opset 21 per channel
            g = g.repeat_interleave(channels // groups)
            b = b.repeat_interleave(channels // groups)
        return (y * g.float().reshape(cs) + b.float().reshape(cs)).to(t.dtype)
    return _Impl(run, (0, 1, 2))


@_op("Softmax", "LogSoftmax")
def _softmax(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    shape = _shape(x)
    rank = len(shape)
    fn = torch.softmax if c.node.op == "Softmax" else torch.log_softmax
    if c.opset >= 13:
        axis = _axis(c, int(c.attr("axis", -1)), rank)
        return _Impl(lambda t: fn(t, axis, dtype=torch.float32).to(t.dtype), (0,))
    # opsets < 13 normalise over the input flattened to 2-d at `axis`
    axis = _axis(c, int(c.attr("axis", 1)), rank)
    rows = math.prod(shape[:axis])
    return _Impl(lambda t: fn(t.reshape(rows, -1), 1, dtype=torch.float32)
                 .to(t.dtype).reshape(shape), (0,))


# ----------------------------------------------------------------------------------- reductions

def _reduce_axes(c: _Ctx, ins: list[_Val | None], rank: int) -> list[int] | None:
    """The axes to reduce (``None`` = all, ``[]`` = no-op), from the attribute or input."""
    from_input = c.opset >= 18 or (c.node.op == "ReduceSum" and c.opset >= 13)
    axes = c.ints(_at(ins, 1), "axes") if from_input else c.attr("axes")
    if not axes:
        return [] if int(c.attr("noop_with_empty_axes", 0)) else None
    return sorted(_axis(c, int(a), rank) for a in axes)


_ACCUMULATING = {"ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2",
                 "ReduceLogSumExp", "ReduceProd"}


@_op("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
     "ReduceSumSquare", "ReduceLogSumExp")
def _reduce(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    rank = len(_shape(x))
    axes = _reduce_axes(c, ins, rank)
    keep = bool(c.attr("keepdims", 1))
    if axes == []:
        return _Impl(lambda t: t, (0,))
    dims = tuple(range(rank)) if axes is None else tuple(axes)
    op = c.node.op
    upcast = op in _ACCUMULATING

    def core(t: torch.Tensor) -> torch.Tensor:
        if op == "ReduceMean":
            return t.mean(dim=dims, keepdim=keep)
        if op == "ReduceSum":
            return t.sum(dim=dims, keepdim=keep)
        if op == "ReduceMax":
            return t.amax(dim=dims, keepdim=keep)
        if op == "ReduceMin":
            return t.amin(dim=dims, keepdim=keep)
        if op == "ReduceSumSquare":
            return (t * t).sum(dim=dims, keepdim=keep)
        if op == "ReduceL1":
            return t.abs().sum(dim=dims, keepdim=keep)
        if op == "ReduceL2":
            return torch.sqrt((t * t).sum(dim=dims, keepdim=keep))
        if op == "ReduceLogSumExp":
            return torch.logsumexp(t, dim=dims, keepdim=keep)
        out = t
        for d in sorted(dims, reverse=True):
            out = out.prod(dim=d, keepdim=keep)
        return out

    def run(t: torch.Tensor) -> torch.Tensor:
        if upcast and t.dtype in (torch.float16, torch.bfloat16):
            return core(t.float()).to(t.dtype)
        return core(t)
    return _Impl(run, (0,))


@_op("ArgMax", "ArgMin")
def _arg(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    axis = _axis(c, int(c.attr("axis", 0)), len(_shape(x)))
    keep = bool(c.attr("keepdims", 1))
    last = bool(c.attr("select_last_index", 0))
    fn = torch.argmax if c.node.op == "ArgMax" else torch.argmin
    n = _shape(x)[axis]
    if last:
        return _Impl(lambda t: (n - 1) - fn(t.flip(axis), dim=axis, keepdim=keep), (0,))
    return _Impl(lambda t: fn(t, dim=axis, keepdim=keep), (0,))


@_op("TopK")
def _topk(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    k = (c.ints(_at(ins, 1), "K") or [0])[0] if c.opset >= 10 else int(c.attr("k"))
    axis = _axis(c, int(c.attr("axis", -1)), len(_shape(x)))
    largest = bool(c.attr("largest", 1))
    return _Impl(lambda t: tuple(torch.topk(t, k, dim=axis, largest=largest, sorted=True)), (0,))


@_op("CumSum")
def _cumsum(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    axis = _axis(c, (c.ints(_need(c, ins, 1), "axis") or [0])[0], len(_shape(x)))
    excl, rev = bool(c.attr("exclusive", 0)), bool(c.attr("reverse", 0))

    def run(t: torch.Tensor) -> torch.Tensor:
        if rev:
            t = t.flip(axis)
        out = torch.cumsum(t, dim=axis)
        if excl:
            out = out - t
        return out.flip(axis) if rev else out
    return _Impl(run, (0,))


# ----------------------------------------------------------------------------------- matmul

@_op("MatMul")
def _matmul(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    return _Impl(torch.matmul, (0, 1))


@_op("Gemm")
def _gemm(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    alpha, beta = float(c.attr("alpha", 1.0)), float(c.attr("beta", 1.0))
    ta, tb = bool(c.attr("transA", 0)), bool(c.attr("transB", 0))
    cv = _at(ins, 2)
    if tb and not ta and alpha == 1.0 and beta == 1.0 and (cv is None or cv.meta.dim() == 1):
        # the layout of every exported nn.Linear: one fused kernel
        return _Impl(F.linear, (0, 1, 2) if cv is not None else (0, 1))

    def run(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        a = a.t() if ta else a
        b = b.t() if tb else b
        if bias is None:
            return a @ b if alpha == 1.0 else alpha * (a @ b)
        return torch.addmm(bias, a, b, beta=beta, alpha=alpha)
    return _Impl(run, (0, 1, 2) if cv is not None else (0, 1))


@_op("Einsum")
def _einsum(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    eq = str(c.attr("equation")).replace(" ", "")
    return _Impl(lambda *xs: torch.einsum(eq, *xs), tuple(range(len(ins))))


# ----------------------------------------------------------------------------------- shapes

@_op("Shape")
def _shape_op(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    shape = _shape(_need(c, ins, 0))
    start, end = c.attr("start", 0), c.attr("end")
    val = torch.tensor(shape[start:end] if end is not None else shape[start:], dtype=torch.int64)
    return _Impl(lambda: val, ())


@_op("Size")
def _size(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    val = torch.tensor(math.prod(_shape(_need(c, ins, 0))), dtype=torch.int64)
    return _Impl(lambda: val, ())


def _attr_tensor(c: _Ctx) -> torch.Tensor:
    a = c.node.attrs
    if "value" in a:
        return a["value"]
    if "value_float" in a:
        return torch.tensor(float(a["value_float"]), dtype=PLAN_DTYPE)
    if "value_floats" in a:
        return torch.tensor([float(v) for v in a["value_floats"]], dtype=PLAN_DTYPE)
    if "value_int" in a:
        return torch.tensor(int(a["value_int"]), dtype=torch.int64)
    if "value_ints" in a:
        return torch.tensor([int(v) for v in a["value_ints"]], dtype=torch.int64)
    raise c.fail(f"only tensor, float(s) and int(s) values are supported, not {sorted(a)}")


@_op("Constant")
def _constant(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    val = _attr_tensor(c)
    return _Impl(lambda: val, ())


@_op("ConstantOfShape")
def _constant_of_shape(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    shape = c.ints(_need(c, ins, 0), "the shape") or []
    fill = c.node.attrs.get("value")
    if fill is None:
        fill = torch.zeros(1, dtype=PLAN_DTYPE)
    val = torch.full(shape, fill.reshape(-1)[0].item(), dtype=fill.dtype)
    return _Impl(lambda: val, ())


@_op("Range")
def _range(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    vals = [c.host(_need(c, ins, i), n) for i, n in enumerate(("start", "limit", "delta"))]
    start, limit, delta = (v.reshape(()).item() for v in vals if v is not None)
    dtype = _need(c, ins, 0).meta.dtype
    val = torch.arange(start, limit, delta, dtype=dtype)
    return _Impl(lambda: val, ())


@_op("Cast", "CastLike")
def _cast(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    target = _torch_dtype(int(c.attr("to"))) if c.node.op == "Cast" else \
        _need(c, ins, 1).meta.dtype
    if target is None:
        raise c.fail(f"cast to ONNX type {c.attr('to')} is not supported")
    if target.is_floating_point:
        return _Impl(lambda t: t.to(c.state.float_dtype), (0,))
    return _Impl(lambda t: t.to(target), (0,))


@_op("Reshape")
def _reshape(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    if c.opset < 5:
        target = list(c.attr("shape"))
    else:
        target = c.ints(_need(c, ins, 1), "the target shape") or []
    if not int(c.attr("allowzero", 0)):
        src = _shape(x)
        target = [src[i] if d == 0 else d for i, d in enumerate(target)]
    return _Impl(lambda t: t.reshape(target), (0,))


@_op("Flatten")
def _flatten(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    shape = _shape(_need(c, ins, 0))
    axis = int(c.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    target = [math.prod(shape[:axis]), math.prod(shape[axis:])]
    return _Impl(lambda t: t.reshape(target), (0,))


@_op("Squeeze", "Unsqueeze")
def _squeeze(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    shape = _shape(_need(c, ins, 0))
    axes = c.ints(_at(ins, 1), "axes") if c.opset >= 13 else c.attr("axes")
    if c.node.op == "Squeeze":
        if axes:
            drop = {_axis(c, a, len(shape)) for a in axes}
            if any(shape[a] != 1 for a in drop):
                raise c.fail(f"cannot squeeze axes {sorted(drop)} of shape {shape}")
        else:
            drop = {i for i, s in enumerate(shape) if s == 1}
        target = [s for i, s in enumerate(shape) if i not in drop]
    else:
        if not axes:
            raise c.fail("axes are required")
        rank = len(shape) + len(axes)
        add = {_axis(c, a, rank) for a in axes}
        it = iter(shape)
        target = [1 if i in add else next(it) for i in range(rank)]
    return _Impl(lambda t: t.reshape(target), (0,))


@_op("Transpose")
def _transpose(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    rank = len(_shape(_need(c, ins, 0)))
    perm = list(c.attr("perm", list(reversed(range(rank)))))
    return _Impl(lambda t: t.permute(perm), (0,))


@_op("Concat")
def _concat(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    present = [i for i, v in enumerate(ins) if v is not None]
    rank = len(_shape(ins[present[0]]))  # type: ignore[arg-type]
    axis = _axis(c, int(c.attr("axis")), rank)
    return _Impl(lambda *ts: torch.cat(ts, dim=axis), tuple(present))


@_op("Split")
def _split(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    shape = _shape(_need(c, ins, 0))
    axis = _axis(c, int(c.attr("axis", 0)), len(shape))
    sizes = c.ints(_at(ins, 1), "split") if c.opset >= 13 else c.attr("split")
    n = len(c.node.outputs)
    if not sizes:
        n = int(c.attr("num_outputs", n))
        step = -(-shape[axis] // n)
        sizes = [min(step, shape[axis] - i * step) for i in range(n)]
    sizes = [int(s) for s in sizes]
    return _Impl(lambda t: tuple(torch.split(t, sizes, dim=axis)), (0,))


@_op("Slice")
def _slice(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    shape = _shape(_need(c, ins, 0))
    if c.opset < 10:
        starts, ends = list(c.attr("starts")), list(c.attr("ends"))
        axes = c.attr("axes")
        steps = None
    else:
        starts = c.ints(_need(c, ins, 1), "starts") or []
        ends = c.ints(_need(c, ins, 2), "ends") or []
        axes = c.ints(_at(ins, 3), "axes")
        steps = c.ints(_at(ins, 4), "steps")
    axes = list(axes) if axes else list(range(len(starts)))
    steps = list(steps) if steps else [1] * len(starts)
    index: list[slice] = [slice(None)] * len(shape)
    flips: list[tuple[int, torch.Tensor]] = []
    for a, st, en, sp in zip(axes, starts, ends, steps, strict=True):
        a = _axis(c, a, len(shape))
        dim = shape[a]
        if sp == 0:
            raise c.fail("a step of 0")
        st = st + dim if st < 0 else st
        en = en + dim if en < 0 else en
        if sp > 0:
            index[a] = slice(min(max(st, 0), dim), min(max(en, 0), dim), sp)
        else:
            st, en = min(max(st, 0), dim - 1), min(max(en, -1), dim - 1)
            flips.append((a, torch.arange(st, en, sp, dtype=torch.int64)))
    key = tuple(index)
    if not flips:
        return _Impl(lambda t: t[key], (0,))
    axes_f = [a for a, _ in flips]

    def run(t: torch.Tensor, *idx: torch.Tensor) -> torch.Tensor:
        t = t[key]
        for a, i in zip(axes_f, idx, strict=True):
            t = t.index_select(a, i)
        return t
    return _Impl(run, (0,), tuple(i for _, i in flips))


@_op("Gather")
def _gather(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x, idx = _need(c, ins, 0), _need(c, ins, 1)
    shape = _shape(x)
    axis = _axis(c, int(c.attr("axis", 0)), len(shape))
    dim = shape[axis]
    out_shape = shape[:axis] + _shape(idx) + shape[axis + 1:]
    if idx.host is not None:
        flat = idx.host.reshape(-1).long()
        flat = torch.where(flat < 0, flat + dim, flat)
        if idx.host.dim() == 0:
            i = int(flat.item())
            return _Impl(lambda t: t.select(axis, i), (0,))
        return _Impl(lambda t, ii: t.index_select(axis, ii).reshape(out_shape), (0,), (flat,))

    def run(t: torch.Tensor, ii: torch.Tensor) -> torch.Tensor:
        ii = ii.reshape(-1).long()
        ii = torch.where(ii < 0, ii + dim, ii)
        return t.index_select(axis, ii).reshape(out_shape)
    return _Impl(run, (0, 1))


@_op("GatherElements")
def _gather_elements(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    shape = _shape(_need(c, ins, 0))
    axis = _axis(c, int(c.attr("axis", 0)), len(shape))
    dim = shape[axis]

    def run(t: torch.Tensor, ii: torch.Tensor) -> torch.Tensor:
        ii = ii.long()
        return torch.gather(t, axis, torch.where(ii < 0, ii + dim, ii))
    return _Impl(run, (0, 1))


@_op("Expand")
def _expand(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    shape = _shape(_need(c, ins, 0))
    target = c.ints(_need(c, ins, 1), "the shape") or []
    try:
        out = list(np.broadcast_shapes(tuple(shape), tuple(target)))
    except ValueError as exc:
        raise c.fail(f"shape {shape} does not broadcast to {target}") from exc
    return _Impl(lambda t: t.expand(out), (0,))


@_op("Tile")
def _tile(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    reps = c.ints(_need(c, ins, 1), "repeats") or []
    return _Impl(lambda t: t.repeat(reps), (0,))


@_op("DepthToSpace", "SpaceToDepth")
def _depth_space(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    n, ch, h, w = _shape(_need(c, ins, 0))
    b = int(c.attr("blocksize"))
    if c.node.op == "SpaceToDepth":
        return _Impl(lambda t: t.reshape(n, ch, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
                     .reshape(n, ch * b * b, h // b, w // b), (0,))
    co = ch // (b * b)
    if c.attr("mode", "DCR") == "DCR":
        return _Impl(lambda t: t.reshape(n, b, b, co, h, w).permute(0, 3, 4, 1, 5, 2)
                     .reshape(n, co, h * b, w * b), (0,))
    return _Impl(lambda t: t.reshape(n, co, b, b, h, w).permute(0, 1, 4, 2, 5, 3)
                 .reshape(n, co, h * b, w * b), (0,))


@_op("Pad")
def _pad(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    rank = len(_shape(x))
    mode = c.attr("mode", "constant")
    if c.opset < 11:
        pads = list(c.attr("pads"))
        value: float | None = float(c.attr("value", 0.0))
        value_in = None
    else:
        pads = c.ints(_need(c, ins, 1), "pads") or []
        value_in = _at(ins, 2)
        value = None
        if value_in is not None and value_in.host is not None:
            value = float(value_in.host.reshape(-1)[0].item()) if value_in.host.numel() else 0.0
            value_in = None
        elif value_in is None:
            value = 0.0
    axes = c.ints(_at(ins, 3), "axes") if c.opset >= 18 else None
    if axes:
        full = [0] * (2 * rank)
        k = len(axes)
        for j, a in enumerate(axes):
            a = _axis(c, a, rank)
            full[a], full[a + rank] = pads[j], pads[j + k]
        pads = full
    if len(pads) != 2 * rank:
        raise c.fail(f"pads {pads} do not match rank {rank}")
    # F.pad takes (begin, end) pairs from the last dim backwards, and only as far as needed
    first = next((i for i in range(rank) if pads[i] or pads[i + rank]), rank)
    tp: list[int] = []
    for i in reversed(range(first, rank)):
        tp += [pads[i], pads[i + rank]]
    if not tp:
        return _Impl(lambda t: t, (0,))
    if mode == "constant":
        if value_in is not None:
            return _Impl(lambda t, v: F.pad(t, tp, value=0.0) + F.pad(
                torch.zeros_like(t), tp, value=1.0) * v.reshape(()), (0, 2))
        return _Impl(lambda t: F.pad(t, tp, value=value), (0,))
    torch_mode = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
    if torch_mode is None:
        raise c.fail(f"mode '{mode}' is not supported")
    n_sp = len(tp) // 2
    if n_sp > 3 or rank - n_sp < 1 or rank < 2:
        raise c.fail(f"{mode} padding of {n_sp} trailing dims of a rank-{rank} tensor is not "
                     "supported")
    lead = max(0, 2 - (rank - n_sp))  # torch wants a batch and a channel dim before them

    def run(t: torch.Tensor) -> torch.Tensor:
        for _ in range(lead):
            t = t.unsqueeze(0)
        y = F.pad(t, tp, mode=torch_mode)
        for _ in range(lead):
            y = y.squeeze(0)
        return y
    return _Impl(run, (0,))


# ----------------------------------------------------------------------------------- resize

def _source_coords(c: _Ctx, mode: str, out_len: int, in_len: int,
                   scale: float) -> np.ndarray:
    """ONNX Resize ``coordinate_transformation_mode``: source coordinate of each output px."""
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adj = out_len / (scale * in_len)
        centre = in_len / 2
        return centre * (1 - adj) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    raise c.fail(f"coordinate_transformation_mode '{mode}' is not supported")


def _nearest_index(c: _Ctx, coords: np.ndarray, nearest: str, in_len: int) -> np.ndarray:
    if nearest == "round_prefer_floor":
        idx = np.where(coords - np.floor(coords) == 0.5, np.floor(coords), np.round(coords))
    elif nearest == "round_prefer_ceil":
        idx = np.floor(coords + 0.5)
    elif nearest == "floor":
        idx = np.floor(coords)
    elif nearest == "ceil":
        idx = np.ceil(coords)
    else:
        raise c.fail(f"nearest_mode '{nearest}' is not supported")
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


_INTERP = {1: "linear", 2: "bilinear", 3: "trilinear"}


@_op("Resize", "Upsample")
def _resize(c: _Ctx, ins: list[_Val | None]) -> _Impl:
    x = _need(c, ins, 0)
    shape = _shape(x)
    rank = len(shape)
    mode = str(c.attr("mode", "nearest"))
    if c.node.op == "Upsample" or c.opset < 11:
        scales = c.attr("scales") if c.opset < 9 else c.floats(_need(c, ins, 1), "scales")
        sizes = None
        coord = "asymmetric"
        nearest = "floor"
    else:
        scales = c.floats(_at(ins, 2), "scales") or None
        sizes = c.ints(_at(ins, 3), "sizes") or None
        coord = str(c.attr("coordinate_transformation_mode", "half_pixel"))
        nearest = str(c.attr("nearest_mode", "round_prefer_floor"))
        if int(c.attr("antialias", 0)):
            raise c.fail("antialias=1 is not supported")
        if c.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            raise c.fail("only keep_aspect_ratio_policy='stretch' is supported")
    axes = c.attr("axes")
    axes = [_axis(c, a, rank) for a in axes] if axes else list(range(rank))
    if scales is None and sizes is None:
        raise c.fail("neither scales nor sizes is given")
    full_scales = [1.0] * rank
    out = list(shape)
    for j, a in enumerate(axes):
        if sizes is not None:
            out[a] = int(sizes[j])
            full_scales[a] = out[a] / shape[a]
        else:
            full_scales[a] = float(scales[j])  # type: ignore[index]
            out[a] = math.floor(shape[a] * full_scales[a])
    changed = [a for a in range(rank) if out[a] != shape[a] or full_scales[a] != 1.0]
    if not changed:
        return _Impl(lambda t: t, (0,))
    if mode == "nearest":
        idx = {a: _nearest_index(c, _source_coords(c, coord, out[a], shape[a], full_scales[a]),
                                 nearest, shape[a]) for a in changed}
        ks = {a: out[a] // shape[a] for a in changed}
        repeat = all(out[a] == ks[a] * shape[a] and np.array_equal(
            idx[a], np.arange(out[a]) // ks[a]) for a in changed)
        trailing = sorted(changed) == list(range(rank - len(changed), rank)) and 0 not in changed
        if repeat and trailing and len(changed) in _INTERP and all(
                ks[a] & (ks[a] - 1) == 0 for a in changed):
            # exact: F.interpolate's floor(dst * (1 / k)) equals dst // k for a power of two k
            size = [out[a] for a in sorted(changed)]
            return _Impl(lambda t: F.interpolate(t, size=size, mode="nearest"), (0,))
        order = sorted(changed)

        def nearest_run(t: torch.Tensor, *ii: torch.Tensor) -> torch.Tensor:
            for a, i in zip(order, ii, strict=True):
                t = t.index_select(a, i)
            return t
        return _Impl(nearest_run, (0,), tuple(torch.from_numpy(idx[a]) for a in order))
    if mode == "linear":
        sp = sorted(changed)
        trailing = sp == list(range(rank - len(sp), rank)) and len(sp) in _INTERP and sp[0] >= 2
        if trailing and coord in ("half_pixel", "pytorch_half_pixel", "align_corners") and not (
                coord == "pytorch_half_pixel" and any(out[a] == 1 for a in sp)):
            corners = coord == "align_corners"
            size = [out[a] for a in sp]
            if sizes is None and not corners:
                # ONNX maps with the given scale, not out/in: so does torch with this flag
                sf = [full_scales[a] for a in sp]
                return _Impl(lambda t: F.interpolate(
                    t, scale_factor=sf, mode=_INTERP[len(sp)], align_corners=False,
                    recompute_scale_factor=False), (0,))
            return _Impl(lambda t: F.interpolate(t, size=size, mode=_INTERP[len(sp)],
                                                 align_corners=corners), (0,))
        consts: list[torch.Tensor] = []
        for a in sp:
            src = np.clip(_source_coords(c, coord, out[a], shape[a], full_scales[a]), 0,
                          shape[a] - 1)
            lo = np.floor(src).astype(np.int64)
            hi = np.minimum(lo + 1, shape[a] - 1)
            wshape = [1] * rank
            wshape[a] = out[a]
            consts += [torch.from_numpy(lo), torch.from_numpy(hi),
                       torch.from_numpy((src - lo).astype(np.float32)).reshape(wshape)]

        def linear_run(t: torch.Tensor, *k: torch.Tensor) -> torch.Tensor:
            # separable lerp along each resized axis, as onnxruntime computes it
            for j, a in enumerate(sp):
                lo_i, hi_i, w = k[3 * j:3 * j + 3]
                t0, t1 = t.index_select(a, lo_i), t.index_select(a, hi_i)
                t = t0 + (t1 - t0) * w
            return t
        return _Impl(linear_run, (0,), tuple(consts))
    if mode == "cubic":
        sp = sorted(changed)
        a_coef = float(c.attr("cubic_coeff_a", -0.75))
        if (sp != [rank - 2, rank - 1] or rank != 4 or a_coef != -0.75
                or int(c.attr("exclude_outside", 0))
                or coord not in ("half_pixel", "pytorch_half_pixel", "align_corners")):
            raise c.fail("cubic resize is supported for the last two axes of a 4-d tensor "
                         "with cubic_coeff_a=-0.75, exclude_outside=0 and half_pixel or "
                         "align_corners coordinates only")
        corners = coord == "align_corners"
        size = [out[a] for a in sp]
        return _Impl(lambda t: F.interpolate(t, size=size, mode="bicubic",
                                             align_corners=corners), (0,))
    raise c.fail(f"mode '{mode}' is not supported")


SUPPORTED_OPS: frozenset[str] = frozenset(_OPS)
"""The ONNX (default domain) op types the runner executes."""


# ----------------------------------------------------------------------------------- loading

def _attr_value(path: Path, node: Any, a: Any) -> Any:
    from onnx import AttributeProto, helper, numpy_helper

    if a.type == AttributeProto.TENSOR:
        return _to_torch(numpy_helper.to_array(a.t))
    if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        raise OnnxOpError(path, node.name or node.output[0], node.op_type,
                          f"attribute '{a.name}' holds a subgraph (control flow is not supported)")
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def _to_torch(arr: np.ndarray) -> torch.Tensor:
    if arr.dtype.kind == "f":
        return torch.from_numpy(np.array(arr, dtype=np.float32))
    if arr.dtype == np.uint16 or arr.dtype == np.uint32 or arr.dtype == np.uint64:
        return torch.from_numpy(np.array(arr, dtype=np.int64))
    return torch.from_numpy(np.array(arr))


def _topological(path: Path, nodes: list[_Node], known: set[str]) -> list[_Node]:
    """Nodes in an order where every input is produced before use (the file's order if valid)."""
    avail = set(known)
    ordered: list[_Node] = []
    pending = list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all((not i) or i in avail for i in n.inputs):
                ordered.append(n)
                avail.update(o for o in n.outputs if o)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            n = rest[0]
            missing = next(i for i in n.inputs if i and i not in avail)
            raise OnnxOpError(path, n.label, n.op,
                              f"input '{missing}' is produced by no node, initializer or input "
                              "(or the graph has a cycle)")
        pending = rest
    return ordered


@dataclass
class _Step:
    fn: Callable[..., Any]
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    frees: tuple[int, ...]


@dataclass
class _PlanData:
    n_slots: int
    input_slots: list[int]
    const_slots: list[tuple[int, str]]  # (slot, buffer key on the plan or the module)
    steps: list[_Step]
    output_slots: list[int]
    float_inputs: list[bool] = field(default_factory=list)
    output_shapes: list[tuple[int, ...]] = field(default_factory=list)


class _Plan(nn.Module):
    """One input-shape signature's executable steps and the constants made for it."""

    def __init__(self, data: _PlanData) -> None:
        super().__init__()
        self.data = data


class OnnxModule(nn.Module):
    """An ONNX graph as a torch module (see the module docstring for how it runs).

    Args:
        path: the ``.onnx`` file (external data beside it is read too).

    Attributes:
        path: the file.
        input_names, output_names: the graph's inputs (initializers excluded) and outputs.
        input_shapes: declared input shapes, a dim ``None`` where the file leaves it free. They are
            not enforced: a model with batch 1 declared runs batches when its ops allow it.
        opset: the default-domain opset the file was exported with.
        node_names: the file's node names in file order (some loaders inspect them).

    ``forward(*inputs)`` takes one tensor per input, in order, on the module's device; float
    inputs are cast to the module's float dtype. It returns a tuple with one tensor per graph
    output.

    Raises:
        OnnxModelError: the file is missing or not a readable ONNX model.
        OnnxOpError: a node cannot be executed (found when loading, or when a new input shape is
            planned on the first call with it).
    """

    _probe: torch.Tensor

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        import onnx
        from onnx import numpy_helper

        self.path = Path(path)
        if not self.path.is_file():
            raise OnnxModelError(self.path, "no such file")
        try:
            proto = onnx.load(str(self.path))
        except Exception as exc:  # DecodeError, OSError, ValueError, ... on a damaged file
            raise OnnxModelError(self.path, f"not a readable ONNX model "
                                 f"({type(exc).__name__}: {exc})") from exc
        graph = proto.graph
        if not graph.node:
            raise OnnxModelError(self.path, "the file holds no graph nodes (truncated or empty?)")
        self.opset = next((int(o.version) for o in proto.opset_import
                           if o.domain in ("", "ai.onnx")), 0)
        self._state = _State()
        self.register_buffer("_probe", torch.zeros(0, dtype=PLAN_DTYPE), persistent=False)

        consts: dict[str, torch.Tensor] = {}
        for t in graph.initializer:
            try:
                consts[t.name] = _to_torch(numpy_helper.to_array(t))
            except Exception as exc:
                raise OnnxModelError(self.path, f"initializer '{t.name}' cannot be read "
                                     f"({type(exc).__name__}: {exc})") from exc
        inputs = [i for i in graph.input if i.name not in consts]
        self.input_names = [i.name for i in inputs]
        self.output_names = [o.name for o in graph.output]
        self.input_shapes = [tuple((d.dim_value if d.HasField("dim_value") else None)
                                   for d in i.type.tensor_type.shape.dim) for i in inputs]
        self._input_dtypes = [_torch_dtype(i.type.tensor_type.elem_type) for i in inputs]
        for name, dt in zip(self.input_names, self._input_dtypes, strict=True):
            if dt is None:
                raise OnnxModelError(self.path, f"input '{name}' has an unsupported type")

        self.node_names = [n.name for n in graph.node]
        nodes = []
        for i, n in enumerate(graph.node):
            label = n.name or f"{n.op_type}#{i}->{n.output[0] if n.output else ''}"
            attrs = {a.name: _attr_value(self.path, n, a) for a in n.attribute}
            nodes.append(_Node(label, n.op_type, n.domain, list(n.input), list(n.output), attrs))
        del proto, graph
        self._nodes = _topological(self.path, nodes, set(consts) | set(self.input_names))
        for n in self._nodes:
            if n.domain not in ("", "ai.onnx") or n.op not in _OPS:
                where = f" in domain '{n.domain}'" if n.domain not in ("", "ai.onnx") else ""
                raise OnnxOpError(self.path, n.label, n.op,
                                  f"op '{n.op}'{where} is not supported by livefuse's ONNX "
                                  "runner (livefuse.models.onnx_torch.SUPPORTED_OPS lists "
                                  "what is)")
        self._fold_constants(consts)
        self._plans = nn.ModuleDict()
        self._plan_keys: dict[tuple[tuple[int, ...], ...], _Plan] = {}

    # -- constants ------------------------------------------------------------------------------

    def _fold_constants(self, consts: dict[str, torch.Tensor]) -> None:
        """Evaluate every node whose inputs are all constants, once; keep the constants the
        remaining graph reads as buffers (and small ones on the host too)."""
        rest: list[_Node] = []
        for n in self._nodes:
            if all((not i) or i in consts for i in n.inputs):
                vals = [None if not i else _Val(consts[i].to("meta"), consts[i])
                        for i in n.inputs]
                outs = self._evaluate(n, vals)
                for name, v in zip(n.outputs, outs, strict=False):
                    if name and v is not None:
                        consts[name] = v
            else:
                rest.append(n)
        self._nodes = rest
        used = {i for n in rest for i in n.inputs if i} | set(self.output_names)
        self._const_keys: dict[str, str] = {}
        self._host: dict[str, torch.Tensor] = {}
        self._const_meta: dict[str, torch.Tensor] = {}
        for k, (name, t) in enumerate(item for item in consts.items() if item[0] in used):
            key = f"c{k}"
            self._const_keys[name] = key
            self.register_buffer(key, t)
            self._const_meta[name] = t.to("meta")
            if not t.is_floating_point() or t.numel() <= HOST_COPY_MAX:
                self._host[name] = t.clone()

    def _evaluate(self, n: _Node, vals: list[_Val | None],
                  impl: _Impl | None = None) -> list[torch.Tensor | None]:
        """Run ``n`` on host values (every input it reads must be known)."""
        impl = impl or self._build(n, vals)
        args = []
        for i in impl.uses:
            v = vals[i] if i < len(vals) else None
            if v is None or v.host is None:
                raise OnnxOpError(self.path, n.label, n.op, f"input #{i} is not known")
            args.append(v.host)
        try:
            out = impl.fn(*args, *impl.extra)
        except OnnxOpError:
            raise
        except Exception as exc:
            raise OnnxOpError(self.path, n.label, n.op,
                              f"{type(exc).__name__}: {exc}") from exc
        return self._outputs(n, out)

    def _outputs(self, n: _Node, out: Any) -> list[torch.Tensor | None]:
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        for j, name in enumerate(n.outputs):
            if name and j >= len(outs):
                raise OnnxOpError(self.path, n.label, n.op, f"output #{j} is not supported")
        return outs

    def _build(self, n: _Node, vals: list[_Val | None]) -> _Impl:
        ctx = _Ctx(self.path, n, self.opset, self._state)
        try:
            return _OPS[n.op](ctx, vals)
        except OnnxOpError:
            raise
        except Exception as exc:  # a malformed attribute or input shape
            raise ctx.fail(f"{type(exc).__name__}: {exc}") from exc

    # -- planning -------------------------------------------------------------------------------

    def _plan(self, shapes: tuple[tuple[int, ...], ...]) -> _Plan:
        """Fold the shape computations for these input shapes and list the tensor ops left."""
        vals: dict[str, _Val] = {}
        for name, shape, dt in zip(self.input_names, shapes, self._input_dtypes, strict=True):
            vals[name] = _Val(torch.empty(shape, dtype=dt, device="meta"))
        for name, meta in self._const_meta.items():
            vals[name] = _Val(meta, self._host.get(name))
        slots = {name: k for k, name in enumerate(self.input_names)}
        const_slots: list[tuple[int, str]] = []  # (slot, buffer key: "c*" module, "p*" plan)
        plan_consts: dict[str, torch.Tensor] = {}

        def const_slot(key: str | None, host: torch.Tensor | None) -> int:
            if key is None:
                assert host is not None
                key = f"p{len(plan_consts)}"
                plan_consts[key] = host
            const_slots.append((len(slots), key))
            slots[f"\0{key}"] = len(slots)
            return len(slots) - 1

        def read(name: str) -> int:
            if name not in slots:
                slots[name] = const_slot(self._const_keys.get(name), vals[name].host)
            return slots[name]

        steps: list[_Step] = []
        dtype = self._probe.dtype
        self._state.float_dtype = PLAN_DTYPE
        try:
            for n in self._nodes:
                ins = [vals[i] if i else None for i in n.inputs]
                impl = self._build(n, ins)
                used = [ins[i] if i < len(ins) else None for i in impl.uses]
                if all(u is not None and u.host is not None for u in used):
                    for name, t in zip(n.outputs, self._evaluate(n, ins, impl), strict=False):
                        if name and t is not None:
                            vals[name] = _Val(t.to("meta"), t)
                    continue
                metas = [None if u is None else u.meta for u in used]
                try:
                    out = impl.fn(*metas, *(e.to("meta") for e in impl.extra))
                except Exception as exc:
                    shapes_in = [None if m is None else tuple(m.shape) for m in metas]
                    raise OnnxOpError(self.path, n.label, n.op, f"{type(exc).__name__}: {exc} "
                                      f"(input shapes {shapes_in})") from exc
                ins_slots = [read(n.inputs[i]) for i in impl.uses]
                ins_slots += [const_slot(None, e) for e in impl.extra]
                outs_slots = []
                for name, t in zip(n.outputs, self._outputs(n, out), strict=False):
                    if name and t is not None:
                        vals[name] = _Val(t)
                        slots[name] = len(slots)
                        outs_slots.append(slots[name])
                steps.append(_Step(impl.fn, tuple(ins_slots), tuple(outs_slots), ()))
        finally:
            self._state.float_dtype = dtype
        output_slots = [read(o) for o in self.output_names]

        # drop each intermediate after its last reader: eager peak memory stays near one layer
        keep = set(output_slots)
        last = {s: k for k, st in enumerate(steps) for s in st.ins}
        for k, st in enumerate(steps):
            st.frees = tuple(sorted({s for s in st.ins if last[s] == k and s not in keep}))
        plan = _Plan(_PlanData(len(slots), list(range(len(self.input_names))), const_slots,
                               steps, output_slots,
                               [bool(dt is not None and dt.is_floating_point)
                                for dt in self._input_dtypes],
                               [tuple(vals[o].meta.shape) for o in self.output_names]))
        device = self._probe.device
        for key, t in plan_consts.items():
            t = t.to(device, dtype) if t.is_floating_point() else t.to(device)
            plan.register_buffer(key, t, persistent=False)
        return plan

    def output_shapes(self, *input_shapes: Sequence[int]) -> list[tuple[int, ...]]:
        """The outputs' shapes for these input shapes, without computing anything: the graph is
        planned for them (as ``forward``'s first call with them would) and the plan kept.

        Raises:
            OnnxOpError: a node cannot run with these shapes.
        """
        plan = self._get_plan(tuple(tuple(int(d) for d in s) for s in input_shapes))
        return list(plan.data.output_shapes)

    def _get_plan(self, key: tuple[tuple[int, ...], ...]) -> _Plan:
        plan = self._plan_keys.get(key)
        if plan is None:
            if len(key) != len(self.input_names):
                raise OnnxModelError(self.path, f"{len(key)} inputs given, the graph takes "
                                     f"{len(self.input_names)} ({', '.join(self.input_names)})")
            plan = self._plan(key)
            self._plans["x".join("_".join(map(str, s)) or "s" for s in key) or "none"] = plan
            self._plan_keys[key] = plan
        return plan

    # -- running --------------------------------------------------------------------------------

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        plan = self._get_plan(tuple(tuple(x.shape) for x in inputs))
        d = plan.data
        env: list[Any] = [None] * d.n_slots
        fdt = self._probe.dtype
        for slot, x, is_float in zip(d.input_slots, inputs, d.float_inputs, strict=True):
            env[slot] = x.to(fdt) if is_float and x.dtype != fdt else x
        own, mine = self._buffers, plan._buffers
        for slot, key in d.const_slots:
            env[slot] = mine[key] if key[0] == "p" else own[key]
        for st in d.steps:
            out = st.fn(*[env[i] for i in st.ins])
            if len(st.outs) == 1 and isinstance(out, torch.Tensor):
                env[st.outs[0]] = out
            else:
                for s, t in zip(st.outs, out, strict=False):
                    env[s] = t
            for s in st.frees:
                env[s] = None
        return tuple(env[s] for s in d.output_slots)

    def _apply(self, fn: Any, recurse: bool = True) -> OnnxModule:
        super()._apply(fn, recurse)
        self._state.float_dtype = self._probe.dtype
        return self

    @property
    def float_dtype(self) -> torch.dtype:
        """The dtype float tensors compute in (``float32`` unless cast)."""
        return self._probe.dtype

