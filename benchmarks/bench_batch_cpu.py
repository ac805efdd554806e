"""``livefuse batch`` against a loop of ``livefuse run`` calls on the CPU, classic engine
(issue 16): 20 photos and 2 short clips with sound, all in one run, side by side.

Rows:

* ``run`` loop (processes): ``livefuse run`` once per item, as a shell loop would call it (each
  call starts Python and loads dlib again);
* ``run`` loop (one engine): ``livefuse.run.run`` per item in one process with one engine: the
  floor for doing the items one after another;
* ``batch`` in process: ``--executor local``, one worker (what batch does without Ray);
* ``batch`` on Ray: an embedded cluster with ``--workers`` actors (start-up reported apart).

The photos are crops, scales and mirror images of insightface's t1.jpg (six faces) and the
whole photo; the clips are the demo's camera motion over t1.jpg at 640x480, 3 s, with AAC sound.

    python benchmarks/bench_batch_cpu.py --workers 2
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.bench import git_commit, machine
from livefuse.imaging import load_image, save_image
from livefuse.samples import astronaut, insightface_image


def make_inputs(folder: Path, clips: int = 2, clip_frames: int = 90) -> list[Path]:
    """20 photos and ``clips`` clips in ``folder``."""
    from livefuse.faces.dlib_analyser import DlibFaceAnalyser
    from livefuse.io.synthetic import motion_clip, write_clip

    folder.mkdir(parents=True, exist_ok=True)
    photo = load_image(insightface_image("t1.jpg")).bgr
    faces = sorted(DlibFaceAnalyser().detect(photo), key=lambda f: f.bbox[0])
    out = [save_image(folder / "t1.jpg", photo),
           save_image(folder / "t1_mirror.jpg", np.ascontiguousarray(photo[:, ::-1]))]
    for k, f in enumerate(faces):
        cx, cy = (f.bbox[0] + f.bbox[2]) / 2, (f.bbox[1] + f.bbox[3]) / 2
        half = int(1.6 * f.width)
        x0, y0 = max(0, int(cx) - half), max(0, int(cy) - half)
        crop = photo[y0:int(cy) + half, x0:int(cx) + half]
        out.append(save_image(folder / f"face{k}.jpg", crop))
        out.append(save_image(folder / f"face{k}_mirror.jpg", np.ascontiguousarray(crop[:, ::-1])))
        big = cv2.resize(crop, None, fx=1.6, fy=1.6, interpolation=cv2.INTER_CUBIC)
        out.append(save_image(folder / f"face{k}_large.png", np.asarray(big, np.uint8)))
    out = out[:20]
    biggest = max(faces, key=lambda f: f.area)
    centre = ((biggest.bbox[0] + biggest.bbox[2]) / 2, (biggest.bbox[1] + biggest.bbox[3]) / 2)
    for k in range(clips):
        frames = motion_clip(photo, (640, 480), clip_frames, centre=centre,
                             face_px=biggest.width, face_width=150 + 20 * k)
        out.append(write_clip(frames, folder / f"clip{k}.mp4"))
    return out


def _loop_processes(items: list[Path], source: Path, out: Path) -> float:
    t0 = time.perf_counter()
    for item in items:
        subprocess.run([sys.executable, "-m", "livefuse", "run", "-q", "-s", str(source), "-t",
                        str(item), "-o", str(out / item.name)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _loop_one_engine(items: list[Path], source: Path, out: Path) -> float:
    from livefuse.config import EngineConfig
    from livefuse.engine import Engine
    from livefuse.run import run

    t0 = time.perf_counter()
    engine = Engine(EngineConfig(engine="classic"))
    engine.set_source(load_image(source))
    for item in items:
        run(engine, item, out / item.name, progress=False)
    return time.perf_counter() - t0


def _batch(folder: Path, source: Path, out: Path, executor: str, workers: int
           ) -> tuple[float, float, str, int]:
    from livefuse.batch.runner import BatchOptions, run_batch
    from livefuse.batch.worker import EngineSpec
    from livefuse.config import EngineConfig

    opts = BatchOptions((str(folder),), out, executor=executor, workers=workers)
    spec = EngineSpec(EngineConfig(engine="classic"), source)
    t0 = time.perf_counter()
    summary = run_batch(opts, spec, quiet=True)
    wall = time.perf_counter() - t0
    assert summary.failed == 0, summary.lines()
    return wall, summary.startup_s, summary.executor, summary.frames


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2, help="Ray workers")
    ap.add_argument("--skip-processes", action="store_true",
                    help="leave out the loop of `livefuse run` processes (the slowest row)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        source = save_image(d / "source.png", astronaut())
        items = make_inputs(d / "in")
        frames = 20 + sum(1 for p in items if p.suffix == ".mp4") * 90
        print(f"# batch vs a loop of run, classic engine, commit {git_commit()}, {machine()}")
        print(f"# {len(items)} items: 20 photos + {len(items) - 20} clips of 90 frames "
              f"(640x480, AAC), {frames} frames in all")
        rows: list[tuple[str, float, float, str]] = []
        if not args.skip_processes:
            rows.append(("run loop (a process per item)",
                         _loop_processes(items, source, _fresh(d / "o1")), 0.0, ""))
        rows.append(("run loop (one engine, one process)",
                     _loop_one_engine(items, source, _fresh(d / "o2")), 0.0, ""))
        wall, start, how, _ = _batch(d / "in", source, _fresh(d / "o3"), "local", 1)
        rows.append(("batch, in process", wall, start, how))
        wall, start, how, _ = _batch(d / "in", source, _fresh(d / "o4"), "ray", args.workers)
        rows.append((f"batch on Ray, {args.workers} workers", wall, start, how))
        print("| path | wall s | of it start-up s | items/s | frames/s | executor |")
        print("|---|---:|---:|---:|---:|---|")
        for name, wall, start, how in rows:
            print(f"| {name} | {wall:.1f} | {start:.1f} | {len(items) / wall:.2f} | "
                  f"{frames / wall:.1f} | {how} |", flush=True)
        base = next(r for r in rows if r[0].startswith("run loop (one"))
        ray_row = rows[-1]
        print(f"\n* batch on Ray vs the one-engine loop: {base[1] / ray_row[1]:.2f}x the speed; "
              f"difference {ray_row[1] - base[1]:+.1f} s against a start-up of "
              f"{ray_row[2]:.1f} s (Ray and {args.workers} engines)")
        if not args.skip_processes:
            print(f"* batch on Ray vs a loop of `livefuse run` processes: "
                  f"{rows[0][1] / ray_row[1]:.2f}x the speed")


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    main()
