"""Face masks in aligned space: box, occlusion (XSeg), regions (BiSeNet parser) and the mouth.

Every mask here is a float32 weight in [0, 1] over the **aligned crop** of a face (the space of the
renderer's patch: the ArcFace-aligned 128 px crop for the neural renderer), 1 where the swapped face
may show. The lead's paste multiplies them into the patch alpha::

    alpha = combine_masks(box_mask(S), occluder.masks(crops), parser.region_masks(crops, regions),
                          1 - keep_target_mask(...))          # per-pixel minimum

Two input kinds, one contract (the model backends are independent of it):

* host: ``crops`` is a sequence of ``(S, S, 3) uint8 BGR`` aligned crops (what
  :func:`livefuse.swap.paste.align_crop` cuts); masks come back as a ``(N, S, S) float32`` array;
* device: ``crops`` is a ``(N, 3, S, S)`` float tensor, RGB in [0, 1] (what
  :func:`livefuse.swap.gpu_frame.align_crops` cuts, the renderer's own crops); masks come back as a
  ``(N, S, S) float32`` tensor on the same device, with no host synchronisation.

The crops are resized to the model's input (bilinear, no antialiasing, the same on both paths) and
the masks back to ``S``; as in FaceFusion's face masker, a model mask is then softened by a
Gaussian of ``feather`` × S and its lower half cut ((clip(m, 0.5, 1) - 0.5) × 2), which shrinks it
slightly and feathers its edge. Model files: the catalog rows ``xseg`` (occluder) and
``bisenet_resnet34`` (parser); the contracts are read from the graph, so FaceFusion's
``xseg_1/2/3.onnx`` and ``bisenet_resnet_18/34.onnx`` run too.

The models run under the swapper's precision policy (``--precision``; fp16 on capable CUDA
devices with ``auto``) and its guard: a non-finite fp16 mask is computed again in fp32 and the
model stays in fp32 (:class:`livefuse.models.graph_runner.TorchGraph`). On device crops the
verdict waits for the frame's one synchronisation: :meth:`FaceMasker.verify`.

The mask stage picks its host or device form once, when it is built (:class:`FaceMasker`'s
``on_device``); the models' ``masks`` / ``labels`` / ``region_masks`` also take either kind of
crops for callers that mix them.

Occluder and parser objects are used from the inference thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from livefuse.config import FACE_MASK_REGION_CHOICES
from livefuse.models.graph_runner import GraphError, GraphIO, Runner, make_runner, read_io
from livefuse.types import FloatArray, Frame

if TYPE_CHECKING:
    import torch

Padding = tuple[float, float, float, float]
"""``(top, right, bottom, left)`` in percent of the crop size."""

PARSER_LABELS: tuple[str, ...] = (
    "background", "skin", "left-eyebrow", "right-eyebrow", "left-eye", "right-eye", "glasses",
    "left-ear", "right-ear", "earring", "nose", "mouth", "upper-lip", "lower-lip", "neck",
    "necklace", "cloth", "hair", "hat")
"""The 19 CelebAMask-HQ classes in the parser's output order (FaceFusion's names)."""
PARSER_CLASS: dict[str, int] = {name: i for i, name in enumerate(PARSER_LABELS)}
FACE_REGIONS: tuple[str, ...] = FACE_MASK_REGION_CHOICES
"""The regions a swap may cover (FaceFusion's face-mask regions); the default region mask."""
MOUTH_REGIONS: tuple[str, ...] = ("mouth",)
"""The parser classes of the inner mouth (teeth, tongue, the dark gap): what is kept of the target
when its mouth is open."""

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
DEFAULT_FEATHER = 0.04
"""Model-mask softening, as a fraction of the crop size (FaceFusion: σ = 5 px)."""
MOUTH_FEATHER = 0.01
"""Softening for the parser's mouth mask: the default (σ = 4 % of the crop, then the lower half cut)
would erase a mouth a few px high."""
MOUTH_MIN_FRACTION = 0.004
"""The mouth counts as open when the parser's inner-mouth class covers at least this fraction of
the aligned crop."""


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


# ---------------------------------------------------------------------------------------- box

@lru_cache(maxsize=32)
def box_mask(size: int, padding: Padding = (0.0, 0.0, 0.0, 0.0), blur: float = 0.3) -> FloatArray:
    """FaceFusion-style feathered box ``(size, size) float32`` (read-only; cached).

    A border of ``padding`` percent (top, right, bottom, left), and at least a quarter of the blur
    width, is set to 0, then a Gaussian of σ = ``blur`` × size / 8 softens the edge (``blur`` 0 = a
    hard box with a 1 px border).
    """
    amount = int(size * 0.5 * blur)
    edge = max(amount // 2, 1)
    top, right, bottom, left = (max(edge, int(size * p / 100.0)) for p in padding)
    mask = np.ones((size, size), np.float32)
    mask[:top] = 0.0
    mask[size - bottom:] = 0.0
    mask[:, :left] = 0.0
    mask[:, size - right:] = 0.0
    soft = cv2.GaussianBlur(mask, (0, 0), amount * 0.25) if amount > 0 else mask
    out = np.clip(soft, 0.0, 1.0).astype(np.float32)
    out.setflags(write=False)
    return out


def combine_masks(*masks: Any) -> Any:
    """Per-pixel minimum of the given masks (``None`` entries skipped), clipped to [0, 1].

    Masks broadcast: ``(S, S)`` with ``(N, S, S)``; all host arrays or all tensors of one device.
    """
    ms = [m for m in masks if m is not None]
    if not ms:
        raise ValueError("combine_masks needs at least one mask")
    if any(_is_tensor(m) for m in ms):
        import torch

        dev = next(m.device for m in ms if _is_tensor(m))
        from livefuse.swap.gpu_frame import upload

        ts = [m if _is_tensor(m) else upload(np.asarray(m, np.float32), dev) for m in ms]
        out = ts[0].float()
        for t in ts[1:]:
            out = torch.minimum(out, t.float())
        return out.clamp(0.0, 1.0)
    out_np = np.asarray(ms[0], np.float32)
    for m in ms[1:]:
        out_np = np.minimum(out_np, np.asarray(m, np.float32))
    return np.clip(out_np, 0.0, 1.0).astype(np.float32, copy=False)


# ------------------------------------------------------------------------- resize and soften

@lru_cache(maxsize=64)
def _gauss_kernel(sigma: float) -> np.ndarray:
    """OpenCV's kernel for ``GaussianBlur(float image, (0, 0), sigma)`` (read-only; cached)."""
    k = round(sigma * 8 + 1) | 1
    out = cv2.getGaussianKernel(k, sigma, cv2.CV_32F).ravel().astype(np.float32)
    out.setflags(write=False)
    return out


_DEVICE_CONSTANTS: dict[tuple[Any, ...], Any] = {}


def device_constant(arr: np.ndarray, device: Any, dtype: Any = None, key: Any = None) -> Any:
    """A host constant (a kernel, a box mask, class ids) as a tensor on ``device``, uploaded once
    and kept: an upload per call costs the host a copy and a launch per frame. ``key`` names it
    (default: the array's bytes, so equal constants share one tensor)."""
    import torch

    k = (key if key is not None else (arr.shape, arr.dtype.str, arr.tobytes()), str(device),
         dtype)
    t = _DEVICE_CONSTANTS.get(k)
    if t is None:
        from livefuse.swap.gpu_frame import upload

        t = upload(np.array(arr), torch.device(device))  # a writable copy: torch warns otherwise
        if dtype is not None:
            t = t.to(dtype)
        if len(_DEVICE_CONSTANTS) > 256:
            _DEVICE_CONSTANTS.clear()
        _DEVICE_CONSTANTS[k] = t
    return t


def soften_host(masks: FloatArray, feather: float) -> FloatArray:
    """``(N, S, S)``: blur σ = feather × S, then keep the upper half stretched to [0, 1]."""
    if feather <= 0:
        return masks
    s = masks.shape[-1]
    sigma = feather * s
    out = np.stack([cv2.GaussianBlur(np.ascontiguousarray(m), (0, 0), sigma) for m in masks])
    return ((np.clip(out, 0.5, 1.0) - 0.5) * 2.0).astype(np.float32)


def soften_device(masks: torch.Tensor, feather: float) -> torch.Tensor:
    """:func:`soften_host` on a ``(N, S, S)`` tensor (separable conv, reflect-101 border)."""
    if feather <= 0:
        return masks
    import torch.nn.functional as F

    s = int(masks.shape[-1])
    sigma = feather * s
    k = device_constant(_gauss_kernel(sigma), masks.device, masks.dtype, key=("gauss", sigma))
    r = (int(k.numel()) - 1) // 2
    x = masks[:, None]
    if r >= s:  # wider than the crop: reflect padding cannot; replicate what cv2 would roughly do
        x = F.pad(x, (r, r, r, r), mode="replicate")
    else:
        x = F.pad(x, (r, r, r, r), mode="reflect")
    x = F.conv2d(x, k.view(1, 1, 1, -1))
    x = F.conv2d(x, k.view(1, 1, -1, 1))
    return ((x[:, 0].clamp(0.5, 1.0) - 0.5) * 2.0).contiguous()


def _resize_host(imgs: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``(N, H, W[, C])`` float32 → ``(N, h, w[, C])`` bilinear; ``size = (w, h)``."""
    if imgs.shape[2] == size[0] and imgs.shape[1] == size[1]:
        return imgs
    return np.stack([cv2.resize(np.ascontiguousarray(im), size, interpolation=cv2.INTER_LINEAR)
                     for im in imgs])


def _resize_device(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``(N, C, H, W)`` → ``(N, C, h, w)`` bilinear (no antialiasing, like cv2's INTER_LINEAR)."""
    import torch.nn.functional as F

    if int(x.shape[-1]) == size[0] and int(x.shape[-2]) == size[1]:
        return x
    return F.interpolate(x, size=(size[1], size[0]), mode="bilinear", align_corners=False)


def _host_batch(crops: Sequence[Frame] | np.ndarray) -> np.ndarray:
    arr = np.asarray(crops) if isinstance(crops, np.ndarray) else np.stack(list(crops))
    if arr.ndim != 4 or arr.shape[-1] != 3 or arr.shape[1] != arr.shape[2]:
        raise ValueError(f"host crops must be (N, S, S, 3) BGR, got {arr.shape}")
    return arr.astype(np.float32) * np.float32(1.0 / 255.0)


# ------------------------------------------------------------------------------------- models

class _MaskModel:
    """Shared plumbing: the runner (under the precision policy and its guard), the graph
    contract, and the host and device forms of the inference."""

    default_size = 256

    def __init__(self, path: str | Path | None, backend: str = "torch", device: str = "cpu",
                 precision: str = "auto", *, module: Any = None, io: GraphIO | None = None,
                 threads: int | None = None, cuda_graph: bool = False,
                 feather: float = DEFAULT_FEATHER) -> None:
        self.path = Path(path) if path is not None else None
        if io is None:
            if self.path is None:
                raise ValueError("a model path, or a module with its GraphIO, is needed")
            io = read_io(self.path)
        self.io = io
        self.runner: Runner = make_runner(self.path, backend, device=device, precision=precision,
                                          module=module, io=io, threads=threads,
                                          cuda_graph=cuda_graph)
        self.backend = backend
        self.device = device
        self.feather = feather
        self._check_io()

    @property
    def precision(self) -> str:
        return self.runner.precision

    @property
    def precision_in_use(self) -> str:
        """e.g. ``fp16``, or ``fp32 (fallback)`` once the guard has latched."""
        return self.runner.precision_in_use

    def verify(self) -> bool:
        """The deferred guard's verdict on the device runs since the last call (see
        :meth:`livefuse.models.graph_runner.TorchGraph.verify`)."""
        return self.runner.verify()

    def _check_io(self) -> None:  # pragma: no cover - overridden
        pass

    def _infer_host(self, blob: np.ndarray) -> np.ndarray:
        return self.runner.run(blob)[0]

    def _infer_device(self, blob: torch.Tensor, deferred: bool = False) -> torch.Tensor:
        import torch

        if self.runner.backend == "torch":
            return self.runner.run_tensors(blob, deferred=deferred)[0]  # type: ignore[union-attr]
        out = self.runner.run(blob.float().cpu().numpy())[0]
        return torch.from_numpy(out).to(blob.device)


class Occluder(_MaskModel):
    """Occlusion masks from an XSeg-contract model (1 = face visible, 0 = something in front).

    Args:
        path: the .onnx file (catalog row ``xseg``; any XSeg export: NHWC or NCHW input of 3
            BGR channels in [0, 1], one output of one channel in [0, 1]).
        backend: ``torch`` (``OnnxModule``, or ``module``) or ``onnxruntime``.
        device: ``cpu`` or ``cuda[:N]`` (where the torch backend runs; onnxruntime picks its
            providers from it).
        precision: ``auto`` (fp16 on capable CUDA devices, fp32 on the CPU), ``fp32``, ``fp16``
            or ``bf16``, as the swapper's; a non-finite low-precision mask is computed again in
            fp32.
        module: (torch) run this module instead of loading ``path`` (a replica in tests);
            ``io`` then gives its contract when there is no file.
        feather: mask softening, fraction of the crop size (0 = the raw model mask).

    Raises:
        GraphError: the graph is not an XSeg-contract model.
        ProviderError: onnxruntime cannot open the file.
    """

    def _check_io(self) -> None:
        shape = self.io.input_shapes[0] if self.io.input_shapes else ()
        if len(shape) != 4 or 3 not in (shape[1], shape[3]):
            raise GraphError(self.path or "<module>", f"occluder input shape {shape} is not "
                             "(N, H, W, 3) or (N, 3, H, W)")
        self.nhwc = shape[3] == 3
        h, w = (shape[1], shape[2]) if self.nhwc else (shape[2], shape[3])
        self.input_size = (w if isinstance(w, int) else self.default_size,
                           h if isinstance(h, int) else self.default_size)

    def masks(self, crops: Any) -> Any:
        """Occlusion masks of aligned crops: ``(N, S, S) float32`` (host array or device tensor,
        as the input; see the module docstring). The mask stage calls :meth:`masks_host` or
        :meth:`masks_device` directly."""
        return self.masks_device(crops) if _is_tensor(crops) else self.masks_host(crops)

    def masks_host(self, crops: Sequence[Frame] | np.ndarray) -> FloatArray:
        """Host crops ``(S, S, 3) uint8 BGR`` → ``(N, S, S) float32``."""
        x = _host_batch(crops)  # BGR [0, 1]
        n, s = x.shape[0], x.shape[1]
        if n == 0:
            return np.zeros((0, s, s), np.float32)
        blob = _resize_host(x, self.input_size)
        if not self.nhwc:
            blob = blob.transpose(0, 3, 1, 2)
        out = self._infer_host(np.ascontiguousarray(blob))
        m = np.clip(out.reshape(n, self.input_size[1], self.input_size[0]), 0.0, 1.0)
        m = _resize_host(m.astype(np.float32), (s, s))
        return soften_host(m, self.feather)

    def masks_device(self, crops: torch.Tensor, deferred: bool = False) -> torch.Tensor:
        """Device crops ``(N, 3, S, S)`` RGB [0, 1] → ``(N, S, S) float32`` on the device;
        ``deferred``: the guard's verdict waits for :meth:`verify`."""
        n, s = int(crops.shape[0]), int(crops.shape[-1])
        if n == 0:
            return crops.new_zeros((0, s, s), dtype=crops.dtype).float()
        blob = _resize_device(crops.float().flip(1), self.input_size)  # RGB -> BGR
        if self.nhwc:
            blob = blob.permute(0, 2, 3, 1)
        out = self._infer_device(blob.contiguous(), deferred).float()
        m = out.reshape(n, 1, self.input_size[1], self.input_size[0]).clamp(0.0, 1.0)
        return soften_device(_resize_device(m, (s, s))[:, 0], self.feather)


class FaceParser(_MaskModel):
    """Region masks from a BiSeNet-contract face parser (19 CelebAMask-HQ classes).

    Args: as :class:`Occluder` (``path``: catalog row ``bisenet_resnet34``; input ``(N, 3, H, W)``
    ImageNet-normalised RGB, first output ``(N, 19, H, W)`` logits).
    """

    default_size = 512

    def _check_io(self) -> None:
        shape = self.io.input_shapes[0] if self.io.input_shapes else ()
        if len(shape) != 4 or shape[1] != 3:
            raise GraphError(self.path or "<module>", f"parser input shape {shape} is not "
                             "(N, 3, H, W)")
        h, w = shape[2], shape[3]
        self.input_size = (w if isinstance(w, int) else self.default_size,
                           h if isinstance(h, int) else self.default_size)

    @staticmethod
    def class_ids(regions: Sequence[str]) -> list[int]:
        """Class indices of region names (see :data:`PARSER_LABELS`).

        Raises:
            ValueError: an unknown region name.
        """
        unknown = [r for r in regions if r not in PARSER_CLASS]
        if unknown:
            raise ValueError(f"unknown face region(s) {unknown}; known: {', '.join(PARSER_LABELS)}")
        return [PARSER_CLASS[r] for r in regions]

    def labels(self, crops: Any) -> Any:
        """Class index per pixel at the parser's resolution: ``(N, H, W)`` (uint8 host array or
        int64 tensor)."""
        return self.labels_device(crops) if _is_tensor(crops) else self.labels_host(crops)

    def labels_host(self, crops: Sequence[Frame] | np.ndarray) -> np.ndarray:
        x = _host_batch(crops)[..., ::-1]  # BGR -> RGB
        blob = (_resize_host(np.ascontiguousarray(x), self.input_size) - IMAGENET_MEAN) \
            / IMAGENET_STD
        out = self._infer_host(np.ascontiguousarray(blob.transpose(0, 3, 1, 2), np.float32))
        return out.argmax(1).astype(np.uint8)

    def labels_device(self, crops: torch.Tensor, deferred: bool = False) -> torch.Tensor:
        blob_t = _resize_device(crops.float(), self.input_size)
        mean = device_constant(IMAGENET_MEAN, blob_t.device).view(1, 3, 1, 1)
        std = device_constant(IMAGENET_STD, blob_t.device).view(1, 3, 1, 1)
        return self._infer_device(((blob_t - mean) / std).contiguous(), deferred).argmax(1)

    def hits_host(self, labels: np.ndarray, size: int, regions: Sequence[str],
                  feather: float | None = None) -> FloatArray:
        """``(N, size, size) float32`` from host :meth:`labels`: 1 where a pixel is one of
        ``regions``, softened by ``feather`` (default: the instance's)."""
        hit = np.isin(labels, self.class_ids(regions)).astype(np.float32)
        return soften_host(_resize_host(hit, (size, size)),
                           self.feather if feather is None else feather)

    def hits_device(self, labels: torch.Tensor, size: int, regions: Sequence[str],
                    feather: float | None = None) -> torch.Tensor:
        """:meth:`hits_host` on device labels (no host sync)."""
        import torch

        ids = device_constant(np.asarray(self.class_ids(regions), np.int64), labels.device)
        hit = torch.isin(labels, ids).float()[:, None]
        return soften_device(_resize_device(hit, (size, size))[:, 0],
                             self.feather if feather is None else feather)

    def region_masks(self, crops: Any, regions: Sequence[str] = FACE_REGIONS,
                     feather: float | None = None) -> Any:
        """``(N, S, S) float32``: 1 where the pixel belongs to one of ``regions``, softened by
        ``feather`` (default: the instance's; use :data:`MOUTH_FEATHER` for the mouth)."""
        self.class_ids(regions)
        if _is_tensor(crops):
            import torch

            n, s = int(crops.shape[0]), int(crops.shape[-1])
            if n == 0:
                return torch.zeros((0, s, s), device=crops.device)
            return self.hits_device(self.labels_device(crops), s, regions, feather)
        x = np.asarray(crops) if isinstance(crops, np.ndarray) else list(crops)
        n = len(x)
        s = int(np.asarray(x[0]).shape[0]) if n else 0
        if n == 0:
            return np.zeros((0, s, s), np.float32)
        return self.hits_host(self.labels_host(crops), s, regions, feather)


# ---------------------------------------------------------------------------------- the mouth

def keep_target_mask(parser_mouth: Any, min_fraction: float = MOUTH_MIN_FRACTION) -> Any:
    """Where to keep the **target** (1) instead of the swap, in aligned space, ``(S, S)``: the
    parser's inner-mouth mask (``parser.region_masks(crops, MOUTH_REGIONS,
    feather=MOUTH_FEATHER)[i]``) when the mouth is open, i.e. when that mask covers at least
    ``min_fraction`` of the crop, else zeros; decided without a host sync for a tensor. The
    neural engine has only 5 kps, so the parser is what sees the mouth (the classic engine keeps
    it from its 68 landmarks, :mod:`livefuse.swap.classic`).

    Use it as ``combine_masks(..., 1 - keep)``.
    """
    m = parser_mouth
    if _is_tensor(m):
        return m * (m.mean() >= min_fraction).to(m.dtype)
    m = np.asarray(m, np.float32)
    return m if float(m.mean()) >= min_fraction else np.zeros_like(m)


class FaceMasker:
    """The neural renderer's mask stage: the patch alpha of each face from the configured masks.

    Args:
        types: the masks on (``box``, ``occlusion``, ``region``), see
            :data:`livefuse.config.FACE_MASK_TYPE_CHOICES`.
        regions: the parser regions kept by the ``region`` mask.
        blur, padding: the ``box`` mask's.
        occluder: the XSeg model (needed for ``occlusion``).
        parser: the face parser (needed for ``region``; it also gives the target's mouth: one
            parser run gives both).
        keep_mouth: keep the target's inner mouth when it is open (needs the parser).
        on_device: the crops are device tensors (the GPU frame path): chosen once here, so the
            per-frame code has no type tests; the models' guard verdicts then wait for
            :meth:`verify`.

    Raises:
        ValueError: a mask type whose model was not given.
    """

    def __init__(self, types: Sequence[str] = (), regions: Sequence[str] = FACE_REGIONS,
                 blur: float = 0.3, padding: Padding = (0.0, 0.0, 0.0, 0.0),
                 occluder: Occluder | None = None, parser: FaceParser | None = None,
                 keep_mouth: bool = True, on_device: bool = False) -> None:
        if "occlusion" in types and occluder is None:
            raise ValueError("the occlusion mask needs the occluder model")
        if "region" in types and parser is None:
            raise ValueError("the region mask needs the face parser model")
        FaceParser.class_ids(regions)
        self.types, self.regions = tuple(types), tuple(regions)
        self.blur, self.padding = blur, tuple(padding)
        self.occluder = occluder if "occlusion" in types else None
        self.parser = parser if "region" in types else None
        self.keep_mouth = keep_mouth
        self.on_device = on_device
        self._alphas = self._alphas_device if on_device else self._alphas_host

    def configure(self, regions: Sequence[str], blur: float, padding: Padding,
                  keep_mouth: bool) -> None:
        """Take settings that need no model (between frames)."""
        FaceParser.class_ids(regions)
        self.regions, self.blur, self.padding = tuple(regions), blur, tuple(padding)
        self.keep_mouth = keep_mouth

    def alphas(self, crops: Any, edge: Any) -> Any:
        """Per-face alphas ``(N, S, S)`` for aligned target crops (host list of ``(S, S, 3)
        uint8 BGR``, or with ``on_device`` a ``(N, 3, S, S)`` RGB [0, 1] tensor): the per-pixel
        minimum of ``edge`` (the renderer's feathered ``(S, S)`` edge) and the configured
        masks."""
        return self._alphas(crops, edge)

    def _alphas_host(self, crops: Sequence[Frame], edge: FloatArray) -> FloatArray:
        n, size = len(crops), int(np.asarray(crops[0]).shape[0])
        parts: list[Any] = [edge]
        if "box" in self.types:
            parts.append(box_mask(size, self.padding, self.blur))
        if self.occluder is not None:
            parts.append(self.occluder.masks_host(crops))
        if self.parser is not None:
            labels = self.parser.labels_host(crops)
            parts.append(self.parser.hits_host(labels, size, self.regions))
            if self.keep_mouth:
                mouths = self.parser.hits_host(labels, size, MOUTH_REGIONS, MOUTH_FEATHER)
                keep = [keep_target_mask(mouths[i]) for i in range(n)]
                parts.append(1.0 - np.stack(keep))
        out = combine_masks(*parts)
        return out if out.ndim == 3 else out[None].repeat(n, 0)

    def _alphas_device(self, crops: torch.Tensor, edge: torch.Tensor) -> torch.Tensor:
        import torch

        n, size = int(crops.shape[0]), int(crops.shape[-1])
        out = edge.float()
        if "box" in self.types:
            out = torch.minimum(out, device_constant(box_mask(size, self.padding, self.blur),
                                                     crops.device))
        if self.occluder is not None:
            out = torch.minimum(out, self.occluder.masks_device(crops, deferred=True))
        if self.parser is not None:
            labels = self.parser.labels_device(crops, deferred=True)
            out = torch.minimum(out, self.parser.hits_device(labels, size, self.regions))
            if self.keep_mouth:
                mouths = self.parser.hits_device(labels, size, MOUTH_REGIONS, MOUTH_FEATHER)
                # keep_target_mask per face, without a host sync
                opened = (mouths.mean((1, 2)) >= MOUTH_MIN_FRACTION).to(mouths.dtype)
                out = torch.minimum(out, 1.0 - mouths * opened[:, None, None])
        out = out.clamp(0.0, 1.0)
        return out if out.ndim == 3 else out[None].expand(n, -1, -1)

    def verify(self) -> bool:
        """Whether the models' deferred fp16 guards passed since the last call (``False``: one
        has fallen back to fp32 and the frame's masks must be computed again)."""
        ok = [m.verify() for m in (self.occluder, self.parser) if m is not None]
        return all(ok)

    @property
    def active(self) -> bool:
        return bool(self.types)



__all__ = [
    "DEFAULT_FEATHER",
    "FACE_REGIONS",
    "MOUTH_FEATHER",
    "MOUTH_MIN_FRACTION",
    "MOUTH_REGIONS",
    "PARSER_CLASS",
    "PARSER_LABELS",
    "FaceMasker",
    "FaceParser",
    "Occluder",
    "Padding",
    "box_mask",
    "combine_masks",
    "device_constant",
    "keep_target_mask",
    "soften_device",
    "soften_host",
]
