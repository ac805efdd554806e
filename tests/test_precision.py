"""The precision policy and the FP16 output guard's checks."""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import numpy as np
import pytest

from livefuse.config import EngineConfig
from livefuse.precision import (
    DeviceInfo,
    bad_output_reason,
    device_choices,
    probe_device,
    resolve_precision,
)

H200 = DeviceInfo("cuda", "NVIDIA H200", (9, 0))
T4 = DeviceInfo("cuda", "Tesla T4", (7, 5))
GTX1660 = DeviceInfo("cuda", "NVIDIA GeForce GTX 1660 SUPER", (7, 5))
P100 = DeviceInfo("cuda", "Tesla P100", (6, 0))
CPU = DeviceInfo("cpu")


@pytest.mark.parametrize(("info", "want"), [
    (H200, "fp16"), (T4, "fp16"), (GTX1660, "fp32"), (P100, "fp32"), (CPU, "fp32"),
])
def test_auto_picks_fp16_only_on_capable_cuda(info: DeviceInfo, want: str) -> None:
    precision, reason = resolve_precision("auto", info)
    assert precision == want
    assert reason.startswith("auto")


def test_gtx16_reason_names_the_nan_problem() -> None:
    assert "NaN" in resolve_precision("auto", GTX1660)[1]


def test_bf16_needs_ampere() -> None:
    assert resolve_precision("bf16", H200)[0] == "bf16"
    assert resolve_precision("bf16", T4)[0] == "fp32"
    assert resolve_precision("bf16", CPU)[0] == "fp32"


def test_explicit_choices_are_kept() -> None:
    assert resolve_precision("fp32", H200) == ("fp32", "fp32 requested")
    assert resolve_precision("fp16", CPU)[0] == "fp16"


def test_choice_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="livefuse.precision"):
        resolve_precision("auto", H200)
    assert "precision fp16" in caplog.text and "9.0" in caplog.text


def test_bad_request_raises() -> None:
    with pytest.raises(ValueError, match="fp8"):
        resolve_precision("fp8", CPU)


def _fake_torch(available: bool, names: dict[int, tuple[str, tuple[int, int]]]) -> Any:
    """A stand-in for ``torch`` with a fixed CUDA answer (device index -> name, capability)."""
    cuda = types.SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: len(names) if available else 0,
        get_device_name=lambda i: names[i][0],
        get_device_capability=lambda i: names[i][1])

    class Device:
        def __init__(self, spec: str) -> None:
            self.index = int(spec.split(":")[1]) if ":" in spec else None

    return types.SimpleNamespace(cuda=cuda, device=Device)


def test_probe_cpu_needs_no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    info = probe_device("cpu")
    assert (info.kind, info.name, info.compute_capability) == ("cpu", "cpu", None)
    assert resolve_precision("auto", info)[0] == "fp32"


def test_probe_cuda_reads_the_named_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(True, {
        0: ("NVIDIA GeForce GTX 1660 SUPER", (7, 5)), 1: ("NVIDIA H200", (9, 0))}))
    assert probe_device("cuda") == GTX1660
    assert probe_device("cuda:1") == H200
    assert resolve_precision("auto", probe_device("cuda:1"))[0] == "fp16"


def test_probe_cuda_without_a_gpu_falls_back_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(False, {}))
    assert probe_device("cuda:0") == CPU


def test_device_choices_list_every_cuda_device_torch_sees(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's Device box: auto, cpu and one cuda:N per GPU, from torch, never a fixed list."""
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(True, {
        0: ("NVIDIA GeForce GTX 1660 SUPER", (7, 5)), 1: ("NVIDIA H200", (9, 0))}))
    choices = dict(device_choices())
    assert list(choices) == ["auto", "cpu", "cuda:0", "cuda:1"]
    assert choices["cuda:1"] == "cuda:1 (NVIDIA H200)"
    for device in choices:
        EngineConfig(device=device).validate()  # every choice is a valid setting
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(False, {}))
    assert [d for d, _ in device_choices()] == ["auto", "cpu"]


def test_guard_reasons() -> None:
    rng = np.random.default_rng(0)
    good = rng.random((1, 3, 128, 128)).astype(np.float32)
    assert bad_output_reason(good) is None
    nan = good.copy()
    nan[0, 1, 5, 5] = np.nan
    assert bad_output_reason(nan) == "non-finite"
    inf = good.astype(np.float16)
    inf[0, 0, 0, 0] = np.inf
    assert bad_output_reason(inf) == "non-finite"
    assert bad_output_reason(np.full_like(good, 0.5)) == "flat"
    assert bad_output_reason(good * 1e-3) == "black"
    # a real, dark but textured face is not flagged
    assert bad_output_reason(good * 0.1) is None
