"""The desktop app as a process (``python -m livefuse gui``, offscreen): SIGINT and SIGTERM quit it
cleanly while frames flow, and without a display it says so in one line instead of letting Qt
abort."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

import livefuse_ui
from livefuse_ui.app import NO_DISPLAY, no_display

import livefuse
from livefuse.imaging import load_image, save_image
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.samples import astronaut, insightface_image

FIRST_FRAME = "preview: first frame"
QUIT_LINE = "quit: session stopped, threads joined, settings saved"
START_TIMEOUT_S = 180.0  # python + Qt + dlib start-up on a loaded 2-core machine
QUIT_TIMEOUT_S = 60.0

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("app")
    photo = load_image(insightface_image("t1.jpg")).bgr
    clip = write_clip(motion_clip(photo, (320, 240), frames=30, face_px=90, face_width=90),
                      work / "t1.mp4", audio=False)
    return clip, save_image(work / "astronaut.png", astronaut())


def _env(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    # The child imports the very livefuse and livefuse_ui under test.
    roots = [str(Path(m.__file__).resolve().parent.parent) for m in (livefuse, livefuse_ui)]
    env["PYTHONPATH"] = os.pathsep.join([*roots, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _read(stream: object, lines: queue.Queue[str], keep: list[str]) -> None:
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        keep.append(line)
        lines.put(line)


@posix_only
@pytest.mark.parametrize(("sig", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_quits_the_running_app_cleanly(tmp_path: Path, inputs: tuple[Path, Path],
                                                sig: int, expected: int) -> None:
    clip, photo = inputs
    cmd = [sys.executable, "-m", "livefuse", "-v", "gui", "--config",
           str(tmp_path / "settings.toml"), "--video", str(clip), "--source", str(photo),
           "--start"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(QT_QPA_PLATFORM="offscreen"))
    lines: queue.Queue[str] = queue.Queue()
    err: list[str] = []
    reader = threading.Thread(target=_read, args=(proc.stderr, lines, err), daemon=True)
    reader.start()
    try:
        # Event-driven: the app logs its first preview frame (-v); no sleeping on a guess.
        while True:
            try:
                line = lines.get(timeout=START_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"no frame within {START_TIMEOUT_S:.0f} s: {''.join(err)[-2000:]}")
            if FIRST_FRAME in line:
                break
            assert proc.poll() is None, "".join(err)[-2000:]
        proc.send_signal(sig)
        rc = proc.wait(timeout=QUIT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    stderr = "".join(err)
    assert rc == expected, stderr[-3000:]
    for bad in ("Traceback", "KeyboardInterrupt", "Fatal Python error", "Segmentation fault"):
        assert bad not in stderr, stderr[-3000:]
    # It quit the way a closed window does: the session stopped, its threads joined, the
    # settings saved.
    assert QUIT_LINE in stderr, stderr[-3000:]
    assert (tmp_path / "settings.toml").is_file() and (tmp_path / "gui.toml").is_file()


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="X11/Wayland systems only")
def test_without_a_display_the_app_says_so_in_one_line(tmp_path: Path) -> None:
    env = _env(DISPLAY=None, WAYLAND_DISPLAY=None, QT_QPA_PLATFORM=None)
    r = subprocess.run([sys.executable, "-m", "livefuse", "gui", "--config",
                        str(tmp_path / "settings.toml")], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [NO_DISPLAY], r.stderr
    assert "livefuse live" in NO_DISPLAY and r.stdout == ""
    assert not (tmp_path / "settings.toml").exists()  # nothing started


def test_no_display_rule() -> None:
    assert no_display({}, "linux")
    assert no_display({"DISPLAY": ""}, "linux")
    assert not no_display({"DISPLAY": ":0"}, "linux")
    assert not no_display({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert not no_display({"QT_QPA_PLATFORM": "offscreen"}, "freebsd14")
    assert not no_display({}, "win32") and not no_display({}, "darwin")
