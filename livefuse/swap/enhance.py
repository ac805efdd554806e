"""The face enhancer (GFPGAN 1.4, GPEN-BFR-512): restores the swapped face at 512 px.

Contract (one call per frame, all faces as one batch, on the inference thread)::

    patches = enhancer.enhance(frame, [face.kps for face in faces])   # right after the swap paste
    paste_all(frame, patches)  /  paste_patches(frame_t, patches)      # the usual paste-back

* ``frame``: the frame **with the swapped faces already pasted**: host ``(H, W, 3) uint8 BGR``
  numpy array, or on the GPU path the staged frame's ``(H, W, 3) uint8`` BGR tensor (the same
  tensor :func:`livefuse.swap.gpu_frame.paste_patches` wrote into).
* ``kps``: per face its 5 keypoints ``(5, 2) float32`` in frame px (InsightFace order); each face
  is aligned with :func:`ffhq_affine` onto the FFHQ-512 template, cut at 512×512 (black outside the
  frame), run through the model (RGB in [-1, 1] → RGB in [-1, 1], clipped), and mixed with its
  un-enhanced crop by ``blend`` (0 = the crop unchanged, 100 = the model output).
* returns per face a :class:`~livefuse.types.Patch` (``None`` for a face outside the frame):
  ``affine`` maps frame px → the 512 crop; ``alpha`` ``(512, 512) float32`` is the feathered
  :func:`~livefuse.swap.masks.box_mask` (times the occlusion mask when an ``occluder`` is given,
  computed on the un-enhanced crop, as FaceFusion does); ``image`` is ``(512, 512, 3) uint8 BGR``
  on the host, or a ``(3, 512, 512) float32`` RGB [0, 1] tensor on the frame's device.

The host path needs no torch (onnxruntime backend); the device path keeps everything on the
device and never synchronises with the host. The model runs in the session's precision under the
swapper's guard: a non-finite fp16 output is computed again in fp32 and the model stays in fp32
(at once on the host; on the device the verdict waits for :meth:`FaceEnhancer.verify`, called by
the engine after the frame's synchronisation, which then enhances the frame again). The engine
calls :meth:`FaceEnhancer.enhance_host` or :meth:`FaceEnhancer.enhance_device` (its frame path
picks one when it is built); :meth:`FaceEnhancer.enhance` takes either kind of frame. Not
thread-safe: one inference thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from livefuse.faces.align import FFHQ_512, ffhq_affine
from livefuse.models.graph_runner import GraphError, GraphIO, Runner, make_runner, read_io
from livefuse.swap.masks import Occluder, Padding, box_mask, combine_masks, device_constant
from livefuse.swap.paste import align_crop, paste_roi
from livefuse.types import Affine, FloatArray, Frame, Patch

ENHANCER_SIZE = 512
DEFAULT_BLEND = 80.0
"""FaceFusion's default face-enhancer blend."""
DEFAULT_ENHANCER = "gfpgan_1.4"


def resolve_model(name_or_path: str | Path, models_dir: str | Path | None = None) -> Path:
    """A catalog name (``gfpgan_1.4``, ``gpen_bfr_512``, ``xseg``, ...) → its verified file in the
    models folder; an existing path → itself.

    Raises:
        UnknownModelError / ModelMissingError / ModelVerifyError.
    """
    p = Path(name_or_path)
    if p.suffix == ".onnx" and (p.is_file() or len(p.parts) > 1):
        return p
    from livefuse.models.catalog import get_spec
    from livefuse.models.catalog import models_dir as default_dir
    from livefuse.models.download import require

    return require(get_spec(str(name_or_path)), default_dir(models_dir))


