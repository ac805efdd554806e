"""Every LivefuseError subclass survives pickle (worker processes report errors to the parent)."""

from __future__ import annotations

import concurrent.futures
import importlib
import inspect
import multiprocessing
import pickle
import pkgutil
from pathlib import Path
from typing import Any

import pytest

import livefuse
from livefuse.errors import ImageLoadError, LivefuseError
from livefuse.models.catalog import CATALOG

# Constructor arguments by parameter name; a subclass with a parameter not listed here makes
# test_every_subclass_round_trips fail with the class and parameter named, so add it here.
SAMPLES: dict[str, Any] = {
    "path": Path("/tmp/a folder/ünïcode.png"),
    "problem": "is truncated (1,234 B)",
    "role": "reference photo",
    "index": 7,
    "count": 3,
    "name": "nope_model",
    "filename": "det_10g.onnx",
    "spec": CATALOG[0],
    "directory": Path("/models"),
    "device": "/dev/video2",
    "attempts": 3,
    "node": "Conv_12",
    "op": "Conv",
    "width": 26.4,
    "output": Path("/tmp/a folder/../out.mp4"),
    "output_dir": Path("/tmp/a folder/batch out"),
    "input_path": Path("/tmp/in.mp4"),
    "what": "recording",
    "folder": Path("/home/me/.config/livefuse/presets"),
}
# Classes whose discovery proves the walk reaches every package (one per module family).
EXPECTED = {
    "ImageLoadError", "VideoError", "NoFaceError", "FaceIndexError", "ConfigError",
    "UnknownModelError", "ModelDownloadError", "ModelMissingError", "ModelVerifyError",
    "ProviderError", "InswapperGraphError", "NothingSwappedError", "NeuralSwapError",
    "VramError", "FaceModelError", "CameraError", "SourceFailedError", "UnknownPackError",
    "OnnxOpError", "GraphError", "FaceTooSmallError", "OutputIsInputError",
}


def _import_all() -> None:
    for mod in pkgutil.walk_packages(livefuse.__path__, "livefuse."):
        if mod.name.endswith("__main__"):
            continue  # running it would start the CLI
        importlib.import_module(mod.name)


def _subclasses(cls: type[LivefuseError]) -> list[type[LivefuseError]]:
    out: list[type[LivefuseError]] = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def _instance(cls: type[LivefuseError]) -> LivefuseError:
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name == "self" or p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            args.append(f"{cls.__name__}: something specific went wrong")
        elif p.name in SAMPLES and p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = SAMPLES[p.name]
        elif p.name in SAMPLES:
            args.append(SAMPLES[p.name])
        elif p.default is p.empty:
            pytest.fail(f"{cls.__module__}.{cls.__name__}: no sample for parameter "
                        f"'{p.name}'; add one to SAMPLES")
    return cls(*args, **kwargs)


def _all_subclasses() -> list[type[LivefuseError]]:
    _import_all()
    return sorted(set(_subclasses(LivefuseError)), key=lambda c: (c.__module__, c.__name__))


def test_discovery_finds_every_module_family() -> None:
    names = {c.__name__ for c in _all_subclasses()}
    assert names >= EXPECTED, EXPECTED - names


@pytest.mark.parametrize("cls", _all_subclasses(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_subclass_round_trips(cls: type[LivefuseError]) -> None:
    err = _instance(cls)
    err.add_note("while loading the source photo")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert str(back) == str(err) and back.args == err.args
    assert vars(back) == vars(err)  # path, problem, spec, ... and the note


def test_raised_in_a_worker_process_reaches_the_parent() -> None:
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        future = pool.submit(_fail_to_load, "/photos/holiday.jpg")
        with pytest.raises(ImageLoadError) as info:
            future.result(timeout=60)
    assert info.value.path == Path("/photos/holiday.jpg")
    assert info.value.problem == "truncated"
    assert str(info.value) == "cannot read image '/photos/holiday.jpg': truncated"


def _fail_to_load(path: str) -> None:
    raise ImageLoadError(path, "truncated")
