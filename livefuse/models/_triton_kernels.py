"""Triton kernels of :mod:`livefuse.models.fused_ops` (imported only where Triton is installed).

Module-level so that one ``@triton.jit`` function can call another (Triton resolves callees through
the module's globals, not through closures).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def modulate_store(val, a, b, r_ptrs, o_ptrs, m,
                   RELU: tl.constexpr, RESIDUAL: tl.constexpr):
    # val * scale' + shift' (the norm folded in), then ReLU or the residual, then the store
    out = val * a[None, :] + b[None, :]
    if RELU:
        out = tl.maximum(out, 0.0)
    if RESIDUAL:
        out += tl.load(r_ptrs, mask=m, other=0.0).to(tl.float32)
    tl.store(o_ptrs, out.to(o_ptrs.dtype.element_ty), mask=m)


@triton.jit
def adain_pad_kernel(y_ptr, s_ptr, r_ptr, o_ptr, C, H, W,
                     syn, syc, syh, syw, srn, src, srh, srw, son, soc, soh, sow, ssn,
                     inv_hw, eps, HW: tl.constexpr, BLOCK_C: tl.constexpr,
                     BORDER: tl.constexpr, RELU: tl.constexpr, RESIDUAL: tl.constexpr):
    # One program owns BLOCK_C channels of one image: it reads them once, keeps them in
    # registers for the statistics and the interior of the padded output, and re-reads only
    # the 2(H+W)+4 source pixels of the reflected border.
    n = tl.program_id(0)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cs < C
    p = tl.arange(0, HW)
    ph = p // W
    pw = p % W
    m2 = (p < H * W)[:, None] & cmask[None, :]
    v = tl.load(y_ptr + n * syn + ph[:, None] * syh + pw[:, None] * syw + cs[None, :] * syc,
                mask=m2, other=0.0).to(tl.float32)
    mean = tl.sum(v, axis=0) * inv_hw
    d = tl.where(m2, v - mean[None, :], 0.0)
    var = tl.sum(d * d, axis=0) * inv_hw
    scale = tl.load(s_ptr + n * ssn + cs, mask=cmask, other=0.0).to(tl.float32)
    shift = tl.load(s_ptr + n * ssn + C + cs, mask=cmask, other=0.0).to(tl.float32)
    a = scale / tl.sqrt(var + eps)
    b = shift - mean * a
    modulate_store(v, a, b,
                   r_ptr + n * srn + ph[:, None] * srh + pw[:, None] * srw + cs[None, :] * src,
                   o_ptr + n * son + (ph + 1)[:, None] * soh + (pw + 1)[:, None] * sow
                   + cs[None, :] * soc, m2, RELU, RESIDUAL)
    # border: top row, bottom row (W+2 each), then left and right columns (H each)
    q = tl.arange(0, BORDER)
    row = q < 2 * (W + 2)
    qc = q - 2 * (W + 2)
    py = tl.where(row, tl.where(q < W + 2, 0, H + 1), 1 + qc % H)
    px = tl.where(row, q % (W + 2), tl.where(qc < H, 0, W + 1))
    qmask = q < 2 * (W + 2) + 2 * H
    sy = py - 1
    sx = px - 1
    sy = tl.where(sy < 0, -sy, sy)
    sy = tl.where(sy > H - 1, 2 * (H - 1) - sy, sy)
    sx = tl.where(sx < 0, -sx, sx)
    sx = tl.where(sx > W - 1, 2 * (W - 1) - sx, sx)
    m = qmask[:, None] & cmask[None, :]
    val = tl.load(y_ptr + n * syn + sy[:, None] * syh + sx[:, None] * syw
                  + cs[None, :] * syc, mask=m, other=0.0).to(tl.float32)
    modulate_store(val, a, b,
                   r_ptr + n * srn + sy[:, None] * srh + sx[:, None] * srw + cs[None, :] * src,
                   o_ptr + n * son + py[:, None] * soh + px[:, None] * sow + cs[None, :] * soc,
                   m, RELU, RESIDUAL)


def launch(kernel: Any, y: torch.Tensor, style: torch.Tensor, eps: float, relu: bool,
           residual: torch.Tensor | None, block_c: int = 16, num_warps: int = 8
           ) -> torch.Tensor:
    """Run ``kernel`` (:func:`adain_pad_kernel`, or it wrapped by ``wrap_triton``) on ``y``
    ``(N, C, H, W)``; returns the ``(N, C, H+2, W+2)`` channels_last output."""
    n, c, h, w = y.shape
    # NHWC storage viewed as NCHW: channels_last without a layout-conversion kernel
    out = torch.empty((n, h + 2, w + 2, c), dtype=y.dtype, device=y.device)
    out = out.permute(0, 3, 1, 2)
    r = residual if residual is not None else y
    kernel[(n, triton.cdiv(c, block_c))](
        y, style, r, out, c, h, w, *y.stride(), *r.stride(), *out.stride(), style.stride(0),
        1.0 / (h * w), eps, HW=triton.next_power_of_2(h * w), BLOCK_C=block_c,
        BORDER=triton.next_power_of_2(2 * (w + 2) + 2 * h), RELU=relu,
        RESIDUAL=residual is not None, num_warps=num_warps)
    return out
