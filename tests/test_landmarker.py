"""The 106-point landmarker (insightface's 2d106det) against insightface's own ``Landmark`` class,
differentially, on a random-weight replica of the released architecture and real photos."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from insightface.model_zoo.landmark import Landmark
from replica_models import arcface_replica, landmark_replica

from livefuse.cache import pose_key, similarity
from livefuse.faces.insight import FaceModelError
from livefuse.faces.landmarker import (
    OrtLandmarker,
    TorchLandmarker,
    crop_affine,
    input_normalisation,
    landmarks_of,
)
from livefuse.imaging import load_image
from livefuse.testing.face_points import face_points_106, kps_of_106
from livefuse.testing.replica_landmark import build_landmark106_replica
from livefuse.types import Face, StagedFrame

CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def replica() -> Path:
    return landmark_replica()


@pytest.fixture(scope="module")
def photo_faces(t1_path: Path) -> tuple[np.ndarray, list[Face]]:
    """t1.jpg's six faces as CenterFace finds them (box and 5 kps; no dlib, so that this runs on
    the GPU machine too), plus one face half out of the frame."""
    from livefuse.faces.centerface import WIDE_INPUT, CenterFace

    img = load_image(t1_path).bgr
    found = CenterFace().detect(img, WIDE_INPUT)
    faces = [Face(bbox=b, kps=k) for b, k in zip(found.boxes, found.kps, strict=True)]
    assert len(faces) == 6
    # one face half out of the frame: the crop's black border must match too
    edge = Face(bbox=np.array([-40, 500, 60, 620], np.float32), kps=faces[0].kps)
    return img, [*faces, edge]


class _Obj(dict):  # type: ignore[type-arg]
    """insightface's Face is a dict with attributes; Landmark.get reads ``bbox`` and writes a
    key."""

    def __init__(self, bbox: np.ndarray) -> None:
        super().__init__()
        self.bbox = bbox


def _insightface(path: Path, img: np.ndarray, faces: list[Face]) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = Landmark(model_file=str(path), session=session)
    assert (ref.input_mean, ref.input_std, ref.lmk_num) == (0.0, 1.0, 106)
    return np.stack([ref.get(img, _Obj(f.bbox.astype(np.float64))) for f in faces])


def test_replica_has_the_released_signature(replica: Path) -> None:
    proto = onnx.load(str(replica))
    assert [i.name for i in proto.graph.input] == ["data"]
    assert [o.name for o in proto.graph.output] == ["fc1"]
    dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 192, 192]
    assert 4.5e6 < replica.stat().st_size < 6e6  # the released file: 5,030,888 B
    assert input_normalisation([n.name for n in proto.graph.node]) == (0.0, 1.0)


def test_onnxruntime_landmarks_equal_insightface(replica: Path,
                                                 photo_faces: tuple[np.ndarray, list[Face]]
                                                 ) -> None:
    img, faces = photo_faces
    ref = _insightface(replica, img, faces)
    got = OrtLandmarker(replica).landmarks(img, faces)
    out = np.stack([f.landmarks_106 for f in got])  # type: ignore[misc]
    assert np.abs(out - ref).max() < 1e-3
    # the landmarks depend on the picture (a degenerate replica would prove nothing)
    rel = ref - ref.mean(1, keepdims=True)
    assert np.abs(rel[0] - rel[1]).max() > 1.0
    for f, g in zip(faces, got, strict=True):  # every other field kept
        assert g.bbox is f.bbox and g.kps is f.kps and g.landmarks is f.landmarks


def test_torch_runner_equals_insightface_on_the_cpu(replica: Path,
                                                    photo_faces: tuple[np.ndarray, list[Face]]
                                                    ) -> None:
    """One batch of all faces, crops cut by grid_sample: within 0.1 px of insightface (whose
    crop is cv2.warpAffine's fixed-point bilinear)."""
    img, faces = photo_faces
    ref = _insightface(replica, img, faces)
    got = TorchLandmarker(replica, "cpu").landmarks(StagedFrame(host=img), faces)
    out = np.stack([f.landmarks_106 for f in got])  # type: ignore[misc]
    assert np.abs(out - ref).max() < 0.1


def test_a_batched_export_gives_the_same_landmarks(replica: Path, tmp_path: Path,
                                                   photo_faces: tuple[np.ndarray, list[Face]]
                                                   ) -> None:
    img, faces = photo_faces
    batched = build_landmark106_replica(tmp_path / "b.onnx", batch=None)
    one = OrtLandmarker(replica)
    many = OrtLandmarker(batched)
    assert many.batched and not one.batched
    a = np.stack([f.landmarks_106 for f in one.landmarks(img, faces)])  # type: ignore[misc]
    b = np.stack([f.landmarks_106 for f in many.landmarks(img, faces)])  # type: ignore[misc]
    assert np.abs(a - b).max() < 1e-3


def test_a_graph_that_runs_one_image_at_a_time_gets_faces_one_by_one(
        tmp_path: Path, photo_faces: tuple[np.ndarray, list[Face]]) -> None:
    """An export whose Reshape fixes the batch at 1 (the released file's internals are not
    published): the torch runner sees that when it plans a batch of 2 and runs faces singly."""
    img, faces = photo_faces
    fixed = build_landmark106_replica(tmp_path / "fixed.onnx", fixed_reshape=True)
    runner = TorchLandmarker(fixed)
    assert not runner.batched and TorchLandmarker(landmark_replica()).batched
    got = np.stack([f.landmarks_106 for f in runner.landmarks(img, faces[:3])])  # type: ignore[misc]
    assert np.abs(got - _insightface(fixed, img, faces[:3])).max() < 0.1


def test_input_normalisation_is_insightfaces_test(replica: Path, tmp_path: Path) -> None:
    """A graph without in-graph normalisation is fed (x - 127.5) / 128, as insightface does."""
    proto = onnx.load(str(replica))
    for node in proto.graph.node[:4]:
        node.name = f"plain_{node.op_type}"
    plain = tmp_path / "plain.onnx"
    onnx.save(proto, str(plain))
    ref = Landmark(model_file=str(plain), session=onnxruntime.InferenceSession(
        str(plain), providers=["CPUExecutionProvider"]))
    for runner in (OrtLandmarker(plain), TorchLandmarker(plain)):
        assert (runner.input_mean, runner.input_std) == (ref.input_mean, ref.input_std) == \
            (127.5, 128.0)
    assert input_normalisation(["bn_data", "conv0"]) == (0.0, 1.0)


def test_crop_is_insightfaces_transform() -> None:
    from insightface.utils import face_align

    bbox = np.array([100.0, 50.0, 180.0, 170.0])
    scale = 192 / (120 * 1.5)
    _, m = face_align.transform(np.zeros((300, 300, 3), np.uint8), (140.0, 110.0), 192, scale, 0)
    np.testing.assert_allclose(crop_affine(bbox), m, atol=1e-9)


@pytest.mark.parametrize("make", ["ort", "torch"])
def test_bad_files_name_the_file(tmp_path: Path, make: str) -> None:
    cls = OrtLandmarker if make == "ort" else TorchLandmarker
    with pytest.raises(FaceModelError, match="no such file"):
        cls(tmp_path / "missing.onnx")
    with pytest.raises(FaceModelError, match=r"w600k_r50\.onnx.*not insightface's 2-d 106"):
        cls(arcface_replica())
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(FaceModelError, match=r"junk\.onnx"):
        cls(junk)


def test_faces_with_68_landmarks_are_left_alone(replica: Path, t1_path: Path,
                                                analyser: Any) -> None:
    img = load_image(t1_path).bgr
    fitted = analyser.detect(img)
    assert len(fitted) == 6 and all(f.landmarks is not None for f in fitted)
    faces = [*fitted, Face(bbox=np.array([-40, 500, 60, 620], np.float32), kps=fitted[0].kps)]
    out = landmarks_of(OrtLandmarker(replica), img, faces)
    assert all(f.landmarks_106 is None for f in out[:6])  # dlib's 68 already tell the key
    assert out[6].landmarks_106 is not None
    assert landmarks_of(None, img, faces) == list(faces)


# -- the key from 106 points ---------------------------------------------------------------------

def _face(points: np.ndarray, kps: np.ndarray | None = None) -> Face:
    lo, hi = points.min(0), points.max(0)
    return Face(bbox=np.concatenate([lo, hi]).astype(np.float32),
                kps=kps_of_106(points) if kps is None else kps, landmarks_106=points)


def test_106_key_ignores_the_similarity_transform_and_sees_the_expression() -> None:
    frame = np.full((480, 640, 3), 128, np.uint8)
    a = pose_key(frame, _face(face_points_106(300, 200, 80)))
    b = pose_key(frame, _face(face_points_106(340, 230, 104, angle_deg=20)))
    assert np.abs(a.shape - b.shape).max() < 1e-3
    assert abs(a.mouth_open - b.mouth_open) < 1e-6 and abs(a.eye_open - b.eye_open) < 1e-6
    # the same head pose, but for the line of sight: the face moved by 40 x 30 px in a frame
    # whose focal length is taken as its width (640 px), and looking the same from there means
    # it turned by 3-4 degrees towards the camera (POSE_SIGMA_DEG is 10)
    assert abs(a.yaw - b.yaw) < 5 and abs(a.pitch - b.pitch) < 5 and abs(b.roll - a.roll) > 10
    assert a.sees_expression and similarity(a, b) > 0.85
    still = pose_key(frame, _face(face_points_106(300, 200, 104, angle_deg=20)))
    assert similarity(a, still) > 0.95  # where it stands: scale and roll alone
    opened = pose_key(frame, _face(face_points_106(300, 200, 80, mouth_gap=0.27)))
    assert opened.mouth_open - a.mouth_open == pytest.approx(0.3, abs=1e-6)  # gap / width
    closed = pose_key(frame, _face(face_points_106(300, 200, 80, eye_open=0.05)))
    assert a.eye_open - closed.eye_open == pytest.approx(0.32 - 0.05, abs=1e-6)
    assert similarity(a, opened) < 0.1 and similarity(a, closed) < 0.1


def test_106_key_reads_the_eyes_by_the_kps_not_the_index_order() -> None:
    """Which of the two eye regions is the image-left eye is taken from the detector's kps
    (image-left eye first), so a mirrored face (the regions swapped) gives the mirrored key."""
    frame = np.full((480, 640, 3), 128, np.uint8)
    pts = face_points_106(320, 200, 80, mouth_gap=0.1)
    mirrored = pts.copy()
    mirrored[:, 0] = 640 - mirrored[:, 0]  # the same face seen in a mirror
    kps = kps_of_106(mirrored)[[1, 0, 2, 4, 3]]  # a detector's order: image-left eye first
    a, b = pose_key(frame, _face(pts)), pose_key(frame, _face(mirrored, kps))
    assert b.sees_expression
    assert abs(a.mouth_open - b.mouth_open) < 1e-6 and abs(a.eye_open - b.eye_open) < 1e-6
    assert abs(a.yaw + b.yaw) < 1 and abs(a.pitch - b.pitch) < 1


def test_106_key_equals_its_definition_on_noisy_faces() -> None:
    """The key's lean form gives what its parts define: the shape by ``_normalise`` on the eye
    centres, openness by ``region_openness`` along the eye line, the pose by ``_head_pose`` on
    the nose tip (mean of its two points), chin, outer eye corners and mouth corners, the
    image-left ones first (within float32 rounding)."""
    from livefuse.cache import _head_pose, _normalise
    from livefuse.faces import landmarks106 as L
    from livefuse.faces.landmarks106 import region_openness

    rng = np.random.default_rng(3)
    frame = np.full((1080, 1920, 3), 90, np.uint8)
    for i in range(40):
        pts = face_points_106(rng.uniform(300, 1600), rng.uniform(200, 900),
                              rng.uniform(20, 120), rng.uniform(-60, 60),
                              rng.uniform(0.0, 0.4), rng.uniform(0.05, 0.4))
        pts = (pts + rng.normal(0, 1.5, pts.shape)).astype(np.float32)
        kps = kps_of_106(pts)
        if i % 2:  # mirrored: the index order's eye A is then the image-right one
            pts[:, 0] = 1920 - pts[:, 0]
            kps = kps_of_106(pts)[[1, 0, 2, 4, 3]]
        key = pose_key(frame, _face(pts, kps))
        p = pts.astype(np.float64)
        a, b = p[L.EYE_A].mean(0), p[L.EYE_B].mean(0)
        a_left = np.linalg.norm(a - kps[0]) < np.linalg.norm(b - kps[0])
        left, right = (a, b) if a_left else (b, a)
        axis = (right - left) / np.linalg.norm(right - left)
        assert np.abs(key.shape - _normalise(pts, left, right)).max() < 1e-4
        assert key.mouth_open == pytest.approx(region_openness(p[L.MOUTH], axis), abs=1e-6)
        eyes = (region_openness(p[L.EYE_A], axis) + region_openness(p[L.EYE_B], axis)) / 2
        assert key.eye_open == pytest.approx(eyes, abs=1e-6)
        outer = L.EYE_OUTER if a_left else L.EYE_OUTER[::-1]
        corners = sorted(L.MOUTH_CORNERS, key=lambda c: float(np.linalg.norm(p[c] - kps[3])))
        pose = p[[L.NOSE_TIP[0], L.CHIN, *outer, *corners]]
        pose[0] = p[list(L.NOSE_TIP)].mean(0)
        want = _head_pose(pose, (1920, 1080))
        assert np.abs(np.array([key.yaw, key.pitch, key.roll]) - want).max() < 1e-3


def test_106_key_sees_a_turned_head() -> None:
    frame = np.full((480, 640, 3), 128, np.uint8)
    pts = face_points_106(300, 200, 80)
    turned = pts.copy()  # squash the image-right half: the head turns towards the right
    cx = float(pts[:, 0].mean())
    right = turned[:, 0] > cx
    turned[right, 0] = cx + (turned[right, 0] - cx) * math.cos(math.radians(35))
    a, b = pose_key(frame, _face(pts)), pose_key(frame, _face(turned))
    assert abs(a.yaw - b.yaw) > 5 and similarity(a, b) < 0.8


# -- the device runner -----------------------------------------------------------------------------

@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_torch_runner_on_the_staged_device_frame(replica: Path, precision: str,
                                                 photo_faces: tuple[np.ndarray, list[Face]]
                                                 ) -> None:
    """On CUDA, from the staged device frame (no host copy used): as insightface within 0.1 px
    (fp32) or 0.5 px (fp16)."""
    img, faces = photo_faces
    ref = _insightface(replica, img, faces)
    device = torch.from_numpy(img).cuda()
    staged = StagedFrame(host=np.zeros_like(img), device=device)  # a wrong host copy: unused
    got = TorchLandmarker(replica, "cuda", precision).landmarks(staged, faces)
    out = np.stack([f.landmarks_106 for f in got])  # type: ignore[misc]
    assert np.abs(out - ref).max() < (0.1 if precision == "fp32" else 0.5)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_the_fused_graph_on_cuda(replica: Path, photo_faces: tuple[np.ndarray, list[Face]]
                                 ) -> None:
    """On CUDA, a frame staged by the live path's stager: crops and network replay as one CUDA
    graph of the frame's entry, for other faces and frames, as insightface within 0.5 px."""
    from livefuse.swap.gpu_frame import FrameStager

    img, faces = photo_faces
    stager = FrameStager("cuda")
    lm = TorchLandmarker(replica, "cuda", "fp16")
    for frame, batch in ((img, faces[:2]), (img[:, ::-1].copy(), faces[1:3]), (img, faces[:2])):
        staged = stager.stage(frame)
        stager.wait(staged)
        got = np.stack([f.landmarks_106 for f in lm.landmarks(staged, batch)])  # type: ignore[misc]
        assert np.abs(got - _insightface(replica, frame, batch)).max() < 0.5
        assert staged.release is not None
        staged.release()
    assert staged.graphs is not None and ("landmarks", 2, 192, 0) in staged.graphs.graphs


def test_crop_matches_warp_affine_on_a_real_photo(photo_faces: tuple[np.ndarray, list[Face]]
                                                  ) -> None:
    from livefuse.faces.arcface_torch import warp_crops

    img, faces = photo_faces
    m = crop_affine(faces[1].bbox)
    ref = cv2.warpAffine(img, m, (192, 192), borderValue=0.0)[..., ::-1]
    got = warp_crops(torch.from_numpy(img), torch.from_numpy(m[None].astype(np.float32)), 192)
    diff = np.abs(got[0].permute(1, 2, 0).numpy() - ref.astype(np.float32))
    assert diff.mean() < 0.5 and diff.max() <= 8


def test_the_torch_crops_are_warp_affines_of_the_frame(
        replica: Path, photo_faces: tuple[np.ndarray, list[Face]]) -> None:
    """All faces' crops at once, from the region they read, equal cv2.warpAffine of the whole
    frame: inside, across the frame's edge, and wholly outside it (zeros)."""
    img, faces = photo_faces
    gone = Face(bbox=np.array([-400, -400, -300, -300], np.float32), kps=faces[0].kps)
    affines = np.stack([crop_affine(f.bbox) for f in [*faces, gone]])
    got = TorchLandmarker(replica).crops(torch.from_numpy(img), affines).numpy()
    for m, crop in zip(affines, got, strict=True):
        ref = cv2.warpAffine(img, m, (192, 192), borderValue=0.0)[..., ::-1].astype(np.float32)
        diff = np.abs(crop.transpose(1, 2, 0) - ref)
        assert diff.mean() < 0.05 and diff.max() <= 2, (diff.mean(), diff.max())
    assert not got[-1].any()
    only_gone = TorchLandmarker(replica).crops(torch.from_numpy(img), affines[-1:]).numpy()
    assert only_gone.shape == (1, 3, 192, 192) and not only_gone.any()


def test_the_crops_replay_as_a_graph_of_the_staged_frame(
        replica: Path, photo_faces: tuple[np.ndarray, list[Face]]) -> None:
    """On a staged frame with its size's graph-cache entry (the live path), the crops of the
    whole frame run as one graph of that entry, replayed for other faces and other frames:
    the same crops, and the same landmarks, as the eager crops of the region they read (the CPU
    stand-in re-runs the captured call on its static buffers, so a stale input shows)."""
    from livefuse.swap.gpu_frame import TensorStager

    img, faces = photo_faces
    stager = TensorStager("cpu")
    lm = TorchLandmarker(replica)
    eager = TorchLandmarker(replica)
    gone = Face(bbox=np.array([-400, -400, -300, -300], np.float32), kps=faces[0].kps)
    for frame, batch in ((img, faces[:2]), (img[:, ::-1].copy(), faces[1:3]),
                         (img, [faces[2], gone])):
        staged = stager.stage(frame)
        stager.wait(staged)
        owner = staged.graphs
        assert owner is not None
        affines = np.stack([crop_affine(f.bbox) for f in batch])
        got = lm.crops(staged.device, affines, owner).numpy()
        ref = eager.crops(torch.from_numpy(frame), affines).numpy()
        assert np.abs(got - ref).max() <= 1.0 and np.abs(got - ref).mean() < 1e-3
        pts = np.stack([f.landmarks_106 for f in lm.landmarks(staged, batch)])  # type: ignore[misc]
        want = np.stack([f.landmarks_106 for f in eager.landmarks(frame, batch)])  # type: ignore[misc]
        assert np.abs(pts - want).max() < 1e-2
    assert ("landmark crops", 2, 192) in owner.graphs
    # landmarks() runs the crops and the network as one graph of the frame's entry
    assert ("landmarks", 2, 192, 0) in owner.graphs and lm.graphs is None


def _overflowing_fp16(replica: Path) -> TorchLandmarker:
    """A CPU fp16 landmarker whose fp16 network answers NaN (an overflow); fp32 is untouched."""
    lm = TorchLandmarker(replica, "cpu", "fp16")
    real = lm.net.forward

    def overflowing(x: torch.Tensor) -> Any:
        out = real(x)
        return [o.fill_(float("nan")) for o in out] if x.dtype == torch.float16 else out

    lm.net.forward = overflowing  # type: ignore[method-assign]
    return lm


def test_a_non_finite_fused_run_falls_back_to_fp32_and_recaptures(
        replica: Path, photo_faces: tuple[np.ndarray, list[Face]]) -> None:
    """The crops-and-network graph of a staged frame is checked like the network alone: an
    fp16 NaN is run again in fp32, and the next frame replays a graph of the fp32 network (a
    graph of the fp16 one is never replayed again: its weights are gone)."""
    from livefuse.swap.gpu_frame import TensorStager

    img, faces = photo_faces
    stager = TensorStager("cpu")
    lm = _overflowing_fp16(replica)
    ref = _insightface(replica, img, faces[:2])
    for _ in range(2):
        staged = stager.stage(img)
        stager.wait(staged)
        got = np.stack([f.landmarks_106 for f in lm.landmarks(staged, faces[:2])])  # type: ignore[misc]
        assert lm.precision == "fp32 (fallback)"
        assert np.abs(got - ref).max() < 0.1
    assert staged.graphs is not None
    assert {("landmarks", 2, 192, 0), ("landmarks", 2, 192, 1)} <= set(staged.graphs.graphs)


def test_non_finite_landmarks_fall_back_to_fp32(replica: Path,
                                                photo_faces: tuple[np.ndarray, list[Face]]
                                                ) -> None:
    """A reduced-precision overflow never reaches the cache key: the batch is run again in
    fp32 and the landmarker stays there."""
    img, faces = photo_faces
    lm = _overflowing_fp16(replica)
    got = lm.landmarks(img, faces[:2])
    assert lm.precision == "fp32 (fallback)" and lm.dtype == torch.float32
    assert all(np.isfinite(f.landmarks_106).all() for f in got)  # type: ignore[arg-type]
    ref = _insightface(replica, img, faces[:2])
    assert np.abs(np.stack([f.landmarks_106 for f in got]) - ref).max() < 0.1  # type: ignore[misc]


def test_the_network_replays_one_graph_per_batch_size(
        replica: Path, photo_faces: tuple[np.ndarray, list[Face]]) -> None:
    """On CUDA the network is captured once per batch size and replayed (the CPU stand-in
    re-runs the captured call on its static buffers, so a stale buffer gives wrong points)."""
    from livefuse.models.graph_cache import EagerGraphs, GraphCache

    img, faces = photo_faces
    graphs = GraphCache(EagerGraphs())
    lm = TorchLandmarker(replica, "cpu", graphs=graphs)
    eager = TorchLandmarker(replica, "cpu")
    assert lm.graphs is graphs and eager.graphs is None
    for batch in (faces[:2], faces[:1], faces[1:3], faces[:1]):
        got = np.stack([f.landmarks_106 for f in lm.landmarks(img, batch)])  # type: ignore[misc]
        ref = np.stack([f.landmarks_106 for f in eager.landmarks(img, batch)])  # type: ignore[misc]
        assert np.abs(got - ref).max() < 1e-3
    assert sorted(graphs.keys) == [1, 2] and graphs.captures == 2


def test_a_broken_key_never_hits() -> None:
    frame = np.full((480, 640, 3), 128, np.uint8)
    pts = face_points_106(300, 200, 80)
    good = pose_key(frame, _face(pts))
    nan = pts.copy()
    nan[60] = np.nan
    broken = pose_key(frame, Face(bbox=_face(pts).bbox, kps=kps_of_106(pts), landmarks_106=nan))
    assert not broken.sees_expression  # read as a face without landmarks: never reused
    assert similarity(good, broken) == 0.0
    # and a key whose numbers are broken matches nothing, itself included
    bad = replace(good, mouth_open=float("nan"))
    assert similarity(bad, bad) == 0.0 and similarity(good, bad) == 0.0
