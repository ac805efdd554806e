"""A preset switch from the app: Ctrl+N in the window vs the control API's path, on one session.

The desktop app (offscreen Qt) runs the classic engine on a one-face clip
(livefuse.testing.guard_clip's first 24 frames, looped, paced at 30 fps) with two presets of the
same models, prepared at Start as the app does (``Session.preload_presets``). It switches between
them at random moments, alternately by a Ctrl+N key press in the window and by
``Session.switch_preset`` from another thread (what the control API's request thread does), so
the two paths are measured side by side under the same load. For each switch:

* *old frames*: frames the engine processed between the request and the switch's commit (the
  frame in flight when the request came);
* *commit ms*: request -> the inference thread took the switch at a frame boundary;
* *shown ms*: request -> the window's preset list marks the new preset (Ctrl+N: when the
  control thread reports the switch done; the control API's path: the window's revision poll,
  every 500 ms).

Usage: QT_QPA_PLATFORM=offscreen python benchmarks/bench_gui_switch.py [--switches 12] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from livefuse.bench import git_commit, machine
from livefuse.config import LIVE_DEFAULTS, AppConfig, CaptureConfig
from livefuse.engine import Engine, PreparedSource
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.imaging import load_image, save_image
from livefuse.io.sources import FramesSource, Source
from livefuse.presets import Preset, PresetSource, PresetStore
from livefuse.samples import astronaut, insightface_image
from livefuse.testing.guard_clip import guard_clip
from livefuse.types import Face, Frame, FramePacket, StagedFrame

TIMEOUT_S = 120.0


class _Timed(Engine):
    """The classic engine, noting when each source is taken and how many frames it ran."""

    frames = 0
    taken: ClassVar[list[tuple[float, int]]] = []

    def use_source(self, prepared: PreparedSource) -> Face:
        face = super().use_source(prepared)
        _Timed.taken.append((time.perf_counter(), _Timed.frames))
        return face

    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False) -> FramePacket:
        packet = super().process(frame, index, t_capture_ns, strict, in_place)
        _Timed.frames += 1
        return packet


def _wait(app: Any, cond: Any, timeout: float = TIMEOUT_S) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError("the app did not get there in time")
        app.processEvents()
        time.sleep(0.002)


def _pause(app: Any, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.002)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--switches", type=int, default=12, help="switches per path")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from livefuse_ui.app import close_app
    from livefuse_ui.main_window import MainWindow
    from livefuse_ui.worker import wait_for_jobs
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    work = Path(tempfile.mkdtemp(prefix="livefuse-gui-switch-"))
    store = PresetStore(work / "presets")
    photos = [save_image(work / "a.png", astronaut()),
              Path(shutil.copy(insightface_image("Tom_Hanks_54745.png"), work / "b.png"))]
    for name, photo in zip(("A", "B"), photos, strict=True):
        store.save(Preset.of(name, AppConfig(engine=LIVE_DEFAULTS.engine),
                             PresetSource(path=str(photo))))
    frames = guard_clip(load_image(insightface_image("t1.jpg")).bgr, frames=24).frames
    analyser = DlibFaceAnalyser()

    def source(c: CaptureConfig) -> Source:
        return FramesSource(frames, fps=30.0, name="guard clip")

    app = QApplication.instance() or QApplication([])
    # the engine uses the window's serialized analyser: the picker detects on the photo a
    # switch brings while the engine detects on frames, and dlib must not be entered twice
    win = MainWindow(config_path=work / "settings.toml", analyser=analyser,
                     source_factory=source, models_directory=work / "models",
                     engine_factory=lambda c: _Timed(c.engine, analyser=win.analyser.get(),
                                                     cache=c.cache))
    win.show()
    win.picker.load(photos[0])
    _wait(app, lambda: win.picker.face is not None)
    win.input_kind.setCurrentText("test pattern")  # the source factory gives the clip
    win.start()
    _wait(app, lambda: win.preview.frames_shown > 30 and win.idle)
    session, rng = win.session, random.Random(args.seed)
    rows: dict[str, dict[str, list[float]]] = {}
    try:
        for i in range(2 * args.switches):
            path = "Ctrl+N" if i % 2 == 0 else "control API path"
            name = "B" if session.active_preset != "B" else "A"
            _pause(app, rng.uniform(0.2, 0.6))
            taken = len(_Timed.taken)
            f0, t0 = _Timed.frames, time.perf_counter()
            if path == "Ctrl+N":
                win.activateWindow()
                QTest.keyClick(win.preview, getattr(Qt.Key, f"Key_{'AB'.index(name) + 1}"),
                               Qt.KeyboardModifier.ControlModifier)
            else:
                threading.Thread(target=session.switch_preset, args=(name,)).start()
            _wait(app, lambda n=name, k=taken: len(_Timed.taken) > k and
                  win.presets.active == n and session.active_preset == n)
            t_shown = time.perf_counter()
            t_commit, f_commit = _Timed.taken[-1]
            row = rows.setdefault(path, {"old": [], "commit": [], "shown": []})
            row["old"].append(f_commit - f0)
            row["commit"].append((t_commit - t0) * 1e3)
            row["shown"].append((t_shown - t0) * 1e3)
        snap = session.metrics.snapshot()
    finally:
        close_app(app, win, own_app=True, wait_for_jobs=wait_for_jobs)
    fps = snap.processed_fps
    print(f"commit {git_commit()}, {machine()}; {fps:.1f} fps processed (a frame every "
          f"{1e3 / fps if fps else float('nan'):.0f} ms)\n")
    print("| path | switches | old frames (max) | request -> commit ms p50 / max | "
          "request -> list shows it ms p50 / max |")
    print("|---|---:|---:|---:|---:|")
    for path, r in rows.items():
        print(f"| {path} | {len(r['commit'])} | {max(r['old']):.0f} | "
              f"{statistics.median(r['commit']):.0f} / {max(r['commit']):.0f} | "
              f"{statistics.median(r['shown']):.0f} / {max(r['shown']):.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
