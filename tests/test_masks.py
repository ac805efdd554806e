"""Face masks (livefuse.swap.masks) on random-weight replicas with the released signatures.

The occluder and parser replicas have the real files' input/output names, shapes, layouts and
value ranges, but not their weights: these tests prove the plumbing (resize, layout, mapping back
to aligned space and to the frame, backend agreement), never a real model's accuracy.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from livefuse.faces.align import arcface_affine
from livefuse.imaging import load_image
from livefuse.models.graph_runner import GraphError, GraphIO, read_io
from livefuse.swap import masks as M
from livefuse.swap.paste import align_crop, paste
from livefuse.testing import replicas_masks as R
from livefuse.types import Patch

S = 128
KEY = R.KEY_BGR
# Backends agree to float32 rounding on the same input: masks are [0, 1] weights.
BACKEND_ATOL = 1e-4
# Host (cv2) and device (torch) resizing and blurring agree to this on [0, 1] masks.
HOST_DEVICE_ATOL = 2e-3


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mask-replicas")
    return {"occluder": R.export_xseg(R.random_xseg(0), d / "xseg.onnx"),
            "parser": R.export_bisenet(R.random_bisenet(0), d / "bisenet.onnx")}


def _crops(n: int = 3, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    crops = [rng.integers(60, 200, (S, S, 3), dtype=np.uint8) for _ in range(n)]
    crops[0][20:60, 30:90] = KEY  # an "object" in front of the first face
    return crops


def _device(crops: list[np.ndarray]) -> torch.Tensor:
    """Host BGR uint8 crops → the renderer's device layout: (N, 3, S, S) RGB in [0, 1]."""
    return torch.from_numpy(np.stack(crops)[..., ::-1].copy()).permute(0, 3, 1, 2).float() / 255


def test_replica_files_have_the_released_signatures(files: dict[str, Path]) -> None:
    occ = read_io(files["occluder"])
    assert occ.input_names == ("in_face:0",) and occ.output_names == ("out_mask:0",)
    assert occ.input_shapes[0][1:] == (256, 256, 3) and occ.output_shapes[0][1:] == (256, 256, 1)
    par = read_io(files["parser"])
    assert par.input_names == ("input",) and par.output_names[0] == "output"
    assert len(par.output_names) == 3 and par.input_shapes[0][1:] == (3, 512, 512)


