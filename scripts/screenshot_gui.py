"""Screenshot of the desktop app on a video input, saved to docs/screenshot.png, and of the
whole settings column (it scrolls in the window) beside it, as docs/screenshot-settings.png.
With ``--stream``: the app on stream, three presets in its list (the one in use switched to
as Ctrl+1 does), the privacy guard on (blur) and the control API serving, saved to
docs/screenshot-stream.png (the window only).

Run under a virtual X server (a real window, not the offscreen platform):

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_gui.py [--stream] [OUT.png]

Debian packages needed for Xvfb + Qt's xcb plugin: xvfb xauth libxcb-icccm4 libxcb-keysyms1
libxcb-cursor0. The input is a clip with camera motion over insightface's t1.jpg, the source face
is the astronaut (skimage), the engine the offline classic one. The app is driven from its own
event loop and ends like ``livefuse gui`` does (livefuse_ui.app.close_app), so the script exits
0 with nothing left to crash at interpreter exit.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from livefuse.imaging import load_image, save_image
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.samples import astronaut, insightface_image

TIMEOUT_S = 120.0  # generous: the machine may be shared
FRAMES = 60  # frames shown before the shot, so the metrics overlay has settled


def _save(image: object, out: Path) -> bool:
    """Write a QImage atomically (temp file, then rename)."""
    tmp = out.with_name(out.name + ".tmp.png")
    if not image.save(str(tmp)):  # type: ignore[attr-defined]
        return False
    os.replace(tmp, out)
    return True


def _stream_setup(work: Path, source: Path) -> None:
    """Presets beside the settings file (the app's presets folder), and settings with the
    privacy guard on and the control API serving."""
    from livefuse.config import LIVE_DEFAULTS, ControlConfig, GuardConfig, save_config
    from livefuse.presets import Preset, PresetSource, PresetStore

    store = PresetStore(work / "presets")
    hanks = save_image(work / "hanks.png", load_image(insightface_image("Tom_Hanks_54745.png")).bgr)
    for name, photo, mode in (("Astronaut", source, "blur"), ("Hanks", hanks, "hold"),
                              ("Just chatting", source, "off")):
        guard = GuardConfig(mode=mode)
        store.save(Preset.of(name, replace(LIVE_DEFAULTS, guard=guard), PresetSource(str(photo))))
    save_config(replace(LIVE_DEFAULTS, guard=GuardConfig(mode="blur"),
                        control=ControlConfig(enabled=True, port=0)), work / "settings.toml")


def main() -> int:
    args = sys.argv[1:]
    stream = "--stream" in args
    args = [a for a in args if a != "--stream"]
    default = "docs/screenshot-stream.png" if stream else "docs/screenshot.png"
    out = Path(args[0] if args else default)
    work = Path(tempfile.mkdtemp(prefix="livefuse-shot-"))
    photo = load_image(insightface_image("t1.jpg")).bgr
    clip = write_clip(motion_clip(photo, (640, 480), frames=120, centre=(640, 330),
                                  face_px=110, face_width=120), work / "t1.mp4", audio=False)
    source = save_image(work / "astronaut.png", astronaut())
    if stream:
        _stream_setup(work, source)

    from livefuse_ui.app import _prepare_qt_environment, close_app

    _prepare_qt_environment()
    from livefuse_ui.main_window import MainWindow
    from livefuse_ui.worker import wait_for_jobs
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication(sys.argv[:1])
    win = MainWindow(config_path=work / "settings.toml")
    win.set_video(clip)

    def start_once(*_: object) -> None:
        win.picker.source_changed.disconnect(start_once)
        win.start()

    win.picker.source_changed.connect(start_once)
    win.picker.load(source)
    win.resize(1360, 860)  # the whole settings column shows on the 1400x900 screen
    win.show()

    result: dict[str, str] = {}
    deadline = time.monotonic() + TIMEOUT_S
    settle = {"polls": 0}
    switch = {"asked": not stream, "at": 0}

    def poll() -> None:
        snap = win.last_metrics
        ready = win.preview.frames_shown >= FRAMES + switch["at"] and snap is not None \
            and win.metrics_updates >= 6
        if ready and not switch["asked"]:
            switch["asked"], switch["at"] = True, win.preview.frames_shown
            win.switch_to_number(win.presets.names().index("Astronaut") + 1)  # as Ctrl+N
            return
        if stream:  # the window follows the switch: the list, the settings, the photo
            ready = ready and win.idle and win.session.active_preset == "Astronaut"
        if ready:
            settle["polls"] += 1
            if settle["polls"] < 3:  # let the last frame and the overlay paint
                return
            image = win.grab().toImage()
            column = win.side_scroll.widget().grab().toImage()  # every setting, unscrolled
            side = out.with_name(f"{out.stem}-settings{out.suffix}")
            out.parent.mkdir(parents=True, exist_ok=True)
            saved = [_save(image, out), stream or _save(column, side)]
            also = "" if stream else f" and {side} ({column.width()}x{column.height()})"
            if all(saved):
                result["ok"] = (f"saved {out} ({image.width()}x{image.height()}){also}; "
                                f"{snap.line() if snap else ''}")
            else:
                result["error"] = f"cannot write {out}" + ("" if stream else f" or {side}")
        elif time.monotonic() > deadline:
            result["error"] = f"no frames within {TIMEOUT_S:.0f} s: {win.statuses[-5:]}"
        else:
            return
        timer.stop()
        win.close()  # the last window: the event loop ends

    timer = QTimer()
    timer.setInterval(100)
    timer.timeout.connect(poll)
    timer.start()
    app.exec()
    timer.stop()
    close_app(app, win, own_app=True, wait_for_jobs=wait_for_jobs)
    if "ok" in result:
        print(result["ok"])
        return 0
    print(result.get("error", "the window closed early"), file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
