"""The neural engine's parts, built from the model catalog: SCRFD + ArcFace analyser and an
inswapper-class swapper behind the same interface the classic swapper offers the Engine
(``prepare`` a source once, ``swap`` / ``render`` + ``paste`` a target).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from livefuse.config import EngineConfig
from livefuse.faces.insight import InsightAnalyser
from livefuse.models.catalog import get_spec, models_dir
from livefuse.models.download import require, status
from livefuse.swap.classic import ClassicSwapper, RenderedFace
from livefuse.swap.neural import NeuralSwapper
from livefuse.swap.paste import align_crop, arcface_affine, feather_mask, paste_roi
from livefuse.types import Face, FloatArray, Frame

log = logging.getLogger(__name__)

INPUT_SIZE = 128


@dataclass(frozen=True)
class NeuralPaths:
    """Model files of one neural engine: SCRFD detector, ArcFace recogniser, inswapper."""

    detector: Path
    recogniser: Path
    swapper: Path


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
    """The verified catalog files for ``config`` (``models_dir`` or the default folder).

    The swapper is ``inswapper_128``; when only ``inswapper_128_fp16`` is present, that one
    (its weights load into the fp32 port too, and onnxruntime runs it as released).

    Raises:
        ModelMissingError / ModelVerifyError: a file is missing or fails its SHA256 check; the
            message names the file and the `livefuse models fetch` / `import` commands.
    """
    d = models_dir(config.models_dir)
    det = require(get_spec("det_10g"), d)
    rec = require(get_spec("w600k_r50"), d)
    full, half = get_spec("inswapper_128"), get_spec("inswapper_128_fp16")
    if status(full, d) != "present" and status(half, d) == "present":
        return NeuralPaths(det, rec, require(half, d))
    return NeuralPaths(det, rec, require(full, d))


def neural_models_present(directory: str | None = None) -> bool:
    """True when the detector, the recogniser and an inswapper file are present and verified
    (digests are cached, so only the first call after a download hashes the files)."""
    d = models_dir(directory)
    if any(status(get_spec(n), d) != "present" for n in ("det_10g", "w600k_r50")):
        return False
    return any(status(get_spec(n), d) == "present"
               for n in ("inswapper_128", "inswapper_128_fp16"))


class NeuralFaceSwapper:
    """Adapts :class:`NeuralSwapper` to the Engine: the source is prepared from the analyser's
    ArcFace embedding, and ``render`` produces a bbox-local patch so the pose cache can reuse it.

    Args:
        swapper: the inswapper runner (torch or onnxruntime backend, precision policy, guard).
        analyser: gives the source face's ArcFace embedding.
    """

    def __init__(self, swapper: NeuralSwapper, analyser: InsightAnalyser) -> None:
        self.swapper = swapper
        self.analyser = analyser
        # The GPU paste path keeps the frame on the device; the cache's CPU patches would undo it.
        self.supports_cache = not swapper.gpu_paste
        self._mask255 = feather_mask(INPUT_SIZE) * np.float32(255.0)

    @property
    def precision_in_use(self) -> str:
        return self.swapper.precision_in_use

    def prepare(self, image: Frame, face: Face, path: Path | None = None) -> NeuralSource:
        latent = self.swapper.prepare_source(self.analyser.embed(image, face))
        return NeuralSource(latent=latent, face=face, path=path)

    def swap(self, frame: Frame, target: Face, source: NeuralSource) -> bool:
        return self.swapper.swap(frame, target, source.latent)

    def render(self, frame: Frame, target: Face, source: NeuralSource) -> RenderedFace | None:
        """Swap the aligned crop and warp it back into a bbox-local patch with a feathered alpha.

        Returns ``None`` when the face lies wholly outside the frame.
        """
        m = arcface_affine(target.kps, INPUT_SIZE)
        x0, y0, x1, y1 = paste_roi(m, INPUT_SIZE, frame.shape)
        if x1 - x0 < 8 or y1 - y0 < 8:
            return None
        fake = self.swapper.swap_aligned(align_crop(frame, m, INPUT_SIZE), source.latent)
        inv = cv2.invertAffineTransform(m)
        inv[:, 2] -= (x0, y0)
        size = (x1 - x0, y1 - y0)
        face = np.asarray(cv2.warpAffine(fake, inv, size, flags=cv2.INTER_LINEAR,
                                         borderMode=cv2.BORDER_REPLICATE), np.uint8)
        alpha = np.asarray(cv2.warpAffine(self._mask255, inv, size, flags=cv2.INTER_LINEAR,
                                          borderValue=0.0), np.float32)
        return RenderedFace(origin=(x0, y0), face=face,
                            alpha=np.clip(alpha + 0.5, 0, 255).astype(np.uint8), blend="feather")

    paste = staticmethod(ClassicSwapper.paste)


def build_neural(config: EngineConfig, paths: NeuralPaths | None = None,
                 **swapper_options: Any) -> tuple[InsightAnalyser, NeuralFaceSwapper]:
    """Analyser and swapper for ``config.engine == 'neural'``.

    Args:
        config: precision, backend, device and models_dir are read.
        paths: explicit model files (tests, custom models); the verified catalog files otherwise.
        swapper_options: passed to :class:`NeuralSwapper` (``channels_last``, ``cuda_graph``,
            ``compile_mode``, ``gpu_paste``, ...).

    Raises:
        ModelMissingError / ModelVerifyError / FaceModelError / InswapperGraphError / VramError.
    """
    paths = paths or catalog_paths(config)
    device = resolve_device(config.device)
    providers = ("CUDAExecutionProvider", "CPUExecutionProvider") if device.startswith("cuda") \
        else ("CPUExecutionProvider",)
    analyser = InsightAnalyser(paths.detector, paths.recogniser, providers=providers)
    swapper = NeuralSwapper(paths.swapper, backend=config.backend, precision=config.precision,
                            device=device, **swapper_options)
    log.info("neural engine: %s backend on %s, precision %s (%s)", config.backend, device,
             swapper.precision, swapper.precision_reason)
    return analyser, NeuralFaceSwapper(swapper, analyser)