def test_box_mask_padding_and_feather() -> None:
    m = M.box_mask(S, (10, 0, 20, 0), blur=0.3)
    assert m.shape == (S, S) and m.dtype == np.float32 and not m.flags.writeable
    assert m[S // 2, S // 2] == pytest.approx(1.0, abs=1e-3)
    assert m[0].max() < 0.05 and m[-1].max() < 0.05
    assert m[:, S // 2].argmax() > 12  # the 10 % top padding
    assert m[int(S * 0.85), S // 2] < m[int(S * 0.15), S // 2]  # 20 % bottom > 10 % top
    hard = M.box_mask(S, blur=0.0)
    assert set(np.unique(hard)) == {0.0, 1.0} and hard[1:-1, 1:-1].all()


def test_combine_is_the_per_pixel_minimum_on_host_and_device() -> None:
    a = np.linspace(0, 1, S * S, dtype=np.float32).reshape(S, S)
    b = np.stack([a[::-1], np.full_like(a, 0.5)])
    out = M.combine_masks(a, None, b)
    assert out.shape == (2, S, S)
    np.testing.assert_array_equal(out, np.minimum(a, b))
    out_t = M.combine_masks(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_array_equal(out_t.numpy(), out)
    with pytest.raises(ValueError):
        M.combine_masks(None)


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_occluder_shapes_ranges_and_the_key_colour(files: dict[str, Path], backend: str) -> None:
    module = R.random_xseg(0) if backend == "torch" else None
    occ = M.Occluder(files["occluder"], backend, module=module)
    assert occ.nhwc and occ.input_size == (256, 256)
    m = occ.masks(_crops())
    assert m.shape == (3, S, S) and m.dtype == np.float32
    assert m.min() >= 0.0 and m.max() <= 1.0
    assert m[0, 30:50, 45:75].max() < 0.05  # the occluder
    assert m[0, 80:120, 20:110].min() > 0.85 and m[1:, 20:108, 20:108].min() > 0.85


def test_occluder_backends_and_input_kinds_agree(files: dict[str, Path]) -> None:
    crops = _crops()
    ort = M.Occluder(files["occluder"], "onnxruntime")
    tor = M.Occluder(files["occluder"], "torch", module=R.random_xseg(0))
    host = ort.masks(crops)
    np.testing.assert_allclose(tor.masks(crops), host, atol=BACKEND_ATOL)
    dev = tor.masks(_device(crops))
    assert isinstance(dev, torch.Tensor) and dev.shape == (3, S, S)
    np.testing.assert_allclose(dev.numpy(), host, atol=HOST_DEVICE_ATOL)
    np.testing.assert_allclose(ort.masks(_device(crops)).numpy(), host, atol=HOST_DEVICE_ATOL)
    assert ort.masks(np.zeros((0, S, S, 3), np.uint8)).shape == (0, S, S)


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_parser_region_masks(files: dict[str, Path], backend: str) -> None:
    module = R.random_bisenet(0) if backend == "torch" else None
    par = M.FaceParser(files["parser"], backend, module=module)
    crops = _crops(2)
    labels = par.labels(crops)
    assert labels.shape == (2, 512, 512) and labels.dtype == np.uint8
    assert len(np.unique(labels)) >= 6  # several classes, not a degenerate map
    face = par.region_masks(crops)
    assert face.shape == (2, S, S) and face.min() >= 0 and face.max() <= 1
    assert 0.2 < face.mean() < 0.9
    # small regions need less softening than the default (σ = 4 % of the crop) would leave
    face0 = par.region_masks(crops, feather=0.0)
    eyes = par.region_masks(crops, ("left-eye", "right-eye"), feather=0.0)
    assert eyes.min() == 0.0 and eyes.max() == 1.0
    assert 0 < eyes.mean() < face0.mean()  # a subset of the face regions
    assert float(np.maximum(eyes - face0, 0).max()) == 0.0
    with pytest.raises(ValueError, match="unknown face region"):
        par.region_masks(crops, ("beard",))


def test_parser_backends_and_input_kinds_agree(files: dict[str, Path]) -> None:
    crops = _crops(2)
    ort = M.FaceParser(files["parser"], "onnxruntime")
    tor = M.FaceParser(files["parser"], "torch", module=R.random_bisenet(0))
    host = ort.region_masks(crops)
    np.testing.assert_allclose(tor.region_masks(crops), host, atol=BACKEND_ATOL)
    dev = tor.region_masks(_device(crops))
    # argmax can flip on near-ties after a 1e-6 input difference: compare all but a few pixels
    assert float((np.abs(dev.numpy() - host) > HOST_DEVICE_ATOL).mean()) < 0.002


def test_a_graph_of_the_wrong_shape_is_refused(files: dict[str, Path]) -> None:
    with pytest.raises(GraphError, match="parser input shape"):
        M.FaceParser(files["occluder"], "onnxruntime")
    with pytest.raises(GraphError, match="occluder input shape"):
        M.Occluder(None, "torch", module=R.random_xseg(0),
                   io=GraphIO(("x",), ((1, 4, 8, 8),), ("y",), ((1, 1, 8, 8),)))


# ------------------------------------------------------------------ a real face of t1.jpg

@pytest.fixture(scope="module")
def t1(t1_path: Path, analyser):  # type: ignore[no-untyped-def]
    frame = load_image(t1_path).bgr
    faces = sorted(analyser.detect(frame), key=lambda f: f.bbox[0])
    assert len(faces) == 6
    return frame, faces


def test_occluder_keeps_an_object_held_in_front_of_a_real_face(files: dict[str, Path],
                                                                t1) -> None:  # type: ignore[no-untyped-def]
    """An object of the key colour over the mouth of a face of t1.jpg: through the aligned crop,
    the occlusion mask and the paste back into the frame, the swapped patch must not cover the
    object and must cover the visible face.

    The replica's weights are set to detect that colour: this proves the plumbing (resize, NHWC
    layout, mapping back to aligned space and to the frame), not the real XSeg's accuracy.
    """
    frame, faces = t1
    face = faces[3]  # the largest of the six, mouth open
    frame = frame.copy()
    kps = face.kps
    mx, my = kps[3:].mean(0)
    half_w = 0.9 * float(kps[4, 0] - kps[3, 0])
    obj = (int(mx - half_w), int(my - 8), int(mx + half_w), int(my + 40))  # x0, y0, x1, y1
    cv2.rectangle(frame, obj[:2], (obj[2] - 1, obj[3] - 1), KEY, -1)
    affine = arcface_affine(kps, S)
    crop = align_crop(frame, affine, S)
    occ = M.Occluder(files["occluder"], "onnxruntime")
    alpha = M.combine_masks(M.box_mask(S), occ.masks([crop])[0])
    # paste a white "swap" into a black frame: white = where the swap would show
    canvas = np.zeros_like(frame)
    paste(canvas, Patch(image=np.full((S, S, 3), 255, np.uint8), alpha=alpha, affine=affine))
    shown = canvas[..., 0].astype(np.float32) / 255.0
    inner = shown[obj[1] + 4:obj[3] - 4, obj[0] + 4:obj[2] - 4]
    assert inner.max() < 0.1, "the swap covers the object held in front of the face"
    ex0, ey0 = kps[0].astype(int)
    ex1, _ = kps[1].astype(int)
    eyes = shown[ey0 - 6:ey0 + 6, ex0:ex1]
    assert eyes.min() > 0.85, "the visible face (eyes) is not swapped"


def test_mouth_mask_from_the_parser_gates_on_its_area() -> None:
    on = np.zeros((S, S), np.float32)
    on[88:100, 50:78] = 1.0  # 2 % of the crop
    off = np.zeros((S, S), np.float32)
    off[90:91, 60:62] = 1.0
    np.testing.assert_array_equal(M.keep_target_mask(on), on)
    assert M.keep_target_mask(off).max() == 0.0
    t_on = M.keep_target_mask(torch.from_numpy(on))
    t_off = M.keep_target_mask(torch.from_numpy(off))
    assert torch.equal(t_on, torch.from_numpy(on)) and float(t_off.max()) == 0.0


def test_parser_mouth_keeps_an_open_mouth_and_not_a_closed_one(files: dict[str, Path],
                                                                t1) -> None:  # type: ignore[no-untyped-def]
    """Parser path of the keep-the-target mask (the neural engine has only 5 kps): the aligned crop
    of a closed mouth of t1.jpg, and the same crop with a dark gap drawn between the lips. The
    replica reads dark pixels in the mouth band as inner mouth, so this proves the plumbing
    (parser → mouth class → area gate → aligned-space mask), not the real parser's accuracy."""
    frame, faces = t1
    affine = arcface_affine(faces[0].kps, S)
    closed = align_crop(frame, affine, S)
    opened = closed.copy()
    c = (faces[0].kps[3:] @ affine[:, :2].T + affine[:, 2]).mean(0)
    cv2.ellipse(opened, (round(c[0]), round(c[1])), (12, 4), 0, 0, 360, (20, 15, 30), -1)
    par = M.FaceParser(files["parser"], "onnxruntime")
    mouth = par.region_masks([closed, opened], M.MOUTH_REGIONS, feather=M.MOUTH_FEATHER)
    keep = [M.keep_target_mask(m) for m in mouth]
    assert keep[0].max() == 0.0
    assert keep[1].max() > 0.5
    ys, xs = np.nonzero(keep[1] > 0.5)
    assert abs(xs.mean() - c[0]) < 6 and abs(ys.mean() - c[1]) < 6


def test_torch_backend_without_onnx_torch_says_so(files: dict[str, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the ONNX-to-torch runner cannot be imported (no torch), the torch backend says so
    and names the way out, instead of an ImportError from deep inside."""
    import sys

    monkeypatch.setitem(sys.modules, "livefuse.models.onnx_torch", None)  # import fails
    with pytest.raises(GraphError, match=r"onnx_torch.*onnxruntime backend") as err:
        M.Occluder(files["occluder"], "torch")
    assert str(files["occluder"]) in str(err.value)
