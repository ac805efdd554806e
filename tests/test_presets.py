"""Presets: names, the TOML files, the store's save/rename/delete/list (atomic, never
overwriting), and `livefuse presets`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from livefuse.config import AppConfig, CacheConfig, EngineConfig, GuardConfig
from livefuse.presets import (
    Preset,
    PresetError,
    PresetNotFoundError,
    PresetSource,
    PresetStore,
    check_name,
)


@pytest.fixture()
def photo(tmp_path: Path, astronaut_path: Path) -> Path:
    p = tmp_path / "photos" / "me.png"
    p.parent.mkdir()
    p.write_bytes(astronaut_path.read_bytes())
    return p


def _preset(name: str, photo: Path, **kw: object) -> Preset:
    cfg = AppConfig(engine=EngineConfig(face_selector="one", detect_every=2),
                    cache=CacheConfig(enabled=False), guard=GuardConfig(mode="hold",
                                                                        hold_frames=9))
    return Preset.of(name, cfg, PresetSource(path=str(photo), **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["Gaming", "Late show (blur)", "Ünïcode fäce", "2", "a.b",
                                  "Tom & Jerry's #1!", "x" * 64])
def test_good_names(name: str) -> None:
    assert check_name(f"  {name} ") == name


@pytest.mark.parametrize(("name", "why"), [
    ("", "needs a name"), ("   ", "needs a name"), ("x" * 65, "at most 64"),
    ("../evil", "starts with a letter"), ("a/b", "only letters"), ("a\\b", "only letters"),
    (".hidden", "starts with a letter"), ("_x", "starts with a letter"), ("name.", "dot"),
    ("con", "reserved"), ("NUL.txt", "reserved"), ("tab\tname", "only letters"),
    ("nl\nname", "only letters"), ("a:b", "only letters"), ("star*", "only letters"),
])
def test_bad_names_are_refused_with_the_reason(name: str, why: str) -> None:
    with pytest.raises(PresetError, match=why):
        check_name(name)


def test_save_load_round_trip_keeps_every_setting(tmp_path: Path, photo: Path) -> None:
    store = PresetStore(tmp_path / "presets")
    assert store.names() == [] and store.list() == []
    preset = _preset("Gaming", photo, face_box=(10.0, 20.0, 110.0, 120.0))
    path = store.save(preset)
    assert path == tmp_path / "presets" / "Gaming.toml"
    loaded = store.load("gaming")  # names compare case-insensitively
    assert loaded == preset and loaded.source.face() is not None
    assert loaded.guard == GuardConfig(mode="hold", hold_frames=9)
    assert loaded.applied_to(AppConfig()).engine.detect_every == 2
    # nothing but the preset in the folder: the temp file was renamed
    assert [p.name for p in path.parent.iterdir()] == ["Gaming.toml"]


def test_list_is_sorted_case_insensitively_and_reports_broken_files(tmp_path: Path,
                                                                   photo: Path) -> None:
    store = PresetStore(tmp_path)
    for name in ("beta", "Alpha", "gamma"):
        store.save(_preset(name, photo))
    (tmp_path / "Broken.toml").write_text("[source\npath=", encoding="utf-8")
    (tmp_path / ".Alpha.toml.x1y2.part").write_text("half a file", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a preset", encoding="utf-8")
    assert store.names() == ["Alpha", "beta", "Broken", "gamma"]
    items = store.list()
    assert isinstance(items[2], PresetError) and "not valid TOML" in str(items[2])
    assert "Broken.toml" in str(items[2])
    assert [p.name for p in items if isinstance(p, Preset)] == ["Alpha", "beta", "gamma"]


@pytest.mark.parametrize(("text", "why"), [
    ('[engine]\nface_selector = "one"\n', "no \\[source\\] path"),
    ('[source]\npath = "x.png"\n[engine]\nface_selektor = "one"\n', "face_selektor"),
    ('[source]\npath = "x.png"\n[guard]\nmode = "smudge"\n', "privacy guard"),
    ('[source]\npath = "x.png"\nface_box = [1, 2]\n', "face_box needs 4"),
    ('[source]\npath = "x.png"\n[weather]\nsunny = true\n', "unknown table"),
    ('[source]\npath = "x.png"\ncolour = "red"\n', "colour"),
    ('[source]\npath = "x.png"\nengine = 3\n', "engine"),
])
def test_bad_preset_files_name_the_file_and_the_problem(tmp_path: Path, text: str,
                                                        why: str) -> None:
    (tmp_path / "Bad.toml").write_text(text, encoding="utf-8")
    with pytest.raises(PresetError, match=why) as err:
        PresetStore(tmp_path).load("Bad")
    assert str(err.value).startswith("preset 'Bad': ")


def test_a_relative_photo_path_is_read_from_the_presets_folder(tmp_path: Path) -> None:
    (tmp_path / "Rel.toml").write_text('[source]\npath = "faces/me.png"\n', encoding="utf-8")
    assert PresetStore(tmp_path).load("Rel").source.path == str(tmp_path / "faces" / "me.png")


def test_save_refuses_a_missing_photo_and_a_taken_name(tmp_path: Path, photo: Path) -> None:
    store = PresetStore(tmp_path)
    with pytest.raises(PresetError, match="does not exist"):
        store.save(_preset("Gone", tmp_path / "nope.png"))
    store.save(_preset("Gaming", photo))
    with pytest.raises(PresetError, match="exists already"):
        store.save(_preset("GAMING", photo), overwrite=False)
    store.save(_preset("GAMING", photo, face_index=1))  # overwrite: one file, the new case
    assert store.names() == ["GAMING"] and store.load("gaming").source.face_index == 1


def test_rename_never_replaces_another_preset(tmp_path: Path, photo: Path) -> None:
    store = PresetStore(tmp_path)
    store.save(_preset("One", photo))
    store.save(_preset("Two", photo))
    with pytest.raises(PresetError, match="exists already"):
        store.rename("One", "two")
    assert store.rename("one", "Three") == "Three"
    assert store.names() == ["Three", "Two"]
    assert store.rename("Three", "THREE") == "THREE"  # a change of case
    assert store.names() == ["THREE", "Two"]
    with pytest.raises(PresetNotFoundError, match="'Nope': not found"):
        store.rename("Nope", "Four")
    with pytest.raises(PresetError, match="only letters"):
        store.rename("Two", "a/b")
    store.delete("two")
    assert store.names() == ["THREE"]
    with pytest.raises(PresetNotFoundError):
        store.delete("two")


def test_save_is_atomic(tmp_path: Path, photo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = PresetStore(tmp_path / "presets")
    store.save(_preset("Keep", photo, face_index=0))
    tmp_path = store.folder
    before = (tmp_path / "Keep.toml").read_bytes()

    def crash(*a: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        store.save(_preset("Keep", photo, face_index=3))
    assert (tmp_path / "Keep.toml").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Keep.toml"]


def test_presets_cli_save_list_show_rename_delete(
        tmp_path: Path, photo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from livefuse.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert main(["presets", "save", "Stream A", "-s", str(photo), "--engine", "classic",
                 "--privacy-guard", "blur", "--no-cache"]) == 0
    assert "saved preset 'Stream A'" in capsys.readouterr().out
    assert main(["presets", "list"]) == 0
    out = capsys.readouterr().out
    assert "Ctrl+1  Stream A: classic, faces one, guard blur, cache off" in out
    # a name taken: said before the photo's detection, with the way out (a new user's trial)
    assert main(["presets", "save", "stream a", "-s", str(tmp_path / "no-photo.png")]) == 2
    assert "a preset called 'Stream A' exists already (--force replaces it)" in \
        capsys.readouterr().err
    assert main(["presets", "show", "stream a"]) == 0
    assert 'mode = "blur"' in capsys.readouterr().out
    assert main(["presets", "rename", "Stream A", "Stream B"]) == 0
    photo.unlink()
    assert main(["presets", "list"]) == 0
    assert "(photo missing)" in capsys.readouterr().out
    assert main(["presets", "delete", "Stream B"]) == 0
    assert main(["presets", "delete", "Stream B"]) == 2
    assert "preset 'Stream B': not found" in capsys.readouterr().err


def test_presets_cli_refuses_a_photo_without_a_face(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from livefuse.cli import main
    from livefuse.imaging import save_image

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    wall = save_image(tmp_path / "wall.png", np.full((200, 200, 3), 128, np.uint8))
    assert main(["presets", "save", "Wall", "-s", str(wall), "--engine", "classic"]) == 2
    assert "no face in source" in capsys.readouterr().err
    assert not (tmp_path / "cfg" / "livefuse" / "presets" / "Wall.toml").exists()


def test_presets_cli_refuses_an_option_its_engine_would_ignore(
        tmp_path: Path, photo: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """As `live` refuses it: a preset never stores an option that its engine does not read."""
    from livefuse.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert main(["presets", "save", "Masked", "-s", str(photo), "--engine", "classic",
                 "--face-mask-types", "box"]) == 2
    assert "only the neural engine uses" in capsys.readouterr().err
    assert not (tmp_path / "cfg" / "livefuse" / "presets" / "Masked.toml").exists()
