"""The face enhancer (livefuse.swap.enhance) on random-weight replicas with GFPGAN's signature,
the FFHQ-512 alignment, and the GFPGAN-architecture replica used by the GPU benchmark."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from skimage.transform import SimilarityTransform

from livefuse.faces.align import FFHQ_512, ffhq_affine
from livefuse.models.download import ModelMissingError
from livefuse.models.graph_runner import read_io
from livefuse.swap import masks as M
from livefuse.swap.enhance import FaceEnhancer
from livefuse.swap.paste import align_crop
from livefuse.testing import replicas_masks as R
from livefuse.testing.synthetic import face_kps

N = 512
# Same model, same input, two backends: outputs agree to a uint8 rounding step.
BACKEND_MAX_LEVELS = 1
# Host crop (cv2.warpAffine) vs device crop (grid_sample) of the same frame: within 2 levels,
# mean under half a level.
HOST_DEVICE_MAX_LEVELS, HOST_DEVICE_MEAN_LEVELS = 2, 0.5


@pytest.fixture(scope="module")
def enhancer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return R.export_gfpgan(R.random_unet_enhancer(0), tmp_path_factory.mktemp("enh") / "e.onnx")


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    rng = np.random.default_rng(3)
    f = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
    return np.ascontiguousarray(np.clip(f.astype(np.int32) // 2 + 64, 0, 255).astype(np.uint8))


KPS = [face_kps(300, 230, 90, angle_deg=12.0), face_kps(520, 260, 60, angle_deg=-5.0)]


def _enhancer(path: Path, backend: str, **kw) -> FaceEnhancer:  # type: ignore[no-untyped-def]
    module = R.random_unet_enhancer(0) if backend == "torch" else None
    return FaceEnhancer(path, backend, module=module, **kw)


def test_ffhq_alignment_matches_an_independent_similarity_fit() -> None:
    """ffhq_affine vs scikit-image's SimilarityTransform fitted to the same template."""
    assert FFHQ_512.shape == (5, 2)
    np.testing.assert_allclose(FFHQ_512[:, 0].mean(), 256.5, atol=0.5)  # a centred face
    for kps in [*KPS, face_kps(100, 400, 30, angle_deg=170.0)]:
        for size in (512, 256):
            ref = SimilarityTransform()
            assert ref.estimate(kps.astype(np.float64), FFHQ_512 * size / 512.0)
            np.testing.assert_allclose(ffhq_affine(kps, size), ref.params[:2], atol=1e-6)
    # a face already in template position maps onto itself
    np.testing.assert_allclose(ffhq_affine(FFHQ_512), [[1, 0, 0], [0, 1, 0]], atol=1e-5)


def test_replica_has_the_released_signature(enhancer_file: Path) -> None:
    io = read_io(enhancer_file)
    assert io.input_names == ("input",) and io.output_names == ("output",)
    assert io.input_shapes == ((1, 3, N, N),) and io.output_shapes == ((1, 3, N, N),)


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_blend_0_is_the_crop_and_100_the_model_output(enhancer_file: Path, frame: np.ndarray,
                                                       backend: str) -> None:
    enh = _enhancer(enhancer_file, backend)
    crops = [align_crop(frame, ffhq_affine(k), N) for k in KPS]
    model_out = enh.restore_host(crops)
    assert model_out.shape == (2, N, N, 3) and model_out.dtype == np.uint8
    assert np.abs(model_out.astype(int) - np.stack(crops)).mean() > 5  # the model does something
    for blend, want in ((0, crops), (100, list(model_out))):
        patches = enh.enhance(frame, KPS, blend=blend)
        assert len(patches) == 2
        for p, w, k in zip(patches, want, KPS, strict=True):
            assert p is not None and p.image.shape == (N, N, 3) and p.image.dtype == np.uint8
            np.testing.assert_array_equal(p.image, w)
            np.testing.assert_allclose(p.affine, ffhq_affine(k))
            assert p.alpha is enh.alpha and p.alpha.shape == (N, N)
    half = enh.enhance(frame, KPS[:1], blend=50)[0]
    assert half is not None
    mid = (crops[0].astype(np.float32) + model_out[0]) / 2
    assert np.abs(half.image - mid).max() <= 1.0


def test_backends_agree(enhancer_file: Path, frame: np.ndarray) -> None:
    crops = [align_crop(frame, ffhq_affine(k), N) for k in KPS]
    a = _enhancer(enhancer_file, "onnxruntime").restore_host(crops).astype(int)
    b = _enhancer(enhancer_file, "torch").restore_host(crops).astype(int)
    assert np.abs(a - b).max() <= BACKEND_MAX_LEVELS


def test_device_frame_gives_device_patches_like_the_host(enhancer_file: Path,
                                                         frame: np.ndarray) -> None:
    """The GPU path on a CPU tensor: the staged-frame layout in, (3, 512, 512) RGB [0, 1] out."""
    enh = _enhancer(enhancer_file, "torch")
    host = enh.enhance(frame, KPS)
    dev = enh.enhance(torch.from_numpy(frame), KPS)
    for h, d in zip(host, dev, strict=True):
        assert h is not None and d is not None and d.on_device
        assert d.image.shape == (3, N, N) and d.image.dtype == torch.float32
        assert float(d.image.min()) >= 0.0 and float(d.image.max()) <= 1.0
        assert isinstance(d.alpha, torch.Tensor) and d.alpha.shape == (N, N)
        as_bgr = (d.image.permute(1, 2, 0).flip(-1) * 255).round().numpy()
        diff = np.abs(as_bgr - h.image)
        assert diff.max() <= HOST_DEVICE_MAX_LEVELS and diff.mean() < HOST_DEVICE_MEAN_LEVELS
        np.testing.assert_allclose(d.affine, h.affine)


