"""A PyTorch port of the inswapper_128 architecture, and a loader that fills it from the .onnx file.

Architecture (design.md §5, checked against public re-implementations of inswapper_128 and the
initializer names seen in the released graph, ``styles.N.conv1.1.*``, ``styles.N.style1.linear.*``,
``up0.1.*``):

* encoder: reflect-pad 3 + 7×7 conv 3→w, 3×3 conv w→2w, 3×3 stride-2 conv 2w→4w and 4w→8w,
  each followed by LeakyReLU(0.2) (w = 128 in the released model, so 8w = 1024 at 32×32);
* 6 residual style blocks at 8w channels: reflect-pad 1 + 3×3 conv, a non-affine instance norm
  (eps 1e-8) modulated by ``scale, shift = Linear(512 → 2·8w)(latent)``, ReLU; then the same
  again without the ReLU; the block's input is added back;
* decoder: bilinear ×2 + 3×3 conv 8w→4w, bilinear ×2 + 3×3 conv 4w→2w, 3×3 conv 2w→w (each with
  LeakyReLU(0.2)), reflect-pad 3 + 7×7 conv w→3, ``(tanh(y) + 1) / 2``.

Full size (``width=128``) has 138.3 M parameters and costs ~349 GFLOP per face.

The instance norm is always computed in float32: its eps of 1e-8 is 0 in float16, so a flat channel
would give NaN (a known inswapper fp16 failure).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

from livefuse.errors import LivefuseError
from livefuse.models import fused_ops

log = logging.getLogger(__name__)

LATENT_DIM = 512
"""Length of the source latent (the ArcFace embedding times emap), from the model's signature."""
INPUT_SIZE = 128
NORM_EPS = 1e-8
"""Instance-norm epsilon of inswapper_128 (read from its graph by public conversions)."""
FULL_WIDTH = 128


