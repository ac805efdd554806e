"""``livefuse live``: a headless live session (camera or video file in; virtual camera and/or
recording out) printing a metrics line every second until Ctrl-C or ``--duration``."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from livefuse.cli_args import add_engine_args, engine_config
from livefuse.config import AppConfig, CacheConfig
from livefuse.errors import LivefuseError, VideoError
from livefuse.imaging import load_image
from livefuse.io.sinks import RecorderSink, Sink, VirtualCameraSink
from livefuse.io.sources import CameraSource, Source, VideoFileSource
from livefuse.live import LiveRunner, default_engine_factory
from livefuse.metrics import Metrics, start_prometheus


def add_parser(sub: Any) -> None:
    """Register the ``live`` subcommand on an ``argparse`` subparsers object."""
    p = sub.add_parser("live", help="live face swap from a camera or video to a virtual camera")
    p.add_argument("--source", "-s", required=True, type=Path,
                   help="photo of the source face")
    inp = p.add_mutually_exclusive_group()
    inp.add_argument("--camera", default="0", help="camera index or device path (default 0)")
    inp.add_argument("--video", type=Path, help="a video file standing in for the camera")
    p.add_argument("--loop", action="store_true", help="loop --video")
    p.add_argument("--width", type=int, default=1280, help="requested camera width (px)")
    p.add_argument("--height", type=int, default=720, help="requested camera height (px)")
    p.add_argument("--fps", type=float, default=30.0, help="requested camera / output fps")
    p.add_argument("--virtual-cam", action="store_true", help="send frames to a virtual camera")
    p.add_argument("--record", type=Path, help="also record the output (.mp4, .mkv, .mov)")
    p.add_argument("--cache", action=argparse.BooleanOptionalAction, default=True,
                   help="pose-similarity cache (default on)")
    p.add_argument("--cache-refresh", type=int, default=CacheConfig.refresh_every_n,
                   help="force a fresh swap after N reused frames")
    p.add_argument("--cache-threshold", type=float, default=CacheConfig.threshold,
                   help="similarity (0..1] at or above which a cached swap is reused")
    add_engine_args(p, detect_every=3, face_selector="one")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT")
    p.add_argument("--duration", type=float, help="stop after S seconds")
    p.set_defaults(func=run_live)


def _source(args: argparse.Namespace) -> Source:
    if args.video is not None:
        return VideoFileSource(args.video, loop=args.loop)
    dev: int | str = int(args.camera) if str(args.camera).isdigit() else args.camera
    return CameraSource(dev, args.width, args.height, args.fps)


def run_live(args: argparse.Namespace) -> int:
    """Run until Ctrl-C, ``--duration`` or the end of ``--video``; returns the exit code.

    Raises:
        LivefuseError: unreadable source photo or bad settings (the CLI prints it, exit 2).
    """
    config = AppConfig(
        engine=engine_config(args),
        cache=CacheConfig(enabled=args.cache, threshold=args.cache_threshold,
                          refresh_every_n=args.cache_refresh)).validate()
    face = load_image(args.source)
    if args.video is not None and not args.video.is_file():
        raise VideoError(args.video, "file not found" if not args.video.exists() else
                         "is not a file")
    if args.virtual_cam and importlib.util.find_spec("pyvirtualcam") is None:
        raise LivefuseError("--virtual-cam needs pyvirtualcam: pip install 'livefuse[vcam]'")
    if not args.virtual_cam and args.record is None:
        print("note: no --virtual-cam and no --record: frames are processed and measured only",
              file=sys.stderr)
    if args.video is None:
        import cv2

        # OpenCV prints a block of probe warnings on every reopen attempt; the runner's
        # "[status] camera ..." line says the same once per attempt.
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    engine = default_engine_factory(config)
    engine.set_source(face)  # a photo without a face fails here, before anything opens

    def say(line: str) -> None:
        print(f"[status] {line}", file=sys.stderr, flush=True)

    metrics = Metrics()
    sinks: list[Sink] = []
    if args.virtual_cam:
        sinks.append(VirtualCameraSink(args.width, args.height, args.fps, on_status=say))
    if args.record is not None:
        sinks.append(RecorderSink(args.record, fps=args.fps))
    server = None
    if args.metrics_port is not None:
        try:
            server = start_prometheus(metrics, args.metrics_port)
        except (RuntimeError, OSError) as exc:
            raise LivefuseError(f"--metrics-port {args.metrics_port}: {exc}") from exc
    runner = LiveRunner(engine, _source(args), sinks, config, on_status=say, metrics=metrics)
    stop = threading.Event()
    old = signal.getsignal(signal.SIGINT)
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    runner.start()
    t_end = None if args.duration is None else time.monotonic() + args.duration
    try:
        while not stop.wait(1.0):
            print(metrics.snapshot().line(), flush=True)
            if runner.source_ended or (t_end is not None and time.monotonic() >= t_end):
                break
    finally:
        runner.stop(1.0)
        for s in sinks:
            with contextlib.suppress(Exception):
                s.close()
        if server is not None:
            server.shutdown()
        if in_main:
            signal.signal(signal.SIGINT, old)
    processed = metrics.snapshot(memory=False).frames_processed
    print(f"frames processed: {processed}", flush=True)
    if processed == 0:
        where = f"video '{args.video}'" if args.video is not None else f"camera {args.camera}"
        print(f"livefuse: error: no frame was processed: {where} delivered none "
              "(see the [status] lines; `livefuse doctor` lists cameras)", file=sys.stderr)
        return 1
    return 0


__all__ = ["add_parser", "run_live"]
