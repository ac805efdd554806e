"""ArcFace recognition (w600k_r50, IResNet-50) in PyTorch, on the device that holds the frame.

The network is the user's ``.onnx`` file run by :class:`~livefuse.models.onnx_torch.OnnxModule`.
Around it, as insightface does (``utils/face_align.py: norm_crop``,
``model_zoo/arcface_onnx.py: ArcFaceONNX.get_feat``), on the device:

* the aligned crop: the least-squares similarity (rotation, uniform scale, translation) taking
  the 5 kps onto the ArcFace template (:data:`ARCFACE_TEMPLATE`), computed in closed
  form for all faces at once (for 2-d points it equals Umeyama's estimate, which insightface
  uses through scikit-image), and every face sampled in ONE ``grid_sample`` call, bilinear
  with zeros outside the frame like ``cv2.warpAffine`` (INTER_LINEAR, black border);
* normalisation ``(x - 127.5) / 127.5`` in RGB order (``cv2.dnn.blobFromImages``, swapRB), or
  mean 0 / std 1 for an mxnet-style export whose first nodes subtract and multiply (the same
  test as ``ArcFaceONNX.__init__``);
* the embedding, L2-normalised in float32.

No host sync: the embeddings stay on the device. Thread safety: one thread at a time per
instance (planning a new batch size adds to the network module).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from livefuse.faces.align import ARCFACE_DST
from livefuse.faces.insight import FaceModelError
from livefuse.models.onnx_torch import (
    OnnxModelError,
    OnnxModule,
    TorchRuntime,
    precision_dtype,
    to_device,
)

log = logging.getLogger(__name__)

INPUT_MEAN = 127.5
INPUT_STD = 127.5
"""ArcFace input normalisation (insightface ``model_zoo/arcface_onnx.py``)."""

ARCFACE_TEMPLATE = ARCFACE_DST
"""ArcFace 5-point template for 112×112 crops (insightface ``utils/face_align.py``)."""


def similarity_to_template(kps: torch.Tensor, template: torch.Tensor) -> torch.Tensor:
    """Least-squares similarity transforms taking each face's kps onto ``template``.

    With points as complex numbers, the best ``z ↦ a·z + t`` (``a`` = scale·rotation) is
    ``a = Σ conj(p̄ᵢ)·q̄ᵢ / Σ |p̄ᵢ|²`` on centred points; for 2-d point sets this is exactly
    Umeyama's (1991) estimate with the reflection excluded, i.e. insightface's ``estimate_norm``.

    Args:
        kps: ``(N, 5, 2) float32`` frame px.
        template: ``(5, 2) float32`` crop px.

    Returns:
        ``(N, 2, 3) float32`` affine matrices, frame px → crop px.
    """
    mp = kps.mean(1, keepdim=True)
    mq = template.mean(0)[None, None]
    p = kps - mp
    q = template[None] - mq
    norm = (p * p).sum((1, 2)).clamp_min(1e-12)
    a = ((p[..., 0] * q[..., 0] + p[..., 1] * q[..., 1]).sum(1) / norm)
    b = ((p[..., 0] * q[..., 1] - p[..., 1] * q[..., 0]).sum(1) / norm)
    rot = torch.stack((torch.stack((a, -b), 1), torch.stack((b, a), 1)), 1)  # (N, 2, 2)
    t = mq[:, 0] - (rot @ mp[:, 0, :, None])[..., 0]
    return torch.cat((rot, t[..., None]), 2)


def warp_crops(frame_t: torch.Tensor, affine: torch.Tensor, size: int) -> torch.Tensor:
    """All faces' aligned crops in one ``grid_sample``.

    Args:
        frame_t: ``(H, W, 3) uint8 BGR`` on the device.
        affine: ``(N, 2, 3)`` frame px → crop px (the matrix ``cv2.warpAffine`` would take).
        size: crop side in px.

    Returns:
        ``(N, 3, size, size) float32`` RGB, whole levels in [0, 255], zeros outside the frame.
    """
    n = affine.shape[0]
    h, w = int(frame_t.shape[0]), int(frame_t.shape[1])
    a, b, c, d = affine[:, 0, 0], affine[:, 0, 1], affine[:, 1, 0], affine[:, 1, 1]
    det = a * d - b * c
    # the 2x2 inverse by formula: torch.linalg.inv checks for singularity, a host sync on CUDA
    inv = torch.stack((torch.stack((d, -b), 1), torch.stack((-c, a), 1)), 1) / det[:, None, None]
    # cv2.warpAffine samples the frame at M⁻¹·(x, y) for crop px (x, y), pixel centres on integers
    r = torch.arange(size, device=frame_t.device, dtype=torch.float32)
    gy, gx = torch.meshgrid(r, r, indexing="ij")
    dst = torch.stack((gx, gy), -1).reshape(1, -1, 2) - affine[:, None, :, 2]  # (N, S·S, 2)
    src = dst @ inv.transpose(1, 2)
    # grid_sample(align_corners=False) reads frame px p at (2p + 1) / size - 1
    grid = torch.stack(((2 * src[..., 0] + 1) / w - 1, (2 * src[..., 1] + 1) / h - 1), -1)
    grid = grid.reshape(n, size, size, 2)
    frame = frame_t.flip(-1).permute(2, 0, 1)[None].to(torch.float32)
    crops = F.grid_sample(frame.expand(n, -1, -1, -1), grid, mode="bilinear",
                          padding_mode="zeros", align_corners=False)
    return crops.round_()  # cv2.warpAffine writes uint8: the network sees whole levels


def open_image_net(path: Path, what: str) -> tuple[OnnxModule, int | None]:
    """The ``.onnx`` at ``path`` as an :class:`OnnxModule` with one image batch in and one
    tensor out, and its declared square input side (``None`` when free).

    Raises:
        FaceModelError: unreadable, a node cannot run, or not one input and one output (the
            message says the file is not ``what``).
    """
    try:
        net = OnnxModule(path)
    except OnnxModelError as exc:
        raise FaceModelError(path, exc.problem) from exc
    if len(net.input_names) != 1 or len(net.output_names) != 1:
        raise FaceModelError(path, f"{len(net.input_names)} inputs and "
                             f"{len(net.output_names)} outputs: not {what}")
    shape = net.input_shapes[0]
    side = shape[2] if len(shape) == 4 and isinstance(shape[2], int) and shape[2] else None
    return net, side


class TorchArcFace:
    """ArcFace embeddings on a torch device (see the module docstring).

    Args:
        path: the recogniser ``.onnx`` (``(N, 3, 112, 112)`` → ``(N, 512)``).
        device: ``cpu``, ``cuda``, ``cuda:N``.
        precision: ``fp32``, ``fp16`` or ``bf16`` (the network; alignment and the output
            normalisation are float32).

    Raises:
        FaceModelError: the file is missing or unreadable, a node cannot run, or it does not map
            a square image batch to one embedding per image (the message names the file).
        ConfigError: an unknown precision.
    """

    def __init__(self, path: str | Path, device: str | torch.device = "cpu",
                 precision: str = "fp32") -> None:
        self.path = Path(path)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.precision = precision
        self.dtype = precision_dtype(precision)
        net, side = open_image_net(self.path, "an ArcFace recogniser (one image batch in, one "
                                   "embedding batch out)")
        self.input_size = int(side or 112)
        first = net.node_names[:8]
        mxnet = any(n.startswith(("Sub", "_minus")) for n in first) and \
            any(n.startswith(("Mul", "_mul")) for n in first)
        self.input_mean, self.input_std = (0.0, 1.0) if mxnet else (INPUT_MEAN, INPUT_STD)
        self.net = net.to(self.device, self.dtype).eval()
        ratio = self.input_size / 112.0 if self.input_size % 112 == 0 else self.input_size / 128.0
        dst = ARCFACE_TEMPLATE.astype(np.float64) * ratio
        if self.input_size % 112:
            dst[:, 0] += 8.0 * ratio  # insightface estimate_norm's 128-px variant
        self._template = torch.from_numpy(dst.astype(np.float32)).to(self.device)
        try:
            out = self.net.output_shapes((1, 3, self.input_size, self.input_size))[0]
        except OnnxModelError as exc:
            raise FaceModelError(self.path, exc.problem) from exc
        if len(out) != 2 or out[0] != 1:
            raise FaceModelError(self.path, f"output shape {out} for one "
                                 f"{self.input_size}x{self.input_size} image: not an embedding")
        self.dim = int(out[1])
        log.info("ArcFace %s on %s (%d-d)", self.path.name, self.runtime, self.dim)

    @property
    def runtime(self) -> TorchRuntime:
        """Device and precision in use (for ``livefuse doctor``)."""
        return TorchRuntime(str(self.device), self.precision, False)

    def _kps(self, kps: torch.Tensor | npt.ArrayLike) -> torch.Tensor:
        k = to_device(torch.as_tensor(kps, dtype=torch.float32), self.device)
        if k.dim() == 2:
            k = k[None]
        if k.dim() != 3 or k.shape[1:] != (5, 2):
            raise ValueError(f"kps must be (N, 5, 2), got {tuple(k.shape)}")
        return k

    @torch.inference_mode()
    def aligned_crops(self, frame_t: torch.Tensor,
                      kps: torch.Tensor | npt.ArrayLike) -> torch.Tensor:
        """``(N, 3, S, S) float32`` RGB [0, 255] aligned crops (S = 112), as
        ``face_align.norm_crop`` makes them.

        Raises:
            ValueError: ``frame_t`` is not ``(H, W, 3) uint8`` on the device, or bad ``kps``.
        """
        if frame_t.dim() != 3 or frame_t.shape[2] != 3 or frame_t.dtype != torch.uint8:
            raise ValueError(f"frame_t must be (H, W, 3) uint8 BGR, got {tuple(frame_t.shape)} "
                             f"{frame_t.dtype}")
        if frame_t.device != self.device:
            raise ValueError(f"frame_t is on {frame_t.device}, the recogniser on {self.device}")
        affine = similarity_to_template(self._kps(kps), self._template)
        return warp_crops(frame_t, affine, self.input_size)

    @torch.inference_mode()
    def embed(self, frame_t: torch.Tensor, kps: torch.Tensor | npt.ArrayLike) -> torch.Tensor:
        """Embeddings of the faces at ``kps`` in a frame on the device.

        Args:
            frame_t: ``(H, W, 3) uint8 BGR`` tensor on the device.
            kps: ``(N, 5, 2)`` frame px (numpy or tensor; ``(5, 2)`` for one face).

        Returns:
            ``(N, 512) float32`` L2-normalised, on the device (cosine similarity = dot product).
        """
        return self._run(self.aligned_crops(frame_t, kps))

    @torch.inference_mode()
    def embed_crops(self, crops_t: torch.Tensor) -> torch.Tensor:
        """Embeddings of already aligned crops.

        Args:
            crops_t: ``(N, S, S, 3)`` or ``(S, S, 3) uint8 BGR`` (e.g. ``norm_crop`` output) on
                the device, S the model's input side (112).

        Returns:
            ``(N, 512) float32`` L2-normalised.
        """
        c = crops_t[None] if crops_t.dim() == 3 else crops_t
        s = self.input_size
        if c.dim() != 4 or tuple(c.shape[1:]) != (s, s, 3):
            raise ValueError(f"crops_t must be (N, {s}, {s}, 3) uint8 BGR, got "
                             f"{tuple(crops_t.shape)}")
        rgb = to_device(c, self.device).flip(-1).permute(0, 3, 1, 2).to(torch.float32)
        return self._run(rgb)

    def _run(self, rgb: torch.Tensor) -> torch.Tensor:
        x = ((rgb - self.input_mean) / self.input_std).to(self.dtype)
        feat = self.net(x)[0].float()
        return F.normalize(feat, dim=1)
