"""The `livefuse` command line. No Qt here: the GUI lives in livefuse_ui."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from livefuse import __version__
from livefuse.cli_args import (
    HelpFormatter,
    add_engine_args,
    add_models_dir_arg,
    add_source_args,
    add_video_args,
    at_least,
    choose_engine,
    file_name,
    video_options,
)
from livefuse.errors import EXIT_FAILED, LivefuseError, NothingSwappedError


def _cmd_run(args: argparse.Namespace) -> int:
    from livefuse.engine import Engine
    from livefuse.errors import EXIT_INCOMPLETE
    from livefuse.imaging import load_image
    from livefuse.run import check_run_paths, check_target_opens, run

    # what stands at the output path now: after an interrupt, another file there is this
    # run's output, complete (it lands by one rename), and the message says so
    args.output_before = _file_stamp(args.output)
    # before the engine and the source: a wrong output path costs no model load or detection
    check_run_paths(args.target, args.output, {"source": args.source,
                                               "reference": args.reference})
    _refuse_video_options_on_image(args)
    video = video_options(args)
    # the inputs' contents too: a damaged file is the first line, not one after the engine's
    source = load_image(args.source, "source")
    reference = None if args.reference is None else load_image(args.reference, "reference")
    check_target_opens(args.target)
    config = choose_engine(args)
    engine = Engine(config)
    if config.engine == "neural":  # an option trial: a bf16 asked for ran fp32 with no word
        print(f"precision: {engine.precision_in_use} ({engine.precision_reason})",
              file=sys.stderr)
    engine.set_source(source, face_index=args.source_face_index)
    for note in engine.source_notes:
        print(f"source: {note}", file=sys.stderr)
    if reference is not None:
        engine.set_reference(reference)
        for note in engine.reference_notes:
            print(f"reference: {note}", file=sys.stderr)
    # kept until the new one is complete, then replaced; a dangling symlink is there too
    replaces = os.path.lexists(args.output)
    summary = run(engine, args.target, args.output, progress=not args.quiet,
                  other_inputs={"source": args.source, "reference": args.reference},
                  video=video)
    if replaces:  # said, as `batch` would have skipped it
        summary.notes += (f"'{args.output}' was there before and has been replaced",)
    print("\n".join(summary.lines()))
    if summary.incomplete:
        print(f"livefuse: warning: {summary.incomplete}; '{args.output}' holds the "
              f"{summary.frames} frames decoded (exit status {EXIT_INCOMPLETE})",
              file=sys.stderr)
        return EXIT_INCOMPLETE
    return 0


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    """``(device, inode, mtime_ns)`` of the file at ``path``, ``None`` when there is none."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _interrupted_run_note(args: argparse.Namespace) -> str:
    """What an interrupted ``run`` left: its output when the interrupt came after the output's
    rename (a Ctrl-C in the last milliseconds), else nothing partial."""
    before = args.output_before
    if before is not False:
        now = _file_stamp(args.output)
        if now is not None and now != before:
            return f" after '{args.output}' was written in full"
    return "; no partial output was kept"


def _refuse_video_options_on_image(args: argparse.Namespace) -> None:
    """Options that act across frames given for a still image would be accepted and do
    nothing; they are refused instead (:func:`livefuse.cli_args.video_only_options`).

    Raises:
        ConfigError: such an option was set and the target is not a video file.
    """
    from livefuse.cli_args import video_only_options
    from livefuse.errors import ConfigError
    from livefuse.io.video import is_video_path

    if is_video_path(args.target):
        return
    given = video_only_options(args)
    if given:
        raise ConfigError(f"{', '.join(given)}: only for a video target; '{args.target}' is "
                          "an image")


def _cmd_demo(args: argparse.Namespace) -> int:
    from livefuse.demo import check_out_dir, run_demo

    out = args.out.resolve()
    check_out_dir(out)  # before the line that says where it writes
    print(f"livefuse demo: writing to {out} (the clip detects faces every 3rd frame and tracks "
          "them between, as `live` does; `run` detects on every frame unless --detect-every)")
    for summary in run_demo(out, progress=not args.quiet):
        print("\n".join(summary.lines()))
        print()
    print(f"done: open {out} to look at t1_swapped.jpg and clip_swapped.mp4")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    if not args.quality:
        unused = [o for o, v in (("--engine", args.engine), ("--models-dir", args.models_dir))
                  if v is not None]
        if unused:
            from livefuse.errors import ConfigError

            raise ConfigError(f"{', '.join(unused)}: only with --quality (the fps table always "
                              "times the classic engine)")
    if args.quality:
        from livefuse.bench import bench_quality
        from livefuse.config import EngineConfig
        from livefuse.models.catalog import get_spec, models_dir
        from livefuse.models.download import status
        from livefuse.models.engine_choice import resolve_engine

        base = EngineConfig(engine=args.engine or "auto", face_selector="one",
                            models_dir=args.models_dir)
        d = models_dir(args.models_dir)
        have = {n for n in ("gfpgan_1.4", "xseg", "bisenet_resnet34")
                if status(get_spec(n), d) == "present"}
        bench_quality(frames=args.frames, base=resolve_engine(base).applied(base),
            enhancer="gfpgan_1.4" if "gfpgan_1.4" in have else None,
            masks={"xseg", "bisenet_resnet34"} <= have)
        return 0
    from livefuse.bench import bench_classic

    bench_classic(frames=args.frames)
    return 0


