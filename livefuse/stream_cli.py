"""``livefuse presets`` (list, save, show, rename, delete) and ``livefuse control-token``: the
command-line side of presets and of the control API (design.md §9)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from livefuse.cli_args import HelpFormatter, at_least, check_engine_options, engine_config
from livefuse.config import AppConfig, CacheConfig, GuardConfig
from livefuse.errors import ConfigError
from livefuse.live_cli import add_guard_args, add_settings_args, guard_config, unused_settings
from livefuse.models.engine_choice import resolve_engine
from livefuse.presets import Preset, PresetError, PresetSource, PresetStore


def _cmd_list(args: argparse.Namespace) -> int:
    store = PresetStore()
    items = store.list()
    if not items:
        print(f"no presets in {store.folder} (make one: livefuse presets save NAME -s PHOTO)")
        return 0
    for n, item in enumerate(items, 1):
        key = f"Ctrl+{n}" if n <= 9 else "      "
        if isinstance(item, PresetError):
            print(f"{key}  {item.name}: unreadable: {item.problem}")
            continue
        e = item.engine
        photo = Path(item.source.path)
        gone = "" if photo.is_file() else "  (photo missing)"
        print(f"{key}  {item.name}: {e.engine}, faces {e.face_selector}, guard "
              f"{item.guard.mode}, cache {'on' if item.cache.enabled else 'off'}"
              f"{', enhancer ' + e.enhancer if e.enhancer else ''}  <- {photo}{gone}")
    return 0


def _cmd_save(args: argparse.Namespace) -> int:
    from livefuse.engine import Engine
    from livefuse.imaging import load_image

    store = PresetStore()
    taken = None if args.force else store.find(args.name)
    if taken is not None:  # before the photo's detection, and with the way out
        raise PresetError(args.name, f"a preset called '{taken}' exists already (--force "
                                     "replaces it)")
    if args.reference is not None:
        # an option trial: the photo was dropped and the preset then refused by `live`
        raise ConfigError(f"--reference {args.reference}: a preset keeps the face selector, not "
                          "the reference photo; save it with --face-selector reference and give "
                          "the photo where it runs (`livefuse live --preset NAME --reference "
                          "PHOTO`, or the app's reference photo)")
    engine_cfg = engine_config(args, photo_later=True)
    # the preset keeps the request (``auto`` stays auto); options the engine that runs here does
    # not read are refused as `live` refuses them, not stored to be ignored
    check_engine_options(args, resolve_engine(engine_cfg))
    unused = unused_settings(args, args.privacy_guard or GuardConfig().mode, args.cache)
    if unused:
        raise ConfigError("; ".join(unused))
    cache = CacheConfig(enabled=args.cache, threshold=args.cache_threshold,
                        refresh_every_n=args.cache_refresh)
    config = AppConfig(engine=engine_cfg, cache=cache, guard=guard_config(args)).validate()
    preset = Preset.of(args.name, config, PresetSource(path=str(args.source),
                                                       face_index=args.source_face_index))
    preset = preset.validate()
    # the check `live --preset` makes, now: a photo without a usable face is refused here
    engine = Engine(config.effective_engine())
    face = engine.set_source(load_image(args.source, "source"), args.source_face_index)
    for note in engine.source_notes:
        print(f"source: {note}", file=sys.stderr)
    path = store.save(preset, overwrite=args.force)
    x1, y1, x2, y2 = (round(float(v)) for v in face.bbox)
    print(f"saved preset '{path.stem}' to {path} (source face at {x1},{y1}-{x2},{y2})")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    preset = PresetStore().load(args.name)
    sys.stdout.write(preset.to_toml().decode("utf-8"))
    return 0


def _cmd_rename(args: argparse.Namespace) -> int:
    name = PresetStore().rename(args.old, args.new)
    print(f"renamed preset '{args.old}' to '{name}'")
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    PresetStore().delete(args.name)
    print(f"deleted preset '{args.name}'")
    return 0


def _cmd_token(args: argparse.Namespace) -> int:
    from livefuse.control import load_or_create_token, token_path

    token = load_or_create_token(new=args.new)
    print(token)
    print(f"(stored in {token_path()}, mode 0600; send it as 'Authorization: Bearer TOKEN')",
          file=sys.stderr)
    return 0


def add_parsers(sub: Any) -> None:
    """Register ``presets`` and ``control-token`` on an ``argparse`` subparsers object."""
    p = sub.add_parser(
        "presets", help="list, save, show, rename or delete presets",
        description="Presets are named sets of a source face photo and the engine, cache and "
                    "privacy-guard settings, kept as TOML files in the config folder's "
                    "'presets' folder. `livefuse live --preset NAME` starts with one; the app "
                    "and the control API switch between them while streaming.",
        formatter_class=HelpFormatter)
    ps = p.add_subparsers(dest="presets_command", metavar="ACTION", required=True)
    q = ps.add_parser("list", help="the presets, in Ctrl+1..9 order",
                      formatter_class=HelpFormatter)
    q.set_defaults(func=_cmd_list)
    q = ps.add_parser("save", help="save a preset (the photo is checked for a face)",
                      description="Save a preset from a source photo and `live`'s engine, "
                                  "cache and guard options.", formatter_class=HelpFormatter)
    q.add_argument("name", help="the preset's name (letters, digits, spaces, . , ( ) + & ' "
                                "! # - _; at most 64 characters)")
    q.add_argument("--source", "-s", required=True, type=Path, help="photo of the source face")
    q.add_argument("--source-face-index", type=at_least(0), default=None,
                   help="face of the photo, left to right from 0 (default: the most "
                        "confident)")
    q.add_argument("--force", action="store_true", help="replace a preset of that name")
    add_settings_args(q, reference=False)
    add_guard_args(q)
    q.set_defaults(func=_cmd_save)
    q = ps.add_parser("show", help="print a preset's file", formatter_class=HelpFormatter)
    q.add_argument("name")
    q.set_defaults(func=_cmd_show)
    q = ps.add_parser("rename", help="rename a preset (never replaces another)",
                      formatter_class=HelpFormatter)
    q.add_argument("old")
    q.add_argument("new")
    q.set_defaults(func=_cmd_rename)
    q = ps.add_parser("delete", help="delete a preset", formatter_class=HelpFormatter)
    q.add_argument("name")
    q.set_defaults(func=_cmd_delete)

    p = sub.add_parser(
        "control-token", help="print the control API's bearer token",
        description="Print the bearer token every control API request needs (made on first "
                    "use, stored with mode 0600 in the config folder).",
        formatter_class=HelpFormatter)
    p.add_argument("--new", action="store_true",
                   help="replace the token with a new one (every client needs the new one)")
    p.set_defaults(func=_cmd_token)


__all__ = ["add_parsers"]
