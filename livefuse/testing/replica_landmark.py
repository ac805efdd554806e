"""A same-family replica of insightface's 106-point landmark model (``2d106det`` of buffalo_l),
with seeded random weights, exported to ONNX like the released file.

What is known of the released file, and kept: a MobileNet-0.5 backbone (insightface
``alignment/coordinate_reg/README.md``: "Backbone: MobileNet-0.5, size 5MB"), an mxnet export
whose graph normalises its own input (its first nodes subtract and multiply: insightface's
``Landmark`` then feeds raw 0..255 RGB), input ``data`` ``(1, 3, 192, 192)``, one output
``fc1`` ``(1, 212)``: 106 × (x, y) in [-1, 1] of the crop. Its exact layer list is not
published; the replica is MobileNet v1 at width 0.5 (Howard et al. 2017: a 3×3 stride-2 conv
then 13 depthwise-separable blocks, BN and PReLU as insightface's mxnet nets use) followed by a
1×1 conv to 64 channels and a fully connected layer on the 6×6 map: 1.27 M parameters, a 5.1 MB
file (the released one has 5,030,888 bytes).

Random weights would give landmarks that do not depend on the picture, or saturate; so every
conv is rescaled on real photos to unit output spread (LSUV, as the other replicas), and the
last layer is set so the landmarks sit at a face-like mean shape
(:func:`livefuse.testing.face_points.unit_face_106`) and move with the picture by a few
percent of the crop. They still do not follow a real mouth: tests that need an expression script
it (:mod:`livefuse.testing.face_points`).
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from livefuse.faces.landmarks106 import COUNT
from livefuse.imaging import atomic_write_bytes
from livefuse.testing.face_points import unit_face_106
from livefuse.testing.replicas import _lsuv, _photo_crops, _randomise_bn

INPUT = 192
EXPORT_OPSET = 11
INPUT_MEAN, INPUT_SCALE = 127.5, 1.0 / 128.0
"""What the graph's own first nodes do to the 0..255 input (mxnet exports subtract 127.5 and
multiply by 1/128 before the first conv)."""

# MobileNet v1 blocks: (output channels, stride) at width 1.0, halved below
_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
           (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def _conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.PReLU(cout))


class Landmark106(nn.Module):
    """MobileNet-0.5 coordinate regressor; ``forward``: ``(N, 3, 192, 192)`` RGB 0..255 →
    ``(N, 212)``."""

    def __init__(self, width: float = 0.5, fixed_batch: bool = False) -> None:
        super().__init__()
        self.fixed_batch = fixed_batch
        layers = [_conv_bn(3, int(32 * width), 3, 2)]
        cin = int(32 * width)
        for c, s in _BLOCKS:
            cout = int(c * width)
            layers += [_conv_bn(cin, cin, 3, s, groups=cin), _conv_bn(cin, cout, 1, 1)]
            cin = cout
        layers.append(_conv_bn(cin, 64, 1, 1))
        self.features = nn.Sequential(*layers)
        self.fc1 = nn.Linear(64 * (INPUT // 32) ** 2, 2 * COUNT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - INPUT_MEAN) * INPUT_SCALE
        f = self.features(x)
        # some exports reshape to a constant (1, -1): their graph runs one image at a time
        return self.fc1(f.reshape(1, -1) if self.fixed_batch else torch.flatten(f, 1))


def random_landmark106(seed: int = 0, motion: float = 0.03) -> Landmark106:
    """A :class:`Landmark106` with seeded random weights: landmarks at a face-like mean shape,
    moving with the picture by ``motion`` (standard deviation, crop half-widths)."""
    gen = torch.Generator().manual_seed(seed)
    model = Landmark106().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * (2 / fan_in) ** 0.5)
            elif isinstance(m, nn.BatchNorm2d):
                _randomise_bn(m, gen)
            elif isinstance(m, nn.PReLU):
                m.weight.copy_(0.25 + 0.05 * torch.randn(m.weight.shape, generator=gen))
        model.fc1.weight.copy_(torch.randn(model.fc1.weight.shape, generator=gen))
        model.fc1.bias.zero_()
        crops = _photo_crops(INPUT) * 127.5 + 127.5  # the replicas' photo crops, as 0..255
        _lsuv(model, crops, skip={model.fc1})
        out = model(crops)
        model.fc1.weight.mul_(motion / float(out.std()))
        # the mean shape in crop units: eye distance half the crop's half-width, the face
        # centred on the crop (it is 1.5 bboxes wide)
        mean = unit_face_106() * 0.5 + (0.0, -0.25)
        model.fc1.bias.copy_(torch.from_numpy(mean.reshape(-1).astype(np.float32))
                             - model(crops).mean(0) + model.fc1.bias)
    return model


def build_landmark106_replica(path: str | Path, seed: int = 0, batch: int | None = 1,
                              fixed_reshape: bool = False) -> Path:
    """Write a random-weight 2d106det-signature model to ``path`` (atomically): input ``data``
    ``(batch, 3, 192, 192)`` (``batch=None``: a free batch dimension), output ``fc1``
    ``(batch, 212)``, the first nodes named as mxnet names them (``_minus0``, ``_mul0``), so
    insightface's ``Landmark`` takes the input as raw 0..255 RGB like the released file's.
    ``fixed_reshape``: the features are reshaped to the constant ``(1, -1)`` (a graph that runs
    one image at a time whatever its input says)."""
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = random_landmark106(seed)
    model.fixed_batch = fixed_reshape
    dyn = None if batch is not None else {"data": {0: "batch"}, "fc1": {0: "batch"}}
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = Path(tmp) / "export.onnx"
        torch.onnx.export(model, (torch.zeros(batch or 1, 3, INPUT, INPUT),), str(raw),
                          input_names=["data"], output_names=["fc1"], dynamo=False,
                          opset_version=EXPORT_OPSET, do_constant_folding=True,
                          dynamic_axes=dyn)
        proto = onnx.load(str(raw))
    for node in proto.graph.node[:4]:
        if node.op_type == "Sub":
            node.name = "_minus0"
        elif node.op_type == "Mul":
            node.name = "_mul0"
    onnx.checker.check_model(proto)
    atomic_write_bytes(path, proto.SerializeToString())
    return path


__all__ = ["INPUT", "Landmark106", "build_landmark106_replica", "random_landmark106"]
