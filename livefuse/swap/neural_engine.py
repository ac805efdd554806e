"""The neural engine's parts, built from the model catalog: SCRFD + ArcFace analyser and an
inswapper-class swapper behind the renderer contract every swapper offers the Engine
(:class:`livefuse.swap.renderer.Renderer`: ``prepare`` a source once, ``render`` a batch of
target faces into patches).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from livefuse.config import EngineConfig
from livefuse.extras import install_hint
from livefuse.faces.analyser import Analyser
from livefuse.faces.insight import InsightAnalyser
from livefuse.faces.landmarker import Landmarker, OrtLandmarker
from livefuse.models.catalog import get_spec, models_dir
from livefuse.models.download import ModelMissingError, require, status
from livefuse.models.engine_choice import MASK_MODELS, core_models
from livefuse.precision import probe_device, resolve_precision
from livefuse.swap.masks import FaceMasker, FaceParser, Occluder
from livefuse.swap.neural import NeuralBackend, NeuralSwapper
from livefuse.swap.paste import align_crop, arcface_affine, feather_mask, paste_roi
from livefuse.types import Face, FloatArray, Frame, Patch, StagedFrame

log = logging.getLogger(__name__)

INPUT_SIZE = 128


@dataclass(frozen=True)
class NeuralPaths:
    """Model files of one neural engine: SCRFD detector, ArcFace recogniser, inswapper, the
    mask models when masks are on and the 106-point landmarker of the pose cache (``None``: the
    catalog's, when needed)."""

    detector: Path
    recogniser: Path
    swapper: Path
    occluder: Path | None = None
    parser: Path | None = None
    landmarker: Path | None = None


@dataclass(frozen=True)
class NeuralSource:
    """A prepared source face: the inswapper latent ``(1, 512) float32`` (emap applied once)."""

    latent: FloatArray
    face: Face
    path: Path | None = None


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a CUDA device, else ``cpu``; others pass through."""
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def catalog_paths(config: EngineConfig) -> NeuralPaths:
    """The verified catalog files for ``config`` (``models_dir`` or the default folder): the
    rows of :func:`livefuse.models.engine_choice.core_models`.

    Raises:
        ModelMissingError / ModelVerifyError: a file is missing or fails its SHA256 check; the
            message names the file and the `livefuse models fetch` / `import` commands.
    """
    d = models_dir(config.models_dir)
    specs = core_models(d)
    # every missing file in one message: fixing one and meeting the next is three round trips
    missing = [s for s in specs if status(s, d) == "missing"]
    if missing:
        raise ModelMissingError(missing[0], d, tuple(missing[1:]))
    det, rec, swap = (require(s, d) for s in specs)
    return NeuralPaths(det, rec, swap)


def implode(crop: np.ndarray, k: int) -> np.ndarray:
    """Pixel boost's sub-grids: ``(S, S, C)`` with ``S = 128 k`` → ``(k·k, 128, 128, C)``, tile
    ``a·k + b`` holding the pixels at rows ``a::k`` and columns ``b::k``: each tile is the whole
    face at 128 px, shifted by a fraction of a pixel (FaceFusion's "pixel boost")."""
    s = crop.shape[0] // k
    return np.ascontiguousarray(crop.reshape(s, k, s, k, -1).transpose(1, 3, 0, 2, 4)
                                .reshape(k * k, s, s, -1))


def explode(tiles: np.ndarray, k: int) -> np.ndarray:
    """The inverse of :func:`implode`: ``(k·k, 128, 128, C)`` → ``(128 k, 128 k, C)``."""
    s = tiles.shape[1]
    return np.ascontiguousarray(tiles.reshape(k, k, s, s, -1).transpose(2, 0, 3, 1, 4)
                                .reshape(s * k, s * k, -1))


class NeuralRenderer:
    """The neural renderer: the source is prepared from the analyser's ArcFace embedding; per
    frame the aligned crops of all target faces are swapped as one batch.

    On the torch backend on CUDA the frame is on the device (staged by the engine) and the crops,
    the swap and the patches stay there; elsewhere the crops are cut on the host. Which of the
    two a renderer runs is chosen once, when it is built.

    Pixel boost (``EngineConfig.pixel_boost`` 256, 384 or 512): the face is aligned at that size
    and its 2×2, 3×3 or 4×4 strided sub-grids (each a 128 px face) are swapped together in the
    same batch, then interleaved back: a sharper swap for 4, 9 or 16 times the model's work.

    Args:
        swapper: the inswapper runner (torch or onnxruntime backend, precision policy, guard).
        analyser: gives the source face's ArcFace embedding.
        pixel_boost: aligned size (128 = off; 256, 384, 512).
        masker: the box / occlusion / region masks and the kept mouth, computed on the target's
            aligned crops (the same crops the swap takes) and folded into each patch's alpha, so
            the cache stores and re-warps them with the face.
        on_device: render from the staged frame's device copy (default: where the swapper runs;
            tests set it to run the device form on CPU tensors).
    """

    def __init__(self, swapper: NeuralSwapper, analyser: Analyser,
                 pixel_boost: int = INPUT_SIZE, masker: FaceMasker | None = None,
                 on_device: bool | None = None) -> None:
        self.swapper = swapper
        self.analyser = analyser
        self.pixel_boost = pixel_boost
        self.masker = masker
        self._masks_t: dict[int, Any] = {}
        self.on_device = swapper.on_device if on_device is None else on_device
        self._render = self._render_device if self.on_device else self._render_host

    @property
    def device(self) -> str:
        return self.swapper.device if self.swapper.on_device else "cpu"

    @property
    def precision_in_use(self) -> str:
        return self.swapper.precision_in_use

    @property
    def precision_reason(self) -> str:
        if self.swapper.precision_in_use.endswith("(fallback)"):
            return "the fp16 output failed the precision check, so fp32 runs from then on"
        return self.swapper.precision_reason

    def configure(self, config: EngineConfig) -> None:
        """Take a new pixel boost size and mask settings (the models stay loaded)."""
        self.pixel_boost = config.pixel_boost
        if self.masker is not None:
            self.masker.configure(config.face_mask_regions, config.face_mask_blur,
                                  config.face_mask_padding, config.keep_mouth)

    def _alphas(self, crops: Any, edge: Any) -> Any:
        if self.masker is None or not self.masker.active:
            return None
        return self.masker.alphas(crops, edge)

    def verify(self) -> bool:
        """The device path's deferred FP16 guards: the swapper's (see
        :meth:`NeuralSwapper.check_deferred`) and the mask models'."""
        ok = self.swapper.check_deferred()
        masks_ok = self.masker is None or self.masker.verify()
        return ok and masks_ok

    def prepare(self, image: Frame, face: Face, path: Path | None = None) -> NeuralSource:
        latent = self.swapper.prepare_source(self.analyser.embed(image, face))
        return NeuralSource(latent=latent, face=face, path=path)

    def _mask_t(self, size: int, device: Any) -> Any:
        if size not in self._masks_t:
            import torch

            self._masks_t[size] = torch.from_numpy(np.array(feather_mask(size))).to(device)
        return self._masks_t[size]

    def render(self, frame: StagedFrame, faces: Sequence[Face],
               source: NeuralSource) -> list[Patch | None]:
        """Swap the aligned crops of ``faces`` (one batch); ``None`` for a face wholly outside
        the frame. Patches are the swapped crops (128 px, or the pixel-boost size) with the
        feathered mask and the ArcFace affine: host ``uint8 BGR`` crops, or on the device
        ``(3, S, S)`` RGB tensors."""
        size = self.pixel_boost
        out: list[Patch | None] = [None] * len(faces)
        affines = [arcface_affine(f.kps, size) for f in faces]
        shape = frame.host.shape
        todo = [i for i, m in enumerate(affines) if _covers(paste_roi(m, size, shape))]
        if todo:
            self._render(frame, source, affines, todo, out)
        return out

    def _render_device(self, frame: StagedFrame, source: NeuralSource, affines: list[Any],
                       todo: list[int], out: list[Patch | None]) -> None:
        from livefuse.swap.gpu_frame import align_crops

        size = self.pixel_boost
        k = size // INPUT_SIZE
        if frame.device is None:
            raise RuntimeError("the neural renderer on CUDA needs a staged frame")
        crops = align_crops(frame.device, [affines[i] for i in todo], size,
                            graphs=frame.graphs)
        mask = self._mask_t(size, frame.device.device)
        alphas = self._alphas(crops, mask)
        n = crops.shape[0]
        if k > 1:  # (N, 3, S, S) -> (N·k·k, 3, 128, 128) strided sub-grids, and back
            crops = crops.reshape(n, 3, INPUT_SIZE, k, INPUT_SIZE, k).permute(
                0, 3, 5, 1, 2, 4).reshape(n * k * k, 3, INPUT_SIZE, INPUT_SIZE)
        swapped = self.swapper.swap_device(crops, source.latent, deferred=True)
        if k > 1:
            swapped = swapped.reshape(n, k, k, 3, INPUT_SIZE, INPUT_SIZE).permute(
                0, 3, 4, 1, 5, 2).reshape(n, 3, size, size)
        for j, i in enumerate(todo):
            out[i] = Patch(image=swapped[j], alpha=mask if alphas is None else alphas[j],
                           affine=affines[i])

    def _render_host(self, frame: StagedFrame, source: NeuralSource, affines: list[Any],
                     todo: list[int], out: list[Patch | None]) -> None:
        size = self.pixel_boost
        k = size // INPUT_SIZE
        host_crops = [align_crop(frame.host, affines[i], size) for i in todo]
        tiles = [t for c in host_crops for t in (implode(c, k) if k > 1 else [c])]
        fakes = self.swapper.swap_crops(tiles, source.latent)
        edge = feather_mask(size)
        host_alphas = self._alphas(host_crops, edge)
        for j, i in enumerate(todo):
            fake = fakes[j] if k == 1 else explode(np.stack(fakes[j * k * k:(j + 1) * k * k]), k)
            out[i] = Patch(image=fake, alpha=edge if host_alphas is None else host_alphas[j],
                           affine=affines[i])


def _covers(roi: tuple[int, int, int, int]) -> bool:
    x0, y0, x1, y1 = roi
    return x1 - x0 >= 8 and y1 - y0 >= 8


def build_masker(config: EngineConfig, device: str, backend: str,
                 paths: NeuralPaths | None = None) -> FaceMasker | None:
    """The mask stage for ``config.face_mask_types`` (``None`` when no mask is on); the occluder
    and parser come from ``paths`` or the verified catalog files. They run in
    ``config.precision`` under the swapper's guard; on the torch backend on CUDA the stage takes
    the renderer's device crops.

    Raises:
        ModelMissingError / ModelVerifyError: a mask model is missing or corrupt.
    """
    types = config.face_mask_types
    if not types:
        return None
    on_device = backend == "torch" and device.startswith("cuda")
    d = models_dir(config.models_dir)
    occluder = parser = None
    if "occlusion" in types:
        path = paths.occluder if paths is not None and paths.occluder else \
            require(get_spec(MASK_MODELS["occlusion"]), d)
        occluder = Occluder(path, backend=backend, device=device, precision=config.precision,
                            cuda_graph=on_device)
    if "region" in types:
        path = paths.parser if paths is not None and paths.parser else \
            require(get_spec(MASK_MODELS["region"]), d)
        parser = FaceParser(path, backend=backend, device=device, precision=config.precision,
                            cuda_graph=on_device)
    return FaceMasker(types, config.face_mask_regions, config.face_mask_blur,
                      config.face_mask_padding, occluder, parser, config.keep_mouth,
                      on_device=on_device)


def build_landmarker(config: EngineConfig, renderer: NeuralRenderer,
                     paths: NeuralPaths | None = None) -> Landmarker | None:
    """The pose cache's 106-point landmarker (insightface's 2d106det), on the renderer's device:
    the ONNX-to-torch runner on the staged frame when the swap runs there, else onnxruntime.

    Returns ``None`` (and logs a warning) when the catalog's file is not installed: the cache
    then never reuses a neural face, since without landmarks its key cannot see the mouth.

    Raises:
        ModelVerifyError: the file is present but corrupt.
        FaceModelError: it cannot be loaded or is not a 106-point landmark model.
    """
    path = paths.landmarker if paths is not None else None
    if path is None:
        d = models_dir(config.models_dir)
        spec = get_spec("2d106det")
        if status(spec, d) == "missing":
            log.warning("2d106det is not installed (livefuse models fetch 2d106det): the pose "
                        "cache cannot see the mouth and eyes, so it reuses no neural face")
            return None
        path = require(spec, d)
    swapper = renderer.swapper
    if swapper.on_device:
        from livefuse.faces.landmarker import TorchLandmarker

        return TorchLandmarker(path, swapper.device,
                               "fp32" if swapper.precision == "fp32" else "fp16")
    providers = ("CUDAExecutionProvider", "CPUExecutionProvider") \
        if swapper.device.startswith("cuda") else ("CPUExecutionProvider",)
    return OrtLandmarker(path, providers=providers)


@dataclass(frozen=True)
class StagePlan:
    """Where one stage of the neural frame path runs, and why (``livefuse doctor``)."""

    stage: str
    where: str
    why: str


def _ort_cuda() -> bool:
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


TORCH_MISSING = f"PyTorch is not installed ({install_hint('torch')})"


def effective_backend(config: EngineConfig) -> tuple[NeuralBackend, str | None]:
    """The backend the swapper will really use, and why when it is not the configured one:
    the default ``torch`` backend falls back to onnxruntime (insightface's dependency, always
    installed) when PyTorch is not installed."""
    if config.backend == "torch" and importlib.util.find_spec("torch") is None:
        return "onnxruntime", TORCH_MISSING
    return ("torch" if config.backend == "torch" else "onnxruntime"), None


def stage_plan(config: EngineConfig) -> list[StagePlan]:
    """Where the neural engine would run each stage for ``config`` (nothing is loaded).

    With torch on a CUDA device and the torch backend, the whole path runs in PyTorch on the GPU:
    no onnxruntime-gpu needed. Otherwise detection and recognition run on onnxruntime (CUDA when
    an onnxruntime-gpu build is installed, else the CPU) and the swap on the chosen backend.
    """
    device = resolve_device(config.device)
    backend, fallback = effective_backend(config)
    gpu = backend == "torch" and device.startswith("cuda")
    if gpu:
        precision, why = resolve_precision(config.precision, probe_device(device))
        graph = "CUDA graph"
        return [
            StagePlan("detector", f"PyTorch on {device}, {precision}, {graph}",
                      "torch backend on CUDA: SCRFD runs on the frame already on the GPU"),
            StagePlan("recogniser", f"PyTorch on {device}, {precision}",
                      "once per source face (per frame only with --face-selector reference)"),
            StagePlan("landmarker", f"PyTorch on {device}, {precision}",
                      "2d106det on the tracked faces of the staged frame, with the pose cache "
                      "on: it sees the mouth, the eyes and the head pose"),
            StagePlan("swapper", f"PyTorch port on {device}, {precision}, channels_last + "
                      f"{graph} + fused layers", why),
            StagePlan("paste-back", f"{device}: one CUDA graph per patch size; only the pasted "
                      "regions come back", "the frame is uploaded once and stays there"),
        ]
    ort = "onnxruntime CUDA" if device.startswith("cuda") and _ort_cuda() else "onnxruntime CPU"
    ort_why = ("onnxruntime-gpu is installed" if ort == "onnxruntime CUDA" else
               "the CPU onnxruntime (insightface's dependency) has no CUDA provider"
               if device.startswith("cuda") else "no CUDA device")
    if device.startswith("cuda") and backend == "onnxruntime":
        ort_why += "; --backend torch would run the whole path in PyTorch on the GPU"
    swap_where = ort if backend == "onnxruntime" else f"PyTorch port on {device}, fp32"
    return [
        StagePlan("detector", ort, ort_why),
        StagePlan("recogniser", ort, ort_why),
        StagePlan("landmarker", ort, ort_why + "; with the pose cache on"),
        StagePlan("swapper", swap_where,
                  fallback or ("the backend asked for" if backend == "onnxruntime" else
                               "torch backend without CUDA")),
        StagePlan("paste-back", "CPU (OpenCV), only the face's region",
                  "the frame is on the host on this path"),
    ]


def build_neural(config: EngineConfig, paths: NeuralPaths | None = None,
                 **swapper_options: Any) -> tuple[Analyser, NeuralRenderer]:
    """Analyser and renderer for ``config.engine == 'neural'``.

    With the torch backend on CUDA every stage runs in PyTorch on the GPU (the SCRFD and ArcFace
    ports on the staged frame); elsewhere detection and recognition run on onnxruntime
    (:func:`stage_plan` says which, and why).

    Args:
        config: precision, backend, device, models_dir, pixel boost and masks are read.
        paths: explicit model files (tests, custom models); the verified catalog files otherwise.
        swapper_options: passed to :class:`NeuralSwapper` (``channels_last``, ``cuda_graph``,
            ``compile_mode``, ...).

    Raises:
        ModelMissingError / ModelVerifyError / FaceModelError / InswapperGraphError / VramError.
    """
    cat = catalog_paths(config) if paths is None else paths
    device = resolve_device(config.device)
    backend, fallback = effective_backend(config)
    if fallback is not None:
        log.warning("torch backend: %s; the swapper runs on onnxruntime", fallback)
    swapper = NeuralSwapper(cat.swapper, backend=backend, precision=config.precision,
                            device=device, **swapper_options)
    analyser: Analyser
    if swapper.on_device:
        from livefuse.faces.insight_torch import TorchInsightAnalyser

        # bf16's 8-bit mantissa moves SCRFD scores by ~1e-3 near the threshold: fp16 there
        analyser = TorchInsightAnalyser(
            cat.detector, cat.recogniser, device=device,
            precision="fp32" if swapper.precision == "fp32" else "fp16")
    else:
        providers = ("CUDAExecutionProvider", "CPUExecutionProvider") \
            if device.startswith("cuda") else ("CPUExecutionProvider",)
        analyser = InsightAnalyser(cat.detector, cat.recogniser, providers=providers)
    log.info("neural engine: %s backend on %s, precision %s (%s)", config.backend, device,
             swapper.precision, swapper.precision_reason)
    masker = build_masker(config, device if swapper.on_device else "cpu",
                          "torch" if swapper.on_device else "onnxruntime", paths)
    return analyser, NeuralRenderer(swapper, analyser, pixel_boost=config.pixel_boost,
                                    masker=masker)
