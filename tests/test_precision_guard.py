"""The masks and the enhancer under the swapper's precision policy and guard (issue 17 item 4),
and the per-frame work the GPU path no longer repeats (item 7), on the CPU.

The fake models return NaN whenever their weights are fp16, as an fp16 overflow on a real card
would: the guard must compute them again in fp32, stay there, and never let the NaN reach a pixel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from synthetic_faces import build_arcface, build_scrfd
from torch import nn

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.models.graph_runner import GraphIO, TorchGraph
from livefuse.swap import masks as M
from livefuse.swap.enhance import FaceEnhancer
from livefuse.swap.masks import FaceMasker, FaceParser, Occluder
from livefuse.swap.neural_engine import NeuralPaths, build_neural
from livefuse.testing.synthetic import build_synthetic_inswapper

S = 64
OCC_IO = GraphIO(("x",), ((None, 3, 32, 32),), ("mask",), ((None, 1, 32, 32),))
PARSER_IO = GraphIO(("x",), ((None, 3, 32, 32),), ("logits",), ((None, 19, 32, 32),))
ENH_IO = GraphIO(("x",), ((None, 3, 512, 512),), ("y",), ((None, 3, 512, 512),))


class _NanInHalf(nn.Module):
    """Occluder-shaped (``(N, 3, H, W)`` → ``(N, 1, H, W)`` in [0, 1]) or, with ``enhancer``,
    image-shaped; NaN when run in fp16."""

    def __init__(self, enhancer: bool = False) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))
        self.enhancer = enhancer
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = x * self.w * 0.5 if self.enhancer else torch.sigmoid(4 * (x.mean(1, keepdim=True)
                                                                        - 0.3)) * self.w
        return y * float("nan") if self.w.dtype == torch.float16 else y


class _CountingParser(nn.Module):
    """BiSeNet-shaped: skin everywhere, the mouth in the lower middle; counts its runs."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        n, _, h, w = x.shape
        out = torch.zeros(n, 19, h, w, dtype=x.dtype) * self.w
        out[:, M.PARSER_CLASS["skin"]] = 1
        out[:, M.PARSER_CLASS["mouth"], h * 2 // 3:h * 5 // 6, w // 3:w * 2 // 3] = 2
        return out


def _crops(n: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (S, S, 3), dtype=np.uint8) for _ in range(n)]


def _device(crops: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(crops)[..., ::-1].copy()).permute(0, 3, 1, 2).float() / 255


def test_an_fp16_nan_mask_is_computed_again_in_fp32_on_the_host() -> None:
    half = Occluder(None, "torch", "cpu", "fp16", module=_NanInHalf(), io=OCC_IO)
    full = Occluder(None, "torch", "cpu", "fp32", module=_NanInHalf(), io=OCC_IO)
    assert half.precision_in_use == "fp16"
    got = half.masks_host(_crops())
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, full.masks_host(_crops()), atol=1e-6)
    assert half.precision_in_use == "fp32 (fallback)" and half.runner.fallbacks == 1  # type: ignore[union-attr]
    assert half.verify()


def test_a_deferred_nan_is_caught_at_verify_and_the_stage_runs_again() -> None:
    """The device form defers the verdict to the frame's synchronisation: the first alphas carry
    the NaN, verify() says so and latches to fp32, the second alphas are the fp32 ones."""
    edge = torch.ones(S, S)
    bad = FaceMasker(("occlusion",), occluder=Occluder(None, "torch", "cpu", "fp16",
                                                        module=_NanInHalf(), io=OCC_IO),
                     on_device=True)
    good = FaceMasker(("occlusion",), occluder=Occluder(None, "torch", "cpu", "fp32",
                                                         module=_NanInHalf(), io=OCC_IO),
                      on_device=True)
    first = bad.alphas(_device(_crops()), edge)
    assert not torch.isfinite(first).all()
    assert not bad.verify()
    again = bad.alphas(_device(_crops()), edge)
    assert bad.verify()
    torch.testing.assert_close(again, good.alphas(_device(_crops()), edge))


def test_the_enhancer_guard_and_precision() -> None:
    enh = FaceEnhancer(None, "torch", "cpu", "fp16", blend=100, module=_NanInHalf(True), io=ENH_IO)
    crops = np.random.default_rng(1).integers(0, 256, (1, 512, 512, 3), dtype=np.uint8)
    out = enh.restore_host(crops)
    ref = FaceEnhancer(None, "torch", "cpu", "fp32", blend=100, module=_NanInHalf(True),
                       io=ENH_IO).restore_host(crops)
    np.testing.assert_array_equal(out, ref)
    assert enh.precision_in_use == "fp32 (fallback)"
    dev = FaceEnhancer(None, "torch", "cpu", "fp16", module=_NanInHalf(True), io=ENH_IO)
    assert not torch.isfinite(dev.restore_device(torch.rand(1, 3, 512, 512), deferred=True)).all()
    assert not dev.verify() and dev.precision_in_use == "fp32 (fallback)"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> NeuralPaths:
    d = tmp_path_factory.mktemp("guard_models")
    return NeuralPaths(build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx"),
                       build_synthetic_inswapper(d / "inswapper.onnx", width=4))


def _frame() -> np.ndarray:
    rng = np.random.default_rng(3)
    frame = rng.integers(40, 90, (640, 640, 3), dtype=np.uint8)
    frame[32 * 9:32 * 10, 32 * 10:32 * 11] = 255  # the synthetic SCRFD's face
    return frame


