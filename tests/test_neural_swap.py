"""The neural swapper on a synthetic inswapper-signature model: differential checks against
insightface's own INSwapper, backend agreement, fp16 vs fp32, the FP16 guard, providers, VRAM."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from insightface.model_zoo.inswapper import INSwapper
from onnx import numpy_helper
from skimage import data

from livefuse.models.runtime import (
    ProviderError,
    create_session,
    ensure_fp16_model,
    fp16_copy_path,
    provider_name,
)
from livefuse.swap.neural import NeuralSwapError, NeuralSwapper, VramError, check_vram
from livefuse.swap.paste import align_crop, arcface_affine
from livefuse.testing.synthetic import build_synthetic_inswapper, face_kps

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # insightface's skimage call


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic_inswapper(tmp_path_factory.mktemp("m") / "tiny.onnx", width=8, seed=7)


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    return cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)


@pytest.fixture(scope="module")
def face() -> SimpleNamespace:
    e = np.random.default_rng(11).standard_normal(512).astype(np.float32)
    return SimpleNamespace(kps=face_kps(250, 140, 48, 8.0), normed_embedding=e / np.linalg.norm(e))


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_swap_equals_insightface_inswapper(backend: str, model_path: Path, frame: np.ndarray,
                                           face: SimpleNamespace) -> None:
    ref, ref_m = INSwapper(model_file=str(model_path)).get(frame, face, face, paste_back=False)
    sw = NeuralSwapper(model_path, backend=backend, precision="fp32")  # type: ignore[arg-type]
    m = arcface_affine(face.kps)
    np.testing.assert_allclose(m, ref_m, rtol=1e-6, atol=1e-4)
    crop = align_crop(frame, m)
    out = sw.swap_aligned(crop, sw.prepare_source(face.normed_embedding))
    assert out.shape == ref.shape == (128, 128, 3) and out.dtype == np.uint8
    diff = np.abs(out.astype(int) - ref.astype(int))
    assert diff.max() <= 1
    assert (out != crop).mean() > 0.9  # it is a real swap output, not the input passed through


def test_latent_is_insightfaces(model_path: Path, face: SimpleNamespace) -> None:
    sw = NeuralSwapper(model_path, backend="onnxruntime", precision="fp32")
    emap = numpy_helper.to_array(onnx.load(str(model_path)).graph.initializer[-1])
    want = face.normed_embedding.reshape(1, -1) @ emap
    want /= np.linalg.norm(want)
    got = sw.prepare_source(face.normed_embedding)
    assert got.shape == (1, 512) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_prepare_source_rejects_dlib_embedding(model_path: Path) -> None:
    sw = NeuralSwapper(model_path, backend="onnxruntime", precision="fp32")
    with pytest.raises(NeuralSwapError, match="128 values"):
        sw.prepare_source(np.ones(128, np.float32))


def test_backends_agree_in_fp32(model_path: Path) -> None:
    rng = np.random.default_rng(3)
    target = rng.random((1, 3, 128, 128), dtype=np.float32)
    ts = NeuralSwapper(model_path, backend="torch", precision="fp32")
    os_ = NeuralSwapper(model_path, backend="onnxruntime", precision="fp32")
    latent = ts.prepare_source(rng.standard_normal(512))
    a, b = ts.infer(target, latent), os_.infer(target, latent)
    rel = np.abs(a - b).max() / np.abs(b).max()
    assert rel <= 1e-4


def test_fp16_within_one_lsb_of_fp32(model_path: Path, frame: np.ndarray,
                                     face: SimpleNamespace) -> None:
    crop = align_crop(frame, arcface_affine(face.kps))
    outs = {}
    for backend, prec in [("onnxruntime", "fp32"), ("onnxruntime", "fp16"), ("torch", "fp16")]:
        sw = NeuralSwapper(model_path, backend=backend, precision=prec)  # type: ignore[arg-type]
        assert sw.precision_in_use == prec
        outs[backend, prec] = sw.swap_aligned(crop, sw.prepare_source(face.normed_embedding))
    ref = outs["onnxruntime", "fp32"].astype(float)
    for key in [("onnxruntime", "fp16"), ("torch", "fp16")]:
        d = np.abs(outs[key].astype(float) - ref)
        # every pixel within one 8-bit level (measured: max 1, mean 0.05 onnxruntime, 0.07 torch)
        assert d.max() <= 1, (key, d.max())
        assert d.mean() <= 0.2, (key, d.mean())
        assert d.max() > 0, key  # fp16 really ran (bit-identical output would mean it did not)


def test_fp16_copy_is_cached_beside_the_original(model_path: Path) -> None:
    half = ensure_fp16_model(model_path)
    assert half == fp16_copy_path(model_path) and half.parent == model_path.parent
    proto = onnx.load(str(half))
    assert proto.graph.initializer[-1].name == "emap"
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    mtime = os.stat(half).st_mtime_ns
    time.sleep(0.01)
    assert ensure_fp16_model(model_path) == half
    assert os.stat(half).st_mtime_ns == mtime  # reused, not rewritten
    assert ensure_fp16_model(half) == half  # already fp16


@pytest.mark.parametrize(("backend", "bad"), [("torch", "nan"), ("onnxruntime", "flat"),
                                              ("torch", "black")])
def test_bad_fp16_output_is_recomputed_in_fp32_and_latched(
        backend: str, bad: str, model_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(5)
    target = rng.random((1, 3, 128, 128), dtype=np.float32)
    ref_sw = NeuralSwapper(model_path, backend=backend, precision="fp32")  # type: ignore[arg-type]
    latent = ref_sw.prepare_source(rng.standard_normal(512))
    want = ref_sw.infer(target, latent)

    sw = NeuralSwapper(model_path, backend=backend, precision="fp16")  # type: ignore[arg-type]
    fill = {"nan": np.nan, "flat": 0.5, "black": 0.0}[bad]
    sw.runner.infer = lambda t, lat: np.full((1, 3, 128, 128), fill, np.float32)  # type: ignore[method-assign,assignment]
    with caplog.at_level(logging.WARNING, logger="livefuse.swap.neural"):
        got = sw.infer(target, latent)
    np.testing.assert_array_equal(got, want)
    assert sw.fallbacks == 1
    assert sw.precision_in_use == "fp32 (fallback)"
    assert "fp32" in caplog.text and ("non-finite" if bad == "nan" else bad) in caplog.text
    sw.infer(target, latent)
    assert sw.fallbacks == 1  # latched: no second retry


def test_swap_in_frame_touches_only_the_face(model_path: Path, frame: np.ndarray,
                                             face: SimpleNamespace) -> None:
    sw = NeuralSwapper(model_path, backend="torch", precision="fp32")
    out = frame.copy()
    face2 = SimpleNamespace(kps=face_kps(400, 380, 40, -10.0))
    n = sw.swap_all(out, [face, face2], sw.prepare_source(face.normed_embedding))  # type: ignore[list-item]
    assert n == 2
    changed = (out != frame).any(2)
    assert 0.01 < changed.mean() < 0.15
    assert not changed[:, :150].any()  # far from both faces


def test_unknown_backend() -> None:
    with pytest.raises(NeuralSwapError, match="tensorflow"):
        NeuralSwapper("x.onnx", backend="tensorflow")  # type: ignore[arg-type]


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(),
                    reason="CUDA provider present: no fallback to observe")
def test_provider_fallback_is_reported_loudly(model_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="livefuse.models.runtime"):
        sess = create_session(model_path, ["cuda", "cpu"])
    assert sess.fallback and sess.missing == ["CUDAExecutionProvider"]
    assert sess.active == ["CPUExecutionProvider"]
    assert "CUDAExecutionProvider" in caplog.text and "not active" in caplog.text
    with pytest.raises(ProviderError, match="not active"):
        create_session(model_path, ["tensorrt"], trt_cache_dir=model_path.parent / "trt",
                       strict=True)


def test_cpu_session_is_not_a_fallback(model_path: Path) -> None:
    sess = create_session(model_path, ["cpu"], threads=1)
    assert not sess.fallback and sess.active == ["CPUExecutionProvider"]


def test_provider_names_and_missing_file(tmp_path: Path) -> None:
    assert provider_name("directml") == "DmlExecutionProvider"
    assert provider_name("CoreMLExecutionProvider") == "CoreMLExecutionProvider"
    with pytest.raises(ProviderError, match="unknown execution provider 'vulkan'"):
        provider_name("vulkan")
    with pytest.raises(ProviderError, match="file not found"):
        create_session(tmp_path / "none.onnx")


def test_vram_guard() -> None:
    assert check_vram("cpu") == 0.0
    assert check_vram("cuda", 0.85, mem_get_info=lambda: (50, 100)) == pytest.approx(0.5)
    with pytest.raises(VramError, match=r"90% .* above the 85% limit"):
        check_vram("cuda:0", 0.85, mem_get_info=lambda: (10, 100))
