"""``livefuse models ...``: argparse registration and handlers (the command layer; the catalog,
download and verification code it drives is in :mod:`livefuse.models`).

``livefuse.cli`` calls :func:`add_parser` with its sub-parsers object; each handler takes the
parsed namespace and returns the exit status.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from livefuse.cli_args import HelpFormatter, add_models_dir_arg, at_least
from livefuse.errors import LivefuseError
from livefuse.models import catalog
from livefuse.models import download as dl
from livefuse.models.catalog import CATALOG, get_spec, models_dir


def _dir(args: argparse.Namespace) -> Path:
    return models_dir(getattr(args, "models_dir", None))


def format_table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """Left-aligned plain-text table (columns padded to their widest cell)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)


def _sources(spec: catalog.ModelSpec) -> list[str]:
    """Where ``spec`` comes from, in the order tried, one line each (``models list -v``)."""
    lines = []
    if spec.pack is not None:
        pack = catalog.get_pack(spec.pack)
        digest = pack.sha256 or "none published"
        lines += [f"  from {pack.filename} ({pack.size:,} B, SHA-256 {digest}):",
                  *(f"    {url}" for url in pack.urls),
                  "  mirrors, if the pack fails:" if spec.urls else "  no mirror"]
    elif spec.urls:
        lines.append("  from (in this order):")
    lines += [f"    {url}" for url in spec.urls]
    return lines