class InswapperGraphError(LivefuseError):
    """An .onnx file does not have the inswapper graph structure the port expects."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"inswapper model '{path}': {problem}")


def _adain(x: torch.Tensor, style: torch.Tensor, eps: float) -> torch.Tensor:
    """Instance norm of ``x`` (N, C, H, W) in float32, then ``* scale + shift`` from ``style``."""
    # no-op casts are skipped so an fp32 export has no Cast nodes (fp16 converters mishandle them)
    xf = x if x.dtype == torch.float32 else x.float()
    mean = xf.mean(dim=(2, 3), keepdim=True)
    centred = xf - mean
    var = (centred * centred).mean(dim=(2, 3), keepdim=True)
    normed = centred / torch.sqrt(var + eps)
    c = x.shape[1]
    sf = style if style.dtype == torch.float32 else style.float()
    scale = sf[:, :c, None, None]
    shift = sf[:, c:, None, None]
    out = normed * scale + shift
    return out if out.dtype == x.dtype else out.to(x.dtype)


class StyleBlock(nn.Module):
    """Residual block: two reflect-padded 3×3 convs, each followed by a latent-modulated norm."""

    def __init__(self, channels: int, latent_dim: int = LATENT_DIM, eps: float = NORM_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.conv1 = nn.Conv2d(channels, channels, 3)
        self.style1 = nn.Linear(latent_dim, 2 * channels)
        self.conv2 = nn.Conv2d(channels, channels, 3)
        self.style2 = nn.Linear(latent_dim, 2 * channels)

    def forward(self, x: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        return self.forward_styled(x, self.style1(latent), self.style2(latent))

    def forward_styled(self, x: torch.Tensor, style1: torch.Tensor,
                       style2: torch.Tensor) -> torch.Tensor:
        """The block with its two style vectors ``(N, 2C)`` computed beforehand."""
        y = self.conv1(F.pad(x, (1, 1, 1, 1), mode="reflect"))
        y = F.relu(_adain(y, style1, self.eps))
        y = self.conv2(F.pad(y, (1, 1, 1, 1), mode="reflect"))
        y = _adain(y, style2, self.eps)
        return x + y


class InSwapper128(nn.Module):
    """inswapper_128 in PyTorch.

    Args:
        width: channels after the first conv (128 in the released model; tests use e.g. 8). The
            other widths are 2, 4 and 8 times it.
        n_blocks: residual style blocks (6 in the released model).
        latent_dim: source latent length (512).

    ``forward(target, latent)``: target ``(N, 3, 128, 128)`` RGB in [0, 1], latent ``(N, 512)``
    (normalised ``embedding @ emap``); returns ``(N, 3, 128, 128)`` RGB in [0, 1], in the dtype of
    the weights.
    """

    first_gemm: torch.Tensor  # enable_fused's GEMM operands (non-persistent buffers)
    last_gemm: torch.Tensor

    def __init__(self, width: int = FULL_WIDTH, n_blocks: int = 6,
                 latent_dim: int = LATENT_DIM) -> None:
        super().__init__()
        w = width
        self.width = width
        self.first = nn.Conv2d(3, w, 7)
        self.down1 = nn.Conv2d(w, 2 * w, 3, padding=1)
        self.down2 = nn.Conv2d(2 * w, 4 * w, 3, stride=2, padding=1)
        self.down3 = nn.Conv2d(4 * w, 8 * w, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(StyleBlock(8 * w, latent_dim) for _ in range(n_blocks))
        self.up1 = nn.Conv2d(8 * w, 4 * w, 3, padding=1)
        self.up2 = nn.Conv2d(4 * w, 2 * w, 3, padding=1)
        self.up3 = nn.Conv2d(2 * w, w, 3, padding=1)
        self.last = nn.Conv2d(w, 3, 7)
        self.fused: frozenset[str] = frozenset()

    def enable_fused(self, ops: frozenset[str] | set[str]) -> None:
        """Run the layers named in ``ops`` (a subset of
        :data:`~livefuse.models.fused_ops.FUSED_OPS`) through their fused formulations in
        :meth:`forward_styled`: the same function in fewer, fuller GPU kernels. Call it after the
        weights are loaded (the GEMM operands are derived from them here, as non-persistent
        buffers that follow ``.to()``).

        Raises:
            ValueError: an unknown name.
        """
        unknown = set(ops) - fused_ops.FUSED_OPS
        if unknown:
            raise ValueError(f"unknown fused ops {sorted(unknown)}; choose from "
                             f"{sorted(fused_ops.FUSED_OPS)}")
        self.fused = frozenset(ops)
        self._adain_pad = fused_ops.adain_pad_fn()
        with torch.no_grad():
            self.register_buffer("first_gemm", fused_ops.first_weight(self.first.weight),
                                 persistent=False)
            self.register_buffer("last_gemm", fused_ops.last_weight(self.last.weight),
                                 persistent=False)

    def convs(self) -> list[nn.Conv2d]:
        """The conv layers in graph order (the order the .onnx file's Conv nodes follow)."""
        out = [self.first, self.down1, self.down2, self.down3]
        for b in self.blocks:
            assert isinstance(b, StyleBlock)
            out += [b.conv1, b.conv2]
        return [*out, self.up1, self.up2, self.up3, self.last]

    def linears(self) -> list[nn.Linear]:
        """The style linears in graph order (the .onnx file's Gemm nodes)."""
        out: list[nn.Linear] = []
        for b in self.blocks:
            assert isinstance(b, StyleBlock)
            out += [b.style1, b.style2]
        return out

    def forward(self, target: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        x = self._encode(target)
        for block in self.blocks:
            x = block(x, latent)
        return self._decode(x)

    def styles(self, latent: torch.Tensor) -> torch.Tensor:
        """Every block's style vectors, ``(2 * n_blocks, N, 16 * width)``: they depend on the
        source latent only, so a live session computes them once per source face (12 small GEMMs
        that were 18 % of the compiled forward's GPU time on an H200)."""
        return torch.stack([lin(latent) for lin in self.linears()])

    def forward_styled(self, target: torch.Tensor, styles: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` with :meth:`styles` computed beforehand; the same result."""
        x = self._encode(target)
        if "adain" in self.fused:
            x = self._blocks_fused(x, styles)
        else:
            for i, block in enumerate(self.blocks):
                assert isinstance(block, StyleBlock)
                x = block.forward_styled(x, styles[2 * i], styles[2 * i + 1])
        return self._decode(x)

    def _blocks_fused(self, x: torch.Tensor, styles: torch.Tensor) -> torch.Tensor:
        # Each norm's kernel writes the next conv's reflect-padded input, so the block input is
        # the interior of the padded tensor. The convs' bias is left out: the norm's mean
        # subtraction removes a per-channel constant exactly.
        xp = F.pad(x, (1, 1, 1, 1), mode="reflect")
        for i, block in enumerate(self.blocks):
            assert isinstance(block, StyleBlock)
            y = F.conv2d(xp, block.conv1.weight)
            y = self._adain_pad(y, styles[2 * i], block.eps, True, None)
            y = F.conv2d(y, block.conv2.weight)
            xp = self._adain_pad(y, styles[2 * i + 1], block.eps, False, xp[:, :, 1:-1, 1:-1])
        return xp[:, :, 1:-1, 1:-1]

    def _encode(self, target: torch.Tensor) -> torch.Tensor:
        xp = F.pad(target, (3, 3, 3, 3), mode="reflect")
        if "first" in self.fused:
            x = F.leaky_relu(fused_ops.first_conv(xp, self.first_gemm, self.first.bias), 0.2)
        else:
            x = F.leaky_relu(self.first(xp), 0.2)
        x = F.leaky_relu(self.down1(x), 0.2)
        x = F.leaky_relu(self.down2(x), 0.2)
        return F.leaky_relu(self.down3(x), 0.2)

    def _decode(self, x: torch.Tensor) -> torch.Tensor:
        x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        x = F.leaky_relu(self.up1(x), 0.2)
        x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
        x = F.leaky_relu(self.up2(x), 0.2)
        x = F.leaky_relu(self.up3(x), 0.2)
        xp = F.pad(x, (3, 3, 3, 3), mode="reflect")
        if "last" in self.fused:
            y = fused_ops.last_conv(xp, self.last_gemm, self.last.bias, self.last.out_channels)
            return ((torch.tanh(y) + 1.0) / 2.0).to(x.dtype)
        y = self.last(xp)
        return (torch.tanh(y) + 1.0) / 2.0


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- structural loader

@dataclass(frozen=True)
class LoadedInswapper:
    """An inswapper graph read into the port.

    Attributes:
        model: the port in float32 on the CPU, eval mode.
        emap: ``(512, 512) float32``, the graph's last initializer.
        path: the .onnx file.
    """

    model: InSwapper128
    emap: npt.NDArray[np.float32]
    path: Path


def _initializers(graph: object) -> dict[str, npt.NDArray[np.float32]]:
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t) for t in graph.initializer}  # type: ignore[attr-defined]


def _resolve(name: str, inits: dict[str, np.ndarray],
             producers: dict[str, object]) -> np.ndarray | None:
    """Initializer behind ``name``, following Cast / Identity nodes (fp16 graphs cast weights)."""
    seen = 0
    while name not in inits and seen < 8:
        node = producers.get(name)
        if node is None or node.op_type not in ("Cast", "Identity"):  # type: ignore[attr-defined]
            return None
        name = node.input[0]  # type: ignore[attr-defined]
        seen += 1
    arr = inits.get(name)
    return None if arr is None else arr.astype(np.float32)


def _attr(node: object, key: str, default: object) -> object:
    from onnx import helper

    for a in node.attribute:  # type: ignore[attr-defined]
        if a.name == key:
            return helper.get_attribute_value(a)
    return default


def load_inswapper_onnx(path: str | Path) -> LoadedInswapper:
    """Build :class:`InSwapper128` from an inswapper .onnx file by graph structure.

    The Conv nodes, in the graph's topological order, are matched one by one to
    :meth:`InSwapper128.convs` and the Gemm (or MatMul + Add) nodes to :meth:`InSwapper128.linears`;
    every weight and bias shape and every conv stride must agree. The width is read from the first
    conv, so a reduced-width replica loads the same way. Float16 weights (the fp16 release, or a
    converted copy) are read through their Cast nodes and widened to float32.

    Raises:
        InswapperGraphError: the file cannot be parsed, or a node count, node shape or stride does
            not match (the message names the file, the node and both shapes), or the last
            initializer is not a ``(512, 512)`` emap.
    """
    import onnx

    path = Path(path)
    try:
        proto = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, OSError, ... on bad files
        raise InswapperGraphError(path, f"not a readable ONNX model ({exc})") from exc
    graph = proto.graph
    if not graph.initializer:
        raise InswapperGraphError(path, "the graph has no initializers (no emap, no weights)")
    inits = _initializers(graph)
    emap_t = graph.initializer[-1]
    emap = inits[emap_t.name].astype(np.float32)
    if emap.shape != (LATENT_DIM, LATENT_DIM):
        raise InswapperGraphError(
            path, f"last initializer '{emap_t.name}' has shape {emap.shape}, expected the "
            f"({LATENT_DIM}, {LATENT_DIM}) emap")
    producers = {out: n for n in graph.node for out in n.output}

    convs: list[tuple[str, np.ndarray, np.ndarray | None, tuple[int, ...]]] = []
    linears: list[tuple[str, np.ndarray, np.ndarray | None]] = []
    for node in graph.node:
        label = node.name or f"{node.op_type}->{node.output[0]}"
        if node.op_type == "Conv":
            w = _resolve(node.input[1], inits, producers)
            b = _resolve(node.input[2], inits, producers) if len(node.input) > 2 else None
            if w is None:
                raise InswapperGraphError(path, f"Conv node '{label}' has no constant weight")
            strides = tuple(int(v) for v in _attr(node, "strides", [1, 1]))  # type: ignore[attr-defined]
            convs.append((label, w, b, strides))
        elif node.op_type == "Gemm":
            w = _resolve(node.input[1], inits, producers)
            b = _resolve(node.input[2], inits, producers) if len(node.input) > 2 else None
            if w is None:
                raise InswapperGraphError(path, f"Gemm node '{label}' has no constant weight")
            if not _attr(node, "transB", 0):
                w = w.T
            linears.append((label, np.ascontiguousarray(w), b))
        elif node.op_type == "MatMul":
            w = _resolve(node.input[1], inits, producers)
            if w is None or w.ndim != 2:
                continue
            bias = None
            for nxt in graph.node:
                if nxt.op_type == "Add" and node.output[0] in nxt.input:
                    other = [i for i in nxt.input if i != node.output[0]]
                    bias = _resolve(other[0], inits, producers) if other else None
                    break
            linears.append((label, np.ascontiguousarray(w.T), bias))

    if not convs:
        raise InswapperGraphError(path, "no Conv nodes: not an inswapper graph")
    width = int(convs[0][1].shape[0])
    model = InSwapper128(width=width)
    want_convs = model.convs()
    want_lin = model.linears()
    if len(convs) != len(want_convs):
        raise InswapperGraphError(
            path, f"{len(convs)} Conv nodes, the inswapper architecture (width {width}) has "
            f"{len(want_convs)}")
    if len(linears) != len(want_lin):
        raise InswapperGraphError(
            path, f"{len(linears)} Gemm/MatMul nodes, the inswapper architecture has "
            f"{len(want_lin)}")
    with torch.no_grad():
        for (label, w, b, strides), layer in zip(convs, want_convs, strict=True):
            _copy(path, label, layer.weight, w, "weight")
            _copy(path, label, layer.bias, b, "bias")
            if tuple(layer.stride) != strides:
                raise InswapperGraphError(
                    path, f"Conv node '{label}': strides {strides}, expected {tuple(layer.stride)}")
        for (label, w, b), lin in zip(linears, want_lin, strict=True):
            _copy(path, label, lin.weight, w, "weight")
            _copy(path, label, lin.bias, b, "bias")
    model.eval()
    log.info("loaded inswapper port from %s: width %d, %.1f M parameters", path, width,
             parameter_count(model) / 1e6)
    return LoadedInswapper(model=model, emap=emap, path=path)


def _copy(path: Path, label: str, dst: torch.Tensor | None, src: np.ndarray | None,
          what: str) -> None:
    if dst is None:
        return
    if src is None:
        raise InswapperGraphError(path, f"node '{label}' has no {what}, expected "
                                  f"{tuple(dst.shape)}")
    if tuple(src.shape) != tuple(dst.shape):
        raise InswapperGraphError(
            path, f"node '{label}': {what} shape {tuple(src.shape)}, expected {tuple(dst.shape)}")
    dst.copy_(torch.from_numpy(np.ascontiguousarray(src, dtype=np.float32)))
