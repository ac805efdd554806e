"""The neural swapper (inswapper family) on two backends: our PyTorch port and onnxruntime.

Per source face, :meth:`NeuralSwapper.prepare_source` turns the normed ArcFace embedding into the
model's latent once (``normalise(embedding @ emap)``, as insightface's ``INSwapper.get`` does per
call). Per frame, the aligned 128 px crops of all target faces (ArcFace template scaled to 128)
run as one batch: :meth:`NeuralSwapper.swap_crops` on the host, :meth:`NeuralSwapper.swap_device`
on device tensors. The engine's renderer (:mod:`livefuse.swap.neural_engine`) does the aligning
and hands the swapped crops to the shared paste-back.

FP16 guard: every output is checked (non-finite, flat or black crop, see
:func:`livefuse.precision.bad_output_reason`); a bad fp16/bf16 output is recomputed in fp32 for that
face and the swapper latches to fp32 for the rest of the session, with a warning and a counter
(:attr:`NeuralSwapper.fallbacks`, :attr:`NeuralSwapper.precision_in_use`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from livefuse.config import VRAM_LIMIT
from livefuse.errors import LivefuseError
from livefuse.precision import (
    BLACK_MAX,
    FLAT_STD,
    bad_output_reason,
    probe_device,
    resolve_precision,
)
from livefuse.swap.paste import align_crop, arcface_affine, feather_mask, paste_all
from livefuse.types import Face, FloatArray, Frame, Patch

if TYPE_CHECKING:  # torch is optional: the onnxruntime backend works without it
    from livefuse.models.inswapper_torch import LoadedInswapper

log = logging.getLogger(__name__)

NeuralBackend = Literal["torch", "onnxruntime"]
INPUT_SIZE = 128
"""Aligned crop size of inswapper_128 (its ``target`` input is (1, 3, 128, 128))."""
LATENT_DIM = 512


class NeuralSwapError(LivefuseError):
    """Bad input to the neural swapper (wrong embedding size, crop shape) or a refused session."""


class VramError(NeuralSwapError):
    """Too much device memory is already in use to open another swapper session."""


# --------------------------------------------------------------------------------- memory hygiene

def check_vram(device: str, limit: float = VRAM_LIMIT,
               mem_get_info: Callable[[], tuple[int, int]] | None = None) -> float:
    """Refuse a new session when more than ``limit`` (0..1) of the device's memory is in use.

    Args:
        device: ``cpu`` (always passes) or ``cuda[:N]``.
        limit: largest used fraction allowed; 1.0 disables the guard.
        mem_get_info: ``() -> (free_bytes, total_bytes)``; default ``torch.cuda.mem_get_info``.

    Returns:
        The used fraction (0.0 for the CPU).

    Raises:
        VramError: the used fraction is above ``limit``.
    """
    if not device.startswith("cuda") and mem_get_info is None:
        return 0.0
    if mem_get_info is None:
        import torch

        def mem_get_info() -> tuple[int, int]:
            free, total = torch.cuda.mem_get_info(torch.device(device))
            return int(free), int(total)

    free, total = mem_get_info()
    used = 1.0 - free / total if total else 0.0
    if used > limit:
        raise VramError(
            f"{device}: {used:.0%} of {total / 2**30:.1f} GiB device memory is in use, above the "
            f"{limit:.0%} limit; close other GPU programs or lower the model size")
    return used


# ------------------------------------------------------------------------------------------ runners

class Runner(Protocol):
    """One backend in one precision: ``(N, 3, 128, 128)`` RGB [0, 1] + ``(1, 512)`` latent →
    output (:class:`~livefuse.models.torch_runner.TorchRunner`,
    :class:`~livefuse.models.runtime.OrtRunner`)."""

    precision: str

    def infer(self, target: FloatArray, latent: FloatArray) -> FloatArray: ...


def guard_stats(out: Any) -> Any:
    """Per face of a device batch ``(N, ...)``: finite (0/1), max and std, ``(N, 3) float32`` on
    the device (no sync)."""
    import torch

    f = out.float().flatten(1)
    return torch.stack((torch.isfinite(f).all(1).float(), f.amax(1), f.std(1)), 1)


def reasons_from_stats(stats: np.ndarray) -> list[str | None]:
    """:func:`~livefuse.precision.bad_output_reason` per face from :func:`guard_stats`."""
    reasons: list[str | None] = []
    for finite, top, std in stats:
        if finite < 1 or not np.isfinite(top) or not np.isfinite(std):
            reasons.append("non-finite")
        elif top < BLACK_MAX:
            reasons.append("black")
        elif std < FLAT_STD:
            reasons.append("flat")
        else:
            reasons.append(None)
    return reasons


def bad_tensor_reasons(out: Any) -> list[str | None]:
    """:func:`~livefuse.precision.bad_output_reason` per face of a device batch ``(N, ...)``,
    with one host sync for the whole batch."""
    return reasons_from_stats(guard_stats(out).cpu().numpy())


class NeuralSwapper:
    """inswapper-class face swapper: aligned crops in, swapped crops out, with the FP16 guard.

    Args:
        model_path: inswapper .onnx file (released, fp16 release, or a synthetic replica).
        backend: ``torch`` (our port, weights read from the file by graph structure) or
            ``onnxruntime``.
        precision: ``auto``, ``fp32``, ``fp16`` or ``bf16`` (see
            :func:`livefuse.precision.resolve_precision`; onnxruntime has no bf16 path → fp32).
        device: ``cpu`` or ``cuda[:N]`` (torch backend; onnxruntime follows ``providers``).
        providers: onnxruntime execution providers (default ``cuda`` then ``cpu`` on a CUDA
            device, else ``cpu``).
        fp16_mode, channels_last, cuda_graph, compile_mode, tf32, fused: see
            :class:`~livefuse.models.torch_runner.TorchRunner`. ``None`` (channels_last,
            cuda_graph, fused) means on, with every fused layer, for the torch backend on CUDA,
            and off elsewhere.
        empty_cache_every: call ``torch.cuda.empty_cache()`` every N batches (0 = never).
        vram_limit: refuse the session when more than this fraction of VRAM is in use.
        trt_cache_dir: TensorRT engine cache folder.
        threads: onnxruntime CPU threads.

    Raises:
        InswapperGraphError: the torch backend cannot map the file onto the port.
        ProviderError: onnxruntime cannot open the file.
        VramError: the VRAM guard refused the session.
    """

    def __init__(self, model_path: str | Path, *, backend: NeuralBackend = "torch",
                 precision: str = "auto", device: str = "cpu",
                 providers: Sequence[str] | None = None,
                 fp16_mode: Literal["half", "autocast"] = "half",
                 channels_last: bool | None = None, cuda_graph: bool | None = None,
                 compile_mode: str | None = None, tf32: bool = False,
                 fused: frozenset[str] | None = None, empty_cache_every: int = 0,
                 vram_limit: float = VRAM_LIMIT, trt_cache_dir: Path | None = None,
                 threads: int | None = None) -> None:
        if backend not in ("torch", "onnxruntime"):
            raise NeuralSwapError(f"backend {backend!r} is not one of torch, onnxruntime")
        self.model_path = Path(model_path)
        self.backend = backend
        self.device = device
        check_vram(device, vram_limit)
        self.precision, self.precision_reason = resolve_precision(precision, probe_device(device))
        if backend == "onnxruntime" and self.precision == "bf16":
            self.precision, self.precision_reason = "fp32", "onnxruntime backend has no bf16 path"
        if providers is None:
            providers = ("cuda", "cpu") if device.startswith("cuda") else ("cpu",)
        # A torch session on CUDA defaults to the fastest set measured on an H200
        # (docs/BENCHMARKS.md §4): at batch 1 the port is launch-bound, so a plain fp16 forward
        # is no faster than fp32 until a CUDA graph and the fused layers remove the gaps.
        fast = backend == "torch" and device.startswith("cuda")
        if fused is None:
            from livefuse.models.fused_ops import FUSED_OPS

            fused = FUSED_OPS if fast else frozenset()
        self._torch_opts: dict[str, Any] = dict(
            fp16_mode=fp16_mode, channels_last=fast if channels_last is None else channels_last,
            cuda_graph=fast if cuda_graph is None else cuda_graph, compile_mode=compile_mode,
            tf32=tf32, fused=fused)
        self._ort_opts: dict[str, Any] = dict(providers=tuple(providers),
                                              trt_cache_dir=trt_cache_dir, threads=threads)
        self._loaded: LoadedInswapper | None = None
        if backend == "torch":
            from livefuse.models.inswapper_torch import load_inswapper_onnx

            self._loaded = load_inswapper_onnx(self.model_path)
            self.emap = self._loaded.emap
        else:
            self.emap = _read_emap(self.model_path)
        self.on_device = fast
        """Torch on CUDA: :meth:`swap_device` takes and gives device tensors."""
        self.empty_cache_every = empty_cache_every
        self.fallbacks = 0
        self._latched = False
        self._batches = 0
        self._deferred: Any = None
        self._deferred_done: Any = None
        self._runner: Runner = self._make_runner(self.precision)
        log.info("neural swapper: %s backend, %s (%s)", backend, self.precision,
                 self.precision_reason)

    def _make_runner(self, precision: str) -> Runner:
        if self.backend == "torch":
            from livefuse.models.torch_runner import TorchRunner

            assert self._loaded is not None
            return TorchRunner(self._loaded, self.device, precision, **self._torch_opts)
        from livefuse.models.runtime import OrtRunner

        return OrtRunner(self.model_path, precision, **self._ort_opts)

    @property
    def precision_in_use(self) -> str:
        """``fp16``, ``bf16``, ``fp32``, or ``fp32 (fallback)`` after the FP16 guard latched."""
        return "fp32 (fallback)" if self._latched else self.precision

    @property
    def runner(self) -> Runner:
        return self._runner

    # ------------------------------------------------------------------------------- source face
    def prepare_source(self, embedding: npt.ArrayLike) -> FloatArray:
        """Latent ``(1, 512) float32`` = normalise(normed embedding @ emap); once per source face.

        Raises:
            NeuralSwapError: the embedding is not a 512-d ArcFace embedding (e.g. a 128-d dlib one).
        """
        e = np.asarray(embedding, dtype=np.float32).reshape(1, -1)
        if e.shape[1] != LATENT_DIM or not np.isfinite(e).all():
            raise NeuralSwapError(
                f"source embedding has {e.shape[1]} values; the neural swapper needs a finite "
                f"{LATENT_DIM}-d ArcFace embedding (the classic analyser's 128-d one does not fit)")
        latent = np.dot(e, self.emap)
        latent /= np.linalg.norm(latent)
        return latent.astype(np.float32)

    # ------------------------------------------------------------------------------ inference
    def _latch(self, reason: str) -> None:
        self.fallbacks += 1
        log.warning("%s swap output was %s: recomputing in fp32 and staying in fp32 from now on "
                    "(fallback #%d)", self.precision, reason, self.fallbacks)
        self._latched = True
        self._runner = self._make_runner("fp32")

    def _tick(self) -> None:
        self._batches += 1
        if self.empty_cache_every and self._batches % self.empty_cache_every == 0 \
                and self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def infer(self, target: FloatArray, latent: FloatArray) -> FloatArray:
        """Run the model with the FP16 guard on host arrays: ``(N, 3, 128, 128)`` RGB [0, 1] in
        and out, float32."""
        self._tick()
        pred = self._runner.infer(target, latent)
        if self._runner.precision != "fp32":
            reason = next((r for r in map(bad_output_reason, pred) if r is not None), None)
            if reason is not None:
                self._latch(reason)
                pred = self._runner.infer(target, latent)
        return pred

    def swap_device(self, crops: Any, latent: FloatArray, deferred: bool = False) -> Any:
        """Run the model with the FP16 guard on a device batch (torch backend on CUDA).

        Args:
            crops: ``(N, 3, 128, 128)`` float RGB [0, 1] tensor on the device.
            latent: ``(1, 512) float32`` host array (the runner keys its style cache by value).
            deferred: do not wait for the guard's verdict here: its statistics go to pinned
                memory with the frame's other results, and :meth:`check_deferred` reads them
                after the frame's next synchronisation (one sync per frame fewer). The caller
                must then call :meth:`check_deferred` and redo the batch if it says so.

        Returns:
            ``(N, 3, 128, 128)`` tensor, RGB [0, 1], in the runner's dtype; a copy the caller
            owns (not the CUDA graph's static output).
        """
        import torch

        from livefuse.models.graph_cache import current_stream
        from livefuse.models.torch_runner import TorchRunner

        self._tick()
        runner = self._runner
        assert isinstance(runner, TorchRunner)
        latent_t = torch.from_numpy(latent)
        out = runner.infer_tensor(crops, latent_t)
        if runner.precision != "fp32":
            if deferred:
                stats = guard_stats(out)
                cuda = stats.device.type == "cuda"
                self._deferred = torch.empty(stats.shape, dtype=stats.dtype, pin_memory=cuda)
                self._deferred.copy_(stats, non_blocking=cuda)
                self._deferred_done = torch.cuda.Event() if cuda else None
                if self._deferred_done is not None:
                    self._deferred_done.record(current_stream(stats.device))
                return out.clone()
            reason = next((r for r in bad_tensor_reasons(out) if r is not None), None)
            if reason is not None:
                self._latch(reason)
                runner = self._runner
                assert isinstance(runner, TorchRunner)
                out = runner.infer_tensor(crops, latent_t)
        return out.clone()

    def check_deferred(self) -> bool:
        """The verdict of the last deferred guard: ``True`` when every face was fine (or no
        check is pending); ``False`` when one was bad: the swapper has latched to fp32 and the
        batch must be swapped again."""
        pending, self._deferred = self._deferred, None
        if pending is None:
            return True
        if self._deferred_done is not None:  # already done after the frame's download sync
            self._deferred_done.synchronize()
        reason = next((r for r in reasons_from_stats(pending.numpy()) if r is not None), None)
        if reason is None:
            return True
        self._latch(reason)
        return False

    def swap_crops(self, crops_bgr: Sequence[Frame], latent: FloatArray) -> list[Frame]:
        """Swap aligned crops ``(128, 128, 3) uint8 BGR`` on the host, as one batch.

        Raises:
            NeuralSwapError: a crop is not 128×128×3 uint8.
        """
        if not crops_bgr:
            return []
        for crop in crops_bgr:
            if crop.shape != (INPUT_SIZE, INPUT_SIZE, 3) or crop.dtype != np.uint8:
                raise NeuralSwapError(f"aligned crop must be ({INPUT_SIZE}, {INPUT_SIZE}, 3) "
                                      f"uint8, got {crop.shape} {crop.dtype}")
        blob = np.ascontiguousarray(np.stack(crops_bgr)[..., ::-1].transpose(0, 3, 1, 2),
                                    dtype=np.float32) * np.float32(1.0 / 255.0)
        pred = self.infer(blob, latent)
        out = np.clip(np.rint(pred.transpose(0, 2, 3, 1) * 255.0), 0, 255).astype(np.uint8)
        return [np.ascontiguousarray(o[:, :, ::-1]) for o in out]

    def swap_aligned(self, crop_bgr: Frame, latent: FloatArray) -> Frame:
        """Swap one aligned crop: ``(128, 128, 3) uint8 BGR`` → ``(128, 128, 3) uint8 BGR``.

        Raises:
            NeuralSwapError: the crop is not 128×128×3 uint8.
        """
        return self.swap_crops([crop_bgr], latent)[0]

    def swap_all(self, frame: Frame, faces: Sequence[Face], source: FloatArray) -> int:
        """Swap every face in ``frame`` on the host (in place): align, one batch, paste-back.

        All crops are taken from the unmodified frame, so overlapping faces do not feed each
        other's output back in. Returns how many were pasted.
        """
        affines = [arcface_affine(f.kps, INPUT_SIZE) for f in faces]
        fakes = self.swap_crops([align_crop(frame, m, INPUT_SIZE) for m in affines], source)
        mask = feather_mask(INPUT_SIZE)
        rois = paste_all(frame, [Patch(image=f, alpha=mask, affine=m)
                                 for f, m in zip(fakes, affines, strict=True)])
        return sum(r is not None for r in rois)

    def swap(self, frame: Frame, target_face: Face, source: FloatArray) -> bool:
        """:meth:`swap_all` for one face; ``False`` when it lies wholly outside the frame."""
        return self.swap_all(frame, [target_face], source) == 1


def _read_emap(path: Path) -> FloatArray:
    import onnx
    from onnx import numpy_helper

    from livefuse.models.inswapper_torch import InswapperGraphError

    try:
        proto = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, OSError, ... on bad files
        raise InswapperGraphError(path, f"not a readable ONNX model ({exc})") from exc
    if not proto.graph.initializer:
        raise InswapperGraphError(path, "the graph has no initializers (no emap)")
    emap = numpy_helper.to_array(proto.graph.initializer[-1]).astype(np.float32)
    if emap.shape != (LATENT_DIM, LATENT_DIM):
        raise InswapperGraphError(path, f"last initializer has shape {emap.shape}, expected the "
                                  f"({LATENT_DIM}, {LATENT_DIM}) emap")
    return emap
