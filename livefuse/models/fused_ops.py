"""Faster formulations of the inswapper port's layers for batch-1 GPU inference.

A per-kernel profile of the compiled fp16 port on an H200 (``benchmarks/profile_layers.py``,
docs/BENCHMARKS.md §4) showed three places far from the chip's rates:

* the first and last 7×7 convs (3 → 128 and 128 → 3 channels) ran at about 0.6 GFLOP each in
  27 and 48 µs: cuDNN's tensor-core kernels pad 3 channels to 8 or 64 and waste the rest;
* each of the twelve instance norms took three kernels (a split reduction, its second pass and
  the normalise / scale / shift / pad pass), 8-10 µs for a 2 MiB tensor;
* each kernel boundary costs launch gaps even inside a CUDA graph.

So, with the same mathematics:

* :func:`first_conv` is an im2col (147 columns, padded to 152 for 16-byte rows) and one GEMM;
* :func:`last_conv` is one GEMM of the padded input against all 49 taps' weights (128 → 49·3),
  then a strided sum of the 49 shifted taps in float32;
* :func:`adain_pad_fn` gives one Triton kernel (on CUDA; a torch reference elsewhere) for the
  whole instance norm, the latent's scale and shift, the ReLU or the residual add, and the next
  conv's reflect padding; the port then leaves out the res-block convs' bias, which the norm's
  mean subtraction removes exactly.

Every function has the signature-level semantics of the layer it replaces; tests compare each with
the plain layer (on the CPU, and through Triton's interpreter for the kernel).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

FUSED_OPS = frozenset({"first", "last", "adain"})
"""Names of the layers that have a fused formulation (``TorchRunner(fused=...)`` picks a subset)."""

_FIRST_K = 152  # 3·7·7 = 147 im2col columns padded to a multiple of 8 (16-byte fp16 rows)
_LAST_N = 152  # 49 taps × 3 output channels = 147, padded likewise


def first_weight(weight: torch.Tensor) -> torch.Tensor:
    """``(128, 3, 7, 7)`` conv weight → ``(152, 128)`` im2col GEMM operand (rows ci, ky, kx)."""
    cout = weight.shape[0]
    w = weight.reshape(cout, -1).t()
    return F.pad(w, (0, 0, 0, _FIRST_K - w.shape[0])).contiguous()


def first_conv(xp: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """7×7 valid conv of a reflect-padded ``(N, 3, H+6, W+6)`` input with :func:`first_weight`.

    Returns ``(N, Cout, H, W)`` in channels_last strides, in ``xp``'s dtype.
    """
    n, c, hp, wp = xp.shape
    h, w_ = hp - 6, wp - 6
    cols = xp.unfold(2, 7, 1).unfold(3, 7, 1)  # (N, C, H, W, 7, 7)
    cols = cols.permute(0, 2, 3, 1, 4, 5).reshape(n * h * w_, c * 49)
    cols = F.pad(cols, (0, w.shape[0] - c * 49))
    out = torch.mm(cols, w) if bias is None else torch.addmm(bias, cols, w)  # (N·H·W, Cout)
    return out.view(n, h, w_, -1).permute(0, 3, 1, 2)


def last_weight(weight: torch.Tensor) -> torch.Tensor:
    """``(3, 128, 7, 7)`` conv weight → ``(128, 152)``: column ``(ky·7 + kx)·3 + co``."""
    cout, cin = weight.shape[:2]
    w = weight.permute(1, 2, 3, 0).reshape(cin, 49 * cout)
    return F.pad(w, (0, _LAST_N - w.shape[1])).contiguous()


def last_conv(xp: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
              cout: int) -> torch.Tensor:
    """7×7 valid conv (128 → ``cout`` = 3 channels) of a reflect-padded ``(N, 128, H+6, W+6)``
    input with :func:`last_weight`.

    ``z = x @ w`` gives every padded pixel's contribution to each of the 49 taps; the output pixel
    ``(y, x)`` sums tap ``(ky, kx)`` of pixel ``(y+ky, x+kx)``, read through one strided view.
    Returns ``(N, 3, H, W)`` float32.
    """
    n, c, hp, wp = xp.shape
    h, w_ = hp - 6, wp - 6
    rows = xp.permute(0, 2, 3, 1).reshape(n * hp * wp, c)
    z = torch.mm(rows, w).view(n, hp, wp, w.shape[1])
    s_n, s_y, s_x, _ = z.stride()
    taps = z.as_strided((n, h, w_, 7, 7, cout), (s_n, s_y, s_x, s_y + 7 * cout, s_x + cout, 1))
    out = taps.sum(dim=(3, 4), dtype=torch.float32)
    if bias is not None:
        out = out + bias.float()
    return out.permute(0, 3, 1, 2)


# ----------------------------------------------------------------------------- instance norm

def adain_pad_reference(y: torch.Tensor, style: torch.Tensor, eps: float, relu: bool,
                        residual: torch.Tensor | None) -> torch.Tensor:
    """What :func:`adain_pad` computes, in torch: instance norm of ``y`` ``(N, C, H, W)`` in
    float32, ``* scale + shift`` from ``style`` ``(N, 2C)``, then ReLU or ``+ residual``, then
    reflect padding by 1 pixel. Returns ``(N, C, H+2, W+2)`` in ``y``'s dtype."""
    yf = y.float()
    mean = yf.mean(dim=(2, 3), keepdim=True)
    centred = yf - mean
    var = (centred * centred).mean(dim=(2, 3), keepdim=True)
    c = y.shape[1]
    sf = style.float()
    out = centred / torch.sqrt(var + eps) * sf[:, :c, None, None] + sf[:, c:, None, None]
    if relu:
        out = torch.relu(out)
    if residual is not None:
        out = out + residual.float()
    return F.pad(out, (1, 1, 1, 1), mode="reflect").to(y.dtype)


