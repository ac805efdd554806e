"""Which engine a config runs, and which model files it lacks: the one place ``--engine auto`` is
resolved (``livefuse run`` and ``live``, the desktop app, ``livefuse doctor`` and the Engine
itself all call :func:`resolve_engine`).

``auto`` means the neural engine when its three core models (the SCRFD detector, the ArcFace
recogniser and an inswapper file) are present and verified, else the offline classic engine.
Only the catalog is read: nothing is loaded, and digests are cached by
:func:`livefuse.models.download.status`, so only the first call after a download hashes files.
Any thread may call these functions (the app calls them off its GUI thread, because that first
hash of a 554 MB file takes seconds).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from livefuse.config import EngineConfig, EngineName
from livefuse.errors import LivefuseError
from livefuse.models.catalog import ModelSpec, get_spec, models_dir
from livefuse.models.download import ModelMissingError, ModelVerifyError, Status, status

CORE_MODELS = ("det_10g", "w600k_r50")
"""The neural engine's detector and recogniser (buffalo_l); the swapper is one of
:data:`SWAPPER_MODELS`."""
SWAPPER_MODELS = ("inswapper_128", "inswapper_128_fp16")
"""The swapper files, in the order preferred: the fp16 file serves when the full one is absent."""
MASK_MODELS = {"occlusion": "xseg", "region": "bisenet_resnet34"}
"""The catalog row behind each model-backed ``face_mask_types`` entry (``box`` needs none)."""


def core_models(directory: Path) -> tuple[ModelSpec, ModelSpec, ModelSpec]:
    """The neural engine's detector, recogniser and swapper rows: ``inswapper_128``, or
    ``inswapper_128_fp16`` when only that one is present in ``directory`` (its weights load
    into the fp32 port too, and onnxruntime runs it as released)."""
    full, half = (get_spec(n) for n in SWAPPER_MODELS)
    swapper = half if status(full, directory) != "present" and \
        status(half, directory) == "present" else full
    det, rec = (get_spec(n) for n in CORE_MODELS)
    return det, rec, swapper


def neural_models_present(directory: str | None = None) -> bool:
    """True when the detector, the recogniser and an inswapper file are present and verified."""
    d = models_dir(directory)
    return all(status(spec, d) == "present" for spec in core_models(d))


@dataclass(frozen=True)
class EngineChoice:
    """The engine a config runs.

    Attributes:
        engine: ``classic`` or ``neural``.
        requested: what the config asked for (``auto``, ``classic`` or ``neural``).
        reason: one line saying why (for ``auto``: whether the neural models are present).
    """

    engine: EngineName
    requested: str
    reason: str

    @property
    def auto_fell_back(self) -> bool:
        """``auto`` chose the classic engine because the neural models are missing."""
        return self.requested == "auto" and self.engine == "classic"

    def applied(self, config: EngineConfig) -> EngineConfig:
        """``config`` with ``engine`` set to the engine chosen."""
        return dataclasses.replace(config, engine=self.engine)


AUTO_NEURAL = "its models are present and verified"
AUTO_CLASSIC = ("no neural models installed, so the offline classic engine runs; `livefuse "
                "models fetch det_10g w600k_r50 inswapper_128` adds them")


def resolve_engine(config: EngineConfig) -> EngineChoice:
    """The engine ``config`` runs: ``auto`` resolved against ``config.models_dir`` (or the
    default models folder); ``classic`` and ``neural`` as asked."""
    if config.engine != "auto":
        return EngineChoice(config.engine, config.engine, f"{config.engine} asked for")
    if neural_models_present(config.models_dir):
        return EngineChoice("neural", "auto", AUTO_NEURAL)
    d = models_dir(config.models_dir)
    bad = [(spec.name, state) for spec in core_models(d)
           if (state := status(spec, d)) not in ("present", "missing")]
    if bad:  # files there but not usable: "not installed" sent users to fetch them again
        return EngineChoice("classic", "auto", (
            "the neural models in '" + str(d) + "' are not all verified ("
            + ", ".join(f"{n}: {st}" for n, st in bad) + "), so the offline classic engine "
            "runs; `livefuse models verify` says more"))
    return EngineChoice("classic", "auto", AUTO_CLASSIC)


def required_models(config: EngineConfig) -> tuple[ModelSpec, ...]:
    """Every catalog file the engine ``config`` resolves to loads: none for the classic engine;
    for the neural one the detector, the recogniser, the swapper (``inswapper_128``, or the
    fp16 file when only that one is present), the mask models of ``face_mask_types`` and the
    enhancer."""
    if resolve_engine(config).engine != "neural":
        return ()
    names = [MASK_MODELS[t] for t in config.face_mask_types if t in MASK_MODELS]
    if config.enhancer is not None:
        names.append(config.enhancer)
    return (*core_models(models_dir(config.models_dir)), *(get_spec(n) for n in names))


def model_problems(config: EngineConfig) -> list[tuple[ModelSpec, Status]]:
    """The files of :func:`required_models` that are not usable, with their status
    (``missing`` or ``corrupt``; ``unverified`` files are used)."""
    d = models_dir(config.models_dir)
    states = ((spec, status(spec, d)) for spec in required_models(config))
    return [(spec, state) for spec, state in states if state in ("missing", "corrupt")]


def models_error(config: EngineConfig) -> LivefuseError | None:
    """The error building the engine for ``config`` would raise for its model files, naming
    every missing file at once (or the first corrupt one); ``None`` when all are usable.

    Returns (never raises) a :class:`ModelMissingError` or :class:`ModelVerifyError`.
    """
    problems = model_problems(config)
    if not problems:
        return None
    d = models_dir(config.models_dir)
    missing = [spec for spec, state in problems if state == "missing"]
    if missing:
        return ModelMissingError(missing[0], d, tuple(missing[1:]))
    spec = problems[0][0]
    return ModelVerifyError(Path(d) / spec.filename, "size or SHA-256 differ; delete it and run "
                            f"`livefuse models fetch {spec.name}`")


__all__ = ["AUTO_CLASSIC", "AUTO_NEURAL", "CORE_MODELS", "MASK_MODELS", "SWAPPER_MODELS",
           "EngineChoice", "core_models", "model_problems", "models_error", "neural_models_present",
           "required_models", "resolve_engine"]