def _gui_parser(sub: argparse._SubParsersAction) -> None:
    try:
        # The one edge from the engine package to the GUI: launched lazily, only here, so
        # `import livefuse` never needs PySide6 (pyproject's import-linter contract allows it).
        from livefuse_ui.app import add_parser as add_gui_parser
    except ImportError:  # pragma: no cover - livefuse_ui is part of the same distribution
        return
    add_gui_parser(sub)


class _Parser(argparse.ArgumentParser):
    """argparse with a bad option's error on one line and where to look, without the usage
    text first (``batch``'s runs to 12 lines and pushed the error off a new user's screen);
    its subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: `--over` taken for `--overwrite` today becomes an error in the
        # release that adds `--overlay`, breaking a user's script; full names do not
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.commands: Mapping[str, argparse.ArgumentParser] = {}
        """The subcommands' parsers, by name (filled on the top-level parser)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """As argparse's, but an unknown option is reported by the subcommand it was given to
        (argparse says ``livefuse: error: unrecognized arguments``, pointing at the top-level
        help)."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            owner = self.commands.get(getattr(parsed, "command", None) or "", self)
            owner.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="livefuse", description="Real-time face swap for streamers. Without a command: "
                                     "the desktop app.", formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"livefuse {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="-v info, -vv debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = sub.choices

    p = sub.add_parser(
        "run", help="swap a face into an image or a video (audio kept)",
        description="Swap the face of a source photo into an image or a video file. Videos keep "
                    "every audio stream untouched and every frame's timestamp; the output is "
                    "written to a temporary file and renamed when complete, and never "
                    "overwrites an input.", formatter_class=HelpFormatter)
    p.add_argument("--source", "-s", type=Path, required=True, help="photo of the source face")
    p.add_argument("--target", "-t", type=Path, required=True, help="image or video to change")
    p.add_argument("--output", "-o", type=file_name, required=True,
                   help="output image or video")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    add_engine_args(p)
    add_source_args(p)
    add_video_args(p)
    # output_before: _cmd_run's first step sets it (False: not yet looked at)
    p.set_defaults(func=_cmd_run, output_before=False)

    p = sub.add_parser(
        "demo", help="offline demo on photos shipped with installed packages",
        description="Swap the astronaut onto the six faces of insightface's t1.jpg, then onto a "
                    "3-second clip with camera motion and sound made from the same photo. "
                    "Offline, CPU only, no model download.", formatter_class=HelpFormatter)
    p.add_argument("--out", type=Path, default=Path("livefuse-demo"), help="output folder")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_demo)

    from livefuse import batch_cli, doctor, live_cli, models_cli, stream_cli

    models_cli.add_parser(sub)
    doctor.add_parser(sub)
    live_cli.add_parser(sub)
    stream_cli.add_parsers(sub)
    batch_cli.add_parser(sub)
    _gui_parser(sub)

    p = sub.add_parser(
        "bench", help="print the engine's fps table on the demo clip",
        description="Time the classic engine on the demo clip at 640x480 and 1280x720 for each "
                    "detection interval and face selector, and print the fps table.",
        formatter_class=HelpFormatter)
    p.add_argument("--frames", type=at_least(1), default=120, help="frames per table row")
    p.add_argument("--quality", action="store_true",
                   help="the quality gate instead: PSNR/SSIM of fp16, the cache, the enhancer "
                        "and masks against their references, on the face region")
    p.add_argument("--engine", choices=("auto", "classic", "neural"), default=None,
                   help="with --quality: the engine to measure (default: auto)")
    add_models_dir_arg(p, None, "neural: model folder")
    p.set_defaults(func=_cmd_bench)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C so the same clean-up runs (every thread
    stopped, no part file left); the CLI then exits 143 (128 + SIGTERM)."""


_TERMINATED = threading.Event()
"""Set by the SIGTERM handler: a library that turns the exception into a plain
KeyboardInterrupt on its way up (Ray's ``ray.wait``) must not change the exit status."""


def _on_sigterm(signum: int, frame: object) -> None:
    _TERMINATED.set()
    raise Terminated


def entry() -> None:
    """The ``livefuse`` command: :func:`main`, then exit with its status.

    After Ctrl-C or SIGTERM in a process that ran Ray (``livefuse batch``), the clean-up has run
    (partial outputs removed, the embedded cluster stopped) and the process ends at once: Ray's
    core worker threads crashed the interpreter's own shutdown (exit 139, SIGSEGV, after
    "livefuse: interrupted") when the interrupt came while the workers were starting.
    """
    code = main()
    if code in (130, 143) and "ray" in sys.modules:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    # `live` and the desktop app install their own handlers over this one while they run
    old = signal.signal(signal.SIGTERM, _on_sigterm)
    _TERMINATED.clear()
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the command ran: its own handler says what it kept
        return _interrupted_early()
    except ImportError as exc:
        # Ctrl-C inside an extension's import (dlib's, at start-up) comes out as pybind11's
        # "ImportError: initialization failed", which read as a broken install
        if _caused_by_interrupt(exc):
            return _interrupted_early()
        raise
    finally:
        signal.signal(signal.SIGTERM, old)


def _interrupted_batch_note(args: argparse.Namespace) -> str:
    """What an interrupted batch kept and how to go on: with ``--overwrite`` the same command
    would redo everything (a new user's trial read "the same command goes on after it")."""
    if getattr(args, "overwrite", False):  # without it, items not reached keep old outputs
        return ("; what finished is kept (nothing half-written); with --overwrite the same "
                "command makes every item again, without it the items not reached keep their "
                "earlier outputs")
    return "; what finished is kept (nothing half-written) and the same command goes on after it"


def _caused_by_interrupt(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _interrupted_early() -> int:
    """A new user's trial: Ctrl-C in live's first half second printed a traceback (exit 130),
    or exit 1 with dlib's ImportError."""
    print("livefuse: interrupted while starting up", file=sys.stderr)
    return 143 if _TERMINATED.is_set() else 130


def typed_options(argv: Sequence[str]) -> frozenset[str]:
    """The ``dest`` of every option typed in ``argv`` (a command line that parses), whatever its
    value: an option given with its default value is given all the same, and a check of what
    was given must not miss it (an option trial: ``live --preset P --cache`` was taken for no
    option, and the preset's cache stayed off).

    The same parser is built again with every default suppressed, so that only what argparse
    read from ``argv`` lands in the namespace.
    """
    parser = build_parser()
    pending: list[argparse.ArgumentParser] = [parser]
    while pending:
        p = pending.pop()
        # argparse has no public way to walk a parser's arguments; _actions, _defaults and
        # _SubParsersAction have stood unchanged since Python 3.2
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
            action.default = argparse.SUPPRESS
        p._defaults.clear()  # set_defaults(func=...): not typed
    return frozenset(vars(parser.parse_args(argv)))


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line parsed, with ``typed``: the options given on it
    (:func:`typed_options`), which the commands' checks of options given and unused read
    (``livefuse.live_cli.settings_given``, ``unused_settings``): a namespace made by another
    parser has no ``typed`` and those commands fail on it.

    Raises:
        SystemExit: a command line argparse refuses (its message printed).
    """
    args = build_parser().parse_args(argv)
    args.typed = typed_options(sys.argv[1:] if argv is None else argv)
    return args


def _main(argv: Sequence[str] | None) -> int:
    args = parse(argv)
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        # `livefuse` alone opens the desktop app, as a streamer expects from a double-click.
        args = parse(["gui"])
    try:
        try:
            return int(args.func(args))
        except ImportError as exc:
            if _caused_by_interrupt(exc):  # dlib's import, hit by Ctrl-C mid-command
                raise KeyboardInterrupt from exc
            raise
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("PySide6", "shiboken6"):
            from livefuse.extras import install_hint

            print(f"livefuse: error: the desktop app needs PySide6: {install_hint('gui')}; or "
                  "use `livefuse run`, `livefuse live`", file=sys.stderr)
            return 2
        raise
    except LivefuseError as exc:
        print(f"livefuse: error: {exc}", file=sys.stderr)
        # the job ran and the target gave nothing (as a failed batch item), not a bad command
        return EXIT_FAILED if isinstance(exc, NothingSwappedError) else 2
    except KeyboardInterrupt:
        # run and batch write through part files, removed on the way out; a batch stopped
        # after hours keeps what it finished (outputs, a long video's chunks) and goes on from
        # it when run again; live's recording is the user's to keep, so nothing is claimed
        kept = _interrupted_run_note(args) if args.command == "run" else \
            _interrupted_batch_note(args) if args.command == "batch" else ""
        if _TERMINATED.is_set():
            print(f"livefuse: terminated (SIGTERM){kept or '; no partial output was kept'}",
                  file=sys.stderr)
            return 143
        print(f"livefuse: interrupted{kept}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `livefuse models list | head -1`: the reader left. Python's documented recipe: point
        # stdout at devnull so the flush at exit cannot raise again; exit as a tool killed by
        # SIGPIPE would (128 + 13), without a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as exc:
        # a path the system refuses that no check of ours foresaw (a folder where a file must
        # go, /proc): one line naming it, not a traceback
        where = f"'{exc.filename}': " if exc.filename else ""
        print(f"livefuse: error: {where}{(exc.strerror or str(exc)).lower()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
