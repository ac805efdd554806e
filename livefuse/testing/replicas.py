"""Same-architecture replicas of SCRFD-10GF (det_10g) and ArcFace IResNet-50 (w600k_r50), with
seeded random weights, exported to ONNX.

No real weights can be downloaded in CI, so the PyTorch face models are proved differentially:
the same random-weight graph is run by insightface's own classes (onnxruntime) and by livefuse's
ports. The replicas have the released files' architecture, op pattern, input and output
signatures, parameter count and cost, so what runs (and how fast) is what the real files make
run.

SCRFD-10GF with keypoints (insightface ``detection/scrfd/configs/scrfd/scrfd_10g_bnkps.py``)
    * backbone ResNetV1e (``mmdet/models/backbones/resnet.py``): a deep stem of three 3×3 convs
      (3→28 stride 2, 28→28, 28→56), 2×2 max pool, then BasicBlock stages of (3, 4, 2, 3)
      blocks with (56, 88, 88, 224) channels at strides 4, 8, 16, 32; a downsampling shortcut is
      a 2×2 average pool (ceil mode, padding not counted) and a 1×1 conv;
    * neck PAFPN on the last three stages (start_level 1), 56 channels, no activations: 1×1
      laterals, nearest top-down upsampling to the finer map's size (exported as a
      ``Shape``/``Resize`` chain), 3×3 output convs, a bottom-up path of 3×3 stride-2 convs and
      3×3 convs;
    * head SCRFDHead (``mmdet/models/dense_heads/scrfd_head.py``) with ``strides_share=False``:
      per stride 8/16/32 three 3×3 conv-BN-ReLU of 80 channels shared by the classification,
      box and keypoint branches (``cls_reg_share``), then 3×3 convs giving per cell 2 anchors ×
      (1 score, 4 distances, 10 kps offsets); a learnt scale multiplies the distances
      (``scale_mode=2``); the score goes through a sigmoid in the export.
    * Every BN is folded into its conv, as the released export has it.
    4.23 M parameters (a 16.9 MB file, as the released det_10g.onnx); 13.3 G multiply-adds at
    640×640, 10.0 G at 640×480 (the VGA size SCRFD's "10 GF" refers to). Exported at opset 11
    as ``tools/scrfd2onnx.py`` does: input ``input.1`` ``(1, 3, H, W)`` with H and W free;
    outputs ``score_8, score_16, score_32, bbox_8, …, kps_32`` in insightface's order, scores
    ``(H/s·W/s·2, 1)``, distances ``(…, 4)`` in strides, kps ``(…, 10)`` (2-d, not batched,
    like buffalo_l's file).

ArcFace IResNet-50 (insightface ``recognition/arcface_torch/backbones/iresnet.py``)
    3×3 conv 3→64, BN, PReLU; IBasicBlock stages [3, 4, 14, 3] at 64/128/256/512 channels, each
    stage's first block with stride 2 (block: BN, 3×3 conv, BN, PReLU, 3×3 conv (stride), BN,
    plus the shortcut, a 1×1 conv and BN where the shape changes); BN, flatten,
    Linear(512·7·7 → 512), BatchNorm1d. 43.6 M parameters (the released w600k_r50.onnx is
    174 MB). Input ``input.1`` ``(N, 3, 112, 112)``, output ``(N, 512)``.

Random weights are chosen so the outputs are not degenerate and behave like a trained network's
under rounding: every conv is rescaled in order on real photos (:func:`calibration_frames`) so
that its output has unit spread (LSUV, Mishkin & Matas 2016), residual branches at
:data:`RESIDUAL_SCALE` of that (a random deep net with full-size branches amplifies rounding
errors like no trained one); each SCRFD stride's score bias puts the 0.5 threshold in the widest
gap of its anchors' scores on those photos (a few candidates per 10,000 anchors, none within
rounding error of the threshold), the distance and kps biases give boxes of 3 to 8 strides and a
face-like kps layout; the ArcFace feature statistics are centred on crops of the photos, so
embeddings of different faces differ.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

from livefuse.imaging import atomic_write_bytes

SCRFD_STRIDES = (8, 16, 32)
SCRFD_ANCHORS = 2
EXPORT_OPSET = 11
"""The opset of the released SCRFD export (insightface ``tools/scrfd2onnx.py``)."""

RESIDUAL_SCALE = 0.2
"""Output spread of each residual branch relative to the signal it is added to."""

SCORE_SPREAD = 0.15
"""Spread (standard deviation on the calibration photos) of the score logits."""

KPS_TEMPLATE = np.array([[-0.45, -0.35], [0.45, -0.35], [0.0, 0.1], [-0.35, 0.55],
                         [0.35, 0.55]], np.float32)
"""Kps offsets from the anchor centre, in units of the box half-size (insightface kps order:
eyes, nose, mouth corners)."""


def _conv(cin: int, cout: int, k: int = 3, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride, k // 2, bias=True)


class _BasicBlock(nn.Module):
    """mmdet BasicBlock with folded BNs; ResNetV1e's average-pool shortcut when downsampling."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = _conv(cin, cout, 3, stride)
        self.conv2 = _conv(cout, cout)
        self.pool = stride != 1
        self.down = _conv(cin, cout, 1) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(F.relu(self.conv1(x)))
        s = x
        if self.pool:
            s = F.avg_pool2d(s, 2, 2, ceil_mode=True, count_include_pad=False)
        if self.down is not None:
            s = self.down(s)
        return F.relu(y + s)


