"""A video file through ``livefuse run`` (issue 16), all in one run: the pipelined path against
the serial one, ``Engine.process`` alone on the same frames, decode alone (CPU and NVDEC) and
encode alone (libx264 slice threads, frame threads, NVENC where it opens), and the codec chain
alone (the job with a face-sized region changed instead of the engine): the pace no engine can
push a job past.

Models: the full-size replicas and scripted faces of ``bench_frame_path.py``. The clip: 1080p,
30 fps, ``--seconds`` long, one face, AAC sound, generated first (it takes a while on its own).

    python benchmarks/bench_video.py --device cuda --seconds 60        # the H200 table
    python benchmarks/bench_video.py --device cpu --seconds 2 --width 8 --size 640x360  # smoke
    python benchmarks/bench_video.py --engine classic --device cpu --seconds 6 --size 640x360
        # the CPU table: the classic engine, no replicas
"""

from __future__ import annotations

import argparse
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from replica_video import (
    ClassicEngine,
    ReplicaEngine,
    common_args,
    engine_alone_fps,
    prepare,
    user_config,
)

from livefuse.bench import git_commit, machine
from livefuse.config import CacheConfig, EngineConfig
from livefuse.io import pipeline
from livefuse.io.codecs import encoder_options, open_video, probe_encoder
from livefuse.io.video import Processed, VideoOptions, transcode
from livefuse.run import run_video


def decode_alone(clip: Path, decoder: str) -> tuple[float, float, str]:
    """fps, CPU ms per frame, and what decoded."""
    opened = open_video(clip, decoder)
    n = 0
    c0, t0 = time.process_time(), time.perf_counter()
    with opened.container as c:
        vs = c.streams.video[0]
        if opened.decoder == "CPU":
            vs.thread_type = "AUTO"
        for frame in c.decode(vs):
            frame.to_ndarray(format="bgr24")
            n += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return n / wall, cpu * 1e3 / n, opened.note


def encode_alone(frames: list[np.ndarray], name: str, frame_threads: bool) -> float:
    h, w = frames[0].shape[:2]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with av.open(str(Path(tmp) / "e.mp4"), "w") as out:
            vs = out.add_stream(name, rate=30)
            vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
            vs.options = encoder_options(name)
            if frame_threads:
                vs.codec_context.thread_type = "FRAME"
            for i, img in enumerate(frames):
                vf = av.VideoFrame.from_ndarray(img, format="bgr24")
                vf.pts, vf.time_base = i, Fraction(1, 30)
                for pkt in vs.encode(vf):
                    out.mux(pkt)
            for pkt in vs.encode(None):
                out.mux(pkt)
        return len(frames) / (time.perf_counter() - t0)


