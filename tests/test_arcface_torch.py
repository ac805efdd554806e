"""TorchArcFace against insightface's ArcFaceONNX on norm_crop crops of real faces, on the
w600k_r50 replica (random weights, the released architecture at full size)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from insightface.model_zoo.arcface_onnx import ArcFaceONNX
from insightface.utils import face_align
from replica_models import arcface_replica
from synthetic_faces import build_scrfd

from livefuse.faces.arcface_torch import (
    ARCFACE_TEMPLATE,
    TorchArcFace,
    similarity_to_template,
)
from livefuse.faces.insight import FaceModelError
from livefuse.imaging import load_image
from livefuse.samples import astronaut, insightface_image
from livefuse.swap.paste import ARCFACE_DST, arcface_affine

T1_KPS = np.array([
    [[88.2, 330.2], [128.3, 310.5], [118.0, 337.0], [114.0, 371.0], [148.0, 352.0]],
    [[491.7, 320.5], [540.0, 333.8], [509.0, 365.0], [482.0, 369.0], [530.0, 381.0]],
    [[1148.7, 327.8], [1192.2, 324.8], [1164.0, 348.0], [1153.0, 367.0], [1196.0, 364.0]],
], np.float32)
"""kps of three of t1.jpg's six faces: livefuse's dlib analyser (68-point landmarks reduced to
5 points), rounded to 0.1 px; fixed here so the test needs no detector."""


@functools.cache
def _faces() -> tuple[np.ndarray, np.ndarray]:
    """t1.jpg and :data:`T1_KPS`, plus the first face turned 25 degrees about its nose and moved
    half out of the left edge: ``(frame, kps (4, 5, 2))``."""
    frame = load_image(insightface_image("t1.jpg")).bgr
    k0 = T1_KPS[0] - T1_KPS[0][2]
    a = np.deg2rad(25)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]], np.float32)
    kps = [*T1_KPS, k0 @ rot.T + (5.0, T1_KPS[0][2, 1])]
    return frame, np.stack(kps).astype(np.float32)


@functools.cache
def _reference() -> ArcFaceONNX:
    path = arcface_replica()
    return ArcFaceONNX(model_file=str(path),
                       session=ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))


@functools.cache
def _reference_feats() -> np.ndarray:
    frame, kps = _faces()
    crops = [face_align.norm_crop(frame, k) for k in kps]
    feats = np.concatenate([_reference().get_feat(c) for c in crops])
    return feats / np.linalg.norm(feats, axis=1, keepdims=True)


@functools.cache
def _model(precision: str) -> TorchArcFace:
    return TorchArcFace(arcface_replica(), precision=precision)


@pytest.mark.parametrize("precision, floor", [("fp32", 0.999), ("fp16", 0.995),
                                              ("bf16", 0.99)])
def test_embed_matches_insightface(precision: str, floor: float) -> None:
    frame, kps = _faces()
    ours = _model(precision).embed(torch.from_numpy(frame), kps)
    assert ours.shape == (4, 512) and ours.dtype == torch.float32
    np.testing.assert_allclose(ours.norm(dim=1).numpy(), 1.0, atol=1e-5)
    cos = (ours.numpy() * _reference_feats()).sum(1)
    assert cos.min() >= floor, cos
    if precision == "fp32":
        assert cos.min() >= 0.9999, cos


def test_the_replica_tells_faces_and_mistakes_apart() -> None:
    """The comparison above can fail: different faces give far-apart embeddings, and a crop in
    BGR instead of RGB order (a plausible bug) is far below the cosine floor."""
    feats = _reference_feats()
    cross = feats @ feats.T
    assert cross[np.triu_indices(4, 1)].max() < 0.9
    frame, kps = _faces()
    crop = face_align.norm_crop(frame, kps[0])
    swapped = _model("fp32").embed_crops(torch.from_numpy(np.ascontiguousarray(crop[..., ::-1])))
    assert float(swapped[0] @ torch.from_numpy(feats[0])) < 0.98


def test_embed_crops_of_norm_crop_match() -> None:
    frame, kps = _faces()
    crops = np.stack([face_align.norm_crop(frame, k) for k in kps])
    ours = _model("fp32").embed_crops(torch.from_numpy(crops)).numpy()
    assert ((ours * _reference_feats()).sum(1) >= 0.99999).all()
    one = _model("fp32").embed_crops(torch.from_numpy(crops[2])).numpy()
    np.testing.assert_allclose(one[0], ours[2], atol=1e-5)


def test_aligned_crops_are_norm_crops() -> None:
    """One batched grid_sample gives norm_crop's crops: within a level or two of cv2's
    fixed-point bilinear, black outside the frame."""
    frame, kps = _faces()
    ours = _model("fp32").aligned_crops(torch.from_numpy(frame), kps).numpy()
    ref = np.stack([face_align.norm_crop(frame, k)[..., ::-1].transpose(2, 0, 1) for k in kps])
    diff = np.abs(ours - ref.astype(np.float32))
    assert diff.mean() < 0.3 and diff.max() <= 3, (diff.mean(), diff.max())
    assert (ours[3][:, :, :20] == 0).mean() > 0.5  # the half-outside face is black there


def test_similarity_is_insightfaces_estimate() -> None:
    rng = np.random.default_rng(5)
    kps = (ARCFACE_DST[None] * rng.uniform(0.5, 4, (32, 1, 1)) + rng.uniform(0, 900, (32, 1, 2))
           + rng.normal(0, 3, (32, 5, 2))).astype(np.float32)
    kps[::4] = kps[::4, :, ::-1]  # some mirror-image layouts (Umeyama's reflection case)
    ours = similarity_to_template(torch.from_numpy(kps), torch.from_numpy(ARCFACE_TEMPLATE))
    for k, m in zip(kps, ours.numpy(), strict=True):
        ref = face_align.estimate_norm(k, 112)
        np.testing.assert_allclose(m, ref, atol=1e-3, rtol=1e-4)
        np.testing.assert_allclose(m, arcface_affine(k, 112), atol=1e-3, rtol=1e-4)
    np.testing.assert_array_equal(ARCFACE_TEMPLATE, ARCFACE_DST)


def test_astronaut_and_other_inputs() -> None:
    m = _model("fp32")
    a = astronaut()
    k = np.array([[220, 175], [282, 168], [253, 205], [228, 240], [283, 236]], np.float32)
    one = m.embed(torch.from_numpy(a), k)  # a single (5, 2) face
    ref = _reference().get_feat(face_align.norm_crop(a, k))[0]
    assert float(one[0] @ torch.from_numpy(ref / np.linalg.norm(ref))) >= 0.999
    with pytest.raises(ValueError, match=r"\(N, 5, 2\)"):
        m.embed(torch.from_numpy(a), np.zeros((2, 4, 2)))
    with pytest.raises(ValueError, match="uint8"):
        m.embed(torch.zeros(10, 10, 3), k)
    with pytest.raises(ValueError, match="112"):
        m.embed_crops(torch.zeros(2, 96, 96, 3, dtype=torch.uint8))
    assert str(m.runtime) == "cpu fp32" and m.dim == 512


def test_loader_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FaceModelError, match=r"nothere\.onnx"):
        TorchArcFace(tmp_path / "nothere.onnx")
    cut = tmp_path / "rec_cut.onnx"
    with open(arcface_replica(), "rb") as f:
        cut.write_bytes(f.read(5_000_000))
    with pytest.raises(FaceModelError, match=r"rec_cut\.onnx"):
        TorchArcFace(cut)
    det = build_scrfd(tmp_path / "det.onnx")
    with pytest.raises(FaceModelError, match=r"det\.onnx.*9 outputs: not an ArcFace"):
        TorchArcFace(det)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_fp16_matches_insightface() -> None:
    frame, kps = _faces()
    m = TorchArcFace(arcface_replica(), device="cuda", precision="fp16")
    ours = m.embed(torch.from_numpy(frame).cuda(), torch.from_numpy(kps).cuda()).cpu().numpy()
    cos = (ours * _reference_feats()).sum(1)
    assert cos.min() >= 0.995, cos
