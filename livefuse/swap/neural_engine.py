"""The neural engine's parts, built from the model catalog: SCRFD + ArcFace analyser and an
inswapper-class swapper behind the renderer contract every swapper offers the Engine
(:class:`livefuse.swap.renderer.Renderer`: ``prepare`` a source once, ``render`` a batch of
target faces into patches).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from livefuse.config import EngineConfig
from livefuse.faces.analyser import Analyser
from livefuse.faces.insight import InsightAnalyser
from livefuse.models.catalog import get_spec, models_dir
from livefuse.models.download import require, status
from livefuse.swap.neural import NeuralSwapper
from livefuse.swap.paste import align_crop, arcface_affine, feather_mask, paste_roi
from livefuse.types import Face, FloatArray, Frame, Patch, StagedFrame

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


class NeuralRenderer:
    """The neural renderer: the source is prepared from the analyser's ArcFace embedding; per
    frame the aligned crops of all target faces are swapped as one batch.

    On the torch backend on CUDA the frame is on the device (staged by the engine) and the crops,
    the swap and the patches stay there; elsewhere the crops are cut on the host.

    Args:
        swapper: the inswapper runner (torch or onnxruntime backend, precision policy, guard).
        analyser: gives the source face's ArcFace embedding.
    """

    def __init__(self, swapper: NeuralSwapper, analyser: Analyser) -> None:
        self.swapper = swapper
        self.analyser = analyser
        self._mask = feather_mask(INPUT_SIZE)
        self._mask_t: Any = None

    @property
    def device(self) -> str:
        return self.swapper.device if self.swapper.on_device else "cpu"

    @property
    def precision_in_use(self) -> str:
        return self.swapper.precision_in_use

    def configure(self, config: EngineConfig) -> None:
        """Nothing of the neural render depends on the settings that change in place."""

    def prepare(self, image: Frame, face: Face, path: Path | None = None) -> NeuralSource:
        latent = self.swapper.prepare_source(self.analyser.embed(image, face))
        return NeuralSource(latent=latent, face=face, path=path)

    def render(self, frame: StagedFrame, faces: Sequence[Face],
               source: NeuralSource) -> list[Patch | None]:
        """Swap the aligned crops of ``faces`` (one batch); ``None`` for a face wholly outside
        the frame. Patches are the swapped 128 px crops with the feathered mask and the ArcFace
        affine: host ``uint8 BGR`` crops, or on the device ``(3, 128, 128)`` RGB tensors."""
        out: list[Patch | None] = [None] * len(faces)
        affines = [arcface_affine(f.kps, INPUT_SIZE) for f in faces]
        shape = frame.host.shape
        todo = [i for i, m in enumerate(affines)
                if _covers(paste_roi(m, INPUT_SIZE, shape))]
        if not todo:
            return out
        if self.swapper.on_device:
            import torch

            from livefuse.swap.gpu_frame import align_crops

            if frame.device is None:
                raise RuntimeError("the neural renderer on CUDA needs a staged frame")
            if self._mask_t is None:
                self._mask_t = torch.from_numpy(np.array(self._mask)).to(frame.device.device)
            crops = align_crops(frame.device, [affines[i] for i in todo], INPUT_SIZE)
            swapped = self.swapper.swap_device(crops, source.latent)
            for k, i in enumerate(todo):
                out[i] = Patch(image=swapped[k], alpha=self._mask_t, affine=affines[i])
            return out
        host_crops = [align_crop(frame.host, affines[i], INPUT_SIZE) for i in todo]
        for i, fake in zip(todo, self.swapper.swap_crops(host_crops, source.latent),
                            strict=True):
            out[i] = Patch(image=fake, alpha=self._mask, affine=affines[i])
        return out


def _covers(roi: tuple[int, int, int, int]) -> bool:
    x0, y0, x1, y1 = roi
    return x1 - x0 >= 8 and y1 - y0 >= 8


def build_neural(config: EngineConfig, paths: NeuralPaths | None = None,
                 **swapper_options: Any) -> tuple[InsightAnalyser, NeuralRenderer]:
    """Analyser and renderer for ``config.engine == 'neural'``.

    Args:
        config: precision, backend, device and models_dir are read.
        paths: explicit model files (tests, custom models); the verified catalog files otherwise.
        swapper_options: passed to :class:`NeuralSwapper` (``channels_last``, ``cuda_graph``,
            ``compile_mode``, ...).

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
    return analyser, NeuralRenderer(swapper, analyser)
