"""Presets: named sets of a source face and the engine, cache and privacy-guard settings.

A preset is one TOML file in the ``presets`` folder beside ``settings.toml`` (the user config
dir), named after the preset::

    # ~/.config/livefuse/presets/Gaming.toml
    [source]
    path = "/home/me/faces/hero.jpg"   # the source photo (relative: to the presets folder)
    face_box = [212.0, 140.0, 380.0, 330.0]   # the chosen face (optional; or face_index = 0)

    [engine]      # every EngineConfig setting: engine, face selector, masks, enhancer, ...
    face_selector = "one"
    [cache]
    enabled = true
    [guard]
    mode = "blur"

Capture and output settings are not part of a preset: switching one never touches the camera or
the virtual camera (:meth:`livefuse.session.Session.switch_preset`). Writes are atomic (a temp
file renamed), and a rename never overwrites another preset.
"""

from __future__ import annotations

import os
import re
import tomllib
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from livefuse.config import (
    AppConfig,
    CacheConfig,
    EngineConfig,
    GuardConfig,
    default_config_path,
    from_table,
    table_values,
)
from livefuse.errors import ConfigError, LivefuseError
from livefuse.types import Face

SUFFIX = ".toml"
NAME_MAX = 64
"""Longest preset name, in characters."""
_NAME = re.compile(r"[^\W_][\w .,()+&'!#-]*")
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
             *(f"lpt{i}" for i in range(1, 10))}
"""Names Windows keeps for devices: a file called ``NUL.toml`` cannot be made there."""


