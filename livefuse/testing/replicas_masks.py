"""Random-weight replicas of the mask and enhancer models, with the released files' signatures.

No weights can be downloaded in CI, so the mask and enhancer code is proved on graphs that have
the real files' input/output names, shapes, layouts and value ranges (see the catalog rows'
``layout``), with seeded weights and a few hand-set ones so the outputs are not degenerate:

* :class:`XSegReplica` (occluder, DeepFaceLab XSeg contract): ``in_face:0`` ``(N, 256, 256, 3)``
  NHWC BGR in [0, 1] → ``out_mask:0`` ``(N, 256, 256, 1)`` in [0, 1], 1 = face. Besides a small
  random encoder-decoder it holds a colour detector set by hand: pixels near :data:`KEY_BGR` read
  as "occluded", so a test can draw an occluder the replica sees. It proves the plumbing (resize,
  layout, mapping back), never the real model's accuracy.
* :class:`BiSeNetReplica` (face parser, yakhyo/face-parsing BiSeNet contract): ``input``
  ``(N, 3, 512, 512)`` ImageNet-normalised RGB → ``output`` ``(N, 19, 512, 512)`` logits plus two
  auxiliary heads, upsampled from 1/8 resolution with ``align_corners=True`` like the original.
  A face-layout prior in ArcFace-aligned coordinates (skin, brows, eyes, nose, lips, mouth, hair,
  neck) is held as a buffer, so a real aligned face parses into several classes; dark pixels in
  the mouth band read as the inner mouth (class 11).
* :class:`UNetEnhancerReplica` (enhancer, CI size): the GFPGAN/GPEN signature below on a few
  convs at 1/8 resolution plus a residual, so the output stays near the input in [-1, 1].
* :class:`GFPGANReplica` (enhancer, benchmark): the GFPGAN v1.4 architecture
  (``GFPGANv1Clean``): a U-Net encoder whose 4×4 bottleneck gives 16 style vectors through one
  linear layer, a StyleGAN2 decoder of modulated 3×3 convs with demodulation and per-layer noise,
  and spatial feature transforms from the U-Net decoder on half of each decoder layer's channels.
  Exported like the released file: ``input`` ``(1, 3, 512, 512)`` RGB in [-1, 1] → ``output``
  ``(1, 3, 512, 512)``. ``width=1`` is the full-size model (86 M parameters, 84 M of them in the
  graph: the unused style MLP is dropped on export) for the GPU benchmark; tests use a small
  ``width``. Written from the published description of the architecture (Wang et al., CVPR 2021;
  Karras et al., CVPR 2020), with fixed noise buffers (deterministic, capturable).

Exports use the TorchScript exporter (``dynamo=False``); the opsets are those the released files
are reported with (XSeg: a tf2onnx conversion, 13 here; BiSeNet: 15; GFPGAN: 11).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from livefuse.imaging import atomic_write_bytes
from livefuse.models.graph_runner import GraphIO

XSEG_SIZE = 256
PARSER_SIZE = 512
ENHANCER_SIZE = 512
PARSER_CLASSES = 19
KEY_BGR = (230, 80, 30)
"""The occluder replica's "occluded" colour (uint8 BGR): a saturated blue, far from skin and not
symmetric in blue and red, so a channel-order mistake shows."""

XSEG_OPSET = 13
BISENET_OPSET = 15
GFPGAN_OPSET = 11

XSEG_IO = GraphIO(("in_face:0",), ((None, XSEG_SIZE, XSEG_SIZE, 3),), ("out_mask:0",),
                  ((None, XSEG_SIZE, XSEG_SIZE, 1),))
BISENET_IO = GraphIO(("input",), (("batch_size", 3, PARSER_SIZE, PARSER_SIZE),),
                     ("output", "aux16", "aux32"),
                     tuple(("batch_size", PARSER_CLASSES, PARSER_SIZE, PARSER_SIZE)
                           for _ in range(3)))
GFPGAN_IO = GraphIO(("input",), ((1, 3, ENHANCER_SIZE, ENHANCER_SIZE),), ("output",),
                    ((1, 3, ENHANCER_SIZE, ENHANCER_SIZE),))


def _seeded_init(module: nn.Module, seed: int, scale: float = 1.0) -> None:
    """Uniform ±scale/sqrt(fan_in) for every parameter (biases by their own size), seeded."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            fan = p[0].numel() if p.ndim > 1 else p.numel()
            p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * scale / math.sqrt(max(fan, 1)))


