"""The replicas have the released files' size, cost and signature."""

from __future__ import annotations

import onnx
import pytest
import torch
from replica_models import arcface_replica, scrfd_replica

from livefuse.testing.replicas import (
    IResNet50,
    Scrfd10g,
    conv_macs,
    parameter_count,
    scrfd_output_names,
)


def test_scrfd_10g_size_and_cost() -> None:
    model = Scrfd10g().eval()
    assert parameter_count(model) == pytest.approx(4.23e6, rel=0.01)
    # SCRFD's "10 GF" is counted at VGA (640x480)
    assert conv_macs(model, torch.zeros(1, 3, 480, 640)) == pytest.approx(10.0e9, rel=0.02)


def test_iresnet50_size_and_cost() -> None:
    model = IResNet50().eval()
    assert parameter_count(model) == pytest.approx(43.59e6, rel=0.005)
    assert conv_macs(model, torch.zeros(1, 3, 112, 112)) == pytest.approx(6.31e9, rel=0.01)


def test_exported_signatures() -> None:
    det = onnx.load(str(scrfd_replica()), load_external_data=False)
    assert det.opset_import[0].version == 11
    (inp,) = det.graph.input
    dims = [d.dim_value or d.dim_param for d in inp.type.tensor_type.shape.dim]
    assert inp.name == "input.1" and dims[:2] == [1, 3] and all(isinstance(d, str)
                                                                for d in dims[2:])
    assert [o.name for o in det.graph.output] == scrfd_output_names()
    assert scrfd_replica().stat().st_size == pytest.approx(16.9e6, rel=0.01)
    ops = {n.op_type for n in det.graph.node}
    assert {"Conv", "Relu", "AveragePool", "MaxPool", "Resize", "Shape", "Sigmoid"} <= ops
    assert "BatchNormalization" not in ops  # folded, as in the released export
    rec = onnx.load(str(arcface_replica()))
    (inp,) = rec.graph.input
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim][1:] == [3, 112, 112]
    assert len(rec.graph.output) == 1
    assert arcface_replica().stat().st_size == pytest.approx(174.4e6, rel=0.01)
    assert {"BatchNormalization", "PRelu", "Gemm"} <= {n.op_type for n in rec.graph.node}
