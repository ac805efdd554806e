"""Entry points: ``livefuse`` (no arguments) and ``livefuse gui`` open the main window.

``livefuse.cli`` imports this module lazily inside its handler, so ``import livefuse`` never needs
PySide6.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def _prepare_qt_environment() -> None:
    # opencv-python (the GUI build, required by insightface) points QT_QPA_PLATFORM_PLUGIN_PATH at
    # its own bundled Qt plugins when cv2 is imported; PySide6 then loads cv2's xcb plugin, which
    # is built against another Qt and fails under X. PySide6 finds its own plugins without it.
    os.environ.pop("QT_QPA_PLATFORM_PLUGIN_PATH", None)
    os.environ.pop("QT_QPA_FONTDIR", None)


def launch(config_path: Path | None = None, video: Path | None = None,
           source: Path | None = None, start: bool = False, argv: list[str] | None = None) -> int:
    """Open the main window and run the event loop until it closes.

    Args:
        config_path: settings file (the user config dir's ``settings.toml`` by default).
        video: use this video file as the input (looped).
        source: load this source face photo.
        start: press Start as soon as the source face is ready.

    Returns:
        The Qt event loop's exit code.
    """
    _prepare_qt_environment()
    from livefuse_ui.main_window import MainWindow
    from PySide6.QtWidgets import QApplication

    app: Any = QApplication.instance() or QApplication(argv or sys.argv[:1])
    app.setApplicationName("livefuse")
    win = MainWindow(config_path)
    if video is not None:
        win.set_video(video)
    if source is not None:
        win.picker.load(source)
    if start:
        def _start_when_ready(*_: object) -> None:
            win.start()
            win.picker.source_changed.disconnect(_start_when_ready)

        win.picker.source_changed.connect(_start_when_ready)
    win.show()
    return int(app.exec())


def _handler(args: argparse.Namespace) -> int:
    return launch(args.config, args.video, args.source, args.start)


def add_parser(sub: Any) -> None:
    """Register ``livefuse gui`` on the CLI's subparsers."""
    p = sub.add_parser("gui", help="open the desktop app (also what `livefuse` alone does)")
    p.add_argument("--config", type=Path, default=None,
                   help="settings file (default: settings.toml in the user config dir)")
    p.add_argument("--source", type=Path, default=None, help="source face photo to load")
    p.add_argument("--video", type=Path, default=None, help="use a video file as the input")
    p.add_argument("--start", action="store_true", help="start as soon as the source is ready")
    p.set_defaults(func=_handler)


def main(argv: list[str] | None = None) -> int:
    """``python -m livefuse_ui.app [gui options]``."""
    parser = argparse.ArgumentParser(prog="livefuse-gui")
    sub = parser.add_subparsers()
    add_parser(sub)
    args = parser.parse_args(["gui", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