@functools.cache
def _triton() -> Any:
    """The Triton kernel and its launcher, or ``None`` where Triton is not installed."""
    try:
        from livefuse.models import _triton_kernels as tk
    except ImportError:
        return None
    return tk.adain_pad_kernel, tk.launch


def triton_available() -> bool:
    return _triton() is not None


def adain_pad_triton(y: torch.Tensor, style: torch.Tensor, eps: float, relu: bool,
                     residual: torch.Tensor | None) -> torch.Tensor:
    """:func:`adain_pad_reference` as one Triton kernel launch (CUDA tensors, or CPU tensors under
    ``TRITON_INTERPRET=1``). Raises ``RuntimeError`` where Triton is not installed."""
    t = _triton()
    if t is None:
        raise RuntimeError("Triton is not installed")
    kernel, launch = t
    out: torch.Tensor = launch(kernel, y, style, eps, relu, residual)
    return out


@functools.cache
def _adain_op() -> Any:
    """``livefuse::adain_pad`` as a ``torch.library.triton_op``, so torch.compile keeps the kernel
    in its graph (and a CUDA graph captures it)."""
    t = _triton()
    if t is None or os.environ.get("TRITON_INTERPRET") == "1":
        return None
    kernel, launch = t
    try:
        from torch.library import triton_op, wrap_triton
    except ImportError:  # torch < 2.6: the torch reference runs instead
        return None

    @triton_op("livefuse::adain_pad", mutates_args=())
    def adain_pad_op(y: torch.Tensor, style: torch.Tensor, eps: float, relu: bool,
                     residual: torch.Tensor | None) -> torch.Tensor:
        out: torch.Tensor = launch(wrap_triton(kernel), y, style, eps, relu, residual)
        return out

    return adain_pad_op


AdainPad = Callable[[torch.Tensor, torch.Tensor, float, bool, torch.Tensor | None], torch.Tensor]


def adain_pad_fn() -> AdainPad:
    """The fused instance norm + modulation + ReLU or residual + reflect pad 1 (semantics of
    :func:`adain_pad_reference`): one Triton kernel for CUDA tensors where Triton is installed,
    the torch reference otherwise.

    Resolved once, outside any compiled region: Dynamo would otherwise trace into Triton's import
    and break the graph at the first norm.
    """
    op = _adain_op()
    if op is None:
        return adain_pad_reference

    def adain_pad(y: torch.Tensor, style: torch.Tensor, eps: float, relu: bool,
                  residual: torch.Tensor | None) -> torch.Tensor:
        if y.is_cuda:
            out: torch.Tensor = op(y, style, eps, relu, residual)
            return out
        return adain_pad_reference(y, style, eps, relu, residual)

    return adain_pad
