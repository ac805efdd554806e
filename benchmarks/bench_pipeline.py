"""The whole frame path: livefuse's Engine vs the reference pipeline Deep-Live-Cam and roop run
(insightface's ``FaceAnalysis.get`` + ``INSwapper.get(paste_back=True)``), side by side.

Both use the SAME model files: the synthetic SCRFD and ArcFace stand-ins of the test suite and a
random-weight inswapper replica (``--width``; 128 is full size), all on onnxruntime's CPU provider,
fp32. The model work is therefore identical; what differs is the frame path around it (detector
input preparation, which models run per frame, paste-back). Real det_10g / w600k_r50 weights would
add the same convolution time to both sides.

Usage: python benchmarks/bench_pipeline.py [--width 16] [--n 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from synthetic_faces import build_arcface, build_scrfd

from livefuse.bench import git_commit, machine
from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.swap.neural_engine import NeuralPaths, build_neural
from livefuse.testing.synthetic import build_synthetic_inswapper


def frame_with_face(size: tuple[int, int], cell: tuple[int, int], seed: int) -> np.ndarray:
    """Dark texture plus one white block the synthetic SCRFD reads as a face at ``cell``."""
    w, h = size
    px = 32 * max(w, h) / 640  # a stride-32 detector cell in frame px
    f = np.random.default_rng(seed).integers(0, 50, (h, w, 3), dtype=np.uint8)
    x0, y0 = round(cell[0] * px), round(cell[1] * px)
    f[y0:y0 + round(px), x0:x0 + round(px)] = 255
    return f


def median_ms(fn: Callable[[], object], n: int) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    from insightface.app import FaceAnalysis
    from insightface.model_zoo.inswapper import INSwapper

    d = Path(tempfile.mkdtemp(prefix="livefuse_pipeline_"))
    paths = NeuralPaths(build_scrfd(d / "det_10g.onnx"), build_arcface(d / "w600k_r50.onnx"),
                        build_synthetic_inswapper(d / "inswapper.onnx", width=args.width))
    pack = d / "pack"
    pack.mkdir()
    for p in (paths.detector, paths.recogniser):
        (pack / p.name).write_bytes(p.read_bytes())
    app = FaceAnalysis(name=str(pack), allowed_modules=["detection", "recognition"],
                       providers=["CPUExecutionProvider"])
    app.prepare(ctx_id=0, det_size=(640, 640))
    reference = INSwapper(model_file=str(paths.swapper))

    cfg = EngineConfig(engine="neural", backend="onnxruntime", precision="fp32", device="cpu")
    engine = Engine(cfg, components=build_neural(cfg, paths))
    src = frame_with_face((640, 640), (5, 6), seed=1)
    engine.set_source(LoadedImage(bgr=src, alpha=None, path=d / "src.png"))
    source_face = app.get(src)[0]

    print(f"# frame path, one face, commit {git_commit()}, {machine()}, onnxruntime CPU fp32, "
          f"inswapper width {args.width}, median of {args.n}")
    print("\n| size | insightface FaceAnalysis.get + INSwapper.get ms | livefuse Engine.process ms "
          "| × faster | livefuse detect ms | livefuse swap ms | mean abs diff, face core |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for size in ((1280, 720), (1920, 1080), (3840, 2160)):
        frame = frame_with_face(size, (10, 5), seed=2)

        def reference_path(frame: np.ndarray = frame) -> np.ndarray:
            out = frame.copy()
            for face in app.get(frame):
                out = reference.get(out, face, source_face, paste_back=True)
            return out

        ref_ms = median_ms(reference_path, args.n)
        ours_ms = median_ms(lambda frame=frame: engine.process(frame), args.n)  # type: ignore[misc]
        packet = engine.process(frame)
        # the face core (kps box): the two pastes use different masks only toward the edge
        (x1, y1), (x2, y2) = packet.faces[0].kps.min(0).astype(int), \
            packet.faces[0].kps.max(0).astype(int)
        region = (slice(y1, y2), slice(x1, x2))
        diff = float(np.abs(packet.output[region].astype(int)  # type: ignore[index]
                            - reference_path()[region]).mean())
        print(f"| {size[0]}x{size[1]} | {ref_ms:.1f} | {ours_ms:.1f} | {ref_ms / ours_ms:.2f} | "
              f"{packet.timings_ms.get('detect', 0):.1f} | {packet.timings_ms['swap']:.1f} | "
              f"{diff:.2f} |", flush=True)


if __name__ == "__main__":
    main()
