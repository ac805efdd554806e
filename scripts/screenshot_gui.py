"""Screenshot of the desktop app on a video input, saved to docs/screenshot.png.

Run under a virtual X server (a real window, not the offscreen platform):

    xvfb-run -a -s "-screen 0 1400x860x24" python scripts/screenshot_gui.py [OUT.png]

Debian packages needed for Xvfb + Qt's xcb plugin: xvfb xauth libxcb-icccm4 libxcb-keysyms1
libxcb-cursor0. The input is a clip with camera motion over insightface's t1.jpg, the source face
is the astronaut (skimage), the engine the offline classic one.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from livefuse.imaging import load_image, save_image
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.samples import astronaut, insightface_image


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot.png")
    work = Path(tempfile.mkdtemp(prefix="livefuse-shot-"))
    photo = load_image(insightface_image("t1.jpg")).bgr
    clip = write_clip(motion_clip(photo, (640, 480), frames=120, centre=(640, 330),
                                  face_px=110, face_width=120), work / "t1.mp4", audio=False)
    source = save_image(work / "astronaut.png", astronaut())

    from livefuse_ui.app import _prepare_qt_environment

    _prepare_qt_environment()
    from livefuse_ui.main_window import MainWindow
    from PySide6.QtWidgets import QApplication

    app = QApplication(sys.argv[:1])
    win = MainWindow(config_path=work / "settings.toml")
    win.set_video(clip)
    win.mirror.setChecked(False)
    win.picker.source_changed.connect(lambda *_: win.start())
    win.picker.load(source)
    win.resize(1360, 820)
    win.show()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
        snap = win.last_metrics
        if win.preview.frames_shown >= 60 and snap is not None and win.metrics_updates >= 6:
            break
    else:
        print("no frames within 60 s:", win.statuses[-5:], file=sys.stderr)
        return 1
    for _ in range(20):  # let the last frame and overlay paint
        app.processEvents()
        time.sleep(0.01)
    image = win.grab().toImage()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.png")
    if not image.save(str(tmp)):
        print(f"cannot write {tmp}", file=sys.stderr)
        return 1
    os.replace(tmp, out)
    print(f"saved {out} ({image.width()}x{image.height()}); {win.last_metrics.line()}")
    win.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