def test_faces_outside_the_frame_and_the_occluder(enhancer_file: Path, tmp_path: Path,
                                                  frame: np.ndarray) -> None:
    occ = M.Occluder(R.export_xseg(R.random_xseg(0), tmp_path / "x.onnx"), "onnxruntime")
    enh = _enhancer(enhancer_file, "onnxruntime", occluder=occ, blend=100)
    f = frame.copy()
    cx, cy = KPS[0].mean(0).astype(int)
    f[cy - 75:cy - 25, cx - 50:cx + 50] = R.KEY_BGR  # something over the brows
    out = enh.enhance(f, [KPS[0], face_kps(-900, -900, 60)])
    assert out[1] is None
    p = out[0]
    assert p is not None and p.alpha.shape == (N, N)
    assert float(p.alpha.max()) > 0.9 and float(p.alpha.min()) == 0.0
    # the occluded pixels get no enhancement: alpha 0 inside the key-coloured object (its rim,
    # within the mask's feather of σ = 4 % of 512 px, blends)
    crop = align_crop(f, p.affine, N)
    key = np.all(np.abs(crop.astype(int) - R.KEY_BGR) < 8, axis=-1).astype(np.uint8)
    inner = cv2.erode(key, np.ones((31, 31), np.uint8)) > 0
    assert inner.sum() > 500 and float(p.alpha[inner].max()) < 0.02


def test_catalog_names_resolve_to_verified_files(tmp_path: Path) -> None:
    with pytest.raises(ModelMissingError, match="gpen_bfr_512"):
        FaceEnhancer("gpen_bfr_512", "onnxruntime", models_dir=tmp_path)


def test_gfpgan_architecture_replica() -> None:
    """The benchmark's GFPGAN-v1.4-architecture replica: full-size parameter count, and one CPU
    forward at reduced width and resolution (the full model runs in benchmarks/bench_enhancer.py).
    """
    full = R.GFPGANReplica(1.0)
    n = R.count_parameters(full)
    mlp = R.count_parameters(full.style_mlp)
    assert 84e6 < n - mlp < 86e6  # GFPGANv1.4.onnx holds 340 MB of float32 weights (~85 M)
    assert full.final_linear.out_features == 16 * 512
    del full
    small = R.random_gfpgan(0.0625)
    small_128 = R.GFPGANReplica(0.0625, size=128)
    small_128.load_state_dict({k: v for k, v in small.state_dict().items()
                               if k in small_128.state_dict()
                               and v.shape == small_128.state_dict()[k].shape}, strict=False)
    with torch.inference_mode():
        y = small_128(torch.rand(2, 3, 128, 128) * 2 - 1)
    assert y.shape == (2, 3, 128, 128) and torch.isfinite(y).all()
    assert float(y.std()) > 0.05


# ------------------------------------------- the torch path from the file (needs OnnxModule)

def test_onnx_module_occluder_and_parser_match_onnxruntime(tmp_path: Path) -> None:
    pytest.importorskip("livefuse.models.onnx_torch")
    rng = np.random.default_rng(1)
    crops = [rng.integers(0, 256, (128, 128, 3), dtype=np.uint8) for _ in range(2)]
    crops[0][10:50, 10:50] = R.KEY_BGR
    x = R.export_xseg(R.random_xseg(0), tmp_path / "x.onnx")
    p = R.export_bisenet(R.random_bisenet(0), tmp_path / "p.onnx")
    np.testing.assert_allclose(M.Occluder(x, "torch").masks(crops),
                               M.Occluder(x, "onnxruntime").masks(crops), atol=1e-4)
    np.testing.assert_allclose(M.FaceParser(p, "torch").region_masks(crops),
                               M.FaceParser(p, "onnxruntime").region_masks(crops), atol=1e-4)


def test_onnx_module_enhancer_matches_onnxruntime(enhancer_file: Path, frame: np.ndarray) -> None:
    pytest.importorskip("livefuse.models.onnx_torch")
    crops = [align_crop(frame, ffhq_affine(k), N) for k in KPS]
    a = FaceEnhancer(enhancer_file, "onnxruntime").restore_host(crops).astype(int)
    b = FaceEnhancer(enhancer_file, "torch").restore_host(crops).astype(int)
    assert np.abs(a - b).max() <= BACKEND_MAX_LEVELS


def test_onnx_module_runs_the_gfpgan_architecture_export(tmp_path: Path) -> None:
    pytest.importorskip("livefuse.models.onnx_torch")
    path = R.export_gfpgan(R.random_gfpgan(0.03125), tmp_path / "gfpgan.onnx")
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, N, N)).astype(np.float32)
    from livefuse.models.graph_runner import OrtGraph, TorchGraph

    ref = OrtGraph(path).run(x)[0]
    got = TorchGraph(path=path, precision="fp32").run(x)[0]
    np.testing.assert_allclose(got, ref, atol=1e-3)


def test_benchmark_runs_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/bench_enhancer.py imports without CUDA and prints its table on the CPU."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_enhancer.py"
    spec = importlib.util.spec_from_file_location("bench_enhancer", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--device", "cpu", "--width", "0.03125", "--n", "1", "--warmup", "0",
                     "--precisions", "fp32"]) == 0
    out = capsys.readouterr().out
    for row in ("enhancer (GFPGAN 1.4 arch)", "occluder (XSeg replica)",
                "parser (BiSeNet replica)"):
        assert row in out and "failed" not in out