class FaceEnhancer:
    """Face restoration on one backend; see the module docstring for the per-frame contract.

    Args:
        name_or_path: a catalog row (``gfpgan_1.4``, ``gfpgan_1.4_facefusion``, ``gpen_bfr_512``)
            or an .onnx path; ``None`` with ``module`` and ``io`` (a replica in tests).
        backend: ``torch`` (the graph through ``OnnxModule``) or ``onnxruntime``.
        device: ``cpu`` or ``cuda[:N]``.
        precision: ``auto`` (fp16 on CUDA devices of compute capability >= 7.0, else fp32),
            ``fp32``, ``fp16``, ``bf16`` (torch backend; onnxruntime runs the file as it is),
            under the swapper's guard (see the module docstring).
        blend: 0-100, how much of the model output replaces the un-enhanced crop.
        box_blur, box_padding: the patch alpha's :func:`box_mask` (FaceFusion: the face-mask
            blur, no padding).
        occluder: optional :class:`~livefuse.swap.masks.Occluder`: occluded pixels keep the
            un-enhanced face.
        models_dir: the models folder for catalog names.
        module, io: (torch) a module with the graph's signature instead of ``OnnxModule``.
        cuda_graph: (torch on CUDA) capture the model per batch size.

    Raises:
        ModelMissingError / ModelVerifyError: a catalog model is missing or corrupt.
        GraphError: the graph does not take ``(N, 3, 512, 512)``.
        ProviderError: onnxruntime cannot open the file.
    """

    def __init__(self, name_or_path: str | Path | None = DEFAULT_ENHANCER,
                 backend: str = "torch", device: str = "cpu", precision: str = "auto",
                 blend: float = DEFAULT_BLEND, *, box_blur: float = 0.3,
                 box_padding: Padding = (0.0, 0.0, 0.0, 0.0), occluder: Occluder | None = None,
                 models_dir: str | Path | None = None, module: Any = None,
                 io: GraphIO | None = None, threads: int | None = None,
                 cuda_graph: bool = False) -> None:
        self.path = resolve_model(name_or_path, models_dir) if name_or_path is not None else None
        if io is None:
            if self.path is None:
                raise ValueError("FaceEnhancer needs a model, or a module with its GraphIO")
            io = read_io(self.path)
        shape = io.input_shapes[0] if io.input_shapes else ()
        if len(shape) != 4 or shape[1] != 3 or any(
                isinstance(d, int) and d != ENHANCER_SIZE for d in shape[2:]):
            raise GraphError(self.path or "<module>", f"enhancer input shape {shape} is not "
                             f"(N, 3, {ENHANCER_SIZE}, {ENHANCER_SIZE})")
        self.io = io
        self.size = ENHANCER_SIZE
        self.runner: Runner = make_runner(self.path, backend, device=device, precision=precision,
                                          module=module, io=io, threads=threads,
                                          cuda_graph=cuda_graph)
        self.backend = backend
        self.device = device
        self.blend = float(blend)
        self.alpha: FloatArray = box_mask(self.size, tuple(box_padding), box_blur)
        self.occluder = occluder

    @property
    def precision(self) -> str:
        return self.runner.precision

    @property
    def precision_in_use(self) -> str:
        """e.g. ``fp16``, or ``fp32 (fallback)`` once the guard has latched."""
        return self.runner.precision_in_use

    def verify(self) -> bool:
        """Whether the deferred guards of the device runs since the last call passed (the
        occluder's too); ``False``: the model has fallen back to fp32 and those faces must be
        enhanced again."""
        ok = [self.runner.verify()]
        if self.occluder is not None:
            ok.append(self.occluder.verify())
        return all(ok)

    @staticmethod
    def template() -> FloatArray:
        """The FFHQ-512 5-point template ``(5, 2) float32`` (crop px)."""
        return FFHQ_512

    def affines(self, kps: Sequence[FloatArray]) -> list[Affine]:
        return [ffhq_affine(k, self.size) for k in kps]

    # --------------------------------------------------------------------------- the model
    def restore_host(self, crops: Sequence[Frame] | np.ndarray) -> np.ndarray:
        """The model on host crops: ``(N, 512, 512, 3) uint8 BGR`` → same, no blending."""
        arr = np.asarray(crops) if isinstance(crops, np.ndarray) else np.stack(list(crops))
        if arr.ndim != 4 or arr.shape[1:] != (self.size, self.size, 3):
            raise ValueError(f"enhancer crops must be (N, {self.size}, {self.size}, 3) uint8 BGR, "
                             f"got {arr.shape}")
        blob = arr[..., ::-1].transpose(0, 3, 1, 2).astype(np.float32) * np.float32(2.0 / 255.0) \
            - np.float32(1.0)
        out = self.runner.run(np.ascontiguousarray(blob))[0]
        out = (np.clip(out, -1.0, 1.0) + 1.0) * 127.5
        return np.ascontiguousarray(np.rint(out).astype(np.uint8).transpose(0, 2, 3, 1)[..., ::-1])

    def restore_device(self, crops: Any, deferred: bool = False) -> Any:
        """The model on device crops: ``(N, 3, 512, 512)`` RGB [0, 1] → same (float32);
        ``deferred``: the guard's verdict waits for :meth:`verify`."""
        import torch

        blob = crops.float() * 2.0 - 1.0
        if self.runner.backend == "torch":
            out = self.runner.run_tensors(blob, deferred=deferred)[0]  # type: ignore[union-attr]
        else:
            out = torch.from_numpy(self.runner.run(blob.cpu().numpy())[0]).to(crops.device)
        return (out.float().clamp(-1.0, 1.0) + 1.0) * 0.5

    # ------------------------------------------------------------------------ per frame
    def enhance(self, frame: Any, kps: Sequence[FloatArray],
                blend: float | None = None) -> list[Patch | None]:
        """Enhanced 512 patches for the faces at ``kps`` of ``frame`` (host array or device
        tensor); see the module docstring. ``blend`` overrides the instance's for this call."""
        if isinstance(frame, np.ndarray):
            return self.enhance_host(frame, kps, blend)
        return self.enhance_device(frame, kps, blend)

    def _plan(self, frame: Any, kps: Sequence[FloatArray], blend: float | None
              ) -> tuple[float, list[Affine], list[int], list[Patch | None]]:
        b = min(max(self.blend if blend is None else float(blend), 0.0), 100.0) / 100.0
        affines = self.affines(kps)
        shape = tuple(frame.shape)
        todo = [i for i, m in enumerate(affines) if _covers(paste_roi(m, self.size, shape))]
        return b, affines, todo, [None] * len(affines)

    def enhance_host(self, frame: Frame, kps: Sequence[FloatArray],
                     blend: float | None = None) -> list[Patch | None]:
        """:meth:`enhance` on a host frame ``(H, W, 3) uint8 BGR``."""
        b, affines, todo, out = self._plan(frame, kps, blend)
        if todo:
            crops = np.stack([align_crop(frame, affines[i], self.size) for i in todo])
            restored = self.restore_host(crops) if b > 0 else crops
            mixed = crops.astype(np.float32)
            mixed += b * (restored.astype(np.float32) - mixed)
            images = np.clip(np.rint(mixed), 0, 255).astype(np.uint8)
            alphas: Any = self.alpha
            if self.occluder is not None:
                alphas = combine_masks(self.alpha, self.occluder.masks_host(crops))
            for k, i in enumerate(todo):
                a = alphas if alphas.ndim == 2 else alphas[k]
                out[i] = Patch(image=images[k], alpha=a, affine=affines[i])
        return out

    def enhance_device(self, frame: Any, kps: Sequence[FloatArray],
                       blend: float | None = None) -> list[Patch | None]:
        """:meth:`enhance` on a device frame ``(H, W, 3) uint8`` BGR tensor (no host sync; the
        guard's verdict waits for :meth:`verify`)."""
        import torch

        from livefuse.swap.gpu_frame import align_crops

        b, affines, todo, out = self._plan(frame, kps, blend)
        if not todo:
            return out
        crops_t = align_crops(frame, [affines[i] for i in todo], self.size)
        mixed_t = crops_t
        if b > 0:
            mixed_t = crops_t + b * (self.restore_device(crops_t, deferred=True) - crops_t)
        alphas_t: Any = device_constant(self.alpha, frame.device)
        if self.occluder is not None:
            occluded = self.occluder.masks_device(crops_t, deferred=True)
            alphas_t = torch.minimum(alphas_t, occluded).clamp(0.0, 1.0)
        for k, i in enumerate(todo):
            a = alphas_t if alphas_t.ndim == 2 else alphas_t[k]
            out[i] = Patch(image=mixed_t[k], alpha=a, affine=affines[i])
        return out


def _covers(roi: tuple[int, int, int, int]) -> bool:
    x0, y0, x1, y1 = roi
    return x1 - x0 >= 8 and y1 - y0 >= 8


__all__ = ["DEFAULT_BLEND", "DEFAULT_ENHANCER", "ENHANCER_SIZE", "FFHQ_512", "FaceEnhancer",
           "ffhq_affine", "resolve_model"]