class Scrfd10g(nn.Module):
    """SCRFD-10GF with keypoints (``scrfd_10g_bnkps``), BNs folded; see the module docstring.

    ``forward(x)``: ``(N, 3, H, W)`` normalised RGB (H, W multiples of 32) → 9 tensors in
    insightface's output order, 2-d (``N·H/s·W/s·2`` rows).
    """

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.ModuleList([_conv(3, 28, 3, 2), _conv(28, 28), _conv(28, 56)])
        blocks, planes = (3, 4, 2, 3), (56, 88, 88, 224)
        stages = []
        cin = 56
        for i, (n, c) in enumerate(zip(blocks, planes, strict=True)):
            stages.append(nn.Sequential(*[_BasicBlock(cin if j == 0 else c, c,
                                                      2 if (i > 0 and j == 0) else 1)
                                          for j in range(n)]))
            cin = c
        self.stages = nn.ModuleList(stages)
        ch = 56
        self.lateral = nn.ModuleList([_conv(c, ch, 1) for c in planes[1:]])
        self.fpn = nn.ModuleList([_conv(ch, ch) for _ in planes[1:]])
        self.down = nn.ModuleList([_conv(ch, ch, 3, 2) for _ in planes[2:]])
        self.pafpn = nn.ModuleList([_conv(ch, ch) for _ in planes[2:]])
        feat = 80
        self.tower = nn.ModuleList([nn.Sequential(_conv(ch, feat), nn.ReLU(), _conv(feat, feat),
                                                  nn.ReLU(), _conv(feat, feat), nn.ReLU())
                                    for _ in SCRFD_STRIDES])
        self.cls = nn.ModuleList([_conv(feat, SCRFD_ANCHORS) for _ in SCRFD_STRIDES])
        self.reg = nn.ModuleList([_conv(feat, 4 * SCRFD_ANCHORS) for _ in SCRFD_STRIDES])
        self.kps = nn.ModuleList([_conv(feat, 10 * SCRFD_ANCHORS) for _ in SCRFD_STRIDES])
        self.scales = nn.Parameter(torch.ones(len(SCRFD_STRIDES)))

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The neck's outputs at strides 8, 16, 32."""
        for conv in self.stem:
            x = F.relu(conv(x))
        x = F.max_pool2d(x, 2, 2)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        lat = [conv(f) for conv, f in zip(self.lateral, outs[1:], strict=True)]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], size=lat[i - 1].shape[2:],
                                                    mode="nearest")
        inter = [conv(t) for conv, t in zip(self.fpn, lat, strict=True)]
        for i in range(len(inter) - 1):
            inter[i + 1] = inter[i + 1] + self.down[i](inter[i])
        return [inter[0]] + [conv(t) for conv, t in zip(self.pafpn, inter[1:], strict=True)]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        scores, boxes, kpss = [], [], []
        for i, feat in enumerate(self.features(x)):
            f = self.tower[i](feat)
            scores.append(self.cls[i](f).permute(0, 2, 3, 1).reshape(-1, 1).sigmoid())
            boxes.append((self.reg[i](f) * self.scales[i]).permute(0, 2, 3, 1).reshape(-1, 4))
            kpss.append(self.kps[i](f).permute(0, 2, 3, 1).reshape(-1, 10))
        return (*scores, *boxes, *kpss)


