"""``livefuse models ...`` and ``livefuse doctor``: argparse registration and handlers.

``livefuse.cli`` calls :func:`add_parser` and :func:`add_doctor_parser` with its sub-parsers
object; each handler takes the parsed namespace and returns the exit status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from livefuse.models import download as dl
from livefuse.models.catalog import CATALOG, MODELS_DIR_ENV, get_spec, models_dir


def _dir(args: argparse.Namespace) -> Path:
    return models_dir(getattr(args, "models_dir", None))


def format_table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """Left-aligned plain-text table (columns padded to their widest cell)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    """Print name, role, size (MiB), status and licence of every catalog row."""
    directory = _dir(args)
    rows = [(s.name, f"{s.role} ({s.pack})" if s.pack else s.role, f"{s.size_mib:.1f}",
             dl.status_text(dl.status(s, directory)), s.licence) for s in CATALOG]
    print(f"models folder: {directory}")
    print(format_table(rows, ("name", "role", "MiB", "status", "licence")))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    """Download one model (or ``all``) into the models folder."""
    directory = _dir(args)
    specs = list(CATALOG) if args.name == "all" else [get_spec(args.name)]
    for spec in specs:
        print(f"{spec.name}: {spec.licence}")
        path = dl.download(spec, directory, timeout=args.timeout)
        print(f"{spec.name}: {dl.status_text(dl.status(spec, directory))} -> {path}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every file that is present; exit 1 when one is corrupt."""
    directory = _dir(args)
    bad = 0
    for spec in CATALOG:
        state = dl.status(spec, directory)
        print(f"{spec.name:20s} {dl.status_text(state)}")
        if state == "corrupt":
            bad += 1
            print(f"  {directory / spec.filename}: delete it and run "
                  f"`livefuse models fetch {spec.name}` or `livefuse models import PATH`")
    return 1 if bad else 0


def cmd_import(args: argparse.Namespace) -> int:
    """Verify a user's file and copy it in; the catalog row is found by --name or file name."""
    path = Path(args.path)
    spec = get_spec(args.name or path.name)
    out = dl.import_model(path, spec, _dir(args))
    print(f"{spec.name}: {dl.status_text(dl.status(spec, out.parent))} -> {out}")
    return 0


def _add_dir_flag(p: argparse.ArgumentParser, default: Any) -> None:
    p.add_argument("--models-dir", default=default,
                   help=f"models folder (default: ${MODELS_DIR_ENV} or the user data dir)")


def add_parser(sub: Any) -> None:
    """Register ``models`` with ``list``, ``fetch NAME``, ``verify`` and ``import PATH``."""
    p = sub.add_parser("models", help="list, download, verify or import model files",
                       description="Without a sub-command: list the models.")
    _add_dir_flag(p, None)
    p.set_defaults(func=cmd_list)
    msub = p.add_subparsers(dest="models_command")
    # SUPPRESS keeps a --models-dir given before the sub-command from being reset to None.
    q = msub.add_parser("list", help="show every model, its status and licence")
    _add_dir_flag(q, argparse.SUPPRESS)
    q.set_defaults(func=cmd_list)
    q = msub.add_parser("fetch", help="download a model (resumes, verifies SHA-256)")
    q.add_argument("name", help="catalog name, or 'all'")
    q.add_argument("--timeout", type=float, default=30.0, help="network timeout in s")
    _add_dir_flag(q, argparse.SUPPRESS)
    q.set_defaults(func=cmd_fetch)
    q = msub.add_parser("verify", help="check size and SHA-256 of the files present")
    _add_dir_flag(q, argparse.SUPPRESS)
    q.set_defaults(func=cmd_verify)
    q = msub.add_parser("import", help="copy a model file you already have, after verifying it")
    q.add_argument("path")
    q.add_argument("--name", help="catalog name (default: from the file name)")
    _add_dir_flag(q, argparse.SUPPRESS)
    q.set_defaults(func=cmd_import)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print the environment report; exit 1 when a check failed."""
    from livefuse import doctor

    checks = doctor.collect(models_directory=_dir(args))
    doctor.print_report(checks, file=sys.stdout)
    return 1 if any(c.level == "fail" for c in checks) else 0


def add_doctor_parser(sub: Any) -> None:
    """Register ``doctor``."""
    p = sub.add_parser("doctor", help="check Python, torch, onnxruntime, GPU, models, cameras")
    _add_dir_flag(p, None)
    p.set_defaults(func=cmd_doctor)
