"""Tiny ONNX models with the signatures of SCRFD (det_10g) and ArcFace (w600k_r50).

No real weights exist on the test machines, so these stand in for them:

* :func:`build_scrfd` - input ``(1, 3, H, W)`` (dynamic), 9 outputs in the order insightface's
  ``SCRFD`` reads them (scores, bbox distances, kps distances for strides 8, 16, 32; 2 anchors per
  location). Its "face" is any stride-32 cell whose mean normalised intensity is high: a white
  32x32 block on black in detector-input pixels fires exactly one cell, whose anchor centre is the
  cell's top-left corner. bbox distances are a constant ``BBOX_DIST`` strides and kps offsets the
  constant ``KPS_OFFSETS`` strides, so the expected bbox and kps follow from the block position.
  Strides 8 and 16 always output score -1 (never above threshold).
* :func:`build_arcface` - input ``(1, 3, 112, 112)``, output ``(1, 512)``: 8x8 average pooling,
  flatten, and a fixed random matrix, so the embedding is a known function of the aligned crop.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STRIDES = (8, 16, 32)
BBOX_DIST = np.array([2.0, 2.0, 2.0, 2.0], np.float32)  # in strides: a 128 px box at stride 32
KPS_OFFSETS = np.array([[-0.6, -0.4], [0.6, -0.4], [0.0, 0.2], [-0.5, 0.9], [0.5, 0.9]],
                       np.float32)  # in strides, insightface kps order
SCORE_WHITE = (255 - 127.5) / 128.0  # SCRFD normalises with mean 127.5, std 128


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def build_scrfd(path: Path) -> Path:
    """Write the synthetic SCRFD model to ``path`` and return it."""
    nodes: list[onnx.NodeProto] = [
        _const("zero", np.array(0.0, np.float32)),
        _const("minus_one", np.array(-1.0, np.float32)),
        _const("col", np.array([-1, 1], np.int64)),
        _const("bbox_c", BBOX_DIST[None, :]),
        _const("kps_c", KPS_OFFSETS.reshape(1, 10)),
        _const("zeros4", np.zeros((1, 4), np.float32)),
        _const("zeros10", np.zeros((1, 10), np.float32)),
    ]
    scores, bboxes, kpss = [], [], []
    for s in STRIDES:
        nodes += [
            helper.make_node("AveragePool", ["input.1"], [f"pool{s}"], kernel_shape=[s, s],
                             strides=[s, s]),
            helper.make_node("ReduceMean", [f"pool{s}"], [f"mean{s}"], axes=[1], keepdims=1),
            helper.make_node("Transpose", [f"mean{s}"], [f"t{s}"], perm=[0, 2, 3, 1]),
            helper.make_node("Reshape", [f"t{s}", "col"], [f"flat{s}"]),
            # two anchors per location, consecutive, as insightface's anchor_centers stack them
            helper.make_node("Concat", [f"flat{s}", f"flat{s}"], [f"pair{s}"], axis=1),
            helper.make_node("Reshape", [f"pair{s}", "col"], [f"raw{s}"]),
            helper.make_node("Mul", [f"raw{s}", "zero"], [f"z{s}"]),
        ]
        if s == 32:
            nodes += [helper.make_node("Identity", [f"raw{s}"], [f"score_{s}"]),
                      helper.make_node("Add", [f"z{s}", "bbox_c"], [f"bbox_{s}"]),
                      helper.make_node("Add", [f"z{s}", "kps_c"], [f"kps_{s}"])]
        else:
            nodes += [helper.make_node("Add", [f"z{s}", "minus_one"], [f"score_{s}"]),
                      helper.make_node("Add", [f"z{s}", "zeros4"], [f"bbox_{s}"]),
                      helper.make_node("Add", [f"z{s}", "zeros10"], [f"kps_{s}"])]
        scores.append(helper.make_tensor_value_info(f"score_{s}", TensorProto.FLOAT, [f"n{s}", 1]))
        bboxes.append(helper.make_tensor_value_info(f"bbox_{s}", TensorProto.FLOAT, [f"n{s}", 4]))
        kpss.append(helper.make_tensor_value_info(f"kps_{s}", TensorProto.FLOAT, [f"n{s}", 10]))
    graph = helper.make_graph(
        nodes, "scrfd_synthetic",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [*scores, *bboxes, *kpss])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def arcface_matrix(seed: int = 0) -> np.ndarray:
    """The ``(588, 512) float32`` projection inside :func:`build_arcface`."""
    return np.random.default_rng(seed).standard_normal((3 * 14 * 14, 512)).astype(np.float32)


def build_arcface(path: Path, seed: int = 0) -> Path:
    """Write the synthetic ArcFace model to ``path`` and return it."""
    nodes = [
        helper.make_node("AveragePool", ["input.1"], ["pool"], kernel_shape=[8, 8],
                         strides=[8, 8]),
        helper.make_node("Flatten", ["pool"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "fc_w"], ["683"]),
    ]
    graph = helper.make_graph(
        nodes, "arcface_synthetic",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, 112, 112])],
        [helper.make_tensor_value_info("683", TensorProto.FLOAT, [1, 512])],
        initializer=[numpy_helper.from_array(arcface_matrix(seed), "fc_w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def expected_detection(cell_x: int, cell_y: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """bbox ``(4,)`` and kps ``(5, 2)`` in frame px for the stride-32 cell ``(cell_x, cell_y)``
    when the frame was scaled by ``scale`` to make the detector input."""
    centre = np.array([cell_x * 32.0, cell_y * 32.0], np.float32)
    bbox = np.array([centre[0] - 64, centre[1] - 64, centre[0] + 64, centre[1] + 64], np.float32)
    kps = centre[None, :] + KPS_OFFSETS * 32.0
    return bbox / scale, kps / scale


def block_face_frame(cell: tuple[int, int], seed: int) -> np.ndarray:
    """640x640 BGR: dim texture (40..89) and a white 32x32 block at ``cell`` (in 32 px cells),
    which the synthetic SCRFD reads as a face."""
    rng = np.random.default_rng(seed)
    frame = rng.integers(40, 90, (640, 640, 3), dtype=np.uint8)
    cx, cy = cell
    frame[32 * cy:32 * (cy + 1), 32 * cx:32 * (cx + 1)] = 255
    return frame
