"""The precision policy (which float type the swapper runs in) and the FP16 output guard.

``auto`` picks fp16 only where it is both fast and known to be safe: CUDA devices of compute
capability >= 7.0 (tensor cores; NVIDIA CUDA C Programming Guide, "Compute Capabilities"), except
GTX 16xx cards (Turing without tensor cores), which are widely reported to produce NaN / black
faces with inswapper in fp16. Everything else, the CPU included, gets fp32.

The guard checks every swap output cheaply; a bad fp16 result is recomputed in fp32 by the caller
(:class:`livefuse.swap.neural.NeuralSwapper`), which then latches to fp32.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)

FLAT_STD = 1e-3
"""A swap output whose standard deviation (on the [0, 1] scale) is below this is a flat crop."""
BLACK_MAX = 1.0 / 255.0
"""A swap output whose maximum (on the [0, 1] scale) is below one 8-bit step is a black crop."""


@dataclass(frozen=True)
class DeviceInfo:
    """What the precision policy needs to know about a device.

    Attributes:
        kind: ``cpu`` or ``cuda`` (or another torch device type).
        name: marketing name, e.g. ``NVIDIA H200``; ``cpu`` for the CPU.
        compute_capability: ``(major, minor)`` for CUDA devices, else ``None``.
    """

    kind: str
    name: str = "cpu"
    compute_capability: tuple[int, int] | None = None


def probe_device(device: str = "cpu") -> DeviceInfo:
    """Describe ``device`` (``cpu``, ``cuda``, ``cuda:1``); works without torch (CPU only)."""
    if not device.startswith("cuda"):
        return DeviceInfo(kind=device.split(":")[0])
    import torch

    if not torch.cuda.is_available():
        return DeviceInfo(kind="cpu")
    idx = torch.device(device).index or 0
    return DeviceInfo(kind="cuda", name=torch.cuda.get_device_name(idx),
                      compute_capability=tuple(torch.cuda.get_device_capability(idx)))  # type: ignore[arg-type]


def device_choices() -> tuple[tuple[str, str], ...]:
    """The devices the neural engine can be asked to run on here, as ``(device, label)`` pairs:
    ``auto``, ``cpu``, and ``cuda:N`` (labelled with its name) for every CUDA device torch sees;
    no CUDA entry without torch or a GPU. The app's Device box lists these.

    Imports torch (about a second): call it off the GUI thread.
    """
    choices = [("auto", "auto (CUDA when torch sees a GPU, else CPU)"), ("cpu", "cpu")]
    try:
        import torch
    except ImportError:
        return tuple(choices)
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        choices += [(f"cuda:{i}", f"cuda:{i} ({torch.cuda.get_device_name(i)})")
                    for i in range(count)]
    except Exception as exc:  # a broken driver or wheel: the CPU is still a choice
        log.warning("cannot list CUDA devices: %s", exc)
    return tuple(choices)


def _is_gtx16(name: str) -> bool:
    n = name.upper().replace(" ", "")
    return "GTX16" in n


def resolve_precision(requested: str, info: DeviceInfo) -> tuple[str, str]:
    """Pick the precision to run in.

    Args:
        requested: ``auto``, ``fp32``, ``fp16`` or ``bf16``.
        info: the device (see :func:`probe_device`).

    Returns:
        ``(precision, reason)``: precision is ``fp32``, ``fp16`` or ``bf16``; reason is one
        human-readable line. The choice is logged at INFO.

    Raises:
        ValueError: ``requested`` is not one of the four choices.
    """
    if requested not in ("auto", "fp32", "fp16", "bf16"):
        raise ValueError(f"precision {requested!r} is not one of auto, fp32, fp16, bf16")
    cc = info.compute_capability
    cuda = info.kind == "cuda" and cc is not None
    if requested == "auto":
        if not cuda:
            out = ("fp32", f"auto: {info.kind} device, fp16 is only picked on CUDA")
        elif _is_gtx16(info.name):
            out = ("fp32", f"auto: {info.name} (GTX 16xx) is known to give NaN in fp16")
        elif cc is not None and cc >= (7, 0):
            out = ("fp16", f"auto: {info.name} has compute capability {cc[0]}.{cc[1]} >= 7.0")
        else:
            out = ("fp32", f"auto: {info.name} has compute capability "
                   f"{cc[0] if cc else '?'}.{cc[1] if cc else '?'} < 7.0 (no tensor cores)")
    elif requested == "bf16" and not (cuda and cc is not None and cc >= (8, 0)):
        out = ("fp32", "bf16 requested but it needs a CUDA device of compute capability >= 8.0")
    elif requested == "fp16" and cuda and _is_gtx16(info.name):
        out = ("fp16", f"fp16 requested on {info.name}: known to give NaN, the fp16 guard will "
               "fall back to fp32 if it does")
    else:
        out = (requested, f"{requested} requested")
    log.info("precision %s (%s)", out[0], out[1])
    return out


def bad_output_reason(pred: npt.NDArray[np.floating]) -> str | None:
    """Why a swap output is unusable, or ``None`` when it is fine.

    Args:
        pred: the model's output, any shape, on the [0, 1] scale (float16 or float32).

    Returns:
        ``"non-finite"``, ``"flat"`` (std < :data:`FLAT_STD`) or ``"black"``
        (max < :data:`BLACK_MAX`), else ``None``.
    """
    p = np.asarray(pred, dtype=np.float32)
    if not np.isfinite(p).all():
        return "non-finite"
    if float(p.max()) < BLACK_MAX:
        return "black"
    if float(p.std()) < FLAT_STD:
        return "flat"
    return None
