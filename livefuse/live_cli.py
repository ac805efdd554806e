"""``livefuse live``: a headless live session (camera or video file in; virtual camera and/or
recording out) printing a metrics line every second until Ctrl-C or ``--duration``. It drives the
same :class:`~livefuse.session.Session` as the desktop app."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from livefuse import extras
from livefuse.cli_args import (
    HelpFormatter,
    add_engine_args,
    at_least,
    choose_engine,
    within,
)
from livefuse.config import (
    CONTROL_HOST,
    GUARD_CHOICES,
    LIVE_DEFAULTS,
    AppConfig,
    CacheConfig,
    CaptureConfig,
    ControlConfig,
    GuardConfig,
    OutputConfig,
)
from livefuse.errors import EXIT_INCOMPLETE, ConfigError, LivefuseError
from livefuse.imaging import is_image_path, load_image
from livefuse.metrics import Metrics, start_prometheus
from livefuse.presets import Preset, PresetStore
from livefuse.session import Session

OPEN_ATTEMPTS = 5
"""``livefuse live`` gives up on a camera after this many failed opens in a row (about 12 s
with the capture's back-off); the app keeps retrying instead."""
_STREAM_SCHEMES = ("http", "https", "rtmp", "rtmps", "rtsp", "srt", "udp", "tcp")


def add_settings_args(p: argparse.ArgumentParser, reference: bool = True) -> None:
    """The engine and cache options of ``live`` (and of ``presets save``: ``reference=False``,
    see :func:`livefuse.cli_args.add_engine_args`), live's defaults."""
    cache = LIVE_DEFAULTS.cache
    p.add_argument("--cache", action=argparse.BooleanOptionalAction, default=cache.enabled,
                   help="pose-similarity cache "
                        f"(default: {'on' if cache.enabled else 'off, --cache turns it on'})")
    p.add_argument("--cache-refresh", type=at_least(1), default=cache.refresh_every_n,
                   metavar="N",
                   help="a fresh swap at least every N frames: a cached swap serves at most N "
                        "frames, the one it was made on included (1: no reuse) "
                        f"(default: {cache.refresh_every_n})")
    p.add_argument("--cache-threshold", type=within(0, 1, low_open=True), default=cache.threshold,
                   help="similarity (0..1] at or above which a cached swap is reused")
    add_engine_args(p, LIVE_DEFAULTS.engine, reference)


def add_guard_args(p: argparse.ArgumentParser) -> None:
    """``--privacy-guard`` and ``--guard-hold-frames`` (``None`` when not given)."""
    p.add_argument("--privacy-guard", choices=GUARD_CHOICES, default=None,
                   help="hide every face that is not swapped (a lost face, a second person): "
                        "blur = pixelate it; hold = repeat the last fully swapped frame, then "
                        "blur; on, detection runs every frame (default: off, or the preset's)")
    p.add_argument("--guard-hold-frames", type=at_least(1), default=None, metavar="N",
                   help=f"hold: repeat the last swapped frame at most N frames in a row "
                        f"(default: {GuardConfig.hold_frames})")


def guard_config(args: argparse.Namespace, base: GuardConfig | None = None) -> GuardConfig:
    """``base`` (the defaults, or a preset's guard) with the guard options that were given."""
    guard = base or GuardConfig()
    if args.privacy_guard is not None:
        guard = dataclasses.replace(guard, mode=args.privacy_guard)
    if args.guard_hold_frames is not None:
        guard = dataclasses.replace(guard, hold_frames=args.guard_hold_frames)
    return guard.validate()


def settings_given(args: argparse.Namespace) -> list[str]:
    """The engine and cache options of :func:`add_settings_args` typed on the command line
    (``args.typed``, :func:`livefuse.cli.typed_options`; a default value typed counts), spelled
    as there. ``--reference`` is not among them: the reference photo is the session's, as the
    app's, and a preset keeps only the face selector."""
    probe = argparse.ArgumentParser(add_help=False)
    add_settings_args(probe)
    # its namespace's names: set_defaults' (engine_defaults, ...) are never typed
    names = [k for k in vars(probe.parse_args([])) if k != "reference"]
    typed: frozenset[str] = args.typed
    # on/off options: `--no-cache`, `--no-smooth`, `--no-keep-mouth` turn a default off
    return [("--no-" if getattr(args, k) is False else "--") + k.replace("_", "-")
            for k in names if k in typed]


def add_parser(sub: Any) -> None:
    """Register the ``live`` subcommand on an ``argparse`` subparsers object."""
    p = sub.add_parser(
        "live", help="live face swap from a camera or video to a virtual camera",
        description="Headless live session: camera (or a video file) in; virtual camera "
                    "and/or a recording out. Prints a metrics line every second; Ctrl-C stops.",
        formatter_class=HelpFormatter)
    p.add_argument("--source", "-s", type=Path,
                   help="photo of the source face (or --preset)")
    p.add_argument("--preset", metavar="NAME",
                   help="start with a saved preset: its source face and engine, cache and "
                        "guard settings (`livefuse presets list`)")
    inp = p.add_mutually_exclusive_group()
    # default None, resolved to "0" below: argparse's exclusive group lets an option through
    # whose typed value is its default's string ("--camera 0 --video x" was accepted)
    inp.add_argument("--camera", default=None, help="camera index or device path (default: 0)")
    inp.add_argument("--video", type=Path, help="a video file standing in for the camera")
    p.add_argument("--loop", action="store_true", help="loop --video")
    cap = LIVE_DEFAULTS.capture
    p.add_argument("--width", type=at_least(1), default=cap.width,
                   help="requested camera width (px), and the virtual camera's")
    p.add_argument("--height", type=at_least(1), default=cap.height,
                   help="requested camera height (px), and the virtual camera's")
    p.add_argument("--fps", type=at_least(0, float, strict=True), default=cap.fps,
                   help="requested camera fps, and the virtual camera's (a --video file and "
                        "its recording keep the file's own rate)")
    p.add_argument("--open-attempts", type=at_least(1), default=OPEN_ATTEMPTS,
                   help="give up after this many failed camera opens in a row")
    p.add_argument("--virtual-cam", action="store_true", help="send frames to a virtual camera")
    p.add_argument("--record", type=Path, help="also record the output (.mp4, .mkv, .mov)")
    add_settings_args(p)
    add_guard_args(p)
    p.add_argument("--metrics-port", type=int,
                   help="serve Prometheus metrics on 127.0.0.1:PORT (needs the metrics extra)")
    p.add_argument("--control-port", type=int, metavar="PORT",
                   help="serve the control API (Stream Deck, scripts) on PORT; every request "
                        "needs the token `livefuse control-token` prints")
    p.add_argument("--control-host", default=CONTROL_HOST, metavar="ADDR",
                   help="the control API's address: only this computer unless you name "
                        "another (plain HTTP: trusted networks only) (default: %(default)s)")
    p.add_argument("--duration", type=at_least(0, float, strict=True), metavar="S",
                   help="stop after S seconds (default: run until Ctrl-C, or the end of "
                        "--video)")
    p.set_defaults(func=run_live)


def app_config(args: argparse.Namespace, with_engine: bool = True) -> AppConfig:
    """The session's settings from ``livefuse live``'s flags (``with_engine=False``: the
    default engine and cache settings, for a preset to replace).

    Raises:
        ConfigError: a value is out of range.
    """
    control = ControlConfig(enabled=args.control_port is not None,
                            port=8765 if args.control_port is None else args.control_port,
                            host=args.control_host)
    capture = CaptureConfig(
        kind="video" if args.video is not None else "camera",
        camera="0" if args.camera is None else str(args.camera),
        video=None if args.video is None else str(args.video), loop=args.loop,
        width=args.width, height=args.height, fps=args.fps,
        max_open_attempts=args.open_attempts)
    output = OutputConfig(virtual_camera=args.virtual_cam,
                          record=None if args.record is None else str(args.record))
    if not with_engine:
        return AppConfig(capture=capture, output=output, control=control).validate()
    return AppConfig(
        engine=choose_engine(args),
        cache=CacheConfig(enabled=args.cache, threshold=args.cache_threshold,
                          refresh_every_n=args.cache_refresh),
        capture=capture, output=output, guard=guard_config(args), control=control,
    ).validate()


def unused_settings(args: argparse.Namespace, guard_mode: str, cache_on: bool) -> list[str]:
    """The cache and guard options typed (``args.typed``) that the settings they tune do not
    read: cache tuning with the cache off, ``--guard-hold-frames`` without the hold guard.
    ``live`` and ``presets save`` refuse them alike (a preset stored them to be ignored)."""
    typed: frozenset[str] = args.typed
    problems: list[str] = []
    if not cache_on:
        tuned = [f"--cache-{name} {getattr(args, dest):g}" for name, dest in
                 (("refresh", "cache_refresh"), ("threshold", "cache_threshold"))
                 if dest in typed]
        if tuned:
            problems.append(f"{', '.join(tuned)}: the cache is off (--no-cache)")
    if "guard_hold_frames" in typed and guard_mode != "hold":
        problems.append(f"--guard-hold-frames {args.guard_hold_frames}: only for "
                        f"--privacy-guard hold (the guard is {guard_mode})")
    return problems


def _refuse_unused_options(args: argparse.Namespace, preset: Preset | None) -> None:
    """Options that this session would accept and never use are refused, as `run` refuses
    video options for an image (a new user's trial: `--fps 10 --width 100` with `--video`
    recorded 640x360 at 30 fps, exit 0). Every option typed counts, whatever its value.

    Args:
        preset: the ``--preset`` given, whose guard and cache the session takes.

    Raises:
        ConfigError: naming each such option and why it does nothing here.
    """
    typed: frozenset[str] = args.typed
    problems: list[str] = []
    if args.video is not None:
        if args.loop and is_image_path(args.video):
            problems.append("--loop: a still photo as --video repeats until stopped")
        if "open_attempts" in typed:
            problems.append(f"--open-attempts {args.open_attempts}: only for a camera")
        # a file keeps its own size and rate; the virtual camera's format is the one use left
        sized = [f"--{name} {getattr(args, name):g}" for name in ("width", "height", "fps")
                 if name in typed]
        if sized and not args.virtual_cam:
            problems.append(f"{', '.join(sized)}: with --video they set only the virtual "
                            "camera's format (--virtual-cam); a file keeps its own size and "
                            "rate, its recording too")
    elif args.loop:
        problems.append("--loop: only for --video (a camera has no end)")
    guard = GuardConfig() if preset is None else preset.guard
    problems += unused_settings(args, args.privacy_guard or guard.mode,
                                args.cache if preset is None else preset.cache.enabled)
    if "control_host" in typed and args.control_port is None:
        problems.append(f"--control-host {args.control_host}: the control API is off without "
                        "--control-port")
    if problems:
        raise ConfigError("; ".join(problems))


def run_live(args: argparse.Namespace) -> int:
    """Run until Ctrl-C / SIGTERM, ``--duration``, the end of ``--video`` or a camera that cannot
    be opened; returns the exit code (1 when no frame was processed or the camera gave up).

    Raises:
        LivefuseError: unreadable source photo, no usable face, a missing model or bad
            settings (the CLI prints it, exit 2).
    """
    if args.record is not None:  # as the path is typed, before any photo is read
        from livefuse.io.paths import check_output
        from livefuse.io.sinks import RECORDING_SUFFIXES

        # an input first: "is the source photo itself" says more than "unsupported suffix"
        check_output(args.record, {"video input": args.video, "source photo": args.source,
                                   "reference photo": args.reference}, what="recording")
        if args.record.is_dir():
            raise ConfigError(f"recording '{args.record}' is a folder; give the recording a "
                              "file name (.mp4, .mkv or .mov)")
        if args.record.suffix.lower() not in RECORDING_SUFFIXES:
            raise ConfigError(f"recording '{args.record}': unsupported suffix "
                              f"'{args.record.suffix}': use .mp4, .mkv or .mov")
    if args.video is not None:
        # Path() has turned "http://host/x" into "http:/host/x" already
        scheme = str(args.video).split(":/", 1)[0].lower()
        if scheme in _STREAM_SCHEMES and ":/" in str(args.video):
            raise ConfigError(f"--video {args.video}: a network stream; --video takes a file")
        from livefuse.run import check_video_input

        # a damaged file or another file renamed .mp4: exit 2 now, as `run` says it, not
        # "gave up after 5 attempts" once the engine is built (a new user's trial)
        check_video_input(args.video)
    if (args.source is None) == (args.preset is None):
        raise ConfigError("give the source face photo (-s PHOTO) or a preset (--preset NAME), "
                          "one of the two")
    if args.preset is not None and settings_given(args):
        raise ConfigError(f"{' '.join(settings_given(args))}: --preset '{args.preset}' sets "
                          "the engine and cache settings; save a preset with them "
                          "(`livefuse presets save`) or leave --preset out")
    preset = None if args.preset is None else PresetStore().load(args.preset)
    _refuse_unused_options(args, preset)
    if preset is not None and args.reference is not None and args.control_port is None and \
            preset.engine.face_selector != "reference":
        # with the control API a later switch may go to a preset that swaps that person
        raise ConfigError(f"--reference {args.reference}: preset '{preset.name}' swaps "
                          f"faces by '{preset.engine.face_selector}', not the person in a "
                          "reference photo")
    # the photos before the engine is chosen: a damaged one is the first line, not one after
    # the engine's
    face = None if args.source is None else load_image(args.source, "source")
    reference = None if args.reference is None else load_image(args.reference, "reference")
    config = app_config(args, with_engine=args.preset is None)
    if args.virtual_cam:
        extras.require("vcam", "--virtual-cam")
    if args.metrics_port is not None:
        extras.require("metrics", "--metrics-port", module="prometheus_client")
    if args.preset is None and "detect_every" in args.typed and args.detect_every > 1 and \
            config.guard.mode != "off":
        # not refused: the control API may turn the guard off, and the interval is used then
        print(f"note: --detect-every {args.detect_every} waits while the privacy guard is on "
              f"({config.guard.mode}): the guard detects on every frame", file=sys.stderr)
    if not args.virtual_cam and args.record is None:
        print("note: no --virtual-cam and no --record: frames are processed and measured only",
              file=sys.stderr)
    if args.video is None:
        import cv2

        # OpenCV prints a block of probe warnings on every reopen attempt; the runner's
        # "[status] camera ..." line says the same once per attempt.
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)

    said: list[str] = []

    def say(line: str) -> None:
        # a camera retried N times fails N times alike: once is enough (the give-up line
        # counts the attempts)
        if (said and said[-1] == line) or line.startswith("giving up: "):
            return  # the give-up line is the error printed at the end
        said.append(line)
        print(f"[status] {line}", file=sys.stderr, flush=True)

    metrics = Metrics()
    session = Session(config, on_status=say, metrics=metrics)
    if reference is not None:  # before a preset that swaps the person in it is checked
        session.set_reference(reference)
    if args.preset is not None:
        preset = session.switch_preset(args.preset)  # builds the engine, checks the face
        guard = guard_config(args, preset.guard)
        if guard != preset.guard:
            session.set_guard(guard.mode, guard.hold_frames)
    if face is not None:
        session.set_source_face(face)  # a recording that is an input is refused here
    engine = session.prepare()  # a photo without a face or a bad model fails here
    for note in engine.source_notes:
        print(f"source: {note}", file=sys.stderr)
    for note in engine.reference_notes:
        print(f"reference: {note}", file=sys.stderr)
    if config.control.enabled:
        for name, why in session.preload_presets().items():
            print(f"preset {name}: " + ("ready" if why is None else why), file=sys.stderr)
        session.open_control()  # the port taken fails here, before any device opens
    server = None
    if args.metrics_port is not None:
        try:
            server = start_prometheus(metrics, args.metrics_port)
        except (RuntimeError, OSError) as exc:
            raise LivefuseError(f"--metrics-port {args.metrics_port}: {exc}") from exc
    stop = threading.Event()
    in_main = threading.current_thread() is threading.main_thread()
    old = {}
    if in_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.getsignal(sig)
            signal.signal(sig, lambda *_: stop.set())
    failed: str | None = None
    incomplete: str | None = None
    # said at the end, as `run` says it: the old file is kept until the new one is complete
    replaces = args.record is not None and os.path.lexists(args.record)  # a dangling link too
    try:
        session.start()
        # from the start of the stream, to the moment: the line each second woke the check too,
        # so --duration 0.5 ran a second (a new user's trial)
        t_next = time.monotonic() + 1.0
        t_end = None if args.duration is None else time.monotonic() + args.duration
        while not stop.wait(max(0.0, min(t_next, t_end or t_next) - time.monotonic())):
            if time.monotonic() >= t_next:
                t_next += 1.0
                snap = metrics.snapshot()
                if snap.frames_in or snap.frames_processed:  # no rows of zeros before a frame
                    print(snap.line(), flush=True)
            failed = session.capture_failed
            incomplete = session.source_incomplete
            if session.source_ended or failed or \
                    (t_end is not None and time.monotonic() >= t_end):
                break
    finally:
        session.stop(2.0)
        session.close_control()
        if server is not None:
            server.shutdown()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    processed = metrics.snapshot(memory=False).frames_processed
    print(f"frames processed: {processed}", flush=True)
    if args.record is not None and processed and not session.sink_errors:
        print(f"recording: {args.record}", flush=True)  # where it went, after the metrics
    if replaces and processed and not session.sink_errors:
        print(f"note: '{args.record}' was there before and has been replaced", flush=True)
    where = f"video '{args.video}'" if args.video is not None else \
        f"camera {config.capture.camera}"
    for why in session.sink_errors:  # a recording lost is never an exit 0
        print(f"livefuse: error: {why}", file=sys.stderr)
    if session.sink_errors:
        return 1
    camera = args.video is None  # the doctor's camera list helps a camera input only
    if failed:
        hint = " (`livefuse doctor` lists cameras)" if camera else ""
        print(f"livefuse: error: {failed}{hint}", file=sys.stderr)
        return 1
    if processed == 0:
        hint = "; `livefuse doctor` lists cameras" if camera else ""
        why = incomplete or f"{where} delivered none (see the [status] lines{hint})"
        print(f"livefuse: error: no frame was processed: {why}", file=sys.stderr)
        return 1
    if incomplete is not None:
        print(f"livefuse: {incomplete}; the output holds the frames before it "
              f"(exit status {EXIT_INCOMPLETE})", file=sys.stderr)
        return EXIT_INCOMPLETE
    return 0


__all__ = ["add_guard_args", "add_parser", "add_settings_args", "app_config", "guard_config",
           "run_live", "settings_given", "unused_settings"]
