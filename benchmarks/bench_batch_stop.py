"""How long `livefuse batch` on an embedded Ray cluster takes to exit after a signal to its
whole process group, as a terminal's Ctrl-C (SIGINT) and a service manager's stop (SIGTERM)
send it. Prints a table; asserts nothing.

    python benchmarks/bench_batch_stop.py --rounds 2 --after 16

Needs the batch extra (Ray). Four 12 s 640x480 clips of camera motion over insightface's t1.jpg
are made in a temp folder; the signal comes ``--after`` seconds after the start, while the
workers are busy.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _clips(folder: Path) -> None:
    from livefuse.imaging import load_image
    from livefuse.io.synthetic import motion_clip, write_clip
    from livefuse.samples import insightface_image

    photo = load_image(insightface_image("t1.jpg")).bgr
    first = folder / "a.mp4"
    write_clip(motion_clip(photo, (640, 480), 360, centre=(520.0, 330.0), face_px=110.0), first)
    for name in ("b", "c", "d"):
        (folder / f"{name}.mp4").write_bytes(first.read_bytes())


def _ray_left(t0: float) -> int:
    import psutil

    return sum(1 for p in psutil.process_iter(["cmdline", "create_time"])
               if p.info["create_time"] >= t0 and any("ray" in part for part in
                                                       (p.info["cmdline"] or [])[:2]))


def _one(sig: signal.Signals, after: float, folder: Path, source: Path) -> tuple[int, float, int]:
    out = folder.parent / f"out-{sig.name}-{time.monotonic_ns()}"
    t_start = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "livefuse", "batch", str(folder), "-o", str(out), "-s",
         str(source), "-q", "--engine", "classic"], start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # a background shell leaves SIGINT ignored in its children; a terminal's job has it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(after)
    t0 = time.monotonic()
    os.killpg(proc.pid, sig)
    proc.wait()
    took = time.monotonic() - t0
    time.sleep(1.0)
    return proc.returncode, took, _ray_left(t_start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--after", type=float, default=16.0, help="seconds before the signal")
    args = ap.parse_args()
    from livefuse.imaging import save_image
    from livefuse.samples import astronaut

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "?"
    print(f"# batch stop, commit {commit}, {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    print("| signal to the group | round | exit status | s to exit | Ray processes left |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "in"
        folder.mkdir()
        _clips(folder)
        source = save_image(Path(tmp) / "face.png", astronaut())
        for k in range(args.rounds):
            for sig in (signal.SIGINT, signal.SIGTERM):
                code, took, left = _one(sig, args.after, folder, source)
                print(f"| {sig.name} | {k + 1} | {code} | {took:.1f} | {left} |", flush=True)


if __name__ == "__main__":
    main()
