"""OnnxModule against onnxruntime: op by op on hand-built graphs, then on whole models."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from replica_models import scrfd_replica
from synthetic_faces import build_scrfd

from livefuse.errors import LivefuseError
from livefuse.models.onnx_torch import OnnxModelError, OnnxModule, OnnxOpError

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(0)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@dataclass
class Case:
    """One graph: nodes, feeds (graph inputs), initializers and (output name, elem type)."""

    id: str
    nodes: list[onnx.NodeProto]
    feeds: dict[str, np.ndarray]
    outputs: list[tuple[str, int]] = field(default_factory=lambda: [("y", F32)])
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    opset: int = 13
    atol: float = 1e-5


_ids = itertools.count()


def _n(op: str, ins: list[str], outs: list[str] | None = None, **attrs: object
       ) -> onnx.NodeProto:
    return helper.make_node(op, ins, outs or ["y"], name=f"my_{op.lower()}_{next(_ids)}",
                            **attrs)


def _write(case: Case, path: Path) -> Path:
    def info(name: str, arr: np.ndarray) -> onnx.ValueInfoProto:
        elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
        return helper.make_tensor_value_info(name, elem, list(arr.shape))

    graph = helper.make_graph(
        case.nodes, case.id, [info(k, v) for k, v in case.feeds.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in case.outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in case.inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _compare(path: Path, feeds: dict[str, np.ndarray], atol: float, rtol: float = 1e-5) -> None:
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    m = OnnxModule(path)
    with torch.inference_mode():
        out = m(*[torch.from_numpy(feeds[n]) for n in m.input_names])
    assert len(out) == len(ref)
    for r, o in zip(ref, out, strict=True):
        assert tuple(o.shape) == r.shape, (o.shape, r.shape)
        if r.dtype.kind in "iub":
            np.testing.assert_array_equal(o.numpy(), r)
        else:
            np.testing.assert_allclose(o.numpy(), r, atol=atol, rtol=rtol)


def _cases() -> list[Case]:
    x4 = _x(2, 4, 9, 11)
    w = _x(6, 4, 3, 3)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    cases = [
        Case("conv_asym_pads_stride_dilation", [_n("Conv", ["x", "w", "b"], pads=[1, 0, 2, 1],
                                                  strides=[2, 1], dilations=[1, 2])],
             {"x": x4}, inits={"w": w, "b": _x(6)}),
        Case("conv_same_upper_groups", [_n("Conv", ["x", "w"], auto_pad="SAME_UPPER", group=2,
                                           strides=[2, 2])],
             {"x": x4}, inits={"w": _x(6, 2, 3, 3)}),
        Case("conv_1d", [_n("Conv", ["x", "w"], pads=[1, 1])], {"x": _x(1, 3, 10)},
             inits={"w": _x(5, 3, 3)}),
        Case("conv_transpose_stride2_outpad", [_n("ConvTranspose", ["x", "w", "b"],
                                                  strides=[2, 2], pads=[1, 1, 1, 1],
                                                  output_padding=[1, 1])],
             {"x": x4}, inits={"w": _x(4, 3, 3, 3), "b": _x(3)}),
        Case("conv_transpose_asym_groups", [_n("ConvTranspose", ["x", "w"], strides=[2, 2],
                                               pads=[0, 1, 1, 0], group=2)],
             {"x": x4}, inits={"w": _x(4, 2, 3, 3)}),
        Case("maxpool_ceil_pads", [_n("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                                      pads=[1, 1, 1, 1], ceil_mode=1)], {"x": x4}),
        Case("maxpool_asym_pads", [_n("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2],
                                      pads=[0, 0, 1, 1])], {"x": x4}),
        Case("avgpool_ceil_exclude_pad", [_n("AveragePool", ["x"], kernel_shape=[2, 2],
                                             strides=[2, 2], ceil_mode=1)], {"x": x4}),
        Case("avgpool_asym_exclude_pad", [_n("AveragePool", ["x"], kernel_shape=[3, 3],
                                             pads=[0, 1, 2, 1])], {"x": x4}),
        Case("avgpool_include_pad", [_n("AveragePool", ["x"], kernel_shape=[3, 3],
                                        pads=[1, 1, 1, 1], count_include_pad=1)], {"x": x4}),
        Case("global_pools", [_n("GlobalAveragePool", ["x"], ["a"]),
                              _n("GlobalMaxPool", ["x"], ["b"]), _n("Add", ["a", "b"])],
             {"x": x4}),
        Case("batchnorm_const", [_n("BatchNormalization", ["x", "g", "b", "m", "v"],
                                    epsilon=1e-3)], {"x": x4},
             inits={"g": _x(4), "b": _x(4), "m": _x(4), "v": np.abs(_x(4)) + 0.1}),
        Case("batchnorm_2d_input", [_n("BatchNormalization", ["x", "g", "b", "m", "v"])],
             {"x": _x(3, 5)}, inits={"g": _x(5), "b": _x(5), "m": _x(5),
                                     "v": np.abs(_x(5)) + 0.1}),
        Case("batchnorm_runtime_stats", [_n("Abs", ["s"], ["v"]),
                                         _n("BatchNormalization", ["x", "s", "s", "s", "v"])],
             {"x": x4, "s": np.abs(_x(4)) + 0.5}),
        Case("instance_norm", [_n("InstanceNormalization", ["x", "g", "b"], epsilon=1e-5)],
             {"x": x4}, inits={"g": _x(4), "b": _x(4)}),
        Case("layer_norm", [_n("LayerNormalization", ["x", "g", "b"], axis=-2)], {"x": x4},
             inits={"g": _x(9, 11), "b": _x(9, 11)}, opset=17),
        Case("prelu_channel_slope", [_n("PRelu", ["x", "s"])], {"x": x4},
             inits={"s": _x(4, 1, 1)}),
        Case("leaky_elu_hardsigmoid", [_n("LeakyRelu", ["x"], ["a"], alpha=0.2),
                                       _n("Elu", ["a"], ["b"], alpha=0.7),
                                       _n("HardSigmoid", ["b"], alpha=0.3, beta=0.4)],
             {"x": x4}),
        Case("unary_chain", [_n("Sigmoid", ["x"], ["a"]), _n("Tanh", ["a"], ["b"]),
                             _n("Exp", ["b"], ["c"]), _n("Sqrt", ["c"], ["d"]),
                             _n("Erf", ["d"], ["e"]), _n("Neg", ["e"], ["f"]),
                             _n("Abs", ["f"], ["g"]), _n("Reciprocal", ["g"], ["h"]),
                             _n("Log", ["h"], ["i"]), _n("Relu", ["i"], ["j"]),
                             _n("Softplus", ["j"], ["k"]), _n("Floor", ["k"], ["l"]),
                             _n("Add", ["l", "k"])], {"x": x4}),
        Case("clip_opset11_inputs", [_n("Clip", ["x", "lo", "hi"])], {"x": x4},
             inits={"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)},
             opset=11),
        Case("clip_opset6_attrs", [_n("Clip", ["x"], min=-0.2, max=0.3)], {"x": x4}, opset=6),
        Case("binary_broadcast", [_n("Mul", ["x", "c"], ["a"]), _n("Sub", ["a", "x"], ["b"]),
                                  _n("Div", ["b", "c"], ["d"]), _n("Pow", ["d", "two"], ["e"]),
                                  _n("Max", ["e", "x", "c"], ["f"]),
                                  _n("Min", ["f", "x"], ["g"]), _n("Mean", ["g", "x"])],
             {"x": x4}, inits={"c": np.abs(_x(1, 4, 1, 1)) + 0.5,
                               "two": np.array(2.0, np.float32)}),
        Case("where_compare", [_n("Greater", ["x", "z"], ["m"]), _n("Where", ["m", "x", "z"])],
             {"x": x4, "z": _x(1, 1, 9, 11)}),
        Case("gemm_trans_alpha_beta", [_n("Gemm", ["a", "b", "c"], alpha=0.5, beta=2.0,
                                          transA=1, transB=0)],
             {"a": _x(7, 3)}, inits={"b": _x(7, 5), "c": _x(3, 5)}),
        Case("gemm_linear", [_n("Gemm", ["a", "b", "c"], transB=1)], {"a": _x(3, 7)},
             inits={"b": _x(5, 7), "c": _x(5)}),
        Case("matmul_batched", [_n("MatMul", ["a", "b"])], {"a": _x(2, 3, 4, 5)},
             inits={"b": _x(5, 6)}),
        Case("einsum", [_n("Einsum", ["a", "b"], equation="bij,bjk->bik")],
             {"a": _x(2, 3, 4), "b": _x(2, 4, 5)}),
        Case("softmax_opset11_flattens", [_n("Softmax", ["x"], axis=1)], {"x": x4}, opset=11),
        Case("softmax_logsoftmax_opset13", [_n("Softmax", ["x"], ["a"], axis=2),
                                            _n("LogSoftmax", ["a"], axis=-1)], {"x": x4}),
        Case("reduce_attrs", [_n("ReduceMean", ["x"], ["a"], axes=[2, 3], keepdims=1),
                              _n("ReduceMax", ["x"], ["b"], axes=[1], keepdims=1),
                              _n("ReduceL2", ["x"], ["c"], axes=[1], keepdims=1),
                              _n("Add", ["a", "b"], ["d"]), _n("Add", ["d", "c"])], {"x": x4}),
        Case("reducesum_axes_input", [_n("ReduceSum", ["x", "ax"], keepdims=0)], {"x": x4},
             inits={"ax": i64(1, -1)}),
        Case("reducesum_all", [_n("ReduceSumSquare", ["x"], keepdims=0)], {"x": x4}),
        Case("argmax_topk", [_n("ArgMax", ["x"], ["y"], axis=1, keepdims=0),
                             _n("TopK", ["x", "k"], ["v", "i"], axis=-1)],
             {"x": x4}, [("y", I64), ("v", F32), ("i", I64)], inits={"k": i64(3)}),
        Case("pad_reflect", [_n("Pad", ["x", "p"], mode="reflect")], {"x": x4},
             inits={"p": i64(0, 0, 2, 1, 0, 0, 1, 3)}, opset=11),
        Case("pad_edge", [_n("Pad", ["x", "p"], mode="edge")], {"x": x4},
             inits={"p": i64(0, 0, 1, 2, 0, 0, 3, 0)}, opset=13),
        Case("pad_constant_value_negative", [_n("Pad", ["x", "p", "v"])], {"x": x4},
             inits={"p": i64(0, 1, -1, 2, 0, 0, 1, -2), "v": np.array(1.5, np.float32)},
             opset=13),
        Case("pad_opset2_attrs", [_n("Pad", ["x"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=2.0)],
             {"x": x4}, opset=9),
        Case("concat_split_attr", [_n("Split", ["x"], ["a", "b"], axis=1, split=[1, 3]),
                                   _n("Concat", ["b", "a", "b"], axis=1)], {"x": x4}, opset=11),
        Case("split_input_even", [_n("Split", ["x", "s"], ["a", "b"], axis=2),
                                  _n("Sub", ["a", "b"])], {"x": _x(1, 2, 6, 3)},
             inits={"s": i64(3, 3)}),
        Case("slice_negative_steps", [_n("Slice", ["x", "st", "en", "ax", "sp"])], {"x": x4},
             inits={"st": i64(-1, 1), "en": i64(-100, 9), "ax": i64(3, 2), "sp": i64(-2, 3)}),
        Case("slice_opset1_attrs", [_n("Slice", ["x"], starts=[1, 2], ends=[3, 100],
                                       axes=[1, 3])], {"x": x4}, opset=9),
        Case("gather_vector_negative", [_n("Gather", ["x", "i"], axis=2)], {"x": x4},
             inits={"i": i64(0, -1, 3, 3)}),
        Case("gather_runtime_indices", [_n("Gather", ["x", "i"], axis=1)],
             {"x": x4, "i": np.array([[3, 0], [-1, 2]], np.int64)}),
        Case("gather_elements", [_n("GatherElements", ["x", "i"], axis=1)],
             {"x": _x(3, 4), "i": np.array([[0, 1], [3, 2], [1, 1]], np.int64)}),
        Case("transpose_flatten", [_n("Transpose", ["x"], ["a"], perm=[0, 2, 3, 1]),
                                   _n("Flatten", ["a"], axis=2)], {"x": x4}),
        Case("squeeze_unsqueeze_opset11", [_n("Unsqueeze", ["x"], ["a"], axes=[0, -1]),
                                           _n("Squeeze", ["a"], axes=[0])], {"x": x4},
             opset=11),
        Case("squeeze_unsqueeze_opset13", [_n("Unsqueeze", ["x", "ax"], ["a"]),
                                           _n("Squeeze", ["a"])], {"x": x4},
             inits={"ax": i64(1, 4)}),
        Case("tile_expand", [_n("Tile", ["x", "r"], ["a"]), _n("Expand", ["a", "s"])],
             {"x": _x(1, 2, 1, 3)}, inits={"r": i64(1, 1, 2, 2), "s": i64(3, 1, 2, 1)}),
        Case("depth_space_dcr_crd", [_n("DepthToSpace", ["x"], ["a"], blocksize=2),
                                     _n("SpaceToDepth", ["a"], ["b"], blocksize=2),
                                     _n("DepthToSpace", ["b"], blocksize=2, mode="CRD")],
             {"x": _x(1, 8, 3, 5)}),
        Case("cumsum_mod", [_n("CumSum", ["x", "ax"], ["a"], exclusive=1, reverse=1),
                            _n("Mod", ["a", "m"], fmod=1)], {"x": x4},
             inits={"ax": i64(2), "m": np.array(0.7, np.float32)}),
        Case("cast_int_float", [_n("Mul", ["x", "k"], ["a"]), _n("Cast", ["a"], ["b"], to=I64),
                                _n("Cast", ["b"], to=F32)], {"x": x4},
             inits={"k": np.array(10.0, np.float32)}),
        Case("dropout_identity_mask", [_n("Dropout", ["x"], ["a", "m"]),
                                       _n("Cast", ["m"], ["mf"], to=F32),
                                       _n("Add", ["a", "mf"])], {"x": x4}, opset=12),
        # exported-model shape chains: every Shape/Gather/Concat value folds at plan time
        Case("shape_chain_reshape", [
            _n("Shape", ["x"], ["s"]), _n("Gather", ["s", "zero"], ["n"], axis=0),
            _n("Unsqueeze", ["n", "ax0"], ["n1"]), _n("Concat", ["n1", "m1"], ["tgt"], axis=0),
            _n("Reshape", ["x", "tgt"])], {"x": x4},
            inits={"zero": i64(0).reshape(()), "ax0": i64(0), "m1": i64(-1)}),
        Case("shape_chain_resize_sizes", [
            _n("Shape", ["b"], ["s"]), _n("Slice", ["s", "st", "en"], ["hw"]),
            _n("Shape", ["x"], ["sx"]), _n("Slice", ["sx", "z", "st"], ["nc"]),
            _n("Concat", ["nc", "hw"], ["sz"], axis=0),
            _n("Resize", ["x", "", "", "sz"], coordinate_transformation_mode="asymmetric",
               mode="nearest", nearest_mode="floor")],
            {"x": _x(1, 3, 5, 6), "b": _x(1, 3, 10, 12)},
            inits={"st": i64(2), "en": i64(4), "z": i64(0)}),
        Case("constant_of_shape_range", [
            _n("Shape", ["x"], ["s"]), _n("ConstantOfShape", ["s"], ["c"],
                                          value=numpy_helper.from_array(np.array([0.5],
                                                                                 np.float32))),
            _n("Range", ["r0", "r1", "r2"], ["r"]), _n("Cast", ["r"], ["rf"], to=F32),
            _n("Add", ["c", "rf"], ["a"]), _n("Add", ["a", "x"])], {"x": _x(2, 3, 4)},
            inits={"r0": np.array(1, np.int64), "r1": np.array(9, np.int64),
                   "r2": np.array(2, np.int64)}),
        Case("constant_node", [helper.make_node("Constant", [], ["k"],
                                                value_floats=[1.0, 2.0, 3.0]),
                               _n("Mul", ["x", "k"])], {"x": _x(2, 3)}),
        # a modulated conv (StyleGAN2 / GFPGAN): per-sample weights computed at run time, the
        # batch folded into groups
        Case("runtime_weights_grouped_conv", [
            _n("Gemm", ["lat", "aw", "ab"], ["style"], transB=1),
            _n("Unsqueeze", ["style", "ax13"], ["s4"]),  # (N, 1, Cin, 1, 1)
            _n("Mul", ["w5", "s4"], ["mw"]),  # (N, Cout, Cin, 3, 3)
            _n("Mul", ["mw", "mw"], ["sq"]), _n("ReduceSum", ["sq", "ax234"], ["ss"]),
            _n("Add", ["ss", "eps"], ["sse"]), _n("Sqrt", ["sse"], ["nrm"]),
            _n("Div", ["mw", "nrm"], ["dw"]),
            _n("Shape", ["x"], ["xs"]), _n("Gather", ["xs", "zero"], ["nb"], axis=0),
            _n("Unsqueeze", ["nb", "ax0"], ["nb1"]), _n("Mul", ["nb1", "cout"], ["nco"]),
            _n("Concat", ["nco", "wtail"], ["wshape"], axis=0),
            _n("Reshape", ["dw", "wshape"], ["wg"]),
            _n("Reshape", ["x", "xshape"], ["xg"]),
            _n("Conv", ["xg", "wg"], ["yg"], pads=[1, 1, 1, 1], group=2),
            _n("Reshape", ["yg", "yshape"])],
            {"x": _x(2, 4, 8, 8), "lat": _x(2, 16)},
            inits={"aw": _x(4, 16), "ab": np.ones(4, np.float32), "ax13": i64(1, 3, 4),
                   "w5": _x(1, 6, 4, 3, 3), "ax234": i64(2, 3, 4),
                   "eps": np.array(1e-8, np.float32), "zero": i64(0).reshape(()),
                   "ax0": i64(0), "cout": i64(6), "wtail": i64(4, 3, 3),
                   "xshape": i64(1, 8, 8, 8), "yshape": i64(2, 6, 8, 8)}, atol=1e-4),
    ]
    img = _x(1, 3, 6, 7)
    resize = [
        ("nearest_asym_floor_x2", {"coordinate_transformation_mode": "asymmetric",
                                   "mode": "nearest", "nearest_mode": "floor"}, [1, 1, 2, 2]),
        ("nearest_half_pixel_x3", {"mode": "nearest"}, [1, 1, 3, 3]),
        ("nearest_tf_ceil_down", {"coordinate_transformation_mode": "tf_half_pixel_for_nn",
                                  "mode": "nearest", "nearest_mode": "ceil"}, [1, 1, 0.6, 0.8]),
        ("linear_half_pixel_1_5", {"mode": "linear"}, [1, 1, 1.5, 1.7]),
        ("linear_align_corners", {"mode": "linear",
                                  "coordinate_transformation_mode": "align_corners"},
         [1, 1, 2, 3]),
        ("linear_asymmetric", {"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
         [1, 1, 2.5, 0.5]),
        ("linear_pytorch_half_pixel_down", {"mode": "linear", "coordinate_transformation_mode":
                                            "pytorch_half_pixel"}, [1, 1, 0.5, 0.75]),
        ("cubic_half_pixel", {"mode": "cubic"}, [1, 1, 2, 2]),
    ]
    for name, attrs, scales in resize:
        cases.append(Case(f"resize_{name}", [_n("Resize", ["x", "roi", "sc"], **attrs)],
                          {"x": img}, inits={"roi": np.zeros(0, np.float32),
                                             "sc": np.array(scales, np.float32)}, atol=1e-4))
    cases.append(Case("resize_sizes_linear", [_n("Resize", ["x", "", "", "sz"], mode="linear")],
                      {"x": img}, inits={"sz": i64(1, 3, 11, 4)}, atol=1e-5))
    cases.append(Case("upsample_opset9", [_n("Upsample", ["x", "sc"], mode="nearest")],
                      {"x": img}, inits={"sc": np.array([1, 1, 2, 3], np.float32)}, opset=9))
    cases.append(Case("resize_opset10_linear", [_n("Resize", ["x", "sc"], mode="linear")],
                      {"x": img}, inits={"sc": np.array([1, 1, 2, 2], np.float32)}, opset=10))
    return cases


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.id)
def test_op_matches_onnxruntime(case: Case, tmp_path: Path) -> None:
    _compare(_write(case, tmp_path / f"{case.id}.onnx"), case.feeds, case.atol)


def test_every_case_op_is_covered() -> None:
    """The op table above touches most of the supported set (guards against silent drift)."""
    from livefuse.models.onnx_torch import SUPPORTED_OPS

    used = {n.op_type for c in _cases() for n in c.nodes}
    assert len(used & SUPPORTED_OPS) >= 70
    assert used <= SUPPORTED_OPS


# ----------------------------------------------------------------------------------- models

def test_synthetic_inswapper_and_faces_match_onnxruntime(tmp_path: Path) -> None:
    from livefuse.testing.synthetic import build_synthetic_inswapper

    swap = build_synthetic_inswapper(tmp_path / "swap.onnx", width=8)
    _compare(swap, {"target": np.random.default_rng(1).random((1, 3, 128, 128), np.float32),
                    "source": _x(1, 512)}, atol=1e-5)
    det = build_scrfd(tmp_path / "det.onnx")
    _compare(det, {"input.1": _x(1, 3, 96, 160)}, atol=1e-6)


class _TinyUNet(torch.nn.Module):
    """The op patterns of an occlusion-mask UNet and a face parser as the TorchScript exporter
    writes them: strided convs, max pooling, instance norm, PReLU, transposed convs, skip
    concatenation, bilinear upsampling to another tensor's size (a Shape/Resize chain), softmax
    and sigmoid heads."""

    def __init__(self) -> None:
        super().__init__()
        c = torch.nn.Conv2d
        self.enc1, self.enc2 = c(3, 8, 3, padding=1), c(8, 16, 3, stride=2, padding=1)
        self.norm, self.act = torch.nn.InstanceNorm2d(16, affine=True), torch.nn.PReLU(16)
        self.up = torch.nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.dec = c(16, 8, 3, padding=1)
        self.parse, self.mask = c(8, 5, 1), c(8, 1, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.nn.functional.leaky_relu(self.enc1(x), 0.1)
        b = self.act(self.norm(self.enc2(torch.nn.functional.max_pool2d(a, 2))))
        u = self.up(b)
        u = torch.nn.functional.interpolate(u, size=a.shape[2:], mode="bilinear",
                                            align_corners=True)
        d = torch.relu(self.dec(torch.cat((u, a), 1)))
        return torch.softmax(self.parse(d), 1), torch.sigmoid(self.mask(d))


def test_exported_unet_like_model_matches_onnxruntime(tmp_path: Path) -> None:
    import warnings

    path = tmp_path / "unet.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        torch.onnx.export(_TinyUNet().eval(), (torch.zeros(1, 3, 64, 48),), str(path),
                          input_names=["x"], output_names=["parse", "mask"], opset_version=13,
                          dynamo=False, dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}})
    for shape in ((1, 3, 64, 48), (2, 3, 40, 56)):
        _compare(path, {"x": _x(*shape)}, atol=1e-5)


def test_scrfd_replica_matches_onnxruntime_at_two_sizes() -> None:
    path = scrfd_replica()
    for shape in ((1, 3, 160, 224), (1, 3, 96, 96)):
        _compare(path, {"input.1": _x(*shape)}, atol=2e-4, rtol=1e-4)


def test_plans_are_kept_per_input_shape_and_follow_dtype(tmp_path: Path) -> None:
    case = next(c for c in _cases() if c.id == "shape_chain_resize_sizes")
    m = OnnxModule(_write(case, tmp_path / "m.onnx"))
    x, b = torch.from_numpy(case.feeds["x"]), torch.from_numpy(case.feeds["b"])
    y1 = m(x, b)[0]
    assert len(m._plan_keys) == 1
    m(x, b)
    assert len(m._plan_keys) == 1
    assert tuple(m(x, torch.zeros(1, 3, 15, 18))[0].shape) == (1, 3, 15, 18)
    assert len(m._plan_keys) == 2
    m.half()
    assert m.float_dtype == torch.float16
    y2 = m(x, b)[0]  # a float32 input is cast to the module's dtype
    assert y2.dtype == torch.float16
    torch.testing.assert_close(y2.float(), y1, atol=2e-3, rtol=2e-3)


def test_planned_graph_reads_no_values_back(tmp_path: Path) -> None:
    """Every shape computation folds at plan time: the planned steps run on the meta device,
    where reading a value (a host sync on a GPU) is impossible."""
    case = next(c for c in _cases() if c.id == "runtime_weights_grouped_conv")
    m = OnnxModule(_write(case, tmp_path / "m.onnx"))
    m.to("meta")
    out = m(torch.empty(2, 4, 8, 8, device="meta"), torch.empty(2, 16, device="meta"))[0]
    assert out.device.type == "meta" and tuple(out.shape) == (2, 6, 8, 8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_close_to_float32(dtype: torch.dtype, tmp_path: Path) -> None:
    """Normalisations and softmax compute in float32 inside: a variance of 1e-6 and an eps of
    1e-8 (0 in float16) still give finite, close results."""
    nodes = [_n("InstanceNormalization", ["x", "g", "b"], ["a"], epsilon=1e-8),
             _n("Softmax", ["a"], ["s"], axis=1), _n("ReduceSum", ["s", "ax"], ["r"]),
             _n("Mul", ["a", "r"])]
    x = (_x(1, 4, 8, 8) * 1e-3).astype(np.float32)
    case = Case("lowp", nodes, {"x": x}, inits={"g": np.ones(4, np.float32),
                                                "b": np.zeros(4, np.float32),
                                                "ax": np.array([1], np.int64)})
    m = OnnxModule(_write(case, tmp_path / "m.onnx"))
    ref = m(torch.from_numpy(x))[0]
    low = m.to(dtype)(torch.from_numpy(x))[0]
    assert low.dtype == dtype and torch.isfinite(low).all()
    tol = 2e-2 if dtype == torch.bfloat16 else 3e-3
    torch.testing.assert_close(low.float(), ref, atol=tol * 4, rtol=tol)


# ----------------------------------------------------------------------------------- errors

def test_unsupported_op_names_file_node_and_op(tmp_path: Path) -> None:
    case = Case("nz", [_n("NonZero", ["x"], ["i"])], {"x": _x(2, 3)}, [("i", I64)])
    path = _write(case, tmp_path / "nonzero.onnx")
    with pytest.raises(OnnxOpError) as err:
        OnnxModule(path)
    msg = str(err.value)
    assert str(path) in msg and "my_nonzero" in msg and "NonZero" in msg
    assert err.value.op == "NonZero" and err.value.node.startswith("my_nonzero")
    assert isinstance(err.value, LivefuseError)


def test_custom_domain_op_is_unsupported(tmp_path: Path) -> None:
    node = helper.make_node("FusedConv", ["x"], ["y"], name="fc", domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F32, [1])],
                              [helper.make_tensor_value_info("y", F32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    onnx.save(model, str(tmp_path / "ms.onnx"))
    with pytest.raises(OnnxOpError, match=r"com\.microsoft"):
        OnnxModule(tmp_path / "ms.onnx")


def test_unsupported_attribute_is_clear(tmp_path: Path) -> None:
    case = Case("aa", [_n("Resize", ["x", "", "", "sz"], mode="linear", antialias=1)],
                {"x": _x(1, 1, 4, 4)}, inits={"sz": np.array([1, 1, 2, 2], np.int64)},
                opset=18)
    m = OnnxModule(_write(case, tmp_path / "aa.onnx"))
    with pytest.raises(OnnxOpError, match=r"my_resize.*antialias"):
        m(torch.zeros(1, 1, 4, 4))


def test_data_dependent_shape_is_refused_clearly(tmp_path: Path) -> None:
    case = Case("dd", [_n("Reshape", ["x", "s"])], {"x": _x(2, 6), "s": np.array([3, 4],
                                                                                np.int64)})
    m = OnnxModule(_write(case, tmp_path / "dd.onnx"))
    with pytest.raises(OnnxOpError, match="computed from the data at run time"):
        m(torch.zeros(2, 6), torch.tensor([3, 4]))


def test_bad_input_shapes_fail_at_planning_naming_the_node(tmp_path: Path) -> None:
    case = next(c for c in _cases() if c.id == "matmul_batched")
    m = OnnxModule(_write(case, tmp_path / "mm.onnx"))
    with pytest.raises(OnnxOpError, match=r"my_matmul.*\(2, 3, 4, 7\)"):
        m(torch.zeros(2, 3, 4, 7))


def test_missing_truncated_and_garbage_files(tmp_path: Path) -> None:
    with pytest.raises(OnnxModelError, match=r"nope\.onnx.*no such file"):
        OnnxModule(tmp_path / "nope.onnx")
    src = scrfd_replica().read_bytes()
    cut = tmp_path / "truncated.onnx"
    cut.write_bytes(src[: len(src) // 3])
    with pytest.raises(OnnxModelError, match=r"truncated\.onnx"):
        OnnxModule(cut)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf" * 10)
    with pytest.raises(OnnxModelError, match=r"junk\.onnx"):
        OnnxModule(junk)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(OnnxModelError, match=r"empty\.onnx"):
        OnnxModule(empty)


def test_dangling_input_is_reported(tmp_path: Path) -> None:
    case = Case("dangling", [_n("Add", ["x", "ghost"])], {"x": _x(2)})
    path = _write(case, tmp_path / "dangling.onnx")
    with pytest.raises(OnnxOpError, match="ghost"):
        OnnxModule(path)