class PresetError(LivefuseError):
    """A preset name is invalid, its file is unreadable or holds bad settings, or it cannot be
    used (its photo is gone or shows no face)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(f"preset '{name}': {problem}")


class PresetNotFoundError(PresetError):
    """No preset has this name."""

    def __init__(self, name: str, folder: Path) -> None:
        self.folder = folder
        super().__init__(name, f"not found in '{folder}'")


def check_name(name: str) -> str:
    """``name`` as a preset is called (Unicode NFC, surrounding spaces removed).

    A name is 1..64 characters: letters, digits, spaces and ``. , ( ) + & ' ! # - _``, starting
    with a letter or digit, not ending with a dot, and not a name Windows reserves for a device.

    Raises:
        PresetError: the name breaks one of these rules (the message says which).
    """
    clean = unicodedata.normalize("NFC", str(name)).strip()
    if not clean:
        raise PresetError(name, "a preset needs a name")
    if len(clean) > NAME_MAX:
        raise PresetError(clean, f"a name has at most {NAME_MAX} characters")
    if not _NAME.fullmatch(clean):
        raise PresetError(clean, "a name starts with a letter or digit and holds only letters, "
                                 "digits, spaces and . , ( ) + & ' ! # - _")
    if clean.endswith("."):
        raise PresetError(clean, "a name cannot end with a dot")
    if clean.split(".")[0].casefold() in _RESERVED:
        raise PresetError(clean, "this name is reserved for a device on Windows")
    return clean


@dataclass(frozen=True)
class PresetSource:
    """The source face of a preset.

    Attributes:
        path: the photo (absolute once saved by :class:`PresetStore`).
        face_index: the face left to right among the plausible ones, or ``None``.
        face_box: the chosen face's box in the photo (x1, y1, x2, y2), matched by position to
            the engine's own detection; wins over ``face_index``. Empty: the engine's choice.
    """

    path: str
    face_index: int | None = None
    face_box: tuple[float, ...] = ()

    def face(self) -> Face | None:
        """The chosen face as a :class:`Face` with just its box (what
        :meth:`livefuse.engine.Engine.set_source` matches), or ``None``."""
        if len(self.face_box) != 4:
            return None
        return Face(bbox=np.array(self.face_box, np.float32), kps=np.zeros((5, 2), np.float32))

    def validate(self, name: str) -> PresetSource:
        if not self.path:
            raise PresetError(name, "[source] path is empty")
        if self.face_index is not None and self.face_index < 0:
            raise PresetError(name, f"face_index={self.face_index} must be >= 0")
        if self.face_box and len(self.face_box) != 4:
            raise PresetError(name, "face_box needs 4 values (x1, y1, x2, y2)")
        return self


@dataclass(frozen=True)
class Preset:
    """A named source face with its engine, cache and guard settings (frozen).

    Attributes:
        name: see :func:`check_name`.
        source: the photo and the chosen face.
        engine, cache, guard: the settings taken when the preset is switched to.
    """

    name: str
    source: PresetSource
    engine: EngineConfig = field(default_factory=EngineConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)

    def validate(self) -> Preset:
        """Return ``self``, or raise :class:`PresetError` naming the preset and the problem."""
        check_name(self.name)
        self.source.validate(self.name)
        try:
            self.engine.validate()
            self.cache.validate()
            self.guard.validate()
        except ConfigError as exc:
            raise PresetError(self.name, str(exc)) from None
        return self

    def applied_to(self, config: AppConfig) -> AppConfig:
        """``config`` with this preset's engine, cache and guard settings (capture, output and
        the control API kept)."""
        return replace(config, engine=self.engine, cache=self.cache, guard=self.guard)

    @staticmethod
    def of(name: str, config: AppConfig, source: PresetSource) -> Preset:
        """A preset of ``config``'s engine, cache and guard settings with ``source``."""
        return Preset(name=name, source=source, engine=config.engine, cache=config.cache,
                      guard=config.guard)

    def to_toml(self) -> bytes:
        src: dict[str, Any] = {"path": self.source.path}
        if self.source.face_index is not None:
            src["face_index"] = self.source.face_index
        if self.source.face_box:
            src["face_box"] = [float(v) for v in self.source.face_box]
        data = {"source": src, "engine": table_values(self.engine),
                "cache": table_values(self.cache), "guard": table_values(self.guard)}
        return tomli_w.dumps(data).encode("utf-8")

    @staticmethod
    def from_toml(name: str, text: str, where: Path) -> Preset:
        """Parse a preset file's text.

        Raises:
            PresetError: not TOML, an unknown table or setting, a missing source path, or a
                value out of range.
        """
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PresetError(name, f"'{where}' is not valid TOML: {exc}") from None
        unknown = sorted(set(data) - {"source", "engine", "cache", "guard"})
        if unknown:
            raise PresetError(name, f"'{where}': unknown table(s) {', '.join(unknown)}")
        src = data.get("source")
        if not isinstance(src, dict) or not isinstance(src.get("path"), str):
            raise PresetError(name, f"'{where}' has no [source] path")
        path = Path(src["path"]).expanduser()
        if not path.is_absolute():
            path = where.parent / path
        try:
            source = PresetSource(path=str(path), face_index=src.get("face_index"),
                                  face_box=tuple(float(v) for v in src.get("face_box", ())))
            extra = sorted(set(src) - {"path", "face_index", "face_box"})
            if extra:
                raise ConfigError(f"'{where}' [source]: unknown setting(s) {', '.join(extra)}")
            tables = {key: from_table(cls, data.get(key, {}), f"'{where}' [{key}]")
                      for key, cls in (("engine", EngineConfig), ("cache", CacheConfig),
                                       ("guard", GuardConfig))}
            preset = Preset(name=name, source=source, **tables)
            return preset.validate()
        except ConfigError as exc:
            raise PresetError(name, str(exc)) from None
        except (TypeError, ValueError) as exc:  # a table that is not one, a box of words
            raise PresetError(name, f"'{where}': {exc}") from None


def default_presets_dir() -> Path:
    """``presets`` beside ``settings.toml`` in the user config dir."""
    return default_config_path().parent / "presets"


