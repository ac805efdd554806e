"""One detection policy for sources, references and targets, still images and video frames
(issue 15, item 2): a detection far below the best score of its image or frame is dropped.

The astronaut saved as a JPEG (quality 92, or with an EXIF rotation) gives dlib a second
detection on the mission patch of her suit, scoring 0.000..0.016 beside her face's ~1.5; the
patch's box is larger than her face, so "the largest face" picked it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from livefuse.cli import main
from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.faces.selection import SCORE_RATIO, drop_weak
from livefuse.imaging import LoadedImage, load_image
from livefuse.types import Face

PATCH = (110, 318, 240, 446)  # the mission patch's dlib box (123 330 227 434) grown by 12 px
FACE = (179, 83, 266, 170)


def _astronaut_jpegs(d: Path) -> dict[str, Path]:
    from skimage import data

    rgb = Image.fromarray(data.astronaut())
    out = {"q92": d / "astronaut-q92.jpg", "exif": d / "astronaut-exif.jpg"}
    rgb.save(out["q92"], quality=92)
    exif = Image.Exif()
    exif[0x0112] = 6  # "turn 90 degrees clockwise to show": the pixels are stored turned back
    rgb.transpose(Image.Transpose.ROTATE_90).save(out["exif"], quality=92, exif=exif)
    return out


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _astronaut_jpegs(tmp_path_factory.mktemp("jpeg"))


def _region(img: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    x0, y0, x1, y1 = box
    return img[y0:y1, x0:x1]


def test_drop_weak_keeps_faces_of_similar_confidence() -> None:
    def face(score: float) -> Face:
        return Face(bbox=np.zeros(4, np.float32), kps=np.zeros((5, 2), np.float32), score=score)

    kept, dropped = drop_weak([face(2.494), face(0.478), face(0.012)])
    assert [f.score for f in kept] == [2.494, 0.478] and [f.score for f in dropped] == [0.012]
    # SCRFD's probabilities are >= its 0.5 threshold: the ratio never drops one
    assert len(drop_weak([face(0.99), face(0.51)])[0]) == 2
    assert SCORE_RATIO * 0.99 < 0.5
    assert drop_weak([]) == ([], [])


@pytest.mark.parametrize("kind", ["q92", "exif"])
@pytest.mark.parametrize("selector", ["many", "one"])
def test_nothing_is_pasted_on_the_mission_patch(
        jpegs: dict[str, Path], hanks_path: Path, tmp_path: Path, kind: str, selector: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    target = jpegs[kind]
    out = tmp_path / "out.png"
    assert main(["run", "-q", "-s", str(hanks_path), "-t", str(target), "-o", str(out),
                 "--engine", "classic", "--face-selector", selector]) == 0
    printed = capsys.readouterr().out
    assert "faces found:         1" in printed and "faces swapped:       1" in printed
    before, after = load_image(target).bgr, load_image(out).bgr
    assert before.shape == after.shape == (512, 512, 3)  # the EXIF turn was applied
    np.testing.assert_array_equal(_region(after, PATCH), _region(before, PATCH))
    swapped = np.abs(_region(after, FACE).astype(int) - _region(before, FACE).astype(int))
    assert swapped.mean() > 8  # the face itself was swapped


def test_the_policy_holds_on_video_frames_and_for_the_reference(
        jpegs: dict[str, Path], hanks_path: Path) -> None:
    """Engine.process (the video and live path) drops the patch at every detection, and a
    reference photo's face is never the patch, though the patch's box is the larger."""
    frame = load_image(jpegs["q92"]).bgr
    engine = Engine(EngineConfig(face_selector="one", detect_every=1))
    engine.set_source(load_image(hanks_path))
    for i in range(3):
        packet = engine.process(frame, index=i, t_capture_ns=i * 33_333_333)
        assert packet.found == 1 and packet.swapped == 1
        assert packet.output is not None
        np.testing.assert_array_equal(_region(packet.output, PATCH), _region(frame, PATCH))
    engine.set_reference(LoadedImage(bgr=frame, alpha=None, path=jpegs["q92"]))
    ref = engine._reference
    face = next(f for f in engine.analyser.detect(frame) if f.bbox[1] < 200)
    assert ref is not None
    np.testing.assert_allclose(ref, engine.analyser.embed(frame, face), atol=1e-6)