class _IBasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin, eps=1e-5)
        self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout, eps=1e-5)
        self.prelu = nn.PReLU(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout, eps=1e-5)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                  nn.BatchNorm2d(cout, eps=1e-5)) \
            if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
        return y + (x if self.down is None else self.down(x))


class IResNet50(nn.Module):
    """ArcFace IResNet-50; ``forward``: ``(N, 3, 112, 112)`` in [-1, 1] RGB → ``(N, 512)``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64, eps=1e-5)
        self.prelu = nn.PReLU(64)
        layers = []
        cin = 64
        for n, c in zip((3, 4, 14, 3), (64, 128, 256, 512), strict=True):
            layers.append(nn.Sequential(*[_IBasicBlock(cin if j == 0 else c, c,
                                                       2 if j == 0 else 1) for j in range(n)]))
            cin = c
        self.layers = nn.Sequential(*layers)
        self.bn2 = nn.BatchNorm2d(512, eps=1e-5)
        self.fc = nn.Linear(512 * 7 * 7, 512)
        self.features = nn.BatchNorm1d(512, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.prelu(self.bn1(self.conv1(x))))
        return self.features(self.fc(torch.flatten(self.bn2(x), 1)))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def conv_macs(model: nn.Module, x: torch.Tensor) -> int:
    """Multiply-adds of the convs and linears of one forward on ``x``."""
    total = 0

    def hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal total
        if isinstance(m, nn.Conv2d):
            total += out.numel() * m.in_channels // m.groups * m.kernel_size[0] * \
                m.kernel_size[1]
        elif isinstance(m, nn.Linear):
            total += out.numel() * m.in_features

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, nn.Conv2d | nn.Linear)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return total


# ----------------------------------------------------------------------------------- weights

def calibration_frames() -> list[npt.NDArray[np.uint8]]:
    """The ``(H, W, 3) uint8 BGR`` frames the replicas are calibrated on (and livefuse's tests
    run on): insightface's ``t1.jpg`` (1280×886, six faces), the astronaut (512×512,
    scikit-image) and a 1920×1080 frame holding both."""
    from livefuse.imaging import load_image
    from livefuse.samples import astronaut, insightface_image

    t1 = load_image(insightface_image("t1.jpg")).bgr
    astro = astronaut()
    frame = np.zeros((1080, 1920, 3), np.uint8)
    frame[100:100 + t1.shape[0], 60:60 + t1.shape[1]] = t1
    frame[520:1032, 1380:1892] = astro
    return [t1, astro, frame]


def detector_input(frame: npt.NDArray[np.uint8], size: int = 640) -> torch.Tensor:
    """``(1, 3, size, size) float32``: ``frame`` letterboxed and normalised exactly as
    insightface's ``SCRFD.detect`` does (``cv2.resize`` INTER_LINEAR, top-left, black padding,
    ``(x - 127.5) / 128`` RGB)."""
    import cv2

    h, w = frame.shape[:2]
    if h / w > 1.0:
        nh, nw = size, max(1, int(size / (h / w)))
    else:
        nw, nh = size, max(1, int(size * (h / w)))
    img = np.zeros((size, size, 3), np.uint8)
    img[:nh, :nw] = cv2.resize(frame, (nw, nh))
    rgb = torch.from_numpy(np.ascontiguousarray(img[..., ::-1])).permute(2, 0, 1)[None]
    return (rgb.float() - 127.5) / 128.0


def _photo_crops(size: int) -> torch.Tensor:
    """``(8, 3, size, size)`` RGB crops in [-1, 1] of two calibration photos at a few places
    and scales (face-sized pieces of real photos for the recogniser's calibration)."""
    photos = torch.cat([detector_input(f, 512) for f in calibration_frames()[:2]]) * (128 / 127.5)
    crops = []
    for img in photos:
        for box in ((0, 0, 512), (160, 40, 192), (256, 256, 256), (64, 300, 160)):
            x, y, w = box
            crops.append(F.interpolate(img[None, :, y:y + w, x:x + w], size=(size, size),
                                       mode="bilinear", align_corners=False, antialias=True))
    return torch.cat(crops)


@torch.no_grad()
def _lsuv(model: nn.Module, x: torch.Tensor, skip: set[nn.Module],
          targets: dict[nn.Module, float] | None = None) -> None:
    """Rescale each conv (in execution order, during one forward) so that its output has
    standard deviation ``targets.get(conv, 1)`` and per-channel mean 0 (its bias absorbs it)."""
    targets = targets or {}

    def hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
        assert isinstance(m, nn.Conv2d)
        dims = (0, 2, 3)
        if m.bias is not None:
            mean = out.mean(dim=dims)
            out = out - mean[None, :, None, None]
            m.bias -= mean
        s = float(out.std()) / targets.get(m, 1.0)
        m.weight /= s
        if m.bias is not None:
            m.bias /= s
        return out / s

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, nn.Conv2d) and m not in skip]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()