class PresetStore:
    """The presets of one folder: list, load, save, rename, delete (any thread; every write is
    a temp file renamed, so a reader never sees half a preset).

    Args:
        folder: the presets folder (:func:`default_presets_dir` by default); made on first save.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_presets_dir()

    def _path(self, name: str) -> Path:
        return self.folder / f"{name}{SUFFIX}"

    def names(self) -> list[str]:
        """Every preset's name, sorted case-insensitively (the order Ctrl+1..9 follow)."""
        try:
            files = [p for p in self.folder.iterdir() if p.suffix == SUFFIX and p.is_file()]
        except FileNotFoundError:
            return []
        names = []
        for p in files:
            try:
                names.append(check_name(p.stem))
            except PresetError:
                continue  # a temp file or a file the user named by hand: not a preset
        return sorted(names, key=lambda n: (n.casefold(), n))

    def find(self, name: str) -> str | None:
        """The stored preset called ``name``, compared case-insensitively (so ``gaming`` finds
        ``Gaming``; an exact match wins), or ``None``."""
        try:
            clean = check_name(name)
        except PresetError:
            return None
        names = self.names()
        if clean in names:
            return clean
        folded = [n for n in names if n.casefold() == clean.casefold()]
        return folded[0] if folded else None

    def load(self, name: str) -> Preset:
        """Read one preset.

        Raises:
            PresetNotFoundError: no preset of that name.
            PresetError: the file is unreadable or holds bad settings.
        """
        found = self.find(name)
        if found is None:
            raise PresetNotFoundError(str(name).strip(), self.folder)
        path = self._path(found)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PresetError(found, f"cannot read '{path}': {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise PresetError(found, f"'{path}' is not UTF-8 text") from None
        return Preset.from_toml(found, text, path)

    def list(self) -> list[Preset | PresetError]:
        """Every preset, in :meth:`names` order; a preset that cannot be read is its error."""
        out: list[Preset | PresetError] = []
        for name in self.names():
            try:
                out.append(self.load(name))
            except PresetError as exc:
                out.append(exc)
        return out

    def save(self, preset: Preset, overwrite: bool = True) -> Path:
        """Write ``preset`` (its photo path made absolute).

        Args:
            overwrite: replace a preset of the same name (compared case-insensitively); with
                ``False`` an existing one is an error.

        Raises:
            PresetError: an invalid name or setting, the photo does not exist, or the name is
                taken and ``overwrite`` is off.
        """
        from livefuse.imaging import atomic_write_bytes

        preset = replace(preset, name=check_name(preset.name)).validate()
        photo = Path(preset.source.path).expanduser()
        if not photo.is_file():
            raise PresetError(preset.name, f"source photo '{photo}' does not exist")
        preset = replace(preset, source=replace(preset.source, path=str(photo.resolve())))
        taken = self.find(preset.name)
        if taken is not None and not overwrite:
            raise PresetError(preset.name, f"a preset called '{taken}' exists already")
        # "gaming" saved over "Gaming": written into the stored file, then renamed (on a
        # case-insensitive file system both names are that one file)
        atomic_write_bytes(self._path(taken or preset.name), preset.to_toml())
        if taken is not None and taken != preset.name:
            os.replace(self._path(taken), self._path(preset.name))
        return self._path(preset.name)

    def rename(self, old: str, new: str) -> str:
        """Rename a preset; never replaces another one.

        Returns:
            The new name (cleaned by :func:`check_name`).

        Raises:
            PresetNotFoundError: no preset called ``old``.
            PresetError: ``new`` is invalid or taken.
        """
        found = self.find(old)
        if found is None:
            raise PresetNotFoundError(str(old).strip(), self.folder)
        new = check_name(new)
        if new == found:
            return new
        taken = self.find(new)
        src, dst = self._path(found), self._path(new)
        if taken is not None and taken != found:
            raise PresetError(new, f"a preset called '{taken}' exists already")
        if new.casefold() == found.casefold():  # a change of case: the same file
            os.replace(src, dst)
            return new
        try:
            os.link(src, dst)  # fails when dst exists: never overwrites a preset made meanwhile
        except FileExistsError:
            raise PresetError(new, "a preset of this name exists already") from None
        except OSError:  # a file system without hard links
            if dst.exists():
                raise PresetError(new, "a preset of this name exists already") from None
            os.replace(src, dst)
            return new
        src.unlink()
        return new

    def delete(self, name: str) -> None:
        """Delete a preset.

        Raises:
            PresetNotFoundError: no preset called ``name``.
        """
        found = self.find(name)
        if found is None:
            raise PresetNotFoundError(str(name).strip(), self.folder)
        self._path(found).unlink(missing_ok=True)


__all__ = ["NAME_MAX", "Preset", "PresetError", "PresetNotFoundError", "PresetSource",
           "PresetStore", "check_name", "default_presets_dir"]
