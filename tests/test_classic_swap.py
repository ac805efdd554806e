"""The offline classic engine on real photos: identity moves to the source, detection is robust."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.errors import NoFaceError
from livefuse.faces.selection import detect_robust
from livefuse.imaging import load_image, save_image


@pytest.fixture(scope="module")
def swapped_t1(analyser, astronaut_path: Path, t1_path: Path):  # type: ignore[no-untyped-def]
    engine = Engine(EngineConfig(), analyser=analyser)
    engine.set_source(load_image(astronaut_path))
    t1 = load_image(t1_path).bgr
    packet = engine.process(t1, strict=True)
    return engine, t1, packet


def test_all_six_faces_of_t1_found_and_swapped(swapped_t1) -> None:  # type: ignore[no-untyped-def]
    _, t1, packet = swapped_t1
    assert len(packet.faces) == 6
    assert packet.swapped == 6
    assert packet.output.shape == t1.shape
    for f in packet.faces:  # every face region changed
        x1, y1, x2, y2 = f.bbox.astype(int)
        diff = np.abs(packet.output[y1:y2, x1:x2].astype(int) - t1[y1:y2, x1:x2]).mean()
        assert diff > 8.0
    # ... and the picture outside the faces did not
    mask = np.ones(t1.shape[:2], bool)
    for f in packet.faces:
        x1, y1, x2, y2 = f.bbox.astype(int)
        pad = int(0.6 * (x2 - x1))
        mask[max(y1 - pad, 0):y2 + pad, max(x1 - pad, 0):x2 + pad] = False
    np.testing.assert_array_equal(packet.output[mask], t1[mask])


def test_each_swapped_face_is_closer_to_source_than_to_original(
        swapped_t1, analyser, astronaut_bgr) -> None:  # type: ignore[no-untyped-def]
    """dlib's 128-d descriptor (face_recognition_models) judges identity."""
    engine, t1, packet = swapped_t1
    source_emb = analyser.embed(astronaut_bgr, engine.source_face)
    for f in packet.faces:
        swapped = analyser.embed(packet.output, f)
        original = analyser.embed(t1, f)
        d_src = float(np.linalg.norm(swapped - source_emb))
        d_orig = float(np.linalg.norm(swapped - original))
        assert d_src < d_orig, f"face at {f.bbox.astype(int)}: {d_src:.3f} vs {d_orig:.3f}"


def test_tiny_grey_tight_source_is_found(analyser, hanks_path: Path) -> None:
    """Tom_Hanks_54745.png is a 112x112 grey crop: found directly or by the pad/upscale retry."""
    img = load_image(hanks_path)
    faces = detect_robust(analyser, img.bgr)
    assert len(faces) == 1
    f = faces[0]
    assert f.landmarks is not None and f.landmarks.shape == (68, 2)
    # eyes above the mouth, inside the photo (coordinates mapped back from the retry)
    assert f.kps[0, 1] < f.kps[3, 1] and f.kps[1, 1] < f.kps[4, 1]
    assert (f.kps > -5).all() and (f.kps < 117).all()


def test_pad_upscale_retry_maps_back(analyser, t1_path: Path) -> None:
    """A face cropped tight and shrunk to 60 px is below HOG's 80 px; the retry finds it."""
    import cv2

    t1 = load_image(t1_path).bgr
    face = max(analyser.detect(t1), key=lambda f: f.area)
    x1, y1, x2, y2 = face.bbox.astype(int)
    crop = t1[y1:y2, x1:x2]
    small = cv2.resize(crop, (60, 60), interpolation=cv2.INTER_AREA)
    assert analyser.detect(small) == []
    faces = detect_robust(analyser, small)
    assert len(faces) == 1
    nose = faces[0].kps[2]
    assert 15 < nose[0] < 45 and 15 < nose[1] < 50


def test_source_without_face_is_a_clear_error(tmp_path: Path) -> None:
    p = save_image(tmp_path / "wall.png", np.full((300, 300, 3), 128, np.uint8))
    engine = Engine(EngineConfig())
    with pytest.raises(NoFaceError, match=r"no face in source '.*wall.png'"):
        engine.set_source(load_image(p))


def test_a_face_the_detector_misses_is_tracked_for_two_rounds(analyser, astronaut_path: Path,
                                                              t1_path: Path) -> None:
    """HOG loses turned heads for a frame or two; the face must not flicker back unswapped."""

    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        def detect(self, frame, upsample=None):  # type: ignore[no-untyped-def]
            self.calls += 1
            return analyser.detect(frame, upsample) if self.calls <= 2 else []

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(analyser, name)

    flaky = Flaky()
    engine = Engine(EngineConfig(face_selector="one"), analyser=flaky)  # type: ignore[arg-type]
    engine.set_source(load_image(astronaut_path))  # detect call 1
    frame = load_image(t1_path).bgr
    swapped = [engine.process(frame, index=i).swapped for i in range(5)]
    # frame 0 detected; frames 1-2 missed by the detector but tracked; then the track is dropped
    assert swapped == [1, 1, 1, 0, 0]


def test_grey_source_takes_the_target_chroma() -> None:
    """A grey source (Tom_Hanks_54745.png-like) keeps its lightness; colour comes from the
    target per pixel, not as one flat tint."""
    import cv2

    from livefuse.swap.classic import transfer_colour_lab

    rng = np.random.default_rng(0)
    grey = np.repeat(rng.integers(60, 200, (40, 40, 1), dtype=np.uint8), 3, axis=2)
    ref = np.dstack([rng.integers(60, 120, (40, 40)), rng.integers(100, 160, (40, 40)),
                     rng.integers(160, 230, (40, 40))]).astype(np.uint8)
    out = transfer_colour_lab(grey, ref, np.ones((40, 40), bool))
    lab_out = cv2.cvtColor(out, cv2.COLOR_BGR2LAB).astype(int)
    lab_ref = cv2.cvtColor(ref, cv2.COLOR_BGR2LAB).astype(int)
    # chroma follows the target pixel by pixel (up to LAB<->BGR rounding and gamut clipping)
    assert np.abs(lab_out[..., 1:] - lab_ref[..., 1:]).mean() < 4.0
    assert lab_out[..., 1:].std() > 3.0
    # lightness keeps the source's pattern
    lab_src = cv2.cvtColor(grey, cv2.COLOR_BGR2LAB).astype(float)
    assert np.corrcoef(lab_out[..., 0].ravel(), lab_src[..., 0].ravel())[0, 1] > 0.95
