"""TorchScrfd against insightface's own SCRFD (onnxruntime CPU) on the same det_10g replica."""

from __future__ import annotations

import functools
from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from insightface.model_zoo.scrfd import SCRFD
from onnx import TensorProto, helper
from replica_models import scrfd_replica
from synthetic_faces import KPS_OFFSETS, build_arcface, build_scrfd, expected_detection

from livefuse.errors import ConfigError
from livefuse.faces.insight import FaceModelError
from livefuse.faces.scrfd_torch import (
    NMS_ITERATIONS,
    Detections,
    TorchScrfd,
    _ResizeTaps,
    greedy_nms,
    letterbox_size,
    resolve_runtime,
)
from livefuse.models.onnx_torch import TorchRuntime
from livefuse.testing.replicas import calibration_frames, detector_input

FRAMES = ("t1", "astronaut", "frame1080")
TOL = {"fp32": (0.5, 1e-3), "fp16": (0.5, 1e-3), "bf16": (2.0, 1e-2)}
"""(px, score) tolerances. bfloat16 keeps 8 significant bits: one rounding of a distance of 6
strides at stride 32, seen at 1/3 scale in a 1080p frame, is already ±0.4 px, of a score near
0.5 ±1e-3, and some 30 layers accumulate more; float16 (11 bits) meets the float32 bounds."""


@functools.cache
def _frames() -> dict[str, np.ndarray]:
    return dict(zip(FRAMES, calibration_frames(), strict=True))


@functools.cache
def _reference(size: int = 640) -> SCRFD:
    path = scrfd_replica()
    det = SCRFD(model_file=str(path),
                session=ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))
    det.prepare(-1, input_size=(size, size), det_thresh=0.5)
    return det


@functools.cache
def _reference_dets(name: str) -> tuple[np.ndarray, np.ndarray]:
    dets, kps = _reference().detect(_frames()[name], input_size=(640, 640))
    return dets, kps


@functools.cache
def _detector(precision: str) -> TorchScrfd:
    return TorchScrfd(scrfd_replica(), precision=precision)


def _match(dets: np.ndarray, kps: np.ndarray, ours: Detections) -> tuple[float, float, float]:
    """Max bbox, kps (px) and score differences after pairing each reference detection with our
    nearest bbox (float16 may swap two detections of near-equal score)."""
    assert len(ours) == len(dets), (len(ours), len(dets))
    b, s, k = ours.bboxes.numpy(), ours.scores.numpy(), ours.kps.numpy()
    pair = [int(np.argmin(np.abs(b - d[:4]).max(1))) for d in dets]
    assert sorted(pair) == list(range(len(dets)))
    return (float(np.abs(b[pair] - dets[:, :4]).max(initial=0)),
            float(np.abs(k[pair] - kps).max(initial=0)),
            float(np.abs(s[pair] - dets[:, 4]).max(initial=0)))


# ----------------------------------------------------------------------------------- letterbox

@pytest.mark.parametrize("hw", [(886, 1280), (512, 512), (1080, 1920), (720, 1280), (480, 640),
                                (333, 517), (90, 61), (700, 300)])
def test_resize_is_cv2_resize_bit_for_bit(hw: tuple[int, int]) -> None:
    img = np.random.default_rng(hw[0]).integers(0, 256, (*hw, 3), dtype=np.uint8)
    for size in ((640, 640), (192, 192), (608, 352)):
        new_w, new_h, _ = letterbox_size(hw, size)
        if (new_h, new_w) == hw:
            continue
        ours = _ResizeTaps(hw, (new_w, new_h), torch.device("cpu"))(torch.from_numpy(img))
        np.testing.assert_array_equal(ours.numpy(), cv2.resize(img, (new_w, new_h)))


@pytest.mark.parametrize("name", FRAMES)
def test_detector_input_is_insightfaces(name: str) -> None:
    d = _detector("fp32")
    frame = _frames()[name]
    scale = d._letterbox(torch.from_numpy(frame), d._make_taps(frame.shape[:2]))
    torch.testing.assert_close(d._input, detector_input(frame), atol=0, rtol=0)
    assert scale == pytest.approx(letterbox_size(frame.shape[:2], (640, 640))[2])