def _threshold_gap(logits: torch.Tensor) -> float:
    """The logit to put at the score threshold, from ``logits`` ``(n_images, ...)`` of one
    stride: the middle of the widest gap between consecutive logits among the cuts leaving 1
    to 10 candidates per 10,000 anchors (at least 1 to 3 per image)."""
    n = logits.shape[0]
    top = torch.sort(logits.flatten(), descending=True).values
    lo = max(n, int(1e-4 * len(top)))
    hi = max(3 * n, int(1e-3 * len(top)))
    k = int(torch.argmax(top[lo - 1:hi - 1] - top[lo:hi])) + lo
    return float(top[k - 1] + top[k]) / 2


def random_scrfd(seed: int = 0) -> Scrfd10g:
    """An :class:`Scrfd10g` with seeded random weights whose outputs are not degenerate.

    Calibrated on :func:`calibration_frames` as the detector sees them (640×640): each stride's
    score bias puts the 0.5 threshold in the widest gap of the anchors' scores on those frames
    (a few candidates per 10,000 anchors), so no anchor there scores within rounding error
    of the threshold and a float16 run keeps the same candidates as a float32 one.
    """
    gen = torch.Generator().manual_seed(seed)
    model = Scrfd10g().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * (2 / fan_in) ** 0.5)
                assert m.bias is not None
                m.bias.zero_()
        heads: set[nn.Module] = set(model.cls) | set(model.reg) | set(model.kps)
        frames = calibration_frames()
        calib = torch.cat([detector_input(f) for f in frames])
        # small residual branches, as trained ResNets have (mmdet initialises them at zero):
        # a random deep net with full-size branches amplifies rounding errors like no trained
        # one does, which would make every fp16 comparison meaningless
        branch: dict[nn.Module, float] = {
            b.conv2: RESIDUAL_SCALE for b in model.modules() if isinstance(b, _BasicBlock)}
        towers: dict[int, torch.Tensor] = {}
        hooks = [t.register_forward_hook(lambda m, i, o, k=k: towers.__setitem__(k, o))
                 for k, t in enumerate(model.tower)]
        try:
            _lsuv(model, calib, skip=heads, targets=branch)
        finally:
            for h in hooks:
                h.remove()
        # the heads, from the calibrated towers' outputs in that same pass
        for i, f in sorted(towers.items()):
            cls, reg, kps = model.cls[i], model.reg[i], model.kps[i]
            assert isinstance(cls, nn.Conv2d) and isinstance(reg, nn.Conv2d)
            assert isinstance(kps, nn.Conv2d)
            for conv, spread in ((cls, SCORE_SPREAD), (reg, 0.3), (kps, 0.15)):
                assert conv.bias is not None
                conv.bias.zero_()
                conv.weight *= spread / float(conv(f).std())
            assert cls.bias is not None
            cls.bias -= _threshold_gap(cls(f))
            # anchor a of a cell has distances of (1.5, 2)·(a + 1) strides: boxes of 3 to 8
            # strides, like SCRFD's two anchor scales per stride
            assert reg.bias is not None and kps.bias is not None
            for a in range(SCRFD_ANCHORS):
                half = torch.tensor([1.5, 2.0, 1.5, 2.0]) * (a + 1)
                reg.bias[4 * a:4 * a + 4] = half
                kps.bias[10 * a:10 * a + 10] = torch.from_numpy(
                    (KPS_TEMPLATE * half[:2].numpy()).reshape(-1))
    return model


