"""The neural engine end to end through Engine, on synthetic models with the real signatures."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from device_on_cpu import cpu_device_path
from insightface.model_zoo.inswapper import INSwapper
from render_count import RenderCount
from replica_models import landmark_replica
from synthetic_faces import build_arcface, build_scrfd

from livefuse.cli import main
from livefuse.config import CacheConfig, EngineConfig
from livefuse.engine import Engine
from livefuse.faces.landmarker import OrtLandmarker
from livefuse.imaging import load_image, save_image
from livefuse.swap.neural_engine import NeuralPaths, build_neural
from livefuse.swap.paste import arcface_affine
from livefuse.testing.synthetic import build_synthetic_inswapper


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> NeuralPaths:
    d = tmp_path_factory.mktemp("neural_models")
    return NeuralPaths(build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx"),
                       build_synthetic_inswapper(d / "inswapper.onnx", width=8))


def _frame(cell: tuple[int, int], seed: int) -> np.ndarray:
    """640x640 frame: dark texture, and a white 32x32 block that the synthetic SCRFD reads as a
    face at that stride-32 cell (bbox 128 px around the cell's corner)."""
    rng = np.random.default_rng(seed)
    frame = rng.integers(0, 50, (640, 640, 3), dtype=np.uint8)
    cx, cy = cell
    frame[32 * cy:32 * (cy + 1), 32 * cx:32 * (cx + 1)] = 255
    return frame


@pytest.fixture(scope="module")
def source_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_image(tmp_path_factory.mktemp("neural_src") / "src.png", _frame((5, 6), 1))


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_engine_swaps_the_detected_face_only(paths: NeuralPaths, source_path: Path,
                                             backend: str) -> None:
    cfg = EngineConfig(engine="neural", backend=backend, precision="fp32",  # type: ignore[arg-type]
                       device="cpu")
    engine = Engine(cfg, components=build_neural(cfg, paths))
    engine.set_source(load_image(source_path))
    frame = _frame((10, 9), 2)
    packet = engine.process(frame)
    assert packet.swapped == 1 and len(packet.faces) == 1
    np.testing.assert_allclose(packet.faces[0].bbox, [256, 224, 384, 352], atol=1e-3)
    out = packet.output
    assert out is not None
    diff = np.abs(out.astype(int) - frame).sum(axis=2)
    ys, xs = np.nonzero(diff)
    # the change stays inside the face's region (the aligned crop around the kps)
    assert xs.min() > 200 and xs.max() < 440 and ys.min() > 170 and ys.max() < 410
    assert diff[250:350, 270:370].mean() > 5.0
    # insightface's own INSwapper on the same model, face and source embedding: the same
    # pixels deep inside the face (its paste-back erodes and blurs differently at the rim)
    ref_face = SimpleNamespace(kps=packet.faces[0].kps, normed_embedding=engine.analyser.embed(
        load_image(source_path).bgr, engine.source_face))  # type: ignore[arg-type]
    ref = INSwapper(model_file=str(paths.swapper)).get(frame.copy(), ref_face, ref_face,
                                                       paste_back=True)
    m = arcface_affine(packet.faces[0].kps)
    ys, xs = np.mgrid[0:640, 0:640]
    u = m[0, 0] * xs + m[0, 1] * ys + m[0, 2]
    v = m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
    core = (u >= 40) & (u < 88) & (v >= 40) & (v < 88)
    assert core.sum() > 1000
    assert np.abs(out[core].astype(int) - ref[core].astype(int)).max() <= 2


def test_backends_agree_through_the_engine(paths: NeuralPaths, source_path: Path) -> None:
    outs = []
    for backend in ("onnxruntime", "torch"):
        cfg = EngineConfig(engine="neural", backend=backend, precision="fp32",  # type: ignore[arg-type]
                           device="cpu")
        engine = Engine(cfg, components=build_neural(cfg, paths))
        engine.set_source(load_image(source_path))
        outs.append(engine.process(_frame((8, 8), 3)).output.astype(int))  # type: ignore[union-attr]
    assert np.abs(outs[0] - outs[1]).max() <= 1


def test_cache_reuses_the_neural_swap(paths: NeuralPaths, source_path: Path) -> None:
    cfg = EngineConfig(engine="neural", backend="onnxruntime", precision="fp32", device="cpu")
    engine = Engine(cfg, components=build_neural(cfg, paths),
                    cache=CacheConfig(enabled=True, threshold=0.9, refresh_every_n=5),
                    landmarker=OrtLandmarker(landmark_replica()))
    engine.set_source(load_image(source_path))
    frame = _frame((10, 9), 2)
    first = engine.process(frame, index=0).output
    second = engine.process(frame, index=1).output
    assert engine.cache.stats.hits == 1
    assert first is not None and second is not None
    assert np.abs(first.astype(int) - second).max() <= 1  # the same swap, re-warped in place
    uncached = Engine(cfg, components=build_neural(cfg, paths))
    uncached.set_source(load_image(source_path))
    plain = uncached.process(frame).output
    assert plain is not None
    # one render and one paste-back for both: the cache changes no pixel on a miss
    np.testing.assert_array_equal(plain, first)


def test_missing_models_name_the_file_and_the_fix(tmp_path: Path, source_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--quiet", "--engine", "neural", "--models-dir", str(tmp_path),
                 "-s", str(source_path), "-t", str(source_path), "-o", str(tmp_path / "o.png")])
    assert code == 2
    err = capsys.readouterr().err
    assert "det_10g" in err and "livefuse models" in err


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_defaults_match_cpu_fp32_on_a_real_photo(paths: NeuralPaths, source_path: Path,
                                                      t1_path: Path) -> None:
    """The torch backend's CUDA defaults (fp16, channels_last, CUDA graph, fused layers) swap a
    face in insightface's t1.jpg like the fp32 CPU path does."""
    import cv2

    photo = cv2.resize(load_image(t1_path).bgr, (640, 640), interpolation=cv2.INTER_AREA)
    # dimmed to the dark range of _frame, so the random-weight SCRFD sees only the white block
    frame = (photo // 5).astype(np.uint8)
    frame[32 * 9:32 * 10, 32 * 10:32 * 11] = 255
    outs = []
    for device, precision in (("cpu", "fp32"), ("cuda", "auto")):
        cfg = EngineConfig(engine="neural", backend="torch", precision=precision,  # type: ignore[arg-type]
                           device=device)
        engine = Engine(cfg, components=build_neural(cfg, paths))
        engine.set_source(load_image(source_path))
        for _ in range(2):  # the second frame replays the captured graph
            packet = engine.process(frame.copy())
        assert packet.swapped == 1 and packet.output is not None
        outs.append(packet.output.astype(int))
        if device == "cuda":
            runner = engine.renderer.swapper.runner  # type: ignore[attr-defined]
            assert runner.fused and runner.cuda_graph and runner.precision == "fp16"
    changed = np.abs(outs[0] - frame).sum(axis=2) > 0
    assert changed.sum() > 5000
    assert np.abs(outs[1] - outs[0])[changed].mean() <= 1.5


def test_deferred_fp16_guard_redoes_a_bad_frame_in_fp32(paths: NeuralPaths, source_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The device path reads the FP16 guard's verdict at the frame's download (one sync fewer);
    a bad fp16 swap is undone on the device frame, swapped again in fp32 and pasted: the frame
    comes out as an fp32 frame would, and the engine stays in fp32. (CPU tensors stand in for
    the device here; the same code runs on CUDA.)"""
    import torch

    from livefuse.swap import neural
    from livefuse.types import StagedFrame

    def engine(precision: str) -> Engine:
        cfg = EngineConfig(engine="neural", backend="torch", precision=precision,  # type: ignore[arg-type]
                           device="cpu", smooth=False)
        eng = cpu_device_path(Engine(cfg, components=build_neural(cfg, paths)))
        eng.set_source(load_image(source_path))
        return eng

    real = neural.guard_stats
    calls = {"n": 0}

    def first_bad(out: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        stats = real(out)
        if calls["n"] == 1:
            stats[:, 0] = 0.0  # "non-finite"
        return stats

    monkeypatch.setattr(neural, "guard_stats", first_bad)
    frame = _frame((10, 9), 2)
    fp16 = engine("fp16")
    fp16.renderer.swapper.precision = "fp16"  # type: ignore[attr-defined]
    fp16.renderer.swapper._runner.precision = "fp16"  # type: ignore[attr-defined]
    out = fp16.process(StagedFrame(host=frame.copy(), device=torch.from_numpy(frame.copy())))
    ref = engine("fp32").process(StagedFrame(host=frame.copy(),
                                             device=torch.from_numpy(frame.copy())))
    assert calls["n"] == 1 and fp16.precision_in_use == "fp32 (fallback)"
    assert out.swapped == ref.swapped == 1
    assert out.output is not None and ref.output is not None
    np.testing.assert_array_equal(out.output, ref.output)


def test_live_frames_are_captured_into_lent_buffers_and_staged_without_a_copy(
        paths: NeuralPaths, source_path: Path) -> None:
    """The live runner hands the capture the engine's buffers (pinned memory on CUDA) and the
    stage then skips its copy of each frame; frames come out right although their buffers are
    reused (the device path on CPU tensors here: the same code runs on CUDA)."""
    import time

    from livefuse.config import AppConfig
    from livefuse.io.sinks import CallbackSink
    from livefuse.io.sources import FramesSource
    from livefuse.live import LiveRunner
    from livefuse.swap.gpu_frame import TensorStager

    cfg = EngineConfig(engine="neural", backend="torch", precision="fp32", device="cpu",
                       smooth=False)
    eng = cpu_device_path(Engine(cfg, components=build_neural(cfg, paths)))
    eng.set_source(load_image(source_path))
    stager = eng.path.stager
    assert isinstance(stager, TensorStager)
    frames = [_frame((10, 9), seed) for seed in (2, 3, 4)]
    for i, f in enumerate(frames):
        f[0, 0] = i  # which input an output came from
    expected = {i: eng.process(f.copy()).output for i, f in enumerate(frames)}
    copies = stager.copies  # the frames above were staged from their own arrays
    outs: list[np.ndarray] = []
    runner = LiveRunner(eng, FramesSource(frames, fps=200.0), [CallbackSink(
        lambda f, t: outs.append(f.copy()))], AppConfig(engine=cfg, cache=CacheConfig(
            enabled=False)), source_face=load_image(source_path))
    runner.start()
    deadline = time.monotonic() + 60
    while len(outs) < 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runner.stop(2.0)
    assert len(outs) >= 12, runner.errors
    assert stager.pool.lent >= len(outs)
    # the first frame may come before the inference thread has taken the engine (unlent)
    assert stager.copies - copies <= 1
    for out in outs:
        want = expected[int(out[0, 0, 0])]
        assert want is not None
        assert np.abs(out.astype(int) - want).max() <= 1


def test_track_leaves_the_state_process_does_on_the_device_path(
        paths: NeuralPaths, source_path: Path) -> None:
    """``Engine.track`` (a batch chunk's warm-up frames) on the GPU frame path, here on CPU
    tensors: no swap rendered, and the next frame comes out as after frames swapped whole."""
    cfg = EngineConfig(engine="neural", backend="torch", precision="fp32", device="cpu",
                       detect_every=2)
    frames = [_frame((10 + (i % 2), 9), 2 + i) for i in range(4)]

    def run(warm: bool) -> tuple[np.ndarray, int]:
        engine = cpu_device_path(Engine(cfg, components=build_neural(cfg, paths)))
        engine.set_source(load_image(source_path))
        renders = RenderCount(engine)
        for i, f in enumerate(frames[:-1]):
            p = engine.track(f.copy(), i, i * 33_000_000) if warm else \
                engine.process(f.copy(), i, i * 33_000_000)
            assert len(p.faces) == 1
            if warm:
                assert p.swapped == 0 and p.output is not None
                assert np.array_equal(p.output, f)  # as it came
        last = engine.process(frames[-1].copy(), 3, 3 * 33_000_000)
        assert last.output is not None and last.swapped == 1
        return last.output, renders.n

    tracked, renders = run(True)
    swapped, renders_whole = run(False)
    assert np.array_equal(tracked, swapped)
    assert (renders, renders_whole) == (1, 4)
