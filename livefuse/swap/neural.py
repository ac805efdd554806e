"""The neural swapper (inswapper family) on two backends: our PyTorch port and onnxruntime.

Per source face, :meth:`NeuralSwapper.prepare_source` turns the normed ArcFace embedding into the
model's latent once (``normalise(embedding @ emap)``, as insightface's ``INSwapper.get`` does per
call). Per target face, :meth:`NeuralSwapper.swap` aligns the face to the ArcFace template scaled to
128 px, runs the model, checks the output (the FP16 guard) and pastes it back bbox-locally.

FP16 guard: every output is checked (non-finite, flat or black crop, see
:func:`livefuse.precision.bad_output_reason`); a bad fp16/bf16 output is recomputed in fp32 for that
face and the swapper latches to fp32 for the rest of the session, with a warning and a counter
(:attr:`NeuralSwapper.fallbacks`, :attr:`NeuralSwapper.precision_in_use`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from livefuse.errors import LivefuseError
from livefuse.precision import (
    BLACK_MAX,
    FLAT_STD,
    bad_output_reason,
    probe_device,
    resolve_precision,
)
from livefuse.swap.paste import align_crop, arcface_affine, feather_mask, paste_back
from livefuse.types import Face, FloatArray, Frame

if TYPE_CHECKING:  # torch is optional: the onnxruntime backend works without it
    from livefuse.models.inswapper_torch import LoadedInswapper

log = logging.getLogger(__name__)

NeuralBackend = Literal["torch", "onnxruntime"]
INPUT_SIZE = 128
"""Aligned crop size of inswapper_128 (its ``target`` input is (1, 3, 128, 128))."""
LATENT_DIM = 512
VRAM_LIMIT = 0.85
"""Default VRAM guard: no new session when more than this fraction of device memory is in use."""


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


def _debug_stage(stage: str, arr: Any) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    mem = ""
    dev = getattr(arr, "device", None)
    if dev is not None and getattr(dev, "type", "") == "cuda":
        import torch

        mem = f", cuda allocated {torch.cuda.memory_allocated(dev) / 2**20:.1f} MiB"
    log.debug("%s: %s %s%s", stage, getattr(arr, "dtype", type(arr)),
              tuple(getattr(arr, "shape", ())), mem)


# ------------------------------------------------------------------------------------------ runners

class Runner(Protocol):
    """One backend in one precision: ``(1,3,128,128)`` RGB [0,1] + ``(1,512)`` latent → output."""

    precision: str

    def infer(self, target: FloatArray, latent: FloatArray) -> FloatArray: ...


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    import torch

    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


class TorchRunner:
    """The PyTorch port on one device in one precision.

    Args:
        loaded: the port as read by :func:`~livefuse.models.inswapper_torch.load_inswapper_onnx`
            (copied, the original is not changed).
        device: ``cpu`` or ``cuda[:N]``.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        fp16_mode: ``half`` casts the weights (half the memory); ``autocast`` keeps fp32 weights and
            runs convs in fp16 through ``torch.autocast``.
        tf32: allow TF32 tensor cores for fp32 convs and matmuls (``False`` = fp32 strict).
        channels_last: NHWC memory format (faster tensor-core convs).
        cuda_graph: capture one forward into a CUDA graph and replay it (CUDA only).
        compile_mode: ``torch.compile`` mode (e.g. ``reduce-overhead``), or ``None``.
        fused: layers to run through their fused formulations (a subset of
            :data:`~livefuse.models.fused_ops.FUSED_OPS`; see
            :meth:`~livefuse.models.inswapper_torch.InSwapper128.enable_fused`).
    """

    def __init__(self, loaded: LoadedInswapper, device: str = "cpu", precision: str = "fp32", *,
                 fp16_mode: Literal["half", "autocast"] = "half", tf32: bool = False,
                 channels_last: bool = False, cuda_graph: bool = False,
                 compile_mode: str | None = None, fused: frozenset[str] = frozenset()) -> None:
        import torch

        self.precision = precision
        self.device = torch.device(device)
        self.tf32 = tf32
        self.low = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
        self.autocast = self.low is not None and fp16_mode == "autocast"
        model = copy.deepcopy(loaded.model).eval()
        if fused:
            model.enable_fused(fused)
        self.fused = frozenset(fused)
        self.in_dtype = torch.float32
        if self.low is not None and not self.autocast:
            # cast before the move, so the device never holds an fp32 copy (peak memory)
            model = model.to(self.low)
            self.in_dtype = self.low
        model = model.to(self.device)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        if channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.model = model
        # The style vectors depend on the source latent only: computed once per source (see
        # InSwapper128.styles), the per-frame graph is convs and norms.
        self._fn: Callable[..., Any] = model.forward_styled
        if compile_mode:
            self._fn = torch.compile(model.forward_styled, mode=compile_mode)
        self._styles: Any = None
        self._styles_key: tuple[Any, ...] | None = None
        self._graph: Any = None
        self._static: tuple[Any, Any, Any] | None = None
        self.cuda_graph = cuda_graph and self.device.type == "cuda"

    def _contexts(self) -> Any:
        import contextlib

        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        stack.enter_context(_tf32(self.tf32))
        if self.autocast:
            assert self.low is not None
            stack.enter_context(torch.autocast(self.device.type, dtype=self.low))
        return stack

    def _forward(self, target: Any, styles: Any) -> Any:
        with self._contexts():
            return self._fn(target, styles)

    def styles_for(self, latent: Any) -> Any:
        """The model's style vectors for ``latent`` ``(1, 512)``, recomputed only when the latent
        changes (a CPU latent is compared by value, a device tensor by identity and version)."""
        import torch

        if latent.device.type == "cpu":
            key: tuple[Any, ...] = ("cpu", latent.numpy().tobytes())
        else:
            key = ("dev", latent.data_ptr(), latent._version, tuple(latent.shape))
        if key != self._styles_key:
            with self._contexts():
                styles = self.model.styles(latent.to(self.device, self.in_dtype))
            if self._styles is not None and self._styles.shape == styles.shape:
                self._styles.copy_(styles)  # in place: a captured CUDA graph reads this buffer
            else:
                self._styles = torch.empty_like(styles).copy_(styles)
            self._styles_key = key
        return self._styles

    def _capture(self, target: Any, styles: Any) -> None:
        import torch

        st = target.clone()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(3):
                self._forward(st, styles)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._forward(st, styles)
        self._graph, self._static = graph, (st, styles, out)

    def _convert(self, target: Any) -> Any:
        return target.to(self.device, self.in_dtype).contiguous(memory_format=self.memory_format)

    def infer_tensor(self, target: Any, latent: Any) -> Any:
        """Tensors on the device: ``(1,3,128,128)`` float and ``(1,512)`` float → output tensor.

        With a CUDA graph the returned tensor is the graph's static output: use it before the next
        call.
        """
        styles = self.styles_for(latent)
        _debug_stage("swap input", target)
        if self.cuda_graph:
            if self._graph is None:
                self._capture(self._convert(target), styles)
            assert self._static is not None
            st, _, out = self._static
            # one copy kernel moves, casts and re-lays the input: at batch 1 every launch counts
            st.copy_(target)
            self._graph.replay()
        else:
            out = self._forward(self._convert(target), styles)
        _debug_stage("swap output", out)
        return out

    def infer(self, target: FloatArray, latent: FloatArray) -> FloatArray:
        import torch

        out = self.infer_tensor(torch.from_numpy(target), torch.from_numpy(latent))
        result: FloatArray = out.float().cpu().numpy()
        return result


class OrtRunner:
    """onnxruntime session in fp32 (the file as is) or fp16 (the fp16 file or a converted copy)."""

    def __init__(self, model_path: Path, precision: str = "fp32",
                 providers: Sequence[str] = ("cpu",), trt_cache_dir: Path | None = None,
                 threads: int | None = None) -> None:
        from livefuse.models.runtime import create_session, ensure_fp16_model

        self.precision = precision
        path = ensure_fp16_model(model_path) if precision == "fp16" else model_path
        self.session = create_session(path, providers, trt_cache_dir=trt_cache_dir,
                                      fp16=precision == "fp16", threads=threads)
        ins = self.session.session.get_inputs()
        self.input_names = [i.name for i in ins]

    @property
    def fallback(self) -> bool:
        return self.session.fallback

    def infer(self, target: FloatArray, latent: FloatArray) -> FloatArray:
        feeds = {self.input_names[0]: target, self.input_names[1]: latent}
        return np.asarray(self.session.run(feeds)[0], dtype=np.float32)


def _bad_tensor_reason(out: Any) -> str | None:
    """:func:`bad_output_reason` on a device tensor with a single host sync."""
    import torch

    f = out.float()
    stats = torch.stack((torch.isfinite(f).all().float(), f.amax(), f.std())).cpu().numpy()
    if stats[0] < 1 or not np.isfinite(stats[1:]).all():
        return "non-finite"
    if stats[1] < BLACK_MAX:
        return "black"
    if stats[2] < FLAT_STD:
        return "flat"
    return None


# ----------------------------------------------------------------------------------------- swapper

class NeuralSwapper:
    """inswapper-class face swapper.

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
            :class:`TorchRunner`. ``None`` (channels_last, cuda_graph, fused) means on, with every
            fused layer, for the torch backend on CUDA, and off elsewhere.
        gpu_paste: torch backend on CUDA: align and paste on the GPU (frame up once, down once).
            Off by default: the pose cache needs the pasted patch on the CPU.
        empty_cache_every: call ``torch.cuda.empty_cache()`` every N frames (0 = never).
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
                 fused: frozenset[str] | None = None, gpu_paste: bool = False,
                 empty_cache_every: int = 0,
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
        # A torch session on CUDA defaults to the fastest eager set measured on an H200
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
        self.gpu_paste = gpu_paste and fast
        self.empty_cache_every = empty_cache_every
        self.fallbacks = 0
        self._latched = False
        self._frames = 0
        self._mask = feather_mask(INPUT_SIZE)
        self._mask_t: Any = None
        self._runner: Runner = self._make_runner(self.precision)
        log.info("neural swapper: %s backend, %s (%s)", backend, self.precision,
                 self.precision_reason)

    def _make_runner(self, precision: str) -> Runner:
        if self.backend == "torch":
            assert self._loaded is not None
            return TorchRunner(self._loaded, self.device, precision, **self._torch_opts)
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

    def infer(self, target: FloatArray, latent: FloatArray) -> FloatArray:
        """Run the model with the FP16 guard: ``(1,3,128,128)`` RGB [0,1] in and out, float32."""
        pred = self._runner.infer(target, latent)
        if self._runner.precision != "fp32":
            reason = bad_output_reason(pred)
            if reason is not None:
                self._latch(reason)
                pred = self._runner.infer(target, latent)
        return pred

    def swap_aligned(self, crop_bgr: Frame, latent: FloatArray) -> Frame:
        """Swap one aligned crop: ``(128, 128, 3) uint8 BGR`` → ``(128, 128, 3) uint8 BGR``.

        Raises:
            NeuralSwapError: the crop is not 128×128×3 uint8.
        """
        if crop_bgr.shape != (INPUT_SIZE, INPUT_SIZE, 3) or crop_bgr.dtype != np.uint8:
            raise NeuralSwapError(f"aligned crop must be ({INPUT_SIZE}, {INPUT_SIZE}, 3) uint8, "
                                  f"got {crop_bgr.shape} {crop_bgr.dtype}")
        blob = np.ascontiguousarray(crop_bgr[:, :, ::-1].transpose(2, 0, 1)[None],
                                    dtype=np.float32) * np.float32(1.0 / 255.0)
        pred = self.infer(blob, latent)
        out = np.clip(np.rint(pred[0].transpose(1, 2, 0) * 255.0), 0, 255).astype(np.uint8)
        return np.ascontiguousarray(out[:, :, ::-1])

    def swap(self, frame: Frame, target_face: Face, source: FloatArray) -> bool:
        """Swap one target face in ``frame`` (in place); ``source`` is the prepared latent.

        Returns ``False`` when the face lies wholly outside the frame.
        """
        return self.swap_all(frame, [target_face], source) == 1

    def swap_all(self, frame: Frame, faces: Sequence[Face], source: FloatArray) -> int:
        """Swap every face in ``faces`` into ``frame`` (in place); returns how many were pasted.

        All crops are taken from the unmodified frame, so overlapping faces do not feed each
        other's output back in.
        """
        self._frames += 1
        if self.gpu_paste:
            n = self._swap_all_gpu(frame, faces, source)
        else:
            affines = [arcface_affine(f.kps, INPUT_SIZE) for f in faces]
            crops = [align_crop(frame, m, INPUT_SIZE) for m in affines]
            n = 0
            for m, crop in zip(affines, crops, strict=True):
                fake = self.swap_aligned(crop, source)
                n += paste_back(frame, fake, m, self._mask) is not None
        if self.empty_cache_every and self._frames % self.empty_cache_every == 0 \
                and self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
        return n

    def _swap_all_gpu(self, frame: Frame, faces: Sequence[Face], source: FloatArray) -> int:
        import torch

        from livefuse.swap.paste import align_crop_torch, paste_back_torch

        dev = torch.device(self.device)
        if self._mask_t is None:
            self._mask_t = torch.from_numpy(np.array(self._mask)).to(dev)
        frame_t = torch.from_numpy(frame).to(dev, non_blocking=True)
        _debug_stage("frame up", frame_t)
        original = frame_t.clone() if len(faces) > 1 else frame_t
        latent_t = torch.from_numpy(source)  # on the CPU: the runner keys its style cache by value
        n = 0
        for face in faces:
            m = arcface_affine(face.kps, INPUT_SIZE)
            crop = align_crop_torch(original, m, INPUT_SIZE)
            runner = self._runner
            assert isinstance(runner, TorchRunner)
            out = runner.infer_tensor(crop, latent_t)
            if runner.precision != "fp32":
                reason = _bad_tensor_reason(out)
                if reason is not None:
                    self._latch(reason)
                    runner = self._runner
                    assert isinstance(runner, TorchRunner)
                    out = runner.infer_tensor(crop, latent_t)
            n += paste_back_torch(frame_t, out, m, self._mask_t) is not None
        frame[...] = frame_t.cpu().numpy()
        return n


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
