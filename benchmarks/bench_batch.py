"""``livefuse batch`` on GPUs (issues 16 and 20), in one run: ``Engine.process`` alone on the same
frames, then the batch on 1 GPU and on N GPUs with the same workers per GPU. Per row: throughput,
exactness of the joined output (frame count, every timestamp, every audio packet's bytes), and
per worker its placement (``CUDA_VISIBLE_DEVICES``, Ray's GPU ids) and peak VRAM.

The executor is Ray when it imports (an embedded cluster started per row with that many GPUs),
else the in-process pool (worker threads, one process, all on ``cuda``: the multi-GPU rows then
need Ray and are skipped); ``--executor`` forces one. The script says which ran.

Models: the full-size replicas and scripted faces of ``bench_frame_path.py``; the clip: 1080p,
30 fps, one face, AAC sound, generated first.

    python benchmarks/bench_batch.py --seconds 60 --workers-per-gpu 4 --gpus 1        # issue 16
    python benchmarks/bench_batch.py --seconds 120 --workers-per-gpu 2 --gpus 1,2     # issue 20
    python benchmarks/bench_batch.py --seconds 120 --workers-per-gpu 2 --gpus 2 --fill 1
        # the guard: another process holds 90 % of GPU 1; no work may go there
    python benchmarks/bench_batch.py --device cpu --seconds 4 --width 8 --size 640x360 \\
        --gpus 0 --workers-per-gpu 2 --alone-frames 20                                  # smoke
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replica_video import (
    ClassicEngine,
    ReplicaEngine,
    common_args,
    engine_alone_fps,
    prepare,
    user_config,
)
from sampler import Sampler

from livefuse.batch.runner import BatchOptions, BatchSummary, run_batch
from livefuse.bench import git_commit, machine
from livefuse.config import EngineConfig
from livefuse.io.video import VideoOptions

FILL = """
import sys, time, torch
dev = torch.device(f"cuda:{sys.argv[1]}")
free, total = torch.cuda.mem_get_info(dev)
hold = torch.empty(int(total * float(sys.argv[2]) - (total - free)), dtype=torch.uint8, device=dev)
print("filled", flush=True)
time.sleep(3600)
"""


def exact(src: Path, out: Path) -> str:
    """``exact`` when ``out`` has every frame of ``src`` at its timestamp and its audio bytes."""
    import av

    def grab(path: Path) -> tuple[list[object], list[object]]:
        with av.open(str(path)) as c:
            vs = c.streams.video[0]
            times = [p.pts * vs.time_base for p in c.demux(vs) if p.size]
        with av.open(str(path)) as c:
            audio = [(p.pts * p.time_base, bytes(p)) for p in c.demux(*c.streams.audio)
                     if p.dts is not None]
        return sorted(times), audio

    (vt, va), (ot, oa) = grab(src), grab(out)
    if len(vt) != len(ot):
        return f"NOT exact: {len(ot)} of {len(vt)} frames"
    if vt != ot:
        return "NOT exact: timestamps differ"
    return "exact" if va == oa else "NOT exact: audio differs"


def run_row(clip: Path, out: Path, factory: ReplicaEngine | ClassicEngine, gpus: int,
            per_gpu: int, executor: str, chunk_s: float | None, cpus_per_worker: float | None,
            codec_threads: int = 0, depth: int | None = None) -> BatchSummary:
    workers = max(1, gpus) * per_gpu
    own_ray = executor == "ray"
    if own_ray:
        from livefuse.batch.executor import start_ray

        start_ray(None, num_gpus=gpus)  # this row's cluster sees exactly `gpus` GPUs
    try:
        opts = BatchOptions((str(clip),), out, overwrite=True, workers=workers,
                            gpus_per_worker=(1 / per_gpu) if gpus else 0.0,
                            cpus_per_worker=cpus_per_worker, chunk_seconds=chunk_s,
                            executor=executor,
                            **({"video": VideoOptions(threads=codec_threads,
                                                      depth=depth or VideoOptions.depth)}
                               if codec_threads or depth else {}))
        neural = factory.config.engine == "neural"
        return run_batch(opts, factory, neural=neural,
                         device=factory.config.device if neural else None,
                         detect_every=factory.config.detect_every,
                         quiet=True, on_line=lambda s: print(f"  [batch] {s}", flush=True))
    finally:
        if own_ray:
            from livefuse.batch.executor import stop_ray

            stop_ray()


def print_row(label: str, summary: BatchSummary, clip: Path, out: Path, alone: float) -> float:
    frames = summary.frames
    steady = summary.seconds - summary.startup_s
    fps, fps_steady = frames / summary.seconds, frames / steady if steady > 0 else 0.0
    print(f"| {label} | {summary.executor} | {frames} | {summary.seconds:.1f} | "
          f"{summary.startup_s:.1f} | {fps:.1f} | {fps_steady:.1f} | {fps_steady / alone:.2f} | "
          f"{exact(clip, out / clip.name) if summary.failed == 0 else 'FAILED'} |", flush=True)
    for w in summary.workers:
        i = w.info
        vram = "-" if w.peak_vram_mib is None else f"{w.peak_vram_mib:.0f}"
        print(f"|   {i.name} | pid {i.pid} | CUDA_VISIBLE_DEVICES={i.cuda_visible_devices or '-'}"
              f" | GPU ids {','.join(i.gpu_ids) or '-'} | {w.units} units | {w.frames} frames "
              f"| peak VRAM {vram} MiB | busy {w.busy_s:.1f} s | "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(w.stage_s.items(),
                                                            key=lambda kv: -kv[1])) + " |")
    for line in summary.lines():
        if line.startswith("failed"):
            print(f"  {line}")
    return fps_steady


def main() -> None:
    ap = argparse.ArgumentParser()
    common_args(ap)
    ap.add_argument("--gpus", default="1", help="GPU counts to run on, e.g. 1,2 (0: CPU)")
    ap.add_argument("--workers-per-gpu", type=int, default=4)
    ap.add_argument("--chunk-seconds", type=float, default=None,
                    help="default: livefuse's own (--chunk-seconds auto), as a user runs it")
    ap.add_argument("--executor", choices=("auto", "ray", "local"), default="auto")
    ap.add_argument("--fill", type=int, default=None, metavar="GPU",
                    help="hold 90 %% of this GPU's memory in another process during the rows")
    ap.add_argument("--alone-frames", type=int, default=200)
    ap.add_argument("--cpus-per-worker", type=float, default=None,
                    help="each worker's CPU share (default: livefuse's, the cores shared "
                         "evenly; trees before 2026-12-03 need 1)")
    ap.add_argument("--codec-threads", type=int, default=0,
                    help="each worker's decoder and encoder threads (default: its CPU share)")
    ap.add_argument("--depth", type=int, default=None,
                    help="queue size between each worker's video stages (default: livefuse's)")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    executor = args.executor
    if executor == "auto":
        executor = "ray" if importlib.util.find_spec("ray") else "local"
    with tempfile.TemporaryDirectory() as tmp:
        d = args.workdir or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        clip, paths = prepare(d, (w, h), args.seconds, args.width, args.engine == "neural")
        factory: ReplicaEngine | ClassicEngine = ClassicEngine(
            EngineConfig(engine="classic")) if paths is None else \
            ReplicaEngine(paths, user_config(args.device), (w, h))
        from bench_video import read_frames_head

        frames = read_frames_head(clip, args.alone_frames)
        with Sampler() as sampler:
            t0 = time.monotonic()
            alone = engine_alone_fps(factory, frames, len(frames))
            alone_window = sampler.window(t0, time.monotonic())
        import torch

        gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
        print(f"\n# livefuse batch, commit {git_commit()}, {machine()}, torch "
              f"{torch.__version__}, {gpu} x {torch.cuda.device_count()}, executor: "
              f"{'Ray' if executor == 'ray' else 'in-process pool (no Ray)'}")
        print(f"# Engine.process alone (numpy in, staged ahead, user defaults, 1 face): "
              f"{alone:.1f} fps ({alone_window.text(0)}, its engine build included)")
        filler = None
        if args.fill is not None:
            filler = subprocess.Popen([sys.executable, "-c", FILL, str(args.fill), "0.9"],
                                      stdout=subprocess.PIPE, text=True)
            assert filler.stdout is not None
            print(f"# another process holds 90 % of GPU {args.fill}: "
                  f"{filler.stdout.readline().strip()}")
        print("\n| GPUs x workers | executor | frames | wall s | start-up s | fps | fps after "
              "start-up | / Engine.process alone | output |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        results = {}
        try:
            for g in (int(v) for v in args.gpus.split(",")):
                if g > 1 and executor != "ray":
                    print(f"| {g} x {args.workers_per_gpu} | skipped: several GPUs need Ray "
                          "(the in-process pool runs every worker on one device) |")
                    continue
                chunk_s = args.chunk_seconds
                out = d / f"out{g}"
                with Sampler() as sampler:
                    summary = run_row(clip, out, factory, g, args.workers_per_gpu, executor,
                                      chunk_s, args.cpus_per_worker, args.codec_threads,
                                      args.depth)
                    t1 = time.monotonic()
                label = f"{g} x {args.workers_per_gpu}" + (
                    f", {args.codec_threads} codec threads" if args.codec_threads else "") + (
                    f", {chunk_s:g} s chunks" if chunk_s is not None else "") + (
                    f", depth {args.depth}" if args.depth else "")
                results[g] = print_row(label, summary, clip, out, alone)
                # the steady part: after the cluster and the workers' engines started
                steady = sampler.window(t1 - (summary.seconds - summary.startup_s), t1)
                print(f"|   machine after start-up | {steady.text(summary.frames)} |")
        finally:
            if filler is not None:
                filler.kill()
        if 1 in results and len(results) > 1:
            for g, fps in results.items():
                if g > 1:
                    print(f"\n* {g} GPUs / 1 GPU: {fps / results[1]:.2f}x (after start-up)")


if __name__ == "__main__":
    main()