# ----------------------------------------------------------------------------------- detect

def test_replica_scores_keep_clear_of_the_thresholds() -> None:
    """What makes the low-precision comparisons meaningful: on the test frames no anchor scores
    within 3e-3 of 0.5 and no two candidates overlap within 2e-3 of the NMS IoU."""
    sess = _reference().session
    for name, frame in _frames().items():
        outs = sess.run(None, {"input.1": detector_input(frame).numpy()})
        scores = np.concatenate([o.reshape(-1) for o in outs[:3]])
        assert np.abs(scores - 0.5).min() > 3e-3, name
        dets, _ = _reference_dets(name)
        assert len(dets) >= 1, f"the replica finds nothing in {name}"
        x1, y1, x2, y2 = (dets[:, i:i + 1] for i in range(4))
        w = np.maximum(0, np.minimum(x2, x2.T) - np.maximum(x1, x1.T) + 1)
        h = np.maximum(0, np.minimum(y2, y2.T) - np.maximum(y1, y1.T) + 1)
        area = (x2 - x1 + 1) * (y2 - y1 + 1)
        iou = w * h / (area + area.T - w * h)
        assert np.abs(iou[np.triu_indices(len(dets), 1)] - 0.4).min(initial=1) > 2e-3, name


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", FRAMES)
def test_detect_matches_insightface(name: str, precision: str) -> None:
    ref_dets, ref_kps = _reference_dets(name)
    ours = _detector(precision).detect(torch.from_numpy(_frames()[name]))
    box, kps, score = _match(ref_dets, ref_kps, ours)
    px, ds = TOL[precision]
    assert box <= px and kps <= px and score <= ds, (box, kps, score)
    if precision == "fp32":  # the same float32 arithmetic: far inside the tolerance
        assert box < 1e-2 and kps < 1e-2 and score < 1e-5


def test_detections_layout() -> None:
    ours = _detector("fp32").detect(torch.from_numpy(_frames()["astronaut"]))
    assert len(ours) >= 5
    assert ours.bboxes.shape == (len(ours), 4) and ours.kps.shape == (len(ours), 5, 2)
    assert {ours.bboxes.dtype, ours.scores.dtype, ours.kps.dtype} == {torch.float32}
    s = ours.scores.numpy()
    assert (np.diff(s) <= 0).all() and (s >= 0.5).all()
    faces = ours.to_faces()
    np.testing.assert_array_equal(faces[0].bbox, ours.bboxes[0].numpy())
    assert faces[-1].score == pytest.approx(float(s[-1]))


def test_overflowing_candidates_take_the_exact_path() -> None:
    """With room for 3 candidates in the graph, the astronaut's 14 are finished exactly."""
    ref_dets, ref_kps = _reference_dets("astronaut")
    d = _detector("fp32")
    d.max_candidates = 3
    try:
        ours = d.detect(torch.from_numpy(_frames()["astronaut"]))
    finally:
        d.max_candidates = 512
    box, kps, score = _match(ref_dets, ref_kps, ours)
    assert box < 1e-2 and kps < 1e-2 and score < 1e-5


def _insightface_nms(boxes: np.ndarray, scores: np.ndarray, thresh: float) -> list[int]:
    det = SCRFD.__new__(SCRFD)
    det.nms_thresh = thresh
    return [int(i) for i in det.nms(np.hstack((boxes, scores[:, None])).astype(np.float32))]


def test_greedy_nms_is_insightfaces() -> None:
    rng = np.random.default_rng(3)
    for trial in range(20):
        centres = rng.uniform(0, 200, (6, 2)).repeat(8, 0) + rng.normal(0, 6, (48, 2))
        sizes = rng.uniform(20, 60, (48, 2))
        boxes = np.hstack((centres - sizes / 2, centres + sizes / 2)).astype(np.float32)
        scores = np.sort(rng.uniform(0.3, 1, 48))[::-1].astype(np.float32)
        valid = torch.from_numpy(scores >= 0.5)
        keep, converged = greedy_nms(torch.from_numpy(boxes), valid, 0.4, 64)
        assert bool(converged)
        ref = _insightface_nms(boxes[scores >= 0.5], scores[scores >= 0.5], 0.4)
        assert np.flatnonzero(keep.numpy()).tolist() == ref, trial