# ------------------------------------------------------------------------------------ occluder

class XSegReplica(nn.Module):
    """Occluder with the XSeg signature; see the module docstring."""

    def __init__(self, key_bgr: tuple[int, int, int] = KEY_BGR, width: int = 8) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1), nn.ReLU(),
            nn.Conv2d(width, width, 3, 2, 1), nn.ReLU(),
            nn.ConvTranspose2d(width, width, 4, 2, 1), nn.ReLU(),
            nn.ConvTranspose2d(width, 1, 4, 2, 1))
        # colour detector: how far a pixel is towards the key colour along its dominant channel
        self.detect = nn.Conv2d(3, 1, 1)
        self.key = tuple(k / 255.0 for k in key_bgr)

    def set_detector(self) -> None:
        """Hand-set the detector: ``dominant - mean(others) - 0.35`` over the key colour's
        channels."""
        dom = int(np.argmax(self.key))
        w = torch.full((3,), -0.5)
        w[dom] = 1.0
        assert self.detect.bias is not None
        with torch.no_grad():
            self.detect.weight.copy_(w.view(1, 3, 1, 1))
            self.detect.bias.fill_(-0.35)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2)  # NHWC -> NCHW, as the TF-converted graph transposes
        occluded = F.relu(self.detect(x))
        logit = 5.0 - 40.0 * occluded + 0.3 * self.body(x)
        return torch.sigmoid(logit).permute(0, 2, 3, 1)


def random_xseg(seed: int = 0, key_bgr: tuple[int, int, int] = KEY_BGR) -> XSegReplica:
    model = XSegReplica(key_bgr)
    _seeded_init(model, seed)
    model.set_detector()
    return model.eval()


# -------------------------------------------------------------------------------------- parser

# (class, cx, cy, rx, ry, strength) in ArcFace-128-aligned crop units (0..1), later ones win.
_LAYOUT = (
    (1, 0.50, 0.56, 0.37, 0.48, 3.0),    # skin
    (2, 0.36, 0.33, 0.09, 0.025, 6.0),   # left eyebrow (image-left)
    (3, 0.64, 0.33, 0.09, 0.025, 6.0),   # right eyebrow
    (4, 0.36, 0.40, 0.06, 0.025, 6.0),   # left eye
    (5, 0.64, 0.40, 0.06, 0.025, 6.0),   # right eye
    (10, 0.50, 0.51, 0.07, 0.09, 5.0),   # nose
    (12, 0.50, 0.69, 0.12, 0.025, 6.0),  # upper lip
    (13, 0.50, 0.76, 0.12, 0.03, 6.0),   # lower lip
    (11, 0.50, 0.725, 0.10, 0.018, 6.5),  # mouth (inner)
    (17, 0.50, -0.05, 0.60, 0.16, 4.0),  # hair
    (14, 0.50, 1.08, 0.22, 0.14, 4.0),   # neck
)
_MOUTH = 11


