"""The PyTorch port of inswapper_128 and its structural ONNX loader (tiny replica, CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import numpy_helper

from livefuse.errors import LivefuseError
from livefuse.models.inswapper_torch import (
    InSwapper128,
    InswapperGraphError,
    _adain,
    load_inswapper_onnx,
    parameter_count,
)
from livefuse.testing.synthetic import export_inswapper, random_emap, random_inswapper


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[InSwapper128, np.ndarray, Path]:
    model = random_inswapper(width=8, seed=3)
    emap = random_emap(3)
    path = export_inswapper(model, emap, tmp_path_factory.mktemp("m") / "tiny.onnx")
    return model, emap, path


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(1, 3, 128, 128, generator=g)
    lat = torch.nn.functional.normalize(torch.randn(1, 512, generator=g), dim=1)
    return t, lat


def test_full_size_has_published_parameter_count() -> None:
    with torch.device("meta"):
        model = InSwapper128()
    assert round(parameter_count(model) / 1e6, 1) == 138.3


def test_forward_shape_and_range() -> None:
    model = random_inswapper(width=4, seed=1)
    with torch.no_grad():
        out = model(*_inputs())
    assert out.shape == (1, 3, 128, 128)
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    assert float(out.std()) > 0.02  # the synthetic weights do not saturate the tanh


def test_signature_matches_inswapper(exported: tuple[InSwapper128, np.ndarray, Path]) -> None:
    _, emap, path = exported
    proto = onnx.load(str(path))
    g = proto.graph
    assert [i.name for i in g.input] == ["target", "source"]
    assert [o.name for o in g.output] == ["output"]
    dims = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in g.input]
    assert dims == [[1, 3, 128, 128], [1, 512]]
    ops = [n.op_type for n in g.node]
    assert ops.count("Conv") == 20 and ops.count("Gemm") == 12
    assert "Pad" in ops and "Resize" in ops
    np.testing.assert_array_equal(numpy_helper.to_array(g.initializer[-1]), emap)


def test_structural_loader_reproduces_outputs(
        exported: tuple[InSwapper128, np.ndarray, Path]) -> None:
    model, emap, path = exported
    loaded = load_inswapper_onnx(path)
    assert loaded.model.width == 8
    np.testing.assert_array_equal(loaded.emap, emap)
    t, lat = _inputs(5)
    with torch.no_grad():
        want = model(t, lat).numpy()
        got = loaded.model(t, lat).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ort_out = sess.run(None, {"target": t.numpy(), "source": lat.numpy()})[0]
    np.testing.assert_allclose(got, ort_out, rtol=1e-4, atol=1e-5)


def test_loader_rejects_wrong_block_count(tmp_path: Path) -> None:
    model = InSwapper128(width=4, n_blocks=5)
    path = export_inswapper(model.eval(), random_emap(), tmp_path / "five.onnx")
    with pytest.raises(InswapperGraphError, match=r"five\.onnx.*18 Conv nodes.*has 20"):
        load_inswapper_onnx(path)


def test_loader_names_node_and_shapes_on_mismatch(
        exported: tuple[InSwapper128, np.ndarray, Path], tmp_path: Path) -> None:
    proto = onnx.load(str(exported[2]))
    convs = [n for n in proto.graph.node if n.op_type == "Conv"]
    target = convs[5]  # first block's second conv
    init = next(t for t in proto.graph.initializer if t.name == target.input[1])
    arr = numpy_helper.to_array(init)
    init.CopyFrom(numpy_helper.from_array(arr[:, :, :2, :2].copy(), init.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(proto, str(bad))
    with pytest.raises(InswapperGraphError) as err:
        load_inswapper_onnx(bad)
    msg = str(err.value)
    assert "bad.onnx" in msg and target.name in msg
    assert "(64, 64, 2, 2)" in msg and "(64, 64, 3, 3)" in msg
    assert isinstance(err.value, LivefuseError)


def test_loader_rejects_missing_emap(exported: tuple[InSwapper128, np.ndarray, Path],
                                     tmp_path: Path) -> None:
    proto = onnx.load(str(exported[2]))
    del proto.graph.initializer[-1]
    path = tmp_path / "noemap.onnx"
    onnx.save(proto, str(path))
    with pytest.raises(InswapperGraphError, match=r"expected the \(512, 512\) emap"):
        load_inswapper_onnx(path)


def test_loader_rejects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "page.onnx"
    path.write_bytes(b"<html>404 not found</html>")
    with pytest.raises(InswapperGraphError, match=r"page\.onnx"):
        load_inswapper_onnx(path)


def test_norm_runs_in_fp32_under_fp16() -> None:
    # A flat channel: in fp16 the 1e-8 eps is 0 and the norm would be 0/0 = NaN.
    x = torch.full((1, 4, 8, 8), 3.0, dtype=torch.float16)
    style = torch.ones(1, 8, dtype=torch.float16)
    y = _adain(x, style, 1e-8)
    assert y.dtype == torch.float16
    assert torch.isfinite(y).all()
    naive = (x - x.mean((2, 3), keepdim=True)) / torch.sqrt(
        x.var((2, 3), keepdim=True, correction=0) + torch.tensor(1e-8, dtype=torch.float16))
    assert not torch.isfinite(naive).all()


def test_half_model_close_to_fp32_on_cpu() -> None:
    model = random_inswapper(width=8, seed=2)
    t, lat = _inputs(2)
    with torch.no_grad():
        ref = model(t, lat)
        half = InSwapper128(width=8)
        half.load_state_dict(model.state_dict())
        out = half.half()(t.half(), lat.half()).float()
    lsb = (out - ref).abs().mean().item() * 255
    assert lsb <= 1.0


def test_precomputed_styles_give_the_same_output() -> None:
    model = random_inswapper(8, seed=3).eval()
    t = torch.rand(2, 3, 128, 128, generator=torch.Generator().manual_seed(1))
    latent = torch.nn.functional.normalize(torch.randn(2, 512), dim=1)
    with torch.inference_mode():
        styles = model.styles(latent)
        assert styles.shape == (12, 2, 16 * 8)
        torch.testing.assert_close(model.forward_styled(t, styles), model(t, latent),
                                   rtol=0, atol=0)


def test_runner_recomputes_styles_when_the_source_changes() -> None:
    """The style cache is keyed by the latent's value: a new source face must not reuse the
    previous face's styles."""
    from livefuse.models.inswapper_torch import LoadedInswapper
    from livefuse.models.torch_runner import TorchRunner

    model = random_inswapper(8, seed=4)
    runner = TorchRunner(LoadedInswapper(model=model, emap=random_emap(0), path=Path("x")))
    t = torch.rand(1, 3, 128, 128, generator=torch.Generator().manual_seed(2))
    a, b = (torch.nn.functional.normalize(torch.randn(1, 512), dim=1) for _ in range(2))
    out_a = runner.infer_tensor(t, a).clone()
    out_b = runner.infer_tensor(t, b).clone()
    with torch.inference_mode():
        torch.testing.assert_close(out_a, model.eval()(t, a))
        torch.testing.assert_close(out_b, model(t, b))
    assert (out_a - out_b).abs().max() > 1e-3
    torch.testing.assert_close(runner.infer_tensor(t, a), out_a)  # back to the first source


@pytest.mark.parametrize("fused", [frozenset(), frozenset({"first", "last", "adain"})])
def test_batched_swap_equals_per_face_swaps(fused: frozenset[str]) -> None:
    """All faces of a frame run as one batch with the source's styles broadcast over it; each
    face's output equals its own batch-1 run (the fused layers included)."""
    from livefuse.models.inswapper_torch import LoadedInswapper
    from livefuse.models.torch_runner import TorchRunner

    model = random_inswapper(8, seed=5)
    runner = TorchRunner(LoadedInswapper(model=model, emap=random_emap(0), path=Path("x")),
                         fused=fused)
    faces = torch.rand(4, 3, 128, 128, generator=torch.Generator().manual_seed(3))
    latent = torch.nn.functional.normalize(torch.randn(1, 512), dim=1)
    batch = runner.infer_tensor(faces, latent).clone()
    assert batch.shape == (4, 3, 128, 128)
    for i in range(4):
        torch.testing.assert_close(batch[i:i + 1], runner.infer_tensor(faces[i:i + 1], latent),
                                   atol=1e-5, rtol=1e-5)
    assert (batch[0] - batch[1]).abs().max() > 1e-3  # different faces, different outputs