def test_long_suppression_chain_is_finished_exactly() -> None:
    """Each box overlaps only its neighbours: the greedy answer keeps every other one, which
    needs one iteration per link; the graph's iterations stop short and say so."""
    n = 2 * NMS_ITERATIONS + 3
    x = np.arange(n, dtype=np.float32) * 12
    boxes = torch.from_numpy(np.stack((x, x * 0, x + 20, x * 0 + 20), 1))
    valid = torch.ones(n, dtype=torch.bool)
    keep, converged = greedy_nms(boxes, valid, 0.2, NMS_ITERATIONS)
    assert not bool(converged)
    while not bool(converged):
        keep, converged = greedy_nms(boxes, valid, 0.2, NMS_ITERATIONS, keep)
    ref = _insightface_nms(boxes.numpy(), np.linspace(1, 0.6, n, dtype=np.float32), 0.2)
    assert np.flatnonzero(keep.numpy()).tolist() == ref == list(range(0, n, 2))


# ----------------------------------------------------------------------------------- regions

def _square_crop(frame: np.ndarray, x0: int, y0: int, side: int) -> np.ndarray:
    out = np.zeros((side, side, 3), np.uint8)
    h, w = frame.shape[:2]
    xa, ya, xb, yb = max(x0, 0), max(y0, 0), min(x0 + side, w), min(y0 + side, h)
    out[ya - y0:yb - y0, xa - x0:xb - x0] = frame[ya:yb, xa:xb]
    return out


def test_detect_regions_matches_insightface_on_the_crops() -> None:
    """A square around each detected face, as one batch; insightface's SCRFD on the same crop
    (resized to 192 by its own letterbox) must find the same best face."""
    d = _detector("fp32")
    ref = _reference()
    compared = 0
    for name in FRAMES:
        frame = _frames()[name]
        rects = []
        for b in _reference_dets(name)[0]:
            side = round(1.6 * max(b[2] - b[0], b[3] - b[1]))
            x0, y0 = round((b[0] + b[2] - side) / 2), round((b[1] + b[3] - side) / 2)
            rects.append((x0, y0, x0 + side, y0 + side))
        found = d.detect_regions(torch.from_numpy(frame), rects)
        assert len(found) == len(rects)
        for (x0, y0, x1, _), got in zip(rects, found, strict=True):
            crop = _square_crop(frame, x0, y0, x1 - x0)
            dets, kps = ref.detect(crop, input_size=(192, 192), det_thresh=0.49)
            if not len(dets):
                assert got is None
                continue
            if abs(dets[0, 4] - 0.5) < 3e-3:  # too close to call for a resampled crop
                continue
            if dets[0, 4] < 0.5:
                assert got is None
                continue
            assert got is not None
            np.testing.assert_allclose(got.kps.numpy(), kps[0] + (x0, y0), atol=2.0)
            np.testing.assert_allclose(got.bbox.numpy(), dets[0, :4] + (x0, y0, x0, y0),
                                       atol=2.0)
            assert got.score == pytest.approx(float(dets[0, 4]), abs=1e-2)
            compared += 1
    assert compared >= 5


@pytest.fixture(scope="module")
def block_detector(tmp_path_factory: pytest.TempPathFactory) -> TorchScrfd:
    """The synthetic SCRFD of ``synthetic_faces``: a white 32x32 block on a stride-32 cell of
    the detector input is one face with a known bbox and kps."""
    return TorchScrfd(build_scrfd(tmp_path_factory.mktemp("block") / "det.onnx"))


def _block_frame(cells: list[tuple[int, int]]) -> np.ndarray:
    frame = np.zeros((1080, 1920, 3), np.uint8)
    for cx, cy in cells:
        frame[96 * cy:96 * (cy + 1), 96 * cx:96 * (cx + 1)] = 255
    return frame


