"""The fused formulations of the port's layers compute what the plain layers compute.

CPU: the im2col first conv, the tap-GEMM last conv and the torch reference of the fused norm
against ``nn.Conv2d`` / the port's own norm; the Triton norm kernel through Triton's interpreter
(a subprocess with ``TRITON_INTERPRET=1``); CUDA (skipped without a GPU): the fused fp16 port
inside a CUDA graph against the plain fp16 and fp32 ports.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from livefuse.models import fused_ops
from livefuse.models.inswapper_torch import LoadedInswapper, _adain
from livefuse.testing.synthetic import random_emap, random_inswapper


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_first_conv_is_the_7x7_conv() -> None:
    conv = torch.nn.Conv2d(3, 16, 7)
    xp = torch.randn(2, 3, 40, 38, generator=_gen(0))
    with torch.no_grad():
        got = fused_ops.first_conv(xp, fused_ops.first_weight(conv.weight), conv.bias)
        want = conv(xp)
    assert got.shape == (2, 16, 34, 32)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_last_conv_is_the_7x7_conv() -> None:
    conv = torch.nn.Conv2d(16, 3, 7)
    xp = torch.randn(2, 16, 30, 27, generator=_gen(1)).to(memory_format=torch.channels_last)
    with torch.no_grad():
        got = fused_ops.last_conv(xp, fused_ops.last_weight(conv.weight), conv.bias, 3)
        want = conv(xp)
    assert got.shape == (2, 3, 24, 21) and got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("relu", [True, False])
def test_norm_reference_is_the_ports_norm_relu_residual_and_pad(relu: bool) -> None:
    y = torch.randn(2, 8, 6, 5, generator=_gen(2)) * 3 + 1
    style = torch.randn(2, 16, generator=_gen(3))
    x = torch.randn(2, 8, 6, 5, generator=_gen(4))
    got = fused_ops.adain_pad_reference(y, style, 1e-8, relu, None if relu else x)
    normed = _adain(y, style, 1e-8)
    want = F.pad(torch.relu(normed) if relu else x + normed, (1, 1, 1, 1), mode="reflect")
    assert got.shape == (2, 8, 8, 7)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fused_port_equals_the_plain_port() -> None:
    model = random_inswapper(8, seed=5).eval()
    fused = copy.deepcopy(model)
    fused.enable_fused(fused_ops.FUSED_OPS)
    assert fused.state_dict().keys() == model.state_dict().keys()  # GEMM operands not saved
    t = torch.rand(2, 3, 128, 128, generator=_gen(5))
    latent = F.normalize(torch.randn(2, 512, generator=_gen(6)), dim=1)
    with torch.inference_mode():
        styles = model.styles(latent)
        want = model.forward_styled(t, styles)
        got = fused.forward_styled(t, styles)
        other = fused.forward_styled(t.flip(3), styles)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (want - other).abs().max() > 1e-3  # the output depends on the target


def test_unknown_fused_layer_is_refused() -> None:
    with pytest.raises(ValueError, match="dropout"):
        random_inswapper(8).enable_fused({"first", "dropout"})


_KERNEL_CHECK = """
import torch
from livefuse.models import fused_ops
g = torch.Generator().manual_seed(0)
cases = [(1, 64, 32, 32, True, False), (2, 24, 5, 7, False, True), (1, 3, 3, 3, False, True)]
for n, c, h, w, relu, res in cases:
    y = (torch.randn(n, c, h, w, generator=g) * 2 + 0.5).to(memory_format=torch.channels_last)
    st = torch.randn(n, 2 * c, generator=g)
    xp = torch.randn(n, c, h + 2, w + 2, generator=g).to(memory_format=torch.channels_last)
    r = xp[:, :, 1:-1, 1:-1] if res else None
    got = fused_ops.adain_pad_triton(y, st, 1e-8, relu, r)
    want = fused_ops.adain_pad_reference(y, st, 1e-8, relu, r)
    assert got.shape == (n, c, h + 2, w + 2), got.shape
    assert got.is_contiguous(memory_format=torch.channels_last)
    err = (got - want).abs().max().item()
    assert err < 1e-4, (n, c, h, w, err)
flat = torch.zeros(1, 16, 32, 32)
flat[:, 1] = 3.0
out = fused_ops.adain_pad_triton(flat, torch.ones(1, 32), 1e-8, True, None)
assert torch.isfinite(out).all()
print("kernel ok")
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton not installed")
def test_triton_norm_kernel_matches_the_reference_in_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_KERNEL_CHECK)], env=env,
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kernel ok" in proc.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fused_fp16_graph_on_cuda_matches_plain_and_fp32() -> None:
    from livefuse.models.torch_runner import TorchRunner

    loaded = LoadedInswapper(model=random_inswapper(32, seed=7), emap=random_emap(0),
                             path=Path("x"))
    t = torch.rand(1, 3, 128, 128, generator=_gen(7)).cuda()
    latent = F.normalize(torch.randn(1, 512, generator=_gen(8)), dim=1).cuda()
    ref = TorchRunner(loaded, "cuda", "fp32").infer_tensor(t, latent).float()
    plain = TorchRunner(loaded, "cuda", "fp16", channels_last=True).infer_tensor(t, latent)
    fast = TorchRunner(loaded, "cuda", "fp16", channels_last=True, cuda_graph=True,
                       fused=fused_ops.FUSED_OPS)
    got = fast.infer_tensor(t, latent).float()
    assert (got - plain.float()).abs().mean().item() * 255 <= 0.1
    assert (got - ref).abs().mean().item() * 255 <= 1.0
    other = fast.infer_tensor(t.flip(3), latent).float()  # the graph replays on new input
    assert (other - got).abs().max().item() > 1e-3
