"""``livefuse batch INPUT... --output-dir DIR``: many images and videos, and long videos in
chunks, across workers (Ray when installed: the ``batch`` extra)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from livefuse.cli_args import (
    HelpFormatter,
    add_engine_args,
    add_source_args,
    add_video_args,
    at_least,
    choose_engine,
    video_only_options,
    video_options,
)
from livefuse.errors import EXIT_FAILED, LivefuseError
from livefuse.extras import install_hint
from livefuse.io.paths import same_file

if TYPE_CHECKING:
    from livefuse.batch.plan import Plan


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _cpu_share(text: str) -> float:
    try:
        value = _share(text)
    except argparse.ArgumentTypeError:
        if _below_zero(text):  # one rule said once: 0 and -1 got two (a new user's trial)
            raise argparse.ArgumentTypeError("must be > 0") from None
        raise
    if value == 0:  # a Ray actor with no CPU is scheduled without limit, its codecs on none
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _below_zero(text: str) -> bool:
    """Whether ``text`` reads as a number below zero."""
    try:
        return float(text) < 0
    except ValueError:
        return False


def _chunk_seconds(text: str) -> float | None:
    return None if text == "auto" else _share(text)


def _workers_without_gpu(args: argparse.Namespace) -> bool:
    """Whether the workers will certainly have no GPU: ``--gpus-per-worker 0``, or no CUDA
    device here for an embedded cluster or the in-process pool (a joined cluster may have
    GPUs this machine lacks)."""
    if args.gpus_per_worker == 0:
        return True
    if args.address is not None:
        return False
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return True
    import torch

    return not torch.cuda.is_available()


def _folder(text: str) -> Path:
    # Path("") is "." : an unset variable (-o "$OUTDIR") wrote into the working folder, exit 0
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset variable?); give a folder")
    return Path(text)


def add_parser(sub: Any) -> None:
    """Register the ``batch`` subcommand on an ``argparse`` subparsers object."""
    p = sub.add_parser(
        "batch", help="swap a face into many images and videos (folders, globs) in parallel",
        description="Swap the source face into every image and video given (files, folders, "
                    "glob patterns), writing each output under --output-dir with the input's "
                    "name. Outputs a batch made are skipped (resume) unless --overwrite; one bad "
                    "item does not stop the others. Long videos are cut at keyframes, processed "
                    "in parallel and joined exactly (every frame, timestamp and audio packet). "
                    "Runs on Ray workers when Ray is installed (the batch extra: "
                    f"{install_hint('batch')}), else in this process.",
        formatter_class=HelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="image or video files, folders, or glob patterns (quote them)")
    p.add_argument("--output-dir", "-o", type=_folder, required=True, help="where outputs go")
    p.add_argument("--source", "-s", type=Path, required=True, help="photo of the source face")
    p.add_argument("--recursive", "-r", action="store_true",
                   help="also the subfolders of folders (a pattern's ** reaches them "
                        "anyway)")
    p.add_argument("--overwrite", action="store_true",
                   help="process items whose output exists (default: skip them)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress display and no status line while the batch runs (the "
                        "summary at the end lists every failure and note)")
    p.add_argument("--workers", type=at_least(1), default=None,
                   help="parallel workers, each with its own engine (default: Ray: as many as "
                        "the GPUs, or CPUs, allow at the given share; without Ray: 1)")
    p.add_argument("--gpus-per-worker", type=_share, default=None, metavar="F",
                   help="GPU share of each Ray worker, e.g. 0.25 for four engines (and four "
                        "encoders) on one GPU (default: 1 for the neural engine when the "
                        "cluster has GPUs, else 0: CPU workers)")
    p.add_argument("--cpus-per-worker", type=_cpu_share, default=None, metavar="F",
                   help="CPU share of each Ray worker; its decoder and encoder take 1.5 "
                        "threads per CPU of it (default: the cluster's CPUs shared evenly "
                        "among the workers)")
    p.add_argument("--address", default=None,
                   help="join a running Ray cluster (auto or HOST:PORT) instead of starting "
                        "an embedded one for this command")
    p.add_argument("--chunk-seconds", type=_chunk_seconds, default=None, metavar="S",
                   help="cut videos at least one and a half chunks long into equal chunks "
                        "of about S seconds at keyframes; 0 never cuts (default: auto: none "
                        "with one worker, else two per worker, or one each when two would be "
                        "under 10 s; auto picks between 10 and 120 s)")
    p.add_argument("--executor", choices=("auto", "ray", "local"), default="auto",
                   help="auto: Ray when installed, else this process; local: worker threads "
                        "in this process (default: %(default)s)")
    add_engine_args(p)
    add_source_args(p)
    add_video_args(p)
    p.set_defaults(func=run_batch_cli)


def say(line: str) -> None:
    """A status line on stderr, above the progress bar (which is redrawn under it) rather than
    run into the bar's line, as a note that came while a video ran once was."""
    from tqdm import tqdm

    tqdm.write(f"[batch] {line}", file=sys.stderr)


def _plain(line: str) -> str:
    """A line as both places word it: a summary's ``note: `` prefix and column padding off."""
    line = line.strip()
    return " ".join(line.removeprefix("note: ").split())


def _one_terminal() -> bool:
    """Whether stdout and stderr are the same terminal, where the status lines said while the
    batch ran are still on screen above the summary."""
    import os

    try:
        return sys.stdout.isatty() and sys.stderr.isatty() and \
            os.path.samestat(os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno()))
    except (OSError, ValueError):
        return False


