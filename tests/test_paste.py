"""Alignment and paste-back against insightface's own (face_align.estimate_norm, INSwapper)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from insightface.model_zoo.inswapper import INSwapper
from insightface.utils import face_align
from skimage import data

from livefuse.swap.gpu_frame import align_crops, paste_patches
from livefuse.swap.neural import NeuralSwapper
from livefuse.swap.paste import (
    align_crop,
    arcface_affine,
    feather_mask,
    paste,
    paste_back,
    paste_roi,
    rewarp,
    translation,
)
from livefuse.testing.synthetic import build_synthetic_inswapper, face_kps
from livefuse.types import Patch


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic_inswapper(tmp_path_factory.mktemp("m") / "tiny.onnx", width=4, seed=1)


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    img = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)
    return cv2.resize(img, (960, 720))


def _core(affine: np.ndarray, shape: tuple[int, ...], lo: int = 40, hi: int = 88) -> np.ndarray:
    """Boolean mask of frame pixels whose aligned position lies in [lo, hi)² (deep in the face)."""
    h, w = shape[:2]
    ys, xs = np.mgrid[0:h, 0:w]
    u = affine[0, 0] * xs + affine[0, 1] * ys + affine[0, 2]
    v = affine[1, 0] * xs + affine[1, 1] * ys + affine[1, 2]
    return (u >= lo) & (u < hi) & (v >= lo) & (v < hi)


@pytest.mark.parametrize("angle", [0.0, 17.0, -35.0])
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_affine_matches_insightface(angle: float) -> None:
    kps = face_kps(300, 250, 60, angle)
    for size in (112, 128, 256):
        np.testing.assert_allclose(arcface_affine(kps, size),
                                   face_align.estimate_norm(kps, size), rtol=1e-6, atol=1e-4)


def test_feather_mask_shape() -> None:
    m = feather_mask(128)
    assert m.shape == (128, 128) and m.dtype == np.float32
    assert m[64, 64] == pytest.approx(1.0)
    assert m[0].max() == 0.0 and m[:, -1].max() == 0.0
    assert m.min() >= 0.0 and m.max() <= 1.0
    row = m[64, :64]
    assert (np.diff(row) >= -1e-6).all()  # rises monotonically toward the centre


def test_paste_matches_insightface_and_stays_in_roi(model_path: Path, frame: np.ndarray) -> None:
    kps = face_kps(480, 330, 70, 12.0)
    face = SimpleNamespace(kps=kps, normed_embedding=_embedding(0))
    ref = INSwapper(model_file=str(model_path)).get(frame.copy(), face, face, paste_back=True)
    sw = NeuralSwapper(model_path, backend="onnxruntime", precision="fp32")
    ours = frame.copy()
    m = arcface_affine(kps)
    fake = sw.swap_aligned(align_crop(frame, m), sw.prepare_source(face.normed_embedding))
    roi = paste_back(ours, fake, m)
    assert roi is not None
    x0, y0, x1, y1 = roi
    outside = np.ones(frame.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    np.testing.assert_array_equal(ours[outside], frame[outside])
    assert (x1 - x0) * (y1 - y0) < 0.2 * frame.shape[0] * frame.shape[1]
    core = _core(m, frame.shape)
    assert core.sum() > 1000
    diff = np.abs(ours[core].astype(int) - ref[core].astype(int))
    # rounding (ours) vs truncation (insightface) of the crop, then one bilinear warp: <= 2 LSB
    assert diff.max() <= 2
    assert (ours[core] != frame[core]).mean() > 0.5  # the face really was replaced


def test_face_partly_outside_the_frame(model_path: Path, frame: np.ndarray) -> None:
    kps = face_kps(15, 700, 80, -20.0)  # centre near the bottom-left corner
    sw = NeuralSwapper(model_path, backend="onnxruntime", precision="fp32")
    face = SimpleNamespace(kps=kps, normed_embedding=_embedding(1))
    ours = frame.copy()
    assert sw.swap(ours, face, sw.prepare_source(face.normed_embedding))  # type: ignore[arg-type]
    m = arcface_affine(kps)
    x0, y0, x1, y1 = paste_roi(m, 128, frame.shape)
    assert x0 == 0 and y1 == frame.shape[0]
    changed = np.argwhere((ours != frame).any(2))
    assert len(changed) > 100
    assert changed[:, 0].min() >= y0 and changed[:, 1].max() < x1
    ref = INSwapper(model_file=str(model_path)).get(frame.copy(), face, face, paste_back=True)
    core = _core(m, frame.shape)
    assert core.sum() > 300
    assert np.abs(ours[core].astype(int) - ref[core].astype(int)).max() <= 2


def test_face_outside_the_frame_is_skipped(frame: np.ndarray) -> None:
    m = arcface_affine(face_kps(-500, -500, 60))
    out = frame.copy()
    assert paste_back(out, np.zeros((128, 128, 3), np.uint8), m) is None
    np.testing.assert_array_equal(out, frame)


def test_torch_align_and_paste_match_opencv(frame: np.ndarray) -> None:
    m = arcface_affine(face_kps(400, 300, 64, 25.0))
    crop = align_crop(frame, m)
    crop_t = align_crops(torch.from_numpy(frame), [m])
    as_bgr = (crop_t[0].permute(1, 2, 0).flip(-1) * 255).round().byte().numpy()
    d = np.abs(as_bgr.astype(int) - crop.astype(int))
    assert d.mean() < 0.5 and np.percentile(d, 99) <= 3
    fake = np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8)
    fake = np.asarray(cv2.GaussianBlur(fake, (9, 9), 0), np.uint8)
    cv_out = frame.copy()
    roi = paste_back(cv_out, fake, m)
    t_out = torch.from_numpy(frame.copy())
    fake_rgb = torch.from_numpy(fake[:, :, ::-1].copy()).permute(2, 0, 1).float() / 255
    mask_t = torch.from_numpy(np.array(feather_mask(128)))
    assert paste_patches(t_out, [Patch(image=fake_rgb, alpha=mask_t, affine=m)]) == [roi]
    d = np.abs(t_out.numpy().astype(int) - cv_out.astype(int))
    assert d.mean() < 0.2 and d.max() <= 8


def test_batched_align_and_paste_equal_one_face_at_a_time(frame: np.ndarray) -> None:
    """Several faces of a frame go through one grid_sample each way; the result is the same as
    aligning and pasting them one by one (overlapping faces paste in order)."""
    rng = np.random.default_rng(3)
    affines = [arcface_affine(face_kps(x, y, e, a)) for x, y, e, a in
               ((200, 200, 50, 0.0), (520, 330, 90, -20.0), (560, 360, 60, 35.0),
                (900, 700, 70, 10.0))]  # the last one partly outside the frame
    frame_t = torch.from_numpy(frame)
    batch = align_crops(frame_t, affines)
    for k, m in enumerate(affines):
        np.testing.assert_allclose(batch[k].numpy(), align_crops(frame_t, [m])[0].numpy(),
                                   atol=1e-6)
    mask_t = torch.from_numpy(np.array(feather_mask(128)))
    patches = [Patch(image=torch.from_numpy(rng.random((3, 128, 128), np.float32)),
                     alpha=mask_t, affine=m) for m in affines]
    together = torch.from_numpy(frame.copy())
    rois = paste_patches(together, patches)
    one_by_one = torch.from_numpy(frame.copy())
    for p, roi in zip(patches, rois, strict=True):
        assert paste_patches(one_by_one, [p]) == [roi]
    assert all(r is not None for r in rois)
    np.testing.assert_array_equal(together.numpy(), one_by_one.numpy())


def test_bbox_local_patch_is_sliced_not_resampled(frame: np.ndarray) -> None:
    """A classic (translation) patch pastes exactly its pixels where alpha is 1."""
    img = np.random.default_rng(1).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    alpha = np.ones((40, 60), np.float32)
    out = frame.copy()
    roi = paste(out, Patch(image=img, alpha=alpha, affine=translation(100, 50)))
    assert roi is not None
    np.testing.assert_array_equal(out[50:90, 100:160], img)
    untouched = np.ones(frame.shape[:2], bool)
    untouched[50:90, 100:160] = False
    np.testing.assert_array_equal(out[untouched], frame[untouched])


def test_rewarp_follows_the_face_in_one_resample(frame: np.ndarray) -> None:
    """A cached patch re-warped by the similarity between the face's points then and now lands
    where a fresh render at the new place would: same pixels as pasting with the new affine."""
    kps_then = face_kps(400, 300, 64, 0.0)
    kps_now = face_kps(430, 310, 70, 12.0)
    fake = np.asarray(cv2.GaussianBlur(np.random.default_rng(2).integers(
        0, 256, (128, 128, 3), dtype=np.uint8), (7, 7), 0), np.uint8)
    mask = feather_mask(128)
    cached = Patch(image=fake, alpha=mask, affine=arcface_affine(kps_then))
    moved = rewarp(cached, kps_then, kps_now)
    np.testing.assert_allclose(moved.affine, arcface_affine(kps_now), atol=1e-6)
    a, b = frame.copy(), frame.copy()
    assert paste(a, moved) == paste(b, Patch(image=fake, alpha=mask,
                                             affine=arcface_affine(kps_now)))
    np.testing.assert_array_equal(a, b)


def _embedding(seed: int) -> np.ndarray:
    e = np.random.default_rng(seed).standard_normal(512).astype(np.float32)
    return e / np.linalg.norm(e)


def test_a_rounded_up_paste_box_writes_the_same_pixels(frame: np.ndarray) -> None:
    """The GPU paste samples a box rounded up (so a CUDA graph is reused while a face moves);
    the px outside each face's exact region keep the frame's value, also at the frame's edges
    and where faces overlap."""
    rng = np.random.default_rng(5)
    affines = [arcface_affine(face_kps(x, y, e, a)) for x, y, e, a in
               ((40, 30, 50, 0.0), (520, 330, 90, -20.0), (560, 360, 60, 35.0),
                (frame.shape[1] - 20, frame.shape[0] - 10, 70, 10.0))]
    mask_t = torch.from_numpy(np.array(feather_mask(128)))
    patches = [Patch(image=torch.from_numpy(rng.random((3, 128, 128), np.float32)),
                     alpha=torch.ones(128, 128) if k == 1 else mask_t, affine=m)
               for k, m in enumerate(affines)]
    exact = torch.from_numpy(frame.copy())
    rois = paste_patches(exact, patches, step=1)
    for step in (32, 100, 4096):
        rounded = torch.from_numpy(frame.copy())
        assert paste_patches(rounded, patches, step=step) == rois
        np.testing.assert_array_equal(rounded.numpy(), exact.numpy())
    changed = (exact.numpy() != frame).any(2)
    assert changed.sum() > 5000
    inside = np.zeros_like(changed)
    for x0, y0, x1, y1 in (r for r in rois if r is not None):
        inside[y0:y1, x0:x1] = True
    assert not (changed & ~inside).any()


def test_align_and_paste_graphs_equal_the_eager_functions_on_the_cpu() -> None:
    """The align and paste graphs' bookkeeping (one entry per frame size holding the work frame,
    keys by face count, patch size and box bucket) on the CPU stand-in of CUDA graphs."""
    from graph_scenes import align_and_paste_scene

    from livefuse.models.graph_cache import EagerGraphs, GraphCache

    align_and_paste_scene(GraphCache(EagerGraphs()), "cpu")


def test_a_cache_hit_pastes_without_refilling_the_static_buffers() -> None:
    """A cache hit pastes the cached patch's own tensors again with a new affine: the paste
    graph's static image and alpha buffers already hold them, so they are not stacked again
    (host CPU on 4 frames in 5). Written in place, or replaced by another patch, they are, and
    every paste equals the eager one."""
    from graph_scenes import cached_patch_scene

    from livefuse.models.graph_cache import EagerGraphs, GraphCache

    fills = cached_patch_scene(GraphCache(EagerGraphs()), "cpu")
    assert fills == [True, False, False, False, True, True, True]


def test_a_growing_face_meets_few_paste_boxes() -> None:
    """With graphs the paste box is a square from a ladder of ~1.25 steps: a face growing from
    10 % to 100 % of a 1080p frame's height meets 11 boxes (a graph each, all captured by the
    warm-up), not one per 32 px (30 of them)."""
    from livefuse.swap.gpu_frame import BOX_SIDES, paste_box

    boxes = {paste_box([(100, 50, 100 + s, 50 + s)], (1920, 1080), True)
             for s in range(108, 1081, 4)}
    assert len(boxes) <= 12
    assert all(min(bw, 1080) == bh or bh == 1080 for bw, bh in boxes)
    assert paste_box([(0, 0, 61, 40)], (1920, 1080), True) == (64, 64)
    assert paste_box([(0, 0, 61, 40)], (1920, 1080), False) == (61, 40)
    assert BOX_SIDES[0] == 64