class RegionOnly:
    """The codec chain's own work in a job: one face-sized region (``box``, pixels) changed and
    converted back, as the engine's paste-back makes the convert stage do; no detection."""

    def __init__(self, size: tuple[int, int]) -> None:
        w, h = size
        self.box = (w * 2 // 5, h * 5 // 18, w * 3 // 5, h * 25 // 36)  # 384x450 at 1080p

    def stage(self, frame: np.ndarray) -> np.ndarray:
        return frame

    def process(self, staged: np.ndarray, index: int, t_s: float,
                following: object = None) -> Processed:
        x0, y0, x1, y1 = self.box
        staged[y0:y1, x0:x1] ^= 1
        return Processed(staged, [self.box])

    def warm(self, staged: np.ndarray, index: int, t_s: float) -> None:
        pass


def codec_chain_fps(clip: Path, out: Path, size: tuple[int, int], pipelined: bool) -> float:
    t0 = time.perf_counter()
    result = transcode(clip, out, processor=RegionOnly(size),
                       options=VideoOptions(pipelined=pipelined))
    fps = result.frames / (time.perf_counter() - t0)
    out.unlink()
    return fps


def main() -> None:
    ap = argparse.ArgumentParser()
    common_args(ap)
    ap.add_argument("--alone-frames", type=int, default=300,
                    help="frames for the decode/encode/engine-alone rows")
    ap.add_argument("--switch-ab", action="store_true",
                    help="also run the pipelined path with Python's default 5 ms GIL switch "
                         "interval (livefuse.io.pipeline.CHAIN_SWITCH_INTERVAL_S)")
    ap.add_argument("--defaults-only", action="store_true",
                    help="only the user-defaults row (not detect 3 + cache): a shorter A/B")
    args = ap.parse_args()
    switch = pipeline.CHAIN_SWITCH_INTERVAL_S
    w, h = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        d = args.workdir or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        clip, paths = prepare(d, (w, h), args.seconds, args.width, args.engine == "neural")
        frames = read_frames_head(clip, args.alone_frames)
        import torch

        gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
        print(f"\n# video path, commit {git_commit()}, {machine()}, torch {torch.__version__}, "
              f"{gpu}, {len(frames)} frames for the 'alone' rows")

        print("\n| decode alone | fps | CPU ms/frame | decoder |\n|---|---:|---:|---|")
        decode_alone(clip, "cpu")  # the file into the page cache, the decoders loaded
        for dec in ("cpu", "nvdec"):
            try:
                fps, cpu_ms, note = decode_alone(clip, dec)
            except Exception as exc:  # report it and carry on with the other tables
                print(f"| {dec} | failed: {type(exc).__name__}: {exc} | | |", flush=True)
                continue
            print(f"| {dec} | {fps:.0f} | {cpu_ms:.2f} | {note} |", flush=True)

        print("\n| encode alone | fps |\n|---|---:|")
        for name, ft in (("libx264", False), ("libx264", True), ("h264_nvenc", False)):
            why = probe_encoder(name)
            label = f"{name}{' frame threads' if ft else ' (PyAV default: slice threads)'}"
            if why is not None:
                print(f"| {name} | {why} |")
                continue
            print(f"| {label} | {encode_alone(frames, name, ft):.0f} |", flush=True)

        print("\n| codec chain alone (no engine: a face-sized region changed) | fps serial | "
              "fps pipelined |\n|---|---:|---:|")
        chain = {p: codec_chain_fps(clip, d / "chain.mp4", (w, h), p) for p in (False, True)}
        print(f"| decode, convert the region back, encode, mux, audio | {chain[False]:.1f} | "
              f"{chain[True]:.1f} |", flush=True)

        modes = ["serial", "pipelined"] + (["pipelined-5ms"] if args.switch_ab else [])
        print("\n| run_video | detect every | cache | fps serial | fps pipelined | pipelined / "
              "serial | Engine.process alone fps | pipelined / alone | job CPU ms/frame "
              "serial / pipelined | busiest stage (s) |" +
              (" fps pipelined, 5 ms switch |" if args.switch_ab else ""))
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|" +
              ("---:|" if args.switch_ab else ""))
        for every, cache_on in ((1, False), (3, True))[:1 if args.defaults_only else 2]:
            cache = CacheConfig(enabled=cache_on)
            factory: ReplicaEngine | ClassicEngine = ClassicEngine(
                EngineConfig(engine="classic", detect_every=every), cache) if paths is None \
                else ReplicaEngine(paths, user_config(args.device, detect_every=every), (w, h),
                                   cache)
            alone = engine_alone_fps(factory, frames, min(len(frames), 200))
            fps, cpu = {}, {}
            busiest = ""
            for mode in modes:
                engine = factory()
                for i, f in enumerate(frames[:20]):  # warm-up: graphs captured, caches filled
                    engine.process(f.copy(), index=i, t_capture_ns=i * 33_333_333)
                out = d / f"out_{mode}_{every}.mp4"
                pipeline.CHAIN_SWITCH_INTERVAL_S = 0.005 if mode == "pipelined-5ms" else switch
                c0 = time.process_time()
                summary = run_video(engine, clip, out, progress=False,
                                    video=VideoOptions(pipelined=mode != "serial"))
                pipeline.CHAIN_SWITCH_INTERVAL_S = switch
                cpu[mode] = (time.process_time() - c0) * 1e3 / max(summary.frames, 1)
                fps[mode] = summary.fps
                if mode == "pipelined" and summary.stats is not None:
                    top = sorted(summary.stats.busy_s.items(), key=lambda kv: -kv[1])[:3]
                    busiest = ", ".join(f"{k} {v:.1f}" for k, v in top)
                out.unlink()
            print(f"| user defaults{'' if every == 1 else ' + detect 3, cache'} | {every} | "
                  f"{'on' if cache_on else 'off'} | {fps['serial']:.1f} | "
                  f"{fps['pipelined']:.1f} | {fps['pipelined'] / fps['serial']:.2f}x | "
                  f"{alone:.1f} | {fps['pipelined'] / alone:.2f} | "
                  f"{cpu['serial']:.1f} / {cpu['pipelined']:.1f} | {busiest} |" +
                  (f" {fps['pipelined-5ms']:.1f} |" if args.switch_ab else ""), flush=True)


def read_frames_head(clip: Path, n: int) -> list[np.ndarray]:
    frames = []
    with open_video(clip, "cpu").container as c:
        for f in c.decode(video=0):
            frames.append(f.to_ndarray(format="bgr24"))
            if len(frames) >= n:
                break
    return frames


if __name__ == "__main__":
    main()
