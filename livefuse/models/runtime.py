"""onnxruntime sessions for the swapper: the only place livefuse imports onnxruntime for swapping.

A session is created with the execution providers the user asked for; afterwards the providers
actually active are read back (``InferenceSession.get_providers()``), and any requested provider
that did not come up is reported loudly (a warning and ``OrtSession.fallback``), so a session
never runs on the CPU without saying so. ``strict=True`` turns that into an error.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from livefuse.errors import LivefuseError
from livefuse.imaging import atomic_write_bytes

log = logging.getLogger(__name__)

PROVIDER_NAMES: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "directml": "DmlExecutionProvider",
}
"""Short names accepted by :func:`create_session` → onnxruntime's provider names."""


class ProviderError(LivefuseError):
    """A model file cannot be opened, or a requested execution provider is not active."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"onnxruntime session for '{path}': {problem}")


@dataclass
class OrtSession:
    """An onnxruntime session and what it really runs on.

    Attributes:
        session: the ``onnxruntime.InferenceSession``.
        path: the model file the session was built from.
        requested: provider names asked for, in priority order.
        active: provider names the session reports as active.
        fallback: ``True`` when a requested non-CPU provider is not active.
        missing: the requested providers that are not active.
    """

    session: Any
    path: Path
    requested: list[str]
    active: list[str]
    missing: list[str] = field(default_factory=list)

    @property
    def fallback(self) -> bool:
        return bool(self.missing)

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        return list(self.session.run(None, feeds))


def provider_name(name: str) -> str:
    """``cuda`` → ``CUDAExecutionProvider``; full onnxruntime names pass through.

    Raises:
        ProviderError: unknown short name.
    """
    if name.endswith("ExecutionProvider"):
        return name
    try:
        return PROVIDER_NAMES[name.lower()]
    except KeyError:
        raise ProviderError("-", f"unknown execution provider {name!r}; known: "
                            f"{', '.join(PROVIDER_NAMES)}") from None


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def _provider_options(name: str, trt_cache_dir: Path | None, fp16: bool,
                      device_id: int) -> dict[str, Any]:
    if name == "TensorrtExecutionProvider":
        opts: dict[str, Any] = {"device_id": device_id, "trt_fp16_enable": fp16}
        if trt_cache_dir is not None:
            trt_cache_dir.mkdir(parents=True, exist_ok=True)
            opts.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(trt_cache_dir),
                        trt_timing_cache_enable=True, trt_timing_cache_path=str(trt_cache_dir))
        return opts
    if name in ("CUDAExecutionProvider", "DmlExecutionProvider"):
        return {"device_id": device_id}
    return {}


def create_session(model_path: str | Path, providers: Sequence[str] = ("cpu",), *,
                   trt_cache_dir: str | Path | None = None, fp16: bool = False,
                   device_id: int = 0, threads: int | None = None,
                   strict: bool = False) -> OrtSession:
    """Open ``model_path`` with the given execution providers, in priority order.

    The CPU provider is always appended last as onnxruntime's own fallback; if any requested
    provider other than the CPU is not active afterwards, a WARNING names it and the providers
    that did come up, and :attr:`OrtSession.fallback` is ``True``.

    Args:
        model_path: the .onnx file.
        providers: short names (``cpu``, ``cuda``, ``tensorrt``, ``coreml``, ``directml``) or
            onnxruntime provider names.
        trt_cache_dir: TensorRT engine and timing cache folder (engines take minutes to build;
            the cache makes the second start fast).
        fp16: let TensorRT build fp16 engines.
        device_id: GPU index for CUDA / TensorRT / DirectML.
        threads: intra-op threads for the CPU provider (``None``: onnxruntime's default).
        strict: raise :class:`ProviderError` instead of warning on a fallback.

    Raises:
        ProviderError: the file is missing or not a model onnxruntime can load, an unknown
            provider name, or (with ``strict``) a requested provider is not active.
    """
    import onnxruntime as ort

    path = Path(model_path)
    if not path.is_file():
        raise ProviderError(path, "file not found")
    requested = [provider_name(p) for p in providers]
    if "CPUExecutionProvider" not in requested:
        requested.append("CPUExecutionProvider")
    available = set(ort.get_available_providers())
    cache = Path(trt_cache_dir) if trt_cache_dir is not None else None
    # Unavailable providers are not passed: onnxruntime would only print its own warning.
    chosen = [(p, _provider_options(p, cache, fp16, device_id)) for p in requested
              if p in available]
    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = threads
    so.log_severity_level = 3  # the unused emap initializer is reported at warning level
    try:
        sess = ort.InferenceSession(str(path), sess_options=so,
                                    providers=[p for p, _ in chosen],
                                    provider_options=[o for _, o in chosen])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise ProviderError(path, f"onnxruntime cannot load it ({exc})") from exc
    active = list(sess.get_providers())
    missing = [p for p in requested if p != "CPUExecutionProvider" and p not in active]
    out = OrtSession(session=sess, path=path, requested=requested, active=active, missing=missing)
    if missing:
        msg = (f"requested execution provider(s) {', '.join(missing)} not active for "
               f"'{path.name}'; running on {', '.join(active)}"
               + (" (onnxruntime-gpu may have been overwritten by the CPU onnxruntime; "
                  "see `livefuse doctor`)" if "CUDAExecutionProvider" in missing else ""))
        if strict:
            raise ProviderError(path, msg)
        log.warning(msg)
    else:
        log.info("onnxruntime session for %s on %s", path.name, ", ".join(active))
    return out


def is_fp16_model(model_path: str | Path) -> bool:
    """``True`` when the graph's Conv weights are stored as float16."""
    import onnx
    from onnx import TensorProto

    proto = onnx.load(str(model_path), load_external_data=False)
    return any(t.data_type == TensorProto.FLOAT16 for t in proto.graph.initializer)


def fp16_copy_path(model_path: str | Path) -> Path:
    """Where the converted fp16 copy of ``model_path`` is cached: ``NAME.fp16.onnx`` beside it."""
    p = Path(model_path)
    return p.with_name(f"{p.stem}.fp16.onnx")


def ensure_fp16_model(model_path: str | Path) -> Path:
    """Return an fp16 version of ``model_path``, converting and caching it when needed.

    A model already stored in fp16 (e.g. the released ``inswapper_128_fp16.onnx``) is returned as
    is. Otherwise onnxconverter-common's ``convert_float_to_float16(keep_io_types=True)`` writes a
    copy beside the original (atomically; reused while it is newer than the original), keeping
    float32 inputs and outputs so callers feed the same arrays. The initializer order is kept, so
    the emap stays the last initializer.

    Raises:
        ProviderError: the original cannot be read or converted.
    """
    import onnx

    src = Path(model_path)
    if not src.is_file():
        raise ProviderError(src, "file not found")
    if is_fp16_model(src):
        return src
    dst = fp16_copy_path(src)
    if dst.is_file() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    try:
        from onnxconverter_common import float16

        proto = onnx.load(str(src))
        emap_name = proto.graph.initializer[-1].name
        with warnings.catch_warnings():
            # one warning per weight that underflows fp16: thousands on a real model
            warnings.simplefilter("ignore", UserWarning)
            half = float16.convert_float_to_float16(proto, keep_io_types=True)
    except Exception as exc:  # conversion errors come from onnx/protobuf/converter internals
        raise ProviderError(src, f"cannot convert to fp16 ({exc})") from exc
    if half.graph.initializer and half.graph.initializer[-1].name != emap_name:
        # keep insightface's convention (emap = last initializer) in the copy
        inits = list(half.graph.initializer)
        idx = next(i for i, t in enumerate(inits) if t.name == emap_name)
        emap = inits.pop(idx)
        del half.graph.initializer[:]
        half.graph.initializer.extend([*inits, emap])
    atomic_write_bytes(dst, half.SerializeToString())
    log.info("wrote fp16 copy %s (%.1f MiB)", dst, os.path.getsize(dst) / 2**20)
    return dst


class OrtRunner:
    """An inswapper session on onnxruntime in fp32 (the file as is) or fp16 (the fp16 file or a
    converted copy); faces run one at a time (the released graph's batch is 1).

    Raises:
        ProviderError: the file cannot be opened or converted.
    """

    def __init__(self, model_path: Path, precision: str = "fp32",
                 providers: Sequence[str] = ("cpu",), trt_cache_dir: Path | None = None,
                 threads: int | None = None) -> None:
        self.precision = precision
        path = ensure_fp16_model(model_path) if precision == "fp16" else model_path
        self.session = create_session(path, providers, trt_cache_dir=trt_cache_dir,
                                      fp16=precision == "fp16", threads=threads)
        ins = self.session.session.get_inputs()
        self.input_names = [i.name for i in ins]

    @property
    def fallback(self) -> bool:
        return self.session.fallback

    def infer(self, target: Any, latent: Any) -> Any:
        """``(N, 3, 128, 128) float32`` RGB [0, 1] and ``(1, 512)`` latent → ``(N, 3, 128, 128)``
        float32."""
        import numpy as np

        outs = [self.session.run({self.input_names[0]: np.ascontiguousarray(target[i:i + 1]),
                                  self.input_names[1]: latent})[0]
                for i in range(target.shape[0])]
        return np.concatenate(outs).astype(np.float32, copy=False)