def cmd_list(args: argparse.Namespace) -> int:
    """Print name, role, size (MiB), status and licence of every catalog row; with ``-v`` also
    each row's SHA-256 and where it is downloaded from."""
    directory = _dir(args)
    rows = [(s.name, f"{s.role} ({s.pack})" if s.pack else s.role, f"{s.size_mib:.1f}",
             dl.status_text(dl.status(s, directory)), s.licence) for s in CATALOG]
    print(f"models folder: {directory}")
    print(format_table(rows, ("name", "role", "MiB", "status", "licence")))
    if getattr(args, "details", False):
        for spec in CATALOG:
            print(f"\n{spec.name} ({spec.filename}, {spec.size:,} B)")
            print(f"  SHA-256 {spec.sha256 or 'none published (size checked only)'}")
            print(*_sources(spec), sep="\n")
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    """Download the named models (or ``all``) into the models folder; each URL is printed
    once, when it is first tried."""
    directory = _dir(args)
    specs = list(CATALOG) if "all" in args.name else \
        list({n: get_spec(n) for n in args.name}.values())  # every name checked before a byte
    for spec in specs:
        print(f"{spec.name}: {spec.licence}")
        path = dl.download(spec, directory, timeout=args.timeout,
                           on_url=lambda name, url: print(f"  {name} <- {url}", flush=True))
        print(f"{spec.name}: {dl.status_text(dl.status(spec, directory))} -> {path}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every file that is present; exit 1 when one is corrupt, or when none is there
    (nothing was verified: a script that runs it as a check must not read that as ready)."""
    directory = _dir(args)
    bad = 0
    present = 0
    width = max(len(spec.name) for spec in CATALOG)
    for spec in CATALOG:
        state = dl.status(spec, directory)
        print(f"{spec.name:{width}s}  {dl.status_text(state)}")
        present += state != "missing"
        if state == "corrupt":
            bad += 1
            print(f"  {directory / spec.filename}: delete it and run "
                  f"`livefuse models fetch {spec.name}` or `livefuse models import PATH`")
    if not present:
        print(f"no model file in {directory}: nothing to verify (`livefuse models fetch "
              "det_10g w600k_r50 inswapper_128` or `livefuse models import PATH` adds the "
              "neural engine's)")
        return 1
    return 1 if bad else 0


def cmd_import(args: argparse.Namespace) -> int:
    """Verify a user's file and copy it in; the catalog row is found by --name or file name.
    A pack's zip (``buffalo_l.zip``) installs every member the catalog wants from it."""
    path = Path(args.path).expanduser()
    # the file first: naming a missing file "an unknown model" sent users to the catalog
    if not path.exists():
        raise LivefuseError(f"cannot import '{path}': file not found")
    if path.is_dir():
        raise LivefuseError(f"cannot import '{path}': it is a folder; give the model file "
                            "(e.g. ~/.insightface/models/buffalo_l/det_10g.onnx)")
    key = args.name or path.name
    known = {p.name for p in catalog.PACKS} | {p.filename for p in catalog.PACKS} | \
        {s.name for s in CATALOG} | {s.filename for s in CATALOG}
    if key not in known:
        names = ", ".join(s.name for s in CATALOG)
        if args.name:
            raise LivefuseError(f"cannot import '{path}': --name '{args.name}' is not in the "
                                f"catalog (one of {names})")
        raise LivefuseError(f"cannot tell which model '{path.name}' is: its name is not in the "
                            f"catalog; say which with --name NAME (one of {names})")
    if key in {p.name for p in catalog.PACKS} | {p.filename for p in catalog.PACKS}:
        for out in dl.import_pack(path, catalog.get_pack(key), _dir(args)):
            print(f"{out.stem}: {dl.status_text(dl.status(get_spec(out.stem), out.parent))} "
                  f"-> {out}")
        return 0
    spec = get_spec(key)
    out = dl.import_model(path, spec, _dir(args))
    print(f"{spec.name}: {dl.status_text(dl.status(spec, out.parent))} -> {out}")
    return 0


def add_parser(sub: Any) -> None:
    """Register ``models`` with ``list``, ``fetch NAME``, ``verify`` and ``import PATH``."""
    p = sub.add_parser(
        "models", help="list, download, verify or import model files",
        description="The neural engine's model files: InsightFace's inswapper_128 and buffalo_l "
                    "(det_10g, w600k_r50; InsightFace's terms: non-commercial research use "
                    "only) and the optional ones (enhancers, masks, landmarks), each under its "
                    "own licence, which `models list` shows. Without a sub-command: list "
                    "them.", formatter_class=HelpFormatter)
    add_models_dir_arg(p, None)
    p.set_defaults(func=cmd_list)
    msub = p.add_subparsers(dest="models_command", metavar="COMMAND")
    # SUPPRESS keeps a --models-dir given before the sub-command from being reset to None.
    q = msub.add_parser(
        "list", help="show every model, its status and licence",
        description="Show every catalog row: role, size, status in the models folder "
                    "(present, missing, corrupt, unverified) and licence.",
        formatter_class=HelpFormatter)
    # dest 'details': `livefuse -v` (logging) keeps its own meaning
    q.add_argument("-v", "--verbose", dest="details", action="store_true",
                   help="also show each file's SHA-256 and the URLs it is downloaded from")
    add_models_dir_arg(q, argparse.SUPPRESS)
    q.set_defaults(func=cmd_list)
    q = msub.add_parser(
        "fetch", help="download models (resumes, verifies SHA-256)",
        description="Download into the models folder, resuming a partial download, and install "
                    "a file only after its size and SHA-256 match the catalog. det_10g and "
                    "w600k_r50 come from InsightFace's buffalo_l.zip (one download installs "
                    "both); third-party mirrors are tried only when it fails.",
        formatter_class=HelpFormatter)
    q.add_argument("name", nargs="+", help="catalog names (see `livefuse models list`), or "
                                           "'all'")
    q.add_argument("--timeout", type=at_least(0, float, strict=True), default=30.0,
                   help="network timeout in s (default: %(default)s)")
    add_models_dir_arg(q, argparse.SUPPRESS)
    q.set_defaults(func=cmd_fetch)
    q = msub.add_parser(
        "verify", help="check size and SHA-256 of the files present (exit 1: one is "
                       "corrupt, or none is there)",
        description="Check the size and SHA-256 of every model file present; exit status 1 "
                    "when one is corrupt.", formatter_class=HelpFormatter)
    add_models_dir_arg(q, argparse.SUPPRESS)
    q.set_defaults(func=cmd_verify)
    q = msub.add_parser(
        "import", help="copy a model file you already have, after verifying it",
        description="Copy a model file (or buffalo_l.zip) you already have into the models "
                    "folder after checking its size and SHA-256; the file itself is never "
                    "changed.", formatter_class=HelpFormatter)
    q.add_argument("path", help="the .onnx file, or buffalo_l.zip")
    q.add_argument("--name", help="catalog name (default: from the file name)")
    add_models_dir_arg(q, argparse.SUPPRESS)
    q.set_defaults(func=cmd_import)