def layout_prior(size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``(19, size, size)`` class logits of a frontal face in ArcFace-aligned coordinates, and the
    ``(size, size)`` band where a dark pixel reads as the inner mouth."""
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32)
    u, v = (xs + 0.5) / size, (ys + 0.5) / size
    prior = np.zeros((PARSER_CLASSES, size, size), np.float32)
    for cls, cx, cy, rx, ry, k in _LAYOUT:
        d = np.sqrt(((u - cx) / rx) ** 2 + ((v - cy) / ry) ** 2)
        prior[cls] = np.maximum(prior[cls], k / (1.0 + np.exp(np.clip((d - 1.0) * 8.0, -30, 30))))
    band = ((np.abs(u - 0.5) < 0.12) & (np.abs(v - 0.725) < 0.06)).astype(np.float32)
    return prior, band


class BiSeNetReplica(nn.Module):
    """Face parser with the BiSeNet signature; see the module docstring."""

    prior: torch.Tensor
    mouth_band: torch.Tensor
    mouth_onehot: torch.Tensor

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(w, 2 * w, 3, 2, 1), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(2 * w, 2 * w, 3, 2, 1), nn.ReLU())
        self.head = nn.Conv2d(2 * w, PARSER_CLASSES, 1)
        self.aux16 = nn.Conv2d(2 * w, PARSER_CLASSES, 1)
        self.aux32 = nn.Conv2d(2 * w, PARSER_CLASSES, 1)
        prior, band = layout_prior(PARSER_SIZE // 8)
        self.register_buffer("prior", torch.from_numpy(prior)[None])
        self.register_buffer("mouth_band", torch.from_numpy(band)[None, None])
        onehot = torch.zeros(1, PARSER_CLASSES, 1, 1)
        onehot[0, _MOUTH] = 12.0
        self.register_buffer("mouth_onehot", onehot)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, w = int(x.shape[2]), int(x.shape[3])
        f4 = self.stem(x)
        f8 = self.down(f4)
        small = F.avg_pool2d(x, 8)
        dark = F.relu(-small.mean(1, keepdim=True) - 0.8)  # ImageNet-normalised: dark is < -0.8
        logits = self.prior + 0.3 * self.head(f8) + self.mouth_onehot * dark * self.mouth_band
        aux16 = self.prior + 0.3 * self.aux16(f8)
        aux32 = self.prior + 0.3 * self.aux32(F.avg_pool2d(f4, 2))

        def up(t: torch.Tensor) -> torch.Tensor:
            return F.interpolate(t, (h, w), mode="bilinear", align_corners=True)

        return up(logits), up(aux16), up(aux32)


def random_bisenet(seed: int = 0) -> BiSeNetReplica:
    model = BiSeNetReplica()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan = p[0].numel() if p.ndim > 1 else p.numel()
            p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) / math.sqrt(max(fan, 1)))
            if name.endswith("bias"):
                p.zero_()
    return model.eval()


# ------------------------------------------------------------------------------------ enhancer

class UNetEnhancerReplica(nn.Module):
    """Enhancer with the GFPGAN signature at CI cost: ``(N, 3, 512, 512)`` in [-1, 1] → same shape,
    ``x + 0.25 * tanh(U-Net(x))`` (a small encoder-decoder at 1/2 to 1/8 resolution)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        w = width
        self.enc1 = nn.Conv2d(3, w, 3, 2, 1)
        self.enc2 = nn.Conv2d(w, 2 * w, 3, 2, 1)
        self.enc3 = nn.Conv2d(2 * w, 2 * w, 3, 2, 1)
        self.dec2 = nn.Conv2d(4 * w, w, 3, 1, 1)
        self.dec1 = nn.Conv2d(2 * w, w, 3, 1, 1)
        self.out = nn.Conv2d(w, 3, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = F.leaky_relu(self.enc1(x), 0.2)
        e2 = F.leaky_relu(self.enc2(e1), 0.2)
        e3 = F.leaky_relu(self.enc3(e2), 0.2)
        d2 = F.interpolate(e3, scale_factor=2.0, mode="bilinear", align_corners=False)
        d2 = F.leaky_relu(self.dec2(torch.cat([d2, e2], 1)), 0.2)
        d1 = F.interpolate(d2, scale_factor=2.0, mode="bilinear", align_corners=False)
        d1 = F.leaky_relu(self.dec1(torch.cat([d1, e1], 1)), 0.2)
        d0 = F.interpolate(d1, scale_factor=2.0, mode="bilinear", align_corners=False)
        return x + 0.25 * torch.tanh(self.out(d0))


def random_unet_enhancer(seed: int = 0) -> UNetEnhancerReplica:
    model = UNetEnhancerReplica()
    _seeded_init(model, seed, scale=1.5)
    return model.eval()


def _ch(n: float) -> int:
    return max(4, int(n))


class ModulatedConv(nn.Module):
    """StyleGAN2 modulated conv: per-sample weights scaled by the style, optionally demodulated;
    ``upsample`` doubles the input bilinearly first (the "clean" variant, no custom CUDA ops)."""

    def __init__(self, cin: int, cout: int, k: int, style_dim: int, demodulate: bool = True,
                 upsample: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, cout, cin, k, k) / math.sqrt(cin * k * k))
        self.modulation = nn.Linear(style_dim, cin)
        self.demodulate, self.upsample, self.pad = demodulate, upsample, k // 2
        self.cin, self.cout, self.k = cin, cout, k

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        b = int(x.shape[0])
        s = self.modulation(style).view(b, 1, self.cin, 1, 1)
        w = self.weight * s
        if self.demodulate:
            w = w * torch.rsqrt(w.pow(2).sum([2, 3, 4]) + 1e-8).view(b, self.cout, 1, 1, 1)
        w = w.view(b * self.cout, self.cin, self.k, self.k)
        if self.upsample:
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        h, wd = int(x.shape[2]), int(x.shape[3])
        out = F.conv2d(x.reshape(1, b * self.cin, h, wd), w, padding=self.pad, groups=b)
        return out.view(b, self.cout, h, wd)


class StyleConv(nn.Module):
    noise: torch.Tensor

    def __init__(self, cin: int, cout: int, style_dim: int, upsample: bool, res: int) -> None:
        super().__init__()
        self.conv = ModulatedConv(cin, cout, 3, style_dim, upsample=upsample)
        self.noise_strength = nn.Parameter(torch.zeros(1))
        self.bias = nn.Parameter(torch.zeros(1, cout, 1, 1))
        self.register_buffer("noise", torch.randn(1, 1, res, res))

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        out = self.conv(x, style) * math.sqrt(2.0)
        out = out + self.noise_strength * self.noise + self.bias
        return F.leaky_relu(out, 0.2)


class ToRGB(nn.Module):
    def __init__(self, cin: int, style_dim: int) -> None:
        super().__init__()
        self.conv = ModulatedConv(cin, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x: torch.Tensor, style: torch.Tensor,
                skip: torch.Tensor | None) -> torch.Tensor:
        out = self.conv(x, style) + self.bias
        if skip is not None:
            out = out + F.interpolate(skip, scale_factor=2.0, mode="bilinear",
                                      align_corners=False)
        return out


class ResBlock(nn.Module):
    """U-Net block: conv, bilinear resample (×0.5 or ×2), conv, plus a resampled 1×1 skip."""

    def __init__(self, cin: int, cout: int, scale: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cin, 3, 1, 1)
        self.conv2 = nn.Conv2d(cin, cout, 3, 1, 1)
        self.skip = nn.Conv2d(cin, cout, 1, bias=False)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.leaky_relu(self.conv1(x), 0.2)
        out = F.interpolate(out, scale_factor=self.scale, mode="bilinear", align_corners=False)
        out = F.leaky_relu(self.conv2(out), 0.2)
        x = F.interpolate(x, scale_factor=self.scale, mode="bilinear", align_corners=False)
        return out + self.skip(x)


class GFPGANReplica(nn.Module):
    """The GFPGAN v1.4 (``GFPGANv1Clean``) architecture; ``width`` scales every channel count.

    ``forward(x)``: ``(N, 3, 512, 512)`` RGB in [-1, 1] → ``(N, 3, 512, 512)`` (unbounded; the
    caller clips to [-1, 1]).
    """

    def __init__(self, width: float = 1.0, size: int = ENHANCER_SIZE) -> None:
        super().__init__()
        self.log_size = int(math.log2(size))
        self.style_dim = _ch(512 * width) if width < 1 else 512
        levels = range(2, self.log_size + 1)  # 4 .. size
        # U-Net (narrow 0.5) and StyleGAN2 decoder (channel multiplier 2) channel counts
        unet = {2 ** i: _ch(c * width) for i, c in zip(
            levels, (256, 256, 256, 256, 256, 128, 64, 32, 16), strict=False)}
        dec = {2 ** i: 2 * unet[2 ** i] for i in levels}
        self.num_latent = self.log_size * 2 - 2
        self.conv_body_first = nn.Conv2d(3, unet[size], 1)
        self.conv_body_down = nn.ModuleList(
            ResBlock(unet[2 ** i], unet[2 ** (i - 1)], 0.5) for i in range(self.log_size, 2, -1))
        self.final_conv = nn.Conv2d(unet[4], unet[4], 3, 1, 1)
        self.conv_body_up = nn.ModuleList(
            ResBlock(unet[2 ** (i - 1)], unet[2 ** i], 2.0) for i in range(3, self.log_size + 1))
        self.final_linear = nn.Linear(unet[4] * 16, self.num_latent * self.style_dim)

        def sft() -> nn.ModuleList:
            return nn.ModuleList(
                nn.Sequential(nn.Conv2d(unet[2 ** i], unet[2 ** i], 3, 1, 1),
                              nn.LeakyReLU(0.2), nn.Conv2d(unet[2 ** i], dec[2 ** i] // 2, 3, 1, 1))
                for i in range(3, self.log_size + 1))

        self.condition_scale, self.condition_shift = sft(), sft()
        # StyleGAN2 decoder ("CSFT": spatial feature transform on half the channels)
        self.style_mlp = nn.Sequential(*[m for _ in range(8) for m in (
            nn.Linear(self.style_dim, self.style_dim), nn.LeakyReLU(0.2))])  # unused: latent input
        self.constant_input = nn.Parameter(torch.randn(1, dec[4], 4, 4))
        self.style_conv1 = StyleConv(dec[4], dec[4], self.style_dim, False, 4)
        self.to_rgb1 = ToRGB(dec[4], self.style_dim)
        self.style_convs = nn.ModuleList()
        self.to_rgbs = nn.ModuleList()
        cin = dec[4]
        for i in range(3, self.log_size + 1):
            cout = dec[2 ** i]
            self.style_convs.append(StyleConv(cin, cout, self.style_dim, True, 2 ** i))
            self.style_convs.append(StyleConv(cout, cout, self.style_dim, False, 2 ** i))
            self.to_rgbs.append(ToRGB(cout, self.style_dim))
            cin = cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = int(x.shape[0])
        feat = F.leaky_relu(self.conv_body_first(x), 0.2)
        skips: list[torch.Tensor] = []
        for block in self.conv_body_down:
            feat = block(feat)
            skips.insert(0, feat)
        feat = F.leaky_relu(self.final_conv(feat), 0.2)
        latent = self.final_linear(feat.reshape(b, -1)).view(b, self.num_latent, self.style_dim)
        conditions = []
        for i, block in enumerate(self.conv_body_up):
            feat = block(feat + skips[i])
            conditions.append((self.condition_scale[i](feat), self.condition_shift[i](feat)))
        out = self.style_conv1(self.constant_input.expand(b, -1, -1, -1), latent[:, 0])
        skip = self.to_rgb1(out, latent[:, 1], None)
        k = 1
        for j, to_rgb in enumerate(self.to_rgbs):
            out = self.style_convs[2 * j](out, latent[:, k])
            scale, shift = conditions[j]
            half = int(out.shape[1]) // 2
            out = torch.cat([out[:, :half], out[:, half:] * scale + shift], dim=1)
            out = self.style_convs[2 * j + 1](out, latent[:, k + 1])
            skip = to_rgb(out, latent[:, k + 2], skip)
            k += 2
        return skip


def random_gfpgan(width: float = 0.0625, seed: int = 0) -> GFPGANReplica:
    """A :class:`GFPGANReplica` with seeded weights whose output spreads over about [-1, 1]:
    convs and linears uniform ±1/sqrt(fan_in), style modulation biases 1 (as StyleGAN2
    initialises them), noise strengths small, the to-RGB weights damped (a trained model's
    output layers are small too)."""
    torch.manual_seed(seed)  # the randn-initialised parameters and noise buffers
    model = GFPGANReplica(width)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.ndim == 5:
                continue  # modulated weights keep their randn / sqrt(fan_in)
            if name == "constant_input":
                continue
            fan = p[0].numel() if p.ndim > 1 else p.numel()
            p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) / math.sqrt(max(fan, 1)))
        for m in model.modules():
            if isinstance(m, ModulatedConv):
                m.modulation.bias.fill_(1.0)
                m.modulation.weight.mul_(0.3)
            if isinstance(m, StyleConv):
                m.noise_strength.fill_(0.02)
            if isinstance(m, ToRGB):
                m.conv.weight.mul_(0.15)
        model.final_linear.weight.mul_(0.5)
    return model.eval()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# -------------------------------------------------------------------------------------- export

def _export(model: nn.Module, example: torch.Tensor, path: str | Path, io: GraphIO, opset: int,
            dynamic_batch: bool, output_names: tuple[str, ...] | None = None) -> Path:
    import onnx

    model = model.float().eval().cpu()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(output_names if output_names is not None else io.output_names)
    axes: dict[str, dict[int, str]] | None = None
    if dynamic_batch:
        axes = {io.input_names[0]: {0: "batch_size"}}
        axes.update({n: {0: "batch_size"} for n in names})
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = Path(tmp) / "export.onnx"
        torch.onnx.export(model, (example,), str(raw), input_names=list(io.input_names),
                          output_names=names, opset_version=opset, dynamo=False,
                          do_constant_folding=True, dynamic_axes=axes)
        proto = onnx.load(str(raw))
    onnx.checker.check_model(proto)
    atomic_write_bytes(path, proto.SerializeToString())
    return path


def export_xseg(model: XSegReplica, path: str | Path) -> Path:
    """Write the occluder replica with the XSeg signature (dynamic batch, NHWC)."""
    ex = torch.rand(1, XSEG_SIZE, XSEG_SIZE, 3)
    return _export(model, ex, path, XSEG_IO, XSEG_OPSET, dynamic_batch=True)


def export_bisenet(model: BiSeNetReplica, path: str | Path) -> Path:
    """Write the parser replica with the BiSeNet signature (dynamic batch; only the first output
    is named ``output``; the auxiliary heads get the exporter's numeric names, as released)."""
    ex = torch.randn(1, 3, PARSER_SIZE, PARSER_SIZE)
    return _export(model, ex, path, BISENET_IO, BISENET_OPSET, dynamic_batch=True,
                   output_names=("output",))


def export_gfpgan(model: nn.Module, path: str | Path) -> Path:
    """Write an enhancer replica (:class:`GFPGANReplica` or :class:`UNetEnhancerReplica`) with the
    GFPGAN v1.4 signature (batch fixed at 1, as in the released file)."""
    ex = torch.rand(1, 3, ENHANCER_SIZE, ENHANCER_SIZE) * 2 - 1
    return _export(model, ex, path, GFPGAN_IO, GFPGAN_OPSET, dynamic_batch=False)


def build_replica(kind: str, path: str | Path, seed: int = 0, **options: Any) -> Path:
    """Write a random-weight replica: ``kind`` is ``occluder``, ``parser``, ``enhancer`` (the
    small U-Net) or ``gfpgan`` (the GFPGAN architecture; ``width=1.0`` is full size)."""
    if kind == "occluder":
        return export_xseg(random_xseg(seed, **options), path)
    if kind == "parser":
        return export_bisenet(random_bisenet(seed), path)
    if kind == "enhancer":
        return export_gfpgan(random_unet_enhancer(seed), path)
    if kind == "gfpgan":
        return export_gfpgan(random_gfpgan(seed=seed, **options), path)
    raise ValueError(f"unknown replica kind {kind!r}: occluder, parser, enhancer or gfpgan")


__all__ = ["BISENET_IO", "ENHANCER_SIZE", "GFPGAN_IO", "KEY_BGR", "PARSER_SIZE", "XSEG_IO",
           "XSEG_SIZE", "BiSeNetReplica", "GFPGANReplica", "UNetEnhancerReplica", "XSegReplica",
           "build_replica",
           "count_parameters", "export_bisenet", "export_gfpgan", "export_xseg", "layout_prior",
           "random_bisenet", "random_gfpgan", "random_unet_enhancer", "random_xseg"]
