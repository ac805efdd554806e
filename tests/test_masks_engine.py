"""What the masks and the kept mouth do to the picture, through Engine.process (issue 15,
item 14): each test fails when its feature's line is deleted.

* the neural region mask (``FaceMasker.alphas``: ``parser.region_masks(crops, regions)``);
* the neural parser's keep-mouth (``FaceMasker.alphas``: ``1 - keep_target_mask(...)``);
* the classic engine's mouth fill (``ClassicSwapper``: ``cv2.fillPoly(mask, inner mouth, 0)``);
* ``--[no-]keep-mouth`` on the neural engine without the region mask: an error, as other options
  an engine would ignore.

The neural tests run the random-weight replicas (synthetic SCRFD reading a white block as a face,
the BiSeNet replica's face-layout prior with dark pixels in the mouth band read as the inner
mouth): they prove the plumbing through the engine, not a real parser's accuracy.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from synthetic_faces import block_face_frame, build_arcface, build_scrfd

from livefuse.cli import main
from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.faces.landmarks import INNER_MOUTH
from livefuse.imaging import LoadedImage, load_image
from livefuse.samples import astronaut, insightface_image
from livefuse.swap.neural_engine import NeuralPaths, build_neural
from livefuse.testing import replicas_masks as R
from livefuse.testing.synthetic import build_synthetic_inswapper


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> NeuralPaths:
    d = tmp_path_factory.mktemp("mask_models")
    return NeuralPaths(build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx"),
                       build_synthetic_inswapper(d / "inswapper.onnx", width=4),
                       parser=R.export_bisenet(R.random_bisenet(0), d / "bisenet.onnx"))


# The face the synthetic detector finds for the block at cell (10, 9): bbox 256..384 x 224..352,
# kps eyes (301, 275) (339, 275), mouth corners (304, 317) (336, 317).
MOUTH_CENTRE = (320, 318)  # the parser replica's inner-mouth band, mapped back to the frame
MOUTH_CORE = (slice(317, 320), slice(314, 324))
CHEEK = (slice(290, 300), slice(270, 290))
NOSE = (slice(290, 300), slice(315, 325))


def _process(paths: NeuralPaths, frame: np.ndarray, **kw: object) -> np.ndarray:
    cfg = EngineConfig(engine="neural", backend="onnxruntime", precision="fp32", device="cpu",
                       smooth=False, **kw)  # type: ignore[arg-type]
    eng = Engine(cfg, components=build_neural(cfg, paths))
    eng.set_source(LoadedImage(bgr=block_face_frame((5, 6), 1), alpha=None, path=Path("src.png")))
    packet = eng.process(frame.copy())
    assert packet.swapped == 1 and packet.output is not None
    return np.abs(packet.output.astype(int) - frame).sum(axis=2)


def test_the_region_mask_swaps_only_the_chosen_regions(paths: NeuralPaths) -> None:
    frame = block_face_frame((10, 9), 2)
    every = _process(paths, frame, face_mask_types=("region",))
    nose = _process(paths, frame, face_mask_types=("region",), face_mask_regions=("nose",))
    assert every[CHEEK].mean() > 50 and every[NOSE].mean() > 50
    assert nose[CHEEK].max() == 0  # skin is not among the regions: untouched
    assert nose[NOSE].mean() > 20  # the nose is swapped
    assert (nose > 0).sum() < 0.1 * (every > 0).sum()


def test_the_neural_parser_keeps_an_open_mouth(paths: NeuralPaths) -> None:
    frame = block_face_frame((10, 9), 2)
    cv2.ellipse(frame, MOUTH_CENTRE, (12, 4), 0, 0, 360, (20, 15, 30), -1)  # an open mouth
    kept = _process(paths, frame, face_mask_types=("region",))
    swapped = _process(paths, frame, face_mask_types=("region",), keep_mouth=False)
    assert kept[MOUTH_CORE].mean() < 20 < 150 < swapped[MOUTH_CORE].mean()
    np.testing.assert_array_equal(kept[CHEEK], swapped[CHEEK])  # the rest is the same swap


def test_the_classic_engine_keeps_an_open_mouth() -> None:
    """t1.jpg: two faces laugh with their mouths open (inner-lip gap / width 0.21 and 0.23).
    Inside their inner mouths (landmarks 60-67, eroded by a pixel) the output is the target's
    own with the mouth kept, and the source's without."""
    t1 = load_image(insightface_image("t1.jpg")).bgr
    source = LoadedImage(bgr=astronaut(), alpha=None, path=Path("astronaut.png"))
    out, faces = {}, []
    for keep in (True, False):
        engine = Engine(EngineConfig(keep_mouth=keep))
        engine.set_source(source)
        packet = engine.process_image(t1)
        assert packet.output is not None and packet.swapped == 6
        out[keep], faces = packet.output, packet.faces
    for face in sorted(faces, key=lambda f: float(f.bbox[0]))[3:5]:
        assert face.landmarks is not None
        inner = np.zeros(t1.shape[:2], np.uint8)
        cv2.fillPoly(inner, [np.round(face.landmarks[INNER_MOUTH]).astype(np.int32)], 1)
        inner = cv2.erode(inner, np.ones((3, 3), np.uint8)).astype(bool)
        assert inner.sum() > 40
        change = {k: float(np.abs(v.astype(int) - t1)[inner].mean()) for k, v in out.items()}
        assert change[True] < 10 and change[False] > 30, change


@pytest.mark.parametrize("flag", ["--keep-mouth", "--no-keep-mouth"])
def test_keep_mouth_on_the_neural_engine_without_the_region_mask_is_an_error(
        tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    from livefuse.imaging import save_image

    src = save_image(tmp_path / "s.png", astronaut())
    assert main(["run", "-s", str(src), "-t", str(insightface_image("t1.jpg")), "-o",
                 str(tmp_path / "o.jpg"), "--engine", "neural", flag]) == 2
    err = capsys.readouterr().err
    assert f"{flag}: the neural engine finds the mouth with the face parser" in err
    assert "--face-mask-types region" in err and not (tmp_path / "o.jpg").exists()
