"""Synthetic inswapper-signature ONNX models with random weights, for tests and benchmarks.

No real weights can be downloaded in CI, so the neural path is proved differentially: the same
random-weight graph is run by insightface's own ``INSwapper``, by onnxruntime through livefuse and
by the PyTorch port loaded through the structural loader. The graph has the released model's
signature: inputs ``target`` (1, 3, 128, 128) and ``source`` (1, 512), output ``output``
(1, 3, 128, 128), Conv / Gemm / Pad(reflect) / Resize op pattern, and the (512, 512) emap as the
LAST initializer (insightface reads it from there).
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from livefuse.imaging import atomic_write_bytes
from livefuse.models.inswapper_torch import INPUT_SIZE, LATENT_DIM, InSwapper128

EXPORT_OPSET = 11
"""Opset of the export: Pad-11 (reflect) and Resize-11 run on every onnxruntime build and
onnx2torch converts it (it does not convert an opset-18 export, design.md §7)."""


def random_inswapper(width: int = 8, seed: int = 0) -> InSwapper128:
    """An :class:`InSwapper128` with seeded random weights whose output is not saturated.

    PyTorch's default init is kept for the convs; the style linears get a scale near 1 and a
    small shift, as a trained AdaIN has, so the decoder sees normalised activations and the
    output spreads over [0, 1] instead of sticking to 0 or 1.
    """
    gen = torch.Generator().manual_seed(seed)
    model = InSwapper128(width=width)
    with torch.no_grad():
        for p in model.parameters():
            bound = 1.0 / max(1.0, float(np.sqrt(p[0].numel() if p.ndim > 1 else p.numel())))
            p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound)
        for lin in model.linears():
            c = lin.out_features // 2
            lin.weight.mul_(0.5)
            lin.bias[:c] += 1.0
    return model.eval()


def random_emap(seed: int = 0) -> np.ndarray:
    """``(512, 512) float32`` random emap with rows of unit-ish norm."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((LATENT_DIM, LATENT_DIM)) / np.sqrt(LATENT_DIM)).astype(np.float32)


def export_inswapper(model: InSwapper128, emap: np.ndarray, path: str | Path,
                     opset: int = EXPORT_OPSET) -> Path:
    """Export ``model`` to ``path`` with the inswapper signature and ``emap`` as last initializer.

    Uses the TorchScript exporter (``dynamo=False``): its opset-11 graph has one Conv node per
    conv and one Gemm per linear, like the released file. Written atomically.
    """
    import onnx
    from onnx import numpy_helper

    model = model.float().eval().cpu()
    target = torch.rand(1, 3, INPUT_SIZE, INPUT_SIZE)
    latent = torch.nn.functional.normalize(torch.randn(1, LATENT_DIM), dim=1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = Path(tmp) / "export.onnx"
        torch.onnx.export(model, (target, latent), str(raw), input_names=["target", "source"],
                          output_names=["output"], opset_version=opset, dynamo=False,
                          do_constant_folding=True)
        proto = onnx.load(str(raw))
    proto.graph.initializer.append(
        numpy_helper.from_array(np.ascontiguousarray(emap, dtype=np.float32), "emap"))
    onnx.checker.check_model(proto)
    atomic_write_bytes(path, proto.SerializeToString())
    return path


def build_synthetic_inswapper(path: str | Path, width: int = 8, seed: int = 0) -> Path:
    """Write a random-weight inswapper-signature model to ``path`` (``width`` 128 = full size)."""
    return export_inswapper(random_inswapper(width, seed), random_emap(seed), path)


def face_kps(cx: float, cy: float, eye_distance: float, angle_deg: float = 0.0) -> np.ndarray:
    """Plausible 5-point kps ``(5, 2) float32`` (insightface order) for a face at (cx, cy) px.

    The ArcFace template (insightface ``utils/face_align.py``) is centred, scaled so the eyes are
    ``eye_distance`` px apart and rotated by ``angle_deg``: a stand-in for a detector in tests.
    """
    from livefuse.swap.paste import ARCFACE_DST

    pts = ARCFACE_DST.astype(np.float64) - ARCFACE_DST.mean(0)
    pts *= eye_distance / float(ARCFACE_DST[1, 0] - ARCFACE_DST[0, 0])
    a = np.deg2rad(angle_deg)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return (pts @ rot.T + (cx, cy)).astype(np.float32)
