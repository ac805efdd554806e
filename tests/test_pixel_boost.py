"""Pixel boost: the 128 px model on the strided sub-grids of a larger aligned crop, as one batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data

from livefuse.swap.neural import NeuralSwapper
from livefuse.swap.neural_engine import NeuralRenderer, NeuralSource, explode, implode
from livefuse.swap.paste import align_crop, arcface_affine
from livefuse.testing.synthetic import build_synthetic_inswapper, face_kps
from livefuse.types import Face, StagedFrame


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic_inswapper(tmp_path_factory.mktemp("pb") / "tiny.onnx", width=4,
                                     seed=2)


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    import cv2

    return np.ascontiguousarray(cv2.resize(data.astronaut()[..., ::-1], (960, 720)))


def _face() -> Face:
    kps = face_kps(480, 330, 120, 8.0)
    return Face(bbox=np.array([360, 200, 600, 480], np.float32), kps=kps)


def _latent(sw: NeuralSwapper) -> np.ndarray:
    e = np.random.default_rng(4).standard_normal(512).astype(np.float32)
    return sw.prepare_source(e / np.linalg.norm(e))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_implode_explode_round_trip_and_tiles_are_strided(k: int) -> None:
    crop = np.random.default_rng(k).integers(0, 256, (128 * k, 128 * k, 3), dtype=np.uint8)
    tiles = implode(crop, k)
    assert tiles.shape == (k * k, 128, 128, 3)
    np.testing.assert_array_equal(tiles[1], crop[0::k, 1::k])  # tile (0, 1)
    np.testing.assert_array_equal(tiles[k], crop[1::k, 0::k])  # tile (1, 0)
    np.testing.assert_array_equal(explode(tiles, k), crop)


@pytest.mark.parametrize("size", [256, 384])
def test_batched_pixel_boost_equals_its_per_tile_runs(model_path: Path, frame: np.ndarray,
                                                      size: int) -> None:
    sw = NeuralSwapper(model_path, backend="torch", precision="fp32", device="cpu")
    latent = _latent(sw)
    renderer = NeuralRenderer(sw, analyser=None, pixel_boost=size)  # type: ignore[arg-type]
    face = _face()
    [patch] = renderer.render(StagedFrame(host=frame), [face], NeuralSource(latent, face))
    assert patch is not None and patch.image.shape == (size, size, 3)
    k = size // 128
    m = arcface_affine(face.kps, size)
    np.testing.assert_allclose(patch.affine, m)
    tiles = implode(align_crop(frame, m, size), k)
    one_by_one = explode(np.stack([sw.swap_aligned(t, latent) for t in tiles]), k)
    assert np.abs(patch.image.astype(int) - one_by_one).max() <= 1


def test_device_pixel_boost_matches_the_host_path(model_path: Path, frame: np.ndarray) -> None:
    """The tensor path (all faces' sub-grids in one batch on the device) gives the host path's
    crop; run here with CPU tensors standing in for the device."""
    sw = NeuralSwapper(model_path, backend="torch", precision="fp32", device="cpu")
    latent = _latent(sw)
    face = _face()
    faces = [face, Face(bbox=face.bbox - 100, kps=face.kps - 100)]
    host = NeuralRenderer(sw, analyser=None, pixel_boost=256)  # type: ignore[arg-type]
    expected = host.render(StagedFrame(host=frame), faces, NeuralSource(latent, face))
    sw.on_device = True
    dev = NeuralRenderer(sw, analyser=None, pixel_boost=256)  # type: ignore[arg-type]
    staged = StagedFrame(host=frame, device=torch.from_numpy(frame))
    got = dev.render(staged, faces, NeuralSource(latent, face))
    for e, g in zip(expected, got, strict=True):
        assert e is not None and g is not None
        as_bgr = (g.image.permute(1, 2, 0).flip(-1) * 255).round().clamp(0, 255).byte().numpy()
        d = np.abs(as_bgr.astype(int) - e.image.astype(int))
        assert d.mean() < 0.5 and np.percentile(d, 99) <= 3
