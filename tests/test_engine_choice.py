"""``--engine auto`` resolved in one place (livefuse.models.engine_choice), the model files a
config needs, and the one set of live defaults (livefuse.config.LIVE_DEFAULTS)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from livefuse import doctor
from livefuse.cli import build_parser
from livefuse.cli_args import choose_engine, engine_config
from livefuse.config import LIVE_DEFAULTS, AppConfig, EngineConfig, load_config, save_config
from livefuse.engine import Engine
from livefuse.live_cli import app_config
from livefuse.models import engine_choice
from livefuse.models.download import ModelMissingError, ModelVerifyError
from livefuse.models.engine_choice import (
    model_problems,
    models_error,
    required_models,
    resolve_engine,
)


def _names(specs: object) -> list[str]:
    return [s.name for s in specs]  # type: ignore[attr-defined]


@pytest.fixture
def models_present(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every catalog file reads as present and verified."""
    monkeypatch.setattr(engine_choice, "status", lambda spec, d=None: "present")


def test_auto_is_classic_without_the_neural_models_and_neural_with_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    auto = EngineConfig(engine="auto", models_dir=str(tmp_path))
    choice = resolve_engine(auto)
    assert (choice.engine, choice.requested, choice.auto_fell_back) == ("classic", "auto", True)
    assert "models fetch det_10g w600k_r50 inswapper_128" in choice.reason
    assert choice.applied(auto) == dataclasses.replace(auto, engine="classic")
    assert resolve_engine(EngineConfig(engine="neural")).engine == "neural"  # as asked
    monkeypatch.setattr(engine_choice, "status", lambda spec, d=None: "present")
    assert resolve_engine(auto).engine == "neural"
    # only the fp16 swapper: still neural (it loads into the fp32 port too)
    monkeypatch.setattr(engine_choice, "status", lambda spec, d=None:
                        "missing" if spec.name == "inswapper_128" else "present")
    assert resolve_engine(auto).engine == "neural"
    assert _names(required_models(auto))[:3] == ["det_10g", "w600k_r50", "inswapper_128_fp16"]


def test_auto_says_which_neural_files_are_there_but_not_usable(tmp_path: Path) -> None:
    """Corrupt det_10g and inswapper_128 in --models-dir: `run` said "no neural models
    installed", sending the user to fetch them again (a new user's trial)."""
    from livefuse.models.catalog import get_spec

    for name in ("det_10g", "inswapper_128"):
        (tmp_path / get_spec(name).filename).write_bytes(b"not a model")
    choice = resolve_engine(EngineConfig(engine="auto", models_dir=str(tmp_path)))
    assert choice.engine == "classic"
    assert "det_10g: corrupt" in choice.reason and "inswapper_128: corrupt" in choice.reason
    assert "models verify" in choice.reason and "w600k_r50" not in choice.reason


def test_parsing_never_probes_the_models_and_every_entry_point_asks_the_one_resolver(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """cli_args probed the neural engine while turning flags into settings; cli (bench) and
    doctor each had their own copy of the rule."""
    asked: list[str | None] = []

    def present(directory: str | None = None) -> bool:
        asked.append(directory)
        return True

    monkeypatch.setattr(engine_choice, "neural_models_present", present)
    args = build_parser().parse_args(["run", "-s", "a.png", "-t", "b.png", "-o", "c.png"])
    assert engine_config(args).engine == "auto" and asked == []
    assert choose_engine(args).engine == "neural" and len(asked) == 1
    assert "engine: neural (its models are present" in capsys.readouterr().err
    live = build_parser().parse_args(["live", "-s", "a.png"])
    assert app_config(live).engine.engine == "neural" and len(asked) == 2
    checks = {c.name: c for c in doctor.check_engine(tmp_path)}
    assert checks["engine"].summary == "default: neural" and len(asked) == 3
    renderer = type("Renderer", (), {"device": "cpu"})()
    engine = Engine(EngineConfig(engine="auto"), components=(object(), renderer))  # type: ignore[arg-type]
    assert engine.engine_choice.engine == "neural" and engine.config.engine == "auto"
    assert len(asked) == 4


def test_the_neural_engine_needs_its_masks_and_enhancer_too(tmp_path: Path) -> None:
    neural = EngineConfig(engine="neural", models_dir=str(tmp_path),
                          face_mask_types=("box", "occlusion", "region"), enhancer="gfpgan_1.4")
    assert _names(required_models(neural)) == [
        "det_10g", "w600k_r50", "inswapper_128", "xseg", "bisenet_resnet34", "gfpgan_1.4"]
    assert required_models(dataclasses.replace(neural, engine="classic")) == ()
    # auto without the core models is the classic engine: it needs nothing
    assert required_models(dataclasses.replace(neural, engine="auto")) == ()
    err = models_error(neural)
    assert isinstance(err, ModelMissingError)
    for name in ("det_10g.onnx", "w600k_r50.onnx", "inswapper_128.onnx", "xseg.onnx",
                 "bisenet_resnet34.onnx", "GFPGANv1.4.onnx"):
        assert name in str(err), name
    assert str(tmp_path) in str(err)
    (tmp_path / "det_10g.onnx").write_bytes(b"not a model")
    assert ("det_10g", "corrupt") in [(s.name, st) for s, st in model_problems(neural)]
    assert "det_10g.onnx" not in str(models_error(neural))  # the missing ones come first
    only_corrupt = dataclasses.replace(neural, face_mask_types=(), enhancer=None)
    for spec in required_models(only_corrupt)[1:]:
        (tmp_path / spec.filename).write_bytes(b"x")
    assert isinstance(models_error(only_corrupt), ModelVerifyError)
    assert "det_10g.onnx" in str(models_error(only_corrupt))


def test_models_error_is_none_when_every_file_is_usable(models_present: None) -> None:
    assert models_error(EngineConfig(engine="neural", enhancer="gpen_bfr_512")) is None
    assert models_error(EngineConfig(engine="classic")) is None


def test_live_takes_the_one_set_of_live_defaults() -> None:
    """`live` detected every 3rd frame and swapped one face; the app every frame, every face."""
    args = build_parser().parse_args(["live", "-s", "a.png"])
    engine = engine_config(args)
    assert engine == LIVE_DEFAULTS.engine
    assert (engine.engine, engine.face_selector, engine.detect_every, engine.rotation) == \
        ("auto", "one", 3, "off")
    cap = LIVE_DEFAULTS.capture
    assert (args.width, args.height, args.fps) == (cap.width, cap.height, cap.fps)
    cache = LIVE_DEFAULTS.cache
    assert (args.cache, args.cache_threshold, args.cache_refresh) == \
        (cache.enabled, cache.threshold, cache.refresh_every_n)
    run = engine_config(build_parser().parse_args(["run", "-s", "a", "-t", "b", "-o", "c"]))
    assert (run.face_selector, run.detect_every, run.rotation) == ("many", 1, "auto")


def test_settings_left_out_of_the_file_take_the_defaults_given(tmp_path: Path) -> None:
    p = tmp_path / "settings.toml"
    p.write_text('[engine]\nblend = "seamless"\n')
    cfg = load_config(p, LIVE_DEFAULTS)
    assert cfg.engine == dataclasses.replace(LIVE_DEFAULTS.engine, blend="seamless")
    assert load_config(p).engine.detect_every == 1  # the dataclass's own default
    assert load_config(save_config(LIVE_DEFAULTS, p)) == LIVE_DEFAULTS
    assert load_config(save_config(AppConfig(), p), LIVE_DEFAULTS) == AppConfig()