def test_detect_regions_finds_the_same_face_as_detect(block_detector: TorchScrfd) -> None:
    frame = torch.from_numpy(_block_frame([(10, 5), (19, 10)]))
    full = block_detector.detect(frame)
    assert len(full) == 2
    # squares of 576 px (3x the 192 input) placing each 96-px block on a stride-32 cell; the
    # second reaches past the frame's right and bottom edges (zeros there); a non-square rect
    # with the same centre; and 8 rects over empty black (chunked: 11 regions, batches of 8+4)
    rects = [(768, 288, 1344, 864), (1632, 768, 2208, 1344), (800, 288, 1312, 864)]
    rects += [(40 * i, 0, 40 * i + 100, 60) for i in range(8)]
    found = block_detector.detect_regions(frame, rects)
    assert [f is None for f in found] == [False] * 3 + [True] * 8
    for got, cell in zip(found[:3], [(10, 5), (19, 10), (10, 5)], strict=True):
        assert got is not None
        bbox, kps = expected_detection(*cell, scale=1 / 3)
        np.testing.assert_allclose(got.bbox.numpy(), bbox, atol=1e-3)
        np.testing.assert_allclose(got.kps.numpy(), kps, atol=1e-3)
        i = int(np.argmin(np.abs(full.bboxes.numpy() - bbox).max(1)))
        np.testing.assert_allclose(got.kps.numpy(), full.kps[i].numpy(), atol=2.0)
    assert KPS_OFFSETS.shape == (5, 2)


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                         reason="needs a CUDA GPU"))])
def test_region_groups_come_back_together_as_each_alone(tmp_path: Path, device: str) -> None:
    """The tracker's groups (faces at two detector sizes; one group of 16 regions, two chunks
    replaying the same graph) queued together and read back with one sync give what each
    region gives alone: a chunk's results are kept (on CUDA: in a pinned buffer of its own)
    before the next chunk's replay overwrites the graph's output."""
    from livefuse.models.graph_cache import CudaGraphs, EagerGraphs, GraphCache

    backend = CudaGraphs(device) if device == "cuda" else EagerGraphs()
    det = TorchScrfd(build_scrfd(tmp_path / "det.onnx"), device, graphs=GraphCache(backend))
    frame = torch.from_numpy(_block_frame([(10, 5), (19, 10)])).to(device)
    face = (768, 288, 1344, 864)  # the block at (10, 5) on a 192 input's cell 2
    empty = (40, 0, 140, 60)
    small = (864, 384, 1152, 672)  # the same block on a 96 input
    many = [face] * 8 + [empty] * 8  # 16 regions: two chunks of 8, one graph key
    for _ in range(2):  # eager on the first use of the frame size, graphs after
        groups = det.detect_region_groups(frame, [(many, 192), ([small, empty], 96)])
        assert [g is None for g in groups[0]] == [False] * 8 + [True] * 8
        assert [g is None for g in groups[1]] == [False, True]
        alone_192 = det.detect_regions(frame, [face])[0]
        alone_96 = det.detect_regions(frame, [small], 96)[0]
        assert alone_192 is not None and alone_96 is not None
        for got in groups[0][:8]:
            assert got is not None and np.array_equal(got.host, alone_192.host)
        assert groups[1][0] is not None and np.array_equal(groups[1][0].host, alone_96.host)


def test_detect_regions_edge_cases(block_detector: TorchScrfd) -> None:
    frame = torch.from_numpy(_block_frame([(10, 5)]))
    assert block_detector.detect_regions(frame, []) == []
    with pytest.raises(ValueError, match="multiple of 32"):
        block_detector.detect_regions(frame, [(0, 0, 10, 10)], size=100)
    one = block_detector.detect_regions(frame, np.array([[768, 288, 1344, 864]], np.float32))
    assert one[0] is not None and one[0].to_face().score > 0.9


# ----------------------------------------------------------------------------------- loading

