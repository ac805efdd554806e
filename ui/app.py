"""Entry points: ``livefuse`` (no arguments) and ``livefuse gui`` open the main window.

``livefuse.cli`` imports this module lazily inside its handler, so ``import livefuse`` never needs
PySide6; Qt itself is imported only inside :func:`launch`.

The process ends in a fixed order, so that no thread reports to a Qt object being destroyed and
Qt's objects are not left to the interpreter's teardown (which deleted the window's widgets from
PySide's atexit hook and crashed there): the window stops the session and joins its threads, the
thread pool's jobs finish, the window is deleted, then the application.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from livefuse.extras import install_hint

NO_DISPLAY = ("livefuse: error: no display: the desktop app needs a graphical session; use "
              "`livefuse live` for a headless session (or set QT_QPA_PLATFORM=offscreen)")


def _prepare_qt_environment() -> None:
    # opencv-python (the GUI build, required by insightface) points QT_QPA_PLATFORM_PLUGIN_PATH at
    # its own bundled Qt plugins when cv2 is imported; PySide6 then loads cv2's xcb plugin, which
    # is built against another Qt and fails under X. PySide6 finds its own plugins without it.
    os.environ.pop("QT_QPA_PLATFORM_PLUGIN_PATH", None)
    os.environ.pop("QT_QPA_FONTDIR", None)


def no_display(environ: dict[str, str] | os._Environ[str] = os.environ,
               platform: str = sys.platform) -> bool:
    """Whether Qt would find no display: on X11/Wayland systems (not Windows or macOS), none of
    DISPLAY, WAYLAND_DISPLAY or QT_QPA_PLATFORM is set. Qt would then abort with a hint about
    libxcb-cursor0 that sends users after a library they have."""
    if platform.startswith(("win", "darwin", "cygwin")):
        return False
    return not any(environ.get(k) for k in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


class QuitOnSignals:
    """SIGINT and SIGTERM close the window like the user would (GUI thread).

    While Qt's event loop waits in C, Python's own signal handlers cannot run (Ctrl-C then
    surfaced later as a KeyboardInterrupt inside some slot, and the app kept running). So the
    signal also writes to a socket (``signal.set_wakeup_fd``) that a ``QSocketNotifier`` watches:
    the loop wakes up, runs the Python handler, and the window closes normally. A second
    signal while closing gets the default action (a stuck quit can still be killed).

    Attributes:
        received: the first signal number, or ``None``.
    """

    SIGNALS = tuple(s for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None))
                    if s is not None)

    def __init__(self, window: Any) -> None:
        from PySide6.QtCore import QSocketNotifier

        self.received: int | None = None
        self._window = window
        self._old: dict[int, Any] = {}
        self._rsock, self._wsock = socket.socketpair()
        for s in (self._rsock, self._wsock):
            s.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._wsock.fileno(), warn_on_full_buffer=False)
        self._notifier = QSocketNotifier(self._rsock.fileno(), QSocketNotifier.Type.Read)
        self._notifier.activated.connect(self._drain)
        for sig in self.SIGNALS:
            self._old[sig] = signal.signal(sig, self._handle)

    def _drain(self, *_: object) -> None:
        # Running this Python slot is what lets the interpreter call _handle; the bytes
        # themselves only woke the loop.
        try:
            while self._rsock.recv(64):
                pass
        except OSError:
            pass

    def _handle(self, signum: int, _frame: object) -> None:
        if self.received is not None:  # a second one: the user means it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.received = signum
        from PySide6.QtCore import QTimer

        # Not from inside the handler (it may interrupt any slot): from the loop, next.
        QTimer.singleShot(0, self._window.close)

    @property
    def exit_code(self) -> int | None:
        """128 + the signal, as the command line exits: 130 after SIGINT (Ctrl-C), 143 after
        SIGTERM; ``None`` without a signal."""
        if self.received is None:
            return None
        return 128 + int(self.received)

    def uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        signal.set_wakeup_fd(self._old_fd)
        self._notifier.setEnabled(False)
        self._notifier.deleteLater()
        self._rsock.close()
        self._wsock.close()


def launch(config_path: Path | None = None, video: Path | None = None,
           source: Path | None = None, start: bool = False, argv: list[str] | None = None) -> int:
    """Open the main window and run the event loop until it closes.

    Args:
        config_path: settings file (the user config dir's ``settings.toml`` by default).
        video: use this video file as the input (looped).
        source: load this source face photo.
        start: press Start as soon as the source face is ready.

    Returns:
        The exit code: the event loop's, 130 after SIGINT, 143 after SIGTERM (as the command
        line), 2 without a display.
    """
    import importlib.util

    if importlib.util.find_spec("PySide6") is None:
        # before the display check: a user without either met them one per attempt
        raise ModuleNotFoundError("No module named 'PySide6'", name="PySide6")
    if no_display():
        print(NO_DISPLAY, file=sys.stderr)
        return 2
    from livefuse.models.catalog import models_dir

    # a $LIVEFUSE_MODELS_DIR naming a file: refused here (ConfigError, one line, exit 2), as
    # every command refuses it, not in the models dialog's slot as a traceback
    models_dir()
    _prepare_qt_environment()
    from livefuse_ui.main_window import MainWindow
    from livefuse_ui.worker import wait_for_jobs
    from PySide6.QtWidgets import QApplication

    existing = QApplication.instance()
    app: Any = existing or QApplication(argv or sys.argv[:1])
    app.setApplicationName("livefuse")
    win = MainWindow(config_path)
    if video is not None:
        win.set_video(video)
    if source is not None:
        win.picker.load(source)
    if start:
        def _start_when_ready(*_: object) -> None:
            win.picker.source_changed.disconnect(_start_when_ready)
            win.start()

        win.picker.source_changed.connect(_start_when_ready)
    quitter = QuitOnSignals(win)
    win.show()
    try:
        code = int(app.exec())
    finally:
        quitter.uninstall()
        close_app(app, win, own_app=existing is None, wait_for_jobs=wait_for_jobs)
    return quitter.exit_code if quitter.exit_code is not None else code


def close_app(app: Any, win: Any, own_app: bool, wait_for_jobs: Any) -> None:
    """The end of the process's Qt life, in order: session stopped and joined (idempotent),
    thread-pool jobs finished, the window deleted, then the application."""
    from PySide6.QtCore import QCoreApplication, QEvent

    win.shutdown()
    wait_for_jobs(30_000)  # a model status check hashes 500 MB files; downloads were cancelled
    win.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    if own_app:
        app.shutdown()


def _handler(args: argparse.Namespace) -> int:
    # absolute: the settings keep them, and the next launch may start in another folder
    video = None if args.video is None else args.video.absolute()
    source = None if args.source is None else args.source.absolute()
    return launch(args.config, video, source, args.start)


def add_parser(sub: Any) -> None:
    """Register ``livefuse gui`` on the CLI's subparsers."""
    p = sub.add_parser(
        "gui", help="open the desktop app (also what `livefuse` alone does)",
        description="Open the desktop app: pick a source photo and a camera or video, see the "
                    "swapped stream with its fps, latency and VRAM, and send it to a virtual "
                    "camera. Needs a graphical session and the gui and vcam extras: "
                    f"{install_hint('gui', 'vcam')}.")
    p.add_argument("--config", type=Path, default=None,
                   help="settings file (default: settings.toml in the user config dir)")
    p.add_argument("--source", type=Path, default=None, help="source face photo to load")
    p.add_argument("--video", type=Path, default=None, help="use a video file as the input")
    p.add_argument("--start", action="store_true", help="start as soon as the source is ready")
    p.set_defaults(func=_handler)


def main(argv: list[str] | None = None) -> int:
    """``python -m livefuse_ui.app [gui options]``."""
    parser = argparse.ArgumentParser(prog="livefuse-gui", allow_abbrev=False)
    sub = parser.add_subparsers()
    add_parser(sub)
    args = parser.parse_args(["gui", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
