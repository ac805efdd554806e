"""The pose cache's threshold on both engines, re-measured with the mouth and the eyes in the key
(issue 17, item 1): hits and stale frames on a scripted talking clip and a still face.

The clips are :mod:`livefuse.testing.talking` (the test's): one face of insightface's t1.jpg,
head still, the mouth moving between levels 0.12 apart every 2-4 frames with small 0.03 moves
between, a blink every 15 frames; landmarks scripted on dlib's real fit of the face with
Gaussian noise (``--noise`` px; the face's eye distance is 50 px). The classic engine renders
with its real renderer; the neural engine with a small synthetic inswapper, its real 2d106det
runner (a random-weight replica, whose answer the script replaces) on every frame.

"stale": a hit although the mouth or eye openness moved by more than 0.08 (the default
threshold's reach; 8 % of the mouth width, 4 px here) since the frame the swap was rendered on.

    python benchmarks/bench_cache_expression.py
    python benchmarks/bench_cache_expression.py --device cuda   # the neural rows on the GPU
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from livefuse.bench import git_commit, machine
from livefuse.config import CacheConfig, EngineConfig
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.faces.landmarker import OrtLandmarker, TorchLandmarker
from livefuse.imaging import load_image
from livefuse.samples import astronaut, insightface_image
from livefuse.swap.neural_engine import NeuralPaths, build_neural
from livefuse.testing.replica_landmark import build_landmark106_replica
from livefuse.testing.replicas import build_arcface_replica, build_scrfd_replica
from livefuse.testing.synthetic import build_synthetic_inswapper
from livefuse.testing.talking import (
    classic_clip,
    neural_clip,
    reach,
    run_clip,
    scene,
    still_script,
    talking_script,
)

VISIBLE = reach(0.8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.6, 0.7, 0.8, 0.9])
    ap.add_argument("--noise", type=float, nargs="+", default=[0.3, 0.6])
    ap.add_argument("--engines", nargs="+", default=["classic", "neural"])
    ap.add_argument("--device", default="cpu", help="neural rows: cpu (onnxruntime) or cuda")
    args = ap.parse_args()

    dlib = DlibFaceAnalyser()
    t1 = scene(load_image(insightface_image("t1.jpg")).bgr, dlib)
    src = astronaut()
    source = (src, dlib.detect(src)[0])
    tmp = Path(tempfile.mkdtemp(prefix="bench-cache-expr-"))
    paths = NeuralPaths(build_scrfd_replica(tmp / "det.onnx", seed=2),
                        build_arcface_replica(tmp / "rec.onnx"),
                        build_synthetic_inswapper(tmp / "inswapper.onnx", width=8),
                        landmarker=build_landmark106_replica(tmp / "2d106det.onnx"))
    cuda = args.device.startswith("cuda")
    cfg = EngineConfig(engine="neural", backend="torch" if cuda else "onnxruntime",
                       precision="fp16" if cuda else "fp32", device=args.device,
                       face_selector="one", smooth=False, rotation="off")
    renderer = build_neural(cfg, paths)[1] if "neural" in args.engines else None
    assert paths.landmarker is not None
    print(f"# pose cache on a scripted talking clip, commit {git_commit()}, {machine()}")
    print(f"# refresh every 5 frames; stale = a hit whose openness moved > {VISIBLE:.3f}")
    print("| engine | landmark noise px | threshold | talking: hits | stale | must miss | "
          "still: hits | landmarks ms/frame |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for engine in args.engines:
        for noise in args.noise:
            for thr in args.thresholds:
                cache = CacheConfig(enabled=True, threshold=thr, refresh_every_n=5)
                rows = []
                for script in (talking_script(), still_script()):
                    if engine == "classic":
                        clip = classic_clip(t1, script, source, cache, noise)
                    else:
                        lmk = TorchLandmarker(paths.landmarker, args.device, "fp16") if cuda \
                            else OrtLandmarker(paths.landmarker)
                        clip = neural_clip(t1, script, renderer, lmk, cache, noise, cfg)
                    rows.append(run_clip(clip, VISIBLE))
                talk, still = rows
                print(f"| {engine} | {noise} | {thr} | {talk.hit_rate:.0%} | {talk.stale} | "
                      f"{talk.must_miss} | {still.hit_rate:.0%} | "
                      f"{talk.landmarks_ms:.2f} |", flush=True)


if __name__ == "__main__":
    main()