def test_channels_last_gives_the_same_detections() -> None:
    """NHWC (the CUDA default) finds what NCHW finds, in full frames and in tracked regions."""
    nhwc = TorchScrfd(scrfd_replica(), channels_last=True)
    assert nhwc._input.is_contiguous(memory_format=torch.channels_last)
    for name in FRAMES:
        frame = torch.from_numpy(_frames()[name])
        a, b = nhwc.detect(frame), _detector("fp32").detect(frame)
        assert len(a) == len(b) >= 1
        torch.testing.assert_close(a.kps, b.kps, atol=1e-3, rtol=0)
        torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=0)
        rects = [(x0 - 30, y0 - 30, x1 + 30, y1 + 30) for x0, y0, x1, y1 in b.bboxes.tolist()]
        for ra, rb in zip(nhwc.detect_regions(frame, rects),
                          _detector("fp32").detect_regions(frame, rects), strict=True):
            assert (ra is None) == (rb is None)
            if ra is not None and rb is not None:
                torch.testing.assert_close(ra.kps, rb.kps, atol=1e-3, rtol=0)


def test_loader_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FaceModelError, match=r"missing\.onnx"):
        TorchScrfd(tmp_path / "missing.onnx")
    cut = tmp_path / "det_cut.onnx"
    data = scrfd_replica().read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(FaceModelError, match=r"det_cut\.onnx"):
        TorchScrfd(cut)
    rec = build_arcface(tmp_path / "rec.onnx")
    with pytest.raises(FaceModelError, match=r"rec\.onnx.*1 outputs: not an SCRFD"):
        TorchScrfd(rec)