def summary_text(lines: list[str], said: set[str]) -> str:
    """The summary for stdout. On one terminal with the status lines, each line already said
    there (``said``: a failure, a note, as :func:`_plain` gives them) is left out: a new
    user's trial read every failure and note twice. Redirected, the summary is the record and
    keeps them all."""
    if _one_terminal():
        lines = [ln for ln in lines if _plain(ln) not in said]
    return "\n".join(lines)


def _refuse_video_options_without_video(args: argparse.Namespace, plan: Plan) -> None:
    """A batch with no video among its inputs (those to do and those already done) refuses the
    options that act only on videos, as `run` does for an image: they would be accepted and do
    nothing.

    Raises:
        ConfigError: such an option was given and no input is a video.
    """
    from livefuse.errors import ConfigError

    items = [*plan.items, *plan.skipped, *plan.failed_before]
    if not items or any(i.kind == "video" for i in items):
        return
    given = video_only_options(args, args.chunk_seconds)
    if given:
        count = "the 1 input is an image" if len(items) == 1 else \
            f"all {len(items)} inputs are images"
        raise ConfigError(f"{', '.join(given)}: only for videos; {count}")


def run_batch_cli(args: argparse.Namespace) -> int:
    """Run ``livefuse batch``; the exit status is 0, :data:`EXIT_FAILED` when any item failed,
    or :data:`livefuse.errors.EXIT_INCOMPLETE` when none failed but an input ended early.

    Raises:
        LivefuseError: bad paths or options, an unreadable source photo, or an engine that
            cannot be built (exit 2, nothing written).
    """
    from livefuse.batch.plan import plan_items
    from livefuse.batch.runner import BatchOptions, run_batch, runs_on_ray
    from livefuse.batch.worker import EngineSpec, job_key
    from livefuse.errors import EXIT_INCOMPLETE
    from livefuse.imaging import load_image

    if args.workers is not None and args.workers < 1:
        raise LivefuseError(f"--workers {args.workers}: must be >= 1")
    video = video_options(args)
    # the photos before the engine's line: an unreadable one is one error, first, not one per
    # item after the engine's
    load_image(args.source, "source")
    if args.reference is not None:
        load_image(args.reference, "reference")
    no_gpu_classic = False
    if args.engine == "auto" and _workers_without_gpu(args):
        from livefuse.models.engine_choice import neural_models_present

        if neural_models_present(args.models_dir):
            # --models-dir was read, for the models just found; the classic engine reads none
            args.engine, args.models_dir, no_gpu_classic = "classic", None, True
    config = choose_engine(args)
    if no_gpu_classic:  # after the options' check, as choose_engine's own line
        print("engine: classic (the batch workers have no GPU; --engine neural runs the "
              "neural models on the CPU)", file=sys.stderr)
    if args.address is None:  # workers on this machine: its model files are theirs
        from livefuse.models.engine_choice import models_error

        problem = models_error(config)
        if problem is not None:  # now, not from every worker after the cluster started
            raise problem
    if args.recursive and not any(Path(raw).is_dir() for raw in args.inputs):
        # taken and ignored otherwise (an option audit); a pattern's ** reaches any depth
        raise LivefuseError("--recursive walks the subfolders of folder inputs, and no input "
                            "is a folder (a pattern's ** reaches every depth by itself)")
    spec = EngineSpec(config, args.source.resolve(), args.source_face_index,
                      None if args.reference is None else args.reference.resolve())
    job = job_key(spec, video, args.chunk_seconds, workers_here=args.address is None,
                  cpu_workers=args.gpus_per_worker == 0)
    plan = plan_items(args.inputs, args.output_dir, args.recursive, args.overwrite,
                      other_inputs={"source": args.source, "reference": args.reference},
                      job=job)
    for photo, role in ((args.source, "source"), (args.reference, "reference")):
        if photo is not None and any(same_file(i.input, photo) for i in plan.items):
            say(f"note: the {role} photo '{photo}' is among the inputs: it is swapped too")
    _refuse_video_options_without_video(args, plan)
    opts = BatchOptions(tuple(args.inputs), args.output_dir, args.recursive, args.overwrite,
                        args.workers, args.gpus_per_worker, args.cpus_per_worker, args.address,
                        args.chunk_seconds, video, args.executor)
    if plan.items and config.engine == "classic" and runs_on_ray(opts):
        # Ray's workers find the source face only after the cluster's start-up (14 s on 2
        # cores against `run`'s 2.4 s for a photo with no face): the classic engine, 1.6 s to
        # build here, finds it first, as each worker would
        spec()

    said: set[str] = set()
    held: list[str] = []

    def status(line: str) -> None:
        if args.quiet:  # the summary repeats it
            held.append(line)
            return
        said.add(_plain(line))
        say(line)

    neural = config.engine == "neural"
    try:
        summary = run_batch(opts, spec, neural=neural, device=config.device if neural else None,
                            detect_every=config.detect_every, quiet=args.quiet,
                            on_line=status, plan=plan, job=job)
    except BaseException:
        # no summary follows: what -q held back (failures so far, the chunks kept) is said now
        for line in held:
            say(line)
        raise
    print(summary_text(summary.lines(), said))
    if summary.failed:
        return EXIT_FAILED
    return EXIT_INCOMPLETE if summary.incomplete else 0


__all__ = ["EXIT_FAILED", "add_parser", "run_batch_cli", "say", "summary_text"]