def _engine(paths: NeuralPaths, precision: str) -> Engine:
    cfg = EngineConfig(engine="neural", backend="onnxruntime", precision="fp32", device="cpu",
                       smooth=False)
    eng = Engine(cfg, components=build_neural(cfg, paths))
    occluder = Occluder(None, "torch", "cpu", precision, module=_NanInHalf(), io=OCC_IO)
    eng.renderer.masker = FaceMasker(("occlusion",), occluder=occluder)  # type: ignore[attr-defined]
    eng.enhancer = FaceEnhancer(None, "torch", "cpu", precision, blend=100,
                                module=_NanInHalf(True), io=ENH_IO)
    src = _frame()
    eng.set_source(LoadedImage(bgr=src, alpha=None, path=Path("src.png")))
    return eng


def test_an_injected_nan_never_reaches_the_output(paths: NeuralPaths) -> None:
    """Masks and enhancer asked for fp16 (whose fakes give NaN there): the frames come out
    exactly as with both in fp32, and both report the fallback."""
    half, full = _engine(paths, "fp16"), _engine(paths, "fp32")
    for i in range(2):
        a = half.process(_frame(), i)
        b = full.process(_frame(), i)
        assert a.swapped == b.swapped == 1 and a.output is not None and b.output is not None
        np.testing.assert_array_equal(a.output, b.output)
    assert half.enhancer is not None and half.enhancer.precision_in_use == "fp32 (fallback)"
    masker = half.renderer.masker  # type: ignore[attr-defined]
    assert masker.occluder.precision_in_use == "fp32 (fallback)"


def test_the_mask_models_take_the_sessions_precision(tmp_path: Path) -> None:
    """``--precision`` reaches the mask models (they ran at "auto" before, whatever was asked)."""
    from livefuse.swap.neural_engine import build_masker
    from livefuse.testing import replicas_masks as R

    occ = R.build_replica("occluder", tmp_path / "xseg.onnx")
    paths = NeuralPaths(tmp_path / "d", tmp_path / "r", tmp_path / "s", occluder=occ)
    for precision in ("fp16", "fp32"):
        cfg = EngineConfig(engine="neural", backend="torch", precision=precision,  # type: ignore[arg-type]
                           device="cpu", face_mask_types=("occlusion",))
        masker = build_masker(cfg, "cpu", "torch", paths)
        assert masker is not None and masker.occluder is not None
        assert masker.occluder.precision == precision and not masker.on_device
    g = TorchGraph(_NanInHalf(), io=OCC_IO, device="cpu", precision="fp32")
    assert g.precision == "fp32" and not g.guarded


# ----------------------------------------------------------------------------- item 7: host cost

def _parser(module: nn.Module) -> FaceParser:
    return FaceParser(None, "torch", "cpu", "fp32", module=module, io=PARSER_IO)


@pytest.mark.parametrize("on_device", [False, True])
def test_the_parser_runs_once_with_keep_mouth(on_device: bool) -> None:
    counting = _CountingParser()
    masker = FaceMasker(("region",), parser=_parser(counting), keep_mouth=True,
                        on_device=on_device)
    crops: object = _device(_crops()) if on_device else _crops()
    edge = torch.ones(S, S) if on_device else np.ones((S, S), np.float32)
    out = masker.alphas(crops, edge)
    assert counting.calls == 1  # region mask and mouth from one parse
    ref = FaceMasker(("region",), parser=_parser(_CountingParser()), keep_mouth=False,
                     on_device=on_device).alphas(crops, edge)
    # the open mouth is kept from the target: lower alpha there than without keep_mouth
    mouth = (slice(S * 2 // 3 + 2, S * 5 // 6 - 2), slice(S // 3 + 2, S * 2 // 3 - 2))
    assert float(np.asarray(out)[0][mouth].mean()) < float(np.asarray(ref)[0][mouth].mean()) - 0.5


def test_per_frame_constants_go_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The box mask, the blur kernels and the parser's class ids are uploaded once per device,
    not at every frame."""
    from livefuse.swap import gpu_frame

    uploads: list[tuple[int, ...]] = []
    real = gpu_frame.upload

    def counting(arr: np.ndarray, device: torch.device) -> torch.Tensor:
        uploads.append(tuple(arr.shape))
        return real(arr, device)

    monkeypatch.setattr(gpu_frame, "upload", counting)
    M._DEVICE_CONSTANTS.clear()
    masker = FaceMasker(("box", "region"), parser=_parser(_CountingParser()), keep_mouth=True,
                        on_device=True)
    crops = _device(_crops())
    masker.alphas(crops, torch.ones(S, S))
    first = len(uploads)
    assert first > 0
    for _ in range(3):
        masker.alphas(crops, torch.ones(S, S))
    assert len(uploads) == first


def test_embed_reuses_the_frame_staged_for_detection(tmp_path: Path) -> None:
    """The reference selector embeds each face of the frame it just detected in: the torch
    analyser takes the staged device copy instead of uploading the host frame again."""
    from livefuse.faces.insight_torch import TorchInsightAnalyser
    from livefuse.types import StagedFrame

    an = TorchInsightAnalyser(build_scrfd(tmp_path / "d.onnx"), build_arcface(tmp_path / "r.onnx"),
                              device="cpu", precision="fp32")
    host = _frame()
    staged = StagedFrame(host=host, device=torch.from_numpy(host.copy()))
    faces = an.detect(staged)
    assert faces
    assert an._tensor(host) is staged.device
    np.testing.assert_allclose(an.embed(host, faces[0]), an.embed(host.copy(), faces[0]),
                               atol=1e-6)
    assert an._tensor(host.copy()) is not staged.device