def test_nine_outputs_of_the_wrong_size_are_refused(tmp_path: Path) -> None:
    nodes = [helper.make_node("GlobalAveragePool", ["input.1"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"])]
    outs = []
    for i in range(9):
        nodes.append(helper.make_node("Identity", ["f"], [f"o{i}"]))
        outs.append(helper.make_tensor_value_info(f"o{i}", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "not_scrfd", [helper.make_tensor_value_info(
        "input.1", TensorProto.FLOAT, [1, 3, "h", "w"])], outs)
    path = tmp_path / "nine.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(FaceModelError, match=r"nine\.onnx.*output 'o0' has shape \(1, 3\)"):
        TorchScrfd(path)


def test_arguments_are_checked(block_detector: TorchScrfd) -> None:
    path = block_detector.path
    with pytest.raises(ConfigError, match="fp8"):
        TorchScrfd(path, precision="fp8")
    with pytest.raises(ValueError, match="multiple of 32"):
        TorchScrfd(path, input_size=(600, 600))
    with pytest.raises(ValueError, match="CUDA"):
        TorchScrfd(path, cuda_graph=True)
    with pytest.raises(ValueError, match="uint8"):
        block_detector.detect(torch.zeros(10, 10, 3))
    assert str(block_detector.runtime) == "cpu fp32"
    assert not block_detector.runtime.cuda_graph
    assert resolve_runtime("cpu", "bf16") == TorchRuntime("cpu", "bf16", False)
    if torch.cuda.is_available():
        assert resolve_runtime("cuda", "fp16").cuda_graph
        assert str(resolve_runtime("cuda:0", "fp16", False)) == "cuda:0 fp16"


def test_any_frame_size_runs(block_detector: TorchScrfd) -> None:
    for hw in ((1080, 1920), (720, 1280), (480, 640), (61, 90), (900, 300)):
        assert len(block_detector.detect(torch.zeros(*hw, 3, dtype=torch.uint8))) == 0


# ----------------------------------------------------------------------------------- GPU

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_cuda_matches_insightface(precision: str) -> None:
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # fp32 means fp32 here, not TF32
    try:
        d = TorchScrfd(scrfd_replica(), device="cuda", precision=precision)
        assert d.runtime.cuda_graph
        for name in FRAMES:
            ref_dets, ref_kps = _reference_dets(name)
            ours = d.detect(torch.from_numpy(_frames()[name]).cuda())
            cpu = Detections(ours.bboxes.cpu(), ours.scores.cpu(), ours.kps.cpu())
            box, kps, score = _match(ref_dets, ref_kps, cpu)
            px, ds = TOL[precision]
            assert box <= px and kps <= px and score <= ds, (name, box, kps, score)
    finally:
        torch.backends.cudnn.allow_tf32 = old


@pytest.mark.gpu
@gpu
def test_cuda_graph_replay_matches_eager() -> None:
    graph = TorchScrfd(scrfd_replica(), device="cuda", precision="fp16", cuda_graph=True)
    eager = TorchScrfd(scrfd_replica(), device="cuda", precision="fp16", cuda_graph=False)
    for _ in range(2):  # capture, then replay
        for name in FRAMES:
            frame = torch.from_numpy(_frames()[name]).cuda()
            a, b = graph.detect(frame), eager.detect(frame)
            assert len(a) == len(b) >= 1
            torch.testing.assert_close(a.bboxes, b.bboxes, atol=1e-3, rtol=0)
            torch.testing.assert_close(a.kps, b.kps, atol=1e-3, rtol=0)
            torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=0)
            rects = [(float(x0) - 40, float(y0) - 40, float(x1) + 40, float(y1) + 40)
                     for x0, y0, x1, y1 in a.bboxes.cpu().tolist()]
            for ra, rb in zip(graph.detect_regions(frame, rects),
                              eager.detect_regions(frame, rects), strict=True):
                assert (ra is None) == (rb is None)
                if ra is not None and rb is not None:
                    torch.testing.assert_close(ra.kps, rb.kps, atol=1e-3, rtol=0)


@pytest.mark.gpu
@gpu
def test_cuda_graph_part_does_not_sync() -> None:
    """Copying the frame in and replaying the detection graph (letterbox included) and the
    region graph never wait for the GPU: the read-back is the call's one sync."""
    d = TorchScrfd(scrfd_replica(), device="cuda", precision="fp16")
    frame = torch.from_numpy(_frames()["frame1080"]).cuda()
    for _ in range(2):  # a frame size gets its graphs at its second use
        d.detect_faces(frame)
    d.detect_regions(frame, [(800, 300, 1100, 600)], 192)
    assert d._graphs is not None
    owner = d._graphs.owner((1080, 1920))
    assert set(owner.graphs) == {"detect", ("regions", 1, 192)}
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.inference_mode():
            buf = d._frame_in(owner, frame)
            for key in owner.graphs:  # replays only: the graphs exist
                owner.run(key, lambda *a: (), (buf,))
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@gpu
def test_cuda_graphs_follow_frame_size_changes() -> None:
    """Issue 17 item 3 on the GPU: ten frame sizes, the stream's size recurring between them,
    freed device memory overwritten after every call (junk allocations take the blocks an
    evicted entry gave back): every answer still equals the eager detector's."""
    graph = TorchScrfd(scrfd_replica(), device="cuda", precision="fp16", cuda_graph=True)
    eager = TorchScrfd(scrfd_replica(), device="cuda", precision="fp16", cuda_graph=False)
    base = _frames()["t1"]
    sizes = [(640, 480), (1280, 720), (800, 600), (1024, 576), (960, 540), (700, 700),
             (300, 900), (517, 333), (1500, 1000), (1920, 1080)]
    order = [wh for other in sizes[1:] for wh in (sizes[0], other, sizes[0])] + sizes[::-1]
    found = 0
    for w, h in order:
        frame = torch.from_numpy(cv2.resize(base, (w, h), interpolation=cv2.INTER_AREA)).cuda()
        a = graph.detect_faces(frame)
        junk = [torch.full((2 ** k,), 0x5A, dtype=torch.uint8, device="cuda")
                for k in range(10, 25)]
        b = eager.detect(frame).to_faces()
        assert len(a) == len(b), (w, h)
        found += len(a)
        for fa, fb in zip(a, b, strict=True):
            np.testing.assert_allclose(fa.kps, fb.kps, atol=1e-3)
        del junk
        assert graph._graphs is not None and len(graph._graphs.keys) <= 4
    assert graph._graphs.evictions > 0 and found >= len(order)