def _randomise_bn(bn: nn.BatchNorm1d | nn.BatchNorm2d, gen: torch.Generator) -> None:
    n = bn.num_features
    bn.weight.copy_(0.5 + torch.rand(n, generator=gen))
    bn.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    assert bn.running_mean is not None and bn.running_var is not None
    bn.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
    bn.running_var.copy_(0.5 + torch.rand(n, generator=gen))


def random_arcface(seed: int = 0) -> IResNet50:
    """An :class:`IResNet50` with seeded random weights whose embeddings are not degenerate."""
    gen = torch.Generator().manual_seed(seed)
    model = IResNet50().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.in_channels * m.kernel_size[0] * m.kernel_size[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * (2 / fan_in) ** 0.5)
            elif isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d):
                _randomise_bn(m, gen)
            elif isinstance(m, nn.PReLU):
                m.weight.copy_(0.25 + 0.05 * torch.randn(m.weight.shape, generator=gen))
        model.fc.weight.copy_(torch.randn(model.fc.weight.shape, generator=gen)
                              * (1 / model.fc.in_features) ** 0.5)
        model.fc.bias.zero_()
        embs: list[torch.Tensor] = []
        hook = model.fc.register_forward_hook(lambda m, i, o: embs.append(o))
        try:
            _lsuv(model, _photo_crops(112), skip=set())
        finally:
            hook.remove()
        # centre and scale the embedding on the calibration crops (a trained model's feature
        # statistics are centred on faces): embeddings of different crops then differ
        emb = embs[0]
        model.features.running_mean.copy_(emb.mean(0))  # type: ignore[union-attr]
        model.features.running_var.copy_(emb.var(0) + 1e-3)  # type: ignore[union-attr]
        model.features.weight.fill_(1.0)
        model.features.bias.zero_()
    return model


# ----------------------------------------------------------------------------------- export

def _export(model: nn.Module, example: torch.Tensor, path: str | Path, output_names: list[str],
            dynamic_axes: dict[str, dict[int, str]]) -> Path:
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = Path(tmp) / "export.onnx"
        torch.onnx.export(model.eval(), (example,), str(raw), input_names=["input.1"],
                          output_names=output_names, opset_version=EXPORT_OPSET, dynamo=False,
                          do_constant_folding=True, dynamic_axes=dynamic_axes)
        proto = onnx.load(str(raw))
    onnx.checker.check_model(proto)
    atomic_write_bytes(path, proto.SerializeToString())
    return path


def scrfd_output_names() -> list[str]:
    """Output names of the replica: scores, distances and kps per stride, insightface's order."""
    return [f"{kind}_{s}" for kind in ("score", "bbox", "kps") for s in SCRFD_STRIDES]


def build_scrfd_replica(path: str | Path, seed: int = 0) -> Path:
    """Write a random-weight SCRFD-10GF (det_10g architecture) to ``path`` (written atomically).

    Input ``input.1`` ``(1, 3, H, W)`` with free H and W; outputs as the released file (see the
    module docstring).
    """
    model = random_scrfd(seed)
    return _export(model, torch.zeros(1, 3, 640, 640), path, scrfd_output_names(),
                   {"input.1": {2: "height", 3: "width"}})


def build_arcface_replica(path: str | Path, seed: int = 0) -> Path:
    """Write a random-weight ArcFace IResNet-50 (w600k_r50 architecture) to ``path``.

    Input ``input.1`` ``(N, 3, 112, 112)``, output ``683`` ``(N, 512)`` (written atomically).
    """
    model = random_arcface(seed)
    return _export(model, torch.zeros(1, 3, 112, 112), path, ["683"],
                   {"input.1": {0: "batch"}, "683": {0: "batch"}})
