"""``livefuse live``: a headless live session (camera or video file in; virtual camera and/or
recording out) printing a metrics line every second until Ctrl-C or ``--duration``. It drives the
same :class:`~livefuse.session.Session` as the desktop app."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from livefuse import extras
from livefuse.cli_args import HelpFormatter, add_engine_args, choose_engine
from livefuse.config import LIVE_DEFAULTS, AppConfig, CacheConfig, CaptureConfig, OutputConfig
from livefuse.errors import LivefuseError, VideoError
from livefuse.imaging import load_image
from livefuse.metrics import Metrics, start_prometheus
from livefuse.session import Session

OPEN_ATTEMPTS = 5
"""``livefuse live`` gives up on a camera after this many failed opens in a row (about 12 s
with the capture's back-off); the app keeps retrying instead."""


def add_parser(sub: Any) -> None:
    """Register the ``live`` subcommand on an ``argparse`` subparsers object."""
    p = sub.add_parser(
        "live", help="live face swap from a camera or video to a virtual camera",
        description="Headless live session: camera (or a video file) in; virtual camera "
                    "and/or a recording out. Prints a metrics line every second; Ctrl-C stops.",
        formatter_class=HelpFormatter)
    p.add_argument("--source", "-s", required=True, type=Path,
                   help="photo of the source face")
    inp = p.add_mutually_exclusive_group()
    inp.add_argument("--camera", default="0", help="camera index or device path")
    inp.add_argument("--video", type=Path, help="a video file standing in for the camera")
    p.add_argument("--loop", action="store_true", help="loop --video")
    cap, cache = LIVE_DEFAULTS.capture, LIVE_DEFAULTS.cache
    p.add_argument("--width", type=int, default=cap.width, help="requested camera width (px)")
    p.add_argument("--height", type=int, default=cap.height,
                   help="requested camera height (px)")
    p.add_argument("--fps", type=float, default=cap.fps, help="requested camera / output fps")
    p.add_argument("--open-attempts", type=int, default=OPEN_ATTEMPTS,
                   help="give up after this many failed camera opens in a row")
    p.add_argument("--virtual-cam", action="store_true", help="send frames to a virtual camera")
    p.add_argument("--record", type=Path, help="also record the output (.mp4, .mkv, .mov)")
    p.add_argument("--cache", action=argparse.BooleanOptionalAction, default=cache.enabled,
                   help="pose-similarity cache "
                        f"(default: {'on' if cache.enabled else 'off, --cache turns it on'})")
    p.add_argument("--cache-refresh", type=int, default=cache.refresh_every_n,
                   help="force a fresh swap after N reused frames")
    p.add_argument("--cache-threshold", type=float, default=cache.threshold,
                   help="similarity (0..1] at or above which a cached swap is reused")
    add_engine_args(p, LIVE_DEFAULTS.engine)
    p.add_argument("--metrics-port", type=int,
                   help="serve Prometheus metrics on 127.0.0.1:PORT (needs the metrics extra)")
    p.add_argument("--duration", type=float, help="stop after S seconds")
    p.set_defaults(func=run_live)


def app_config(args: argparse.Namespace) -> AppConfig:
    """The session's settings from ``livefuse live``'s flags.

    Raises:
        ConfigError: a value is out of range.
    """
    capture = CaptureConfig(
        kind="video" if args.video is not None else "camera", camera=str(args.camera),
        video=None if args.video is None else str(args.video), loop=args.loop,
        width=args.width, height=args.height, fps=args.fps,
        max_open_attempts=args.open_attempts)
    return AppConfig(
        engine=choose_engine(args),
        cache=CacheConfig(enabled=args.cache, threshold=args.cache_threshold,
                          refresh_every_n=args.cache_refresh),
        capture=capture,
        output=OutputConfig(virtual_camera=args.virtual_cam,
                            record=None if args.record is None else str(args.record)),
    ).validate()


def run_live(args: argparse.Namespace) -> int:
    """Run until Ctrl-C / SIGTERM, ``--duration``, the end of ``--video`` or a camera that cannot
    be opened; returns the exit code (1 when no frame was processed or the camera gave up).

    Raises:
        LivefuseError: unreadable source photo, no usable face, a missing model or bad
            settings (the CLI prints it, exit 2).
    """
    if args.video is not None and not args.video.is_file():
        raise VideoError(args.video, "file not found" if not args.video.exists() else
                         "is not a file")
    config = app_config(args)
    face = load_image(args.source)
    reference = None if args.reference is None else load_image(args.reference)
    if args.virtual_cam:
        extras.require("vcam", "--virtual-cam")
    if args.metrics_port is not None:
        extras.require("metrics", "--metrics-port", module="prometheus_client")
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
    session.set_source_face(face)  # a recording that is an input is refused here
    if reference is not None:
        session.set_reference(reference)
    engine = session.prepare()  # a photo without a face or a bad model fails here
    for note in engine.source_notes:
        print(f"source: {note}", file=sys.stderr)
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
    t_end = None if args.duration is None else time.monotonic() + args.duration
    failed: str | None = None
    try:
        session.start()
        while not stop.wait(1.0):
            snap = metrics.snapshot()
            if snap.frames_in or snap.frames_processed:  # no rows of zeros before a frame
                print(snap.line(), flush=True)
            failed = session.capture_failed
            if session.source_ended or failed or \
                    (t_end is not None and time.monotonic() >= t_end):
                break
    finally:
        session.stop(2.0)
        if server is not None:
            server.shutdown()
        for sig, handler in old.items():
            signal.signal(sig, handler)
    processed = metrics.snapshot(memory=False).frames_processed
    print(f"frames processed: {processed}", flush=True)
    where = f"video '{args.video}'" if args.video is not None else f"camera {args.camera}"
    if failed:
        print(f"livefuse: error: {failed} (`livefuse doctor` lists cameras)", file=sys.stderr)
        return 1
    if processed == 0:
        print(f"livefuse: error: no frame was processed: {where} delivered none "
              "(see the [status] lines; `livefuse doctor` lists cameras)", file=sys.stderr)
        return 1
    return 0


__all__ = ["add_parser", "app_config", "run_live"]
