"""Frozen settings: validation names the bad field; TOML round trip rejects unknown keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from livefuse.cli import build_parser
from livefuse.config import (
    ENGINE_CHOICES,
    FACE_SELECTOR_CHOICES,
    AppConfig,
    CacheConfig,
    EngineConfig,
    load_config,
)
from livefuse.errors import ConfigError


def test_defaults_are_the_documented_ones_and_validate() -> None:
    cfg = AppConfig()
    assert cfg.validate() is cfg  # valid as shipped; validate returns the value unchanged
    # README / --help: offline classic engine, every face for `run`, feather blend, exact
    # detection each frame; the cache's 0.8 threshold and 5-frame refresh are the measured ones
    e, c = cfg.engine, cfg.cache
    assert (e.engine, e.precision, e.backend, e.device) == ("classic", "auto", "torch", "auto")
    assert (e.face_selector, e.target_face_index, e.detect_every) == ("many", None, 1)
    assert (e.blend, e.keep_mouth, e.models_dir) == ("feather", True, None)
    assert (c.enabled, c.threshold, c.refresh_every_n) == (True, 0.8, 5)


@pytest.mark.parametrize(("cfg", "field"), [
    (AppConfig(engine=EngineConfig(detect_every=0)), "detect_every"),
    (AppConfig(engine=EngineConfig(device="gpu")), "device"),
    (AppConfig(cache=CacheConfig(threshold=1.5)), "threshold"),
    (AppConfig(cache=CacheConfig(refresh_every_n=0)), "refresh_every_n"),
])
def test_app_config_validates_both_parts(cfg: AppConfig, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        cfg.validate()


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EngineConfig().engine = "neural"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (EngineConfig(precision="fp8"), "precision"),  # type: ignore[arg-type]
        (EngineConfig(detect_every=0), "detect_every"),
        (EngineConfig(jaw_from_target=1.5), "jaw_from_target"),
        (EngineConfig(target_face_index=-1), "target_face_index"),
    ],
)
def test_bad_engine_values_name_the_field(cfg: EngineConfig, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        cfg.validate()


def test_bad_cache_values() -> None:
    with pytest.raises(ConfigError, match="refresh_every_n"):
        CacheConfig(refresh_every_n=0).validate()
    with pytest.raises(ConfigError, match="threshold"):
        CacheConfig(threshold=0.0).validate()


def test_load_toml(tmp_path: Path) -> None:
    p = tmp_path / "settings.toml"
    p.write_text('[engine]\nblend = "seamless"\ndetect_every = 4\n[cache]\nenabled = false\n')
    cfg = load_config(p)
    assert cfg.engine.blend == "seamless" and cfg.engine.detect_every == 4
    assert cfg.cache.enabled is False and cfg.cache.refresh_every_n == CacheConfig().refresh_every_n


def test_load_toml_unknown_key(tmp_path: Path) -> None:
    p = tmp_path / "settings.toml"
    p.write_text("[engine]\nblnd = 1\n")
    with pytest.raises(ConfigError, match=r"settings.toml \[engine\]: unknown setting\(s\) blnd"):
        load_config(p)


def test_cli_reads_the_same_choice_sets() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    run = sub.choices["run"]  # type: ignore[attr-defined]
    actions = {a.dest: a for a in run._actions}
    assert tuple(actions["engine"].choices) == ("auto", *ENGINE_CHOICES)
    assert tuple(actions["face_selector"].choices) == FACE_SELECTOR_CHOICES


def test_save_load_round_trip(tmp_path: Path) -> None:
    from livefuse.config import save_config

    cfg = AppConfig(engine=EngineConfig(blend="seamless", target_face_index=2,
                                        face_selector="one"),
                    cache=CacheConfig(enabled=False, threshold=0.9, refresh_every_n=7))
    p = save_config(cfg, tmp_path / "sub" / "settings.toml")
    assert load_config(p) == cfg
    assert load_config(save_config(AppConfig(), p)) == AppConfig()
