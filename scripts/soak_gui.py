"""Soak test of the desktop app's start → frames → quit cycle, the real ``livefuse gui`` path.

Each cycle runs ``python -m livefuse -v gui --config TMP --video CLIP --source PHOTO --start`` in
a subprocess, waits for the first preview frame (the app logs it with -v) plus a moment of
running, then quits it, in turn by SIGTERM, by SIGINT and (when ``xdotool`` is installed) by
Ctrl+Q sent to the window, i.e. the window's own close. A cycle is a crash when the exit code is
not the expected one (0, 130 after SIGINT) or stderr holds a traceback or a fatal error.

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/soak_gui.py [--cycles 50]

(Under the offscreen platform, ``QT_QPA_PLATFORM=offscreen``, the close-by-key cycles are
skipped.) Prints one line per cycle and a summary; exits 1 when any cycle crashed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from livefuse.imaging import load_image, save_image
from livefuse.io.synthetic import motion_clip, write_clip
from livefuse.samples import astronaut, insightface_image

FIRST_FRAME = "preview: first frame"
BAD = ("Traceback", "Fatal Python error", "Segmentation fault", "Aborted", "core dumped")


def make_inputs(work: Path) -> tuple[Path, Path]:
    photo = load_image(insightface_image("t1.jpg")).bgr
    clip = write_clip(motion_clip(photo, (480, 360), frames=60, face_px=110, face_width=110),
                      work / "t1.mp4", audio=False)
    return clip, save_image(work / "astronaut.png", astronaut())


def _reader(stream: object, lines: queue.Queue[str], keep: list[str]) -> None:
    for line in iter(stream.readline, ""):  # type: ignore[attr-defined]
        keep.append(line)
        lines.put(line)


def _close_by_key(pid: int) -> bool:
    """Ctrl+Q to the app's window (the window's own Quit action): needs xdotool and X."""
    found = subprocess.run(["xdotool", "search", "--sync", "--onlyvisible", "--pid", str(pid)],
                           capture_output=True, text=True, timeout=30)
    ids = found.stdout.split()
    if not ids:
        return False
    # No window manager under Xvfb: focus the window directly, then type.
    subprocess.run(["xdotool", "windowfocus", "--sync", ids[-1]], timeout=30,
                   capture_output=True)
    subprocess.run(["xdotool", "key", "--window", ids[-1], "ctrl+q"], timeout=30,
                   capture_output=True)
    return True


def cycle(n: int, how: str, clip: Path, photo: Path, work: Path, run_s: float,
          timeout: float) -> tuple[str, int | None, str]:
    """One start → frames → quit cycle; returns (verdict, exit code, detail)."""
    cmd = [sys.executable, "-X", "faulthandler", "-m", "livefuse", "-v", "gui", "--config",
           str(work / f"cfg{n % 2}" / "settings.toml"), "--video", str(clip),
           "--source", str(photo), "--start"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    err: list[str] = []
    reader = threading.Thread(target=_reader, args=(proc.stderr, lines, err), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    seen = False
    while not seen and time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(queue.Empty):
            seen = FIRST_FRAME in lines.get(timeout=0.5)
    if not seen:
        proc.kill()
        proc.wait()
        reader.join(5)
        return "no-frames", proc.returncode, "".join(err[-40:]).strip()
    time.sleep(run_s)
    expected = {"sigterm": 0, "sigint": 130, "close": 0}[how]
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    elif how == "sigint":
        proc.send_signal(signal.SIGINT)
    elif not _close_by_key(proc.pid):
        proc.kill()
        proc.wait()
        return "no-window", proc.returncode, "xdotool found no window"
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        reader.join(5)
        return "hung", proc.returncode, "".join(err[-5:]).strip()
    reader.join(5)
    text = "".join(err)
    bad = [b for b in BAD if b in text]
    if rc != expected or bad:
        return "crash", rc, (", ".join(bad) + " | " + "".join(err[-8:])).strip()
    return "ok", rc, ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--run", type=float, default=1.0, help="seconds of frames before quitting")
    ap.add_argument("--timeout", type=float, default=180.0, help="per cycle, for the first frame")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="livefuse-soak-"))
    clip, photo = make_inputs(work)
    ways = ["sigterm", "sigint"]
    if shutil.which("xdotool") and os.environ.get("DISPLAY") \
            and os.environ.get("QT_QPA_PLATFORM", "xcb") == "xcb":
        ways.append("close")
    verdicts: collections.Counter[str] = collections.Counter()
    codes: collections.Counter[tuple[str, int | None]] = collections.Counter()
    t0 = time.monotonic()
    for n in range(args.cycles):
        how = ways[n % len(ways)]
        verdict, rc, detail = cycle(n, how, clip, photo, work, args.run, args.timeout)
        verdicts[verdict] += 1
        codes[(how, rc)] += 1
        print(f"cycle {n + 1:3d}/{args.cycles} {how:8s} rc={rc} {verdict}"
              + (f"  {detail}" if detail else ""), flush=True)
    crashed = sum(v for k, v in verdicts.items() if k != "ok")
    print(f"\n{args.cycles} cycles in {time.monotonic() - t0:.0f} s: {verdicts['ok']} ok, "
          f"{crashed} not ok {dict(verdicts)}; exit codes by quit: "
          + ", ".join(f"{how} rc={rc} x{c}" for (how, rc), c in sorted(codes.items(),
                                                                      key=str)))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if crashed else 0


if __name__ == "__main__":
    raise SystemExit(main())
