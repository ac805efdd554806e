"""Which thread of a video job holds the GIL, and on which line: one ``run_video`` under py-spy.

A pipelined job's stages share one interpreter lock. A stage that holds it inside C code (a
whole-frame copy in an extension that does not release it) stalls every other stage for that
long, and no switch interval can cut in. py-spy's ``--gil`` mode samples only the thread that
holds the lock, so the samples per second of wall time are the share of the job each thread held
it. Run (py-spy is not a livefuse dependency: ``pip install py-spy``):

    py-spy record --gil --nonblocking -t -r 500 -f raw -o gil.txt -- \
        python benchmarks/gil_share.py run --device cuda --seconds 30 --workdir /tmp/bw
    python benchmarks/gil_share.py summary gil.txt --rate 500 --seconds <the run's seconds>

``run`` prints the job's wall seconds (``seconds=``) for ``summary``. The clip, replicas and
settings are those of ``bench_video.py`` (1080p, one face, ``livefuse run``'s user defaults).
docs/BENCHMARKS.md §13 has what it found.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_video import read_frames_head
from replica_video import ClassicEngine, ReplicaEngine, common_args, prepare, user_config

ROLES = (("process", ("_processed", "Engine.process")), ("stage", ("Engine.stage",)),
         ("decode", ("_Decoder", "run_source")), ("convert", ("_Encoder.convert",)),
         ("encode", ("_Encoder.sink", "run_sink")))
"""A thread's role, from the functions its samples pass through (the first match wins)."""

IN_JOB = ("run_video", "run_stage", "run_source", "run_sink")
"""Samples outside these (the clip, the replicas, the warm-up) are not the job's."""


def run(args: argparse.Namespace) -> None:
    from livefuse.config import EngineConfig
    from livefuse.io.codecs import probe_encoder
    from livefuse.io.video import VideoOptions
    from livefuse.run import run_video

    w, h = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        d = args.workdir or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        clip, paths = prepare(d, (w, h), args.seconds, args.width, args.engine == "neural")
        factory = ClassicEngine(EngineConfig(engine="classic")) if paths is None \
            else ReplicaEngine(paths, user_config(args.device), (w, h))
        engine = factory()
        for i, f in enumerate(read_frames_head(clip, 20)):  # graphs captured before the job
            engine.process(f, index=i, t_capture_ns=i * 33_333_333)
        probe_encoder("h264_nvenc")  # once per process (0.45 s on a GPU without NVENC)
        t0 = time.perf_counter()
        s = run_video(engine, clip, d / "gil_share.mp4", progress=False,
                      video=VideoOptions(pipelined=not args.serial))
        print(f"seconds={time.perf_counter() - t0:.3f} frames={s.frames} fps={s.fps:.1f}")


def summary(args: argparse.Namespace) -> None:
    ticks = args.rate * args.seconds
    lines: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    votes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in Path(args.raw).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not any(k in stack for k in IN_JOB):
            continue
        frames = stack.split(";")
        thread = frames[0]
        for role, keys in ROLES:
            if any(k in stack for k in keys):
                votes[thread][role] += int(count)
                break
        py = [f for f in frames if ".py:" in f]
        lines[thread][re.sub(r" \(.*?([^/]+:\d+)\)", r" (\1)", py[-1]) if py else "?"] += \
            int(count)
    held = sum(sum(c.values()) for c in lines.values())
    print(f"GIL held by the job's threads: {held / ticks:.0%} of {args.seconds:.2f} s\n")
    print("| thread | GIL held, share of wall time | top lines (share of wall time) |")
    print("|---|---:|---|")
    for thread, c in sorted(lines.items(), key=lambda kv: -sum(kv[1].values())):
        role = votes[thread].most_common(1)[0][0] if votes[thread] else "main"
        top = "; ".join(f"{k} {v / ticks:.1%}" for k, v in c.most_common(args.top))
        print(f"| {role} | {sum(c.values()) / ticks:.1%} | {top} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="one run_video at the user defaults (under py-spy)")
    common_args(r)
    r.add_argument("--serial", action="store_true", help="the serial path, not pipelined")
    s = sub.add_parser("summary", help="summarise py-spy's raw --gil -t output")
    s.add_argument("raw", type=Path)
    s.add_argument("--rate", type=float, default=500.0, help="py-spy's -r")
    s.add_argument("--seconds", type=float, required=True, help="the job's wall seconds")
    s.add_argument("--top", type=int, default=4, help="lines shown per thread")
    args = ap.parse_args()
    run(args) if args.command == "run" else summary(args)


if __name__ == "__main__":
    main()
