"""The offline classic engine on real photos: identity moves to the source, shading and skin
colour stay the target's, detection is robust.

The shading and identity figures are computed here the way /work/shared/tools/facecheck.py does
(dlib's HOG with one upsampling on RGB, the 68-point predictor, the 128-d descriptor), with dlib
called directly, not through livefuse's analyser or swapper.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.errors import NoFaceError
from livefuse.faces.selection import choose_source_face, detect_robust
from livefuse.imaging import load_image, save_image
from livefuse.swap.classic import (
    ClassicSwapper,
    destination_shape,
    prepare_source,
    source_teeth,
    turned,
)
from livefuse.swap.paste import paste, paste_all
from livefuse.testing.facecheck import FaceCheck
from livefuse.types import StagedFrame


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
    for f in packet.faces:  # every face changed (inside its landmarks' hull)
        hull = np.zeros(t1.shape[:2], np.uint8)
        cv2.fillConvexPoly(hull, cv2.convexHull(np.round(f.landmarks).astype(np.int32)), 1)
        diff = np.abs(packet.output.astype(int) - t1)[hull > 0].mean()
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


def test_pad_upscale_retry_maps_back(hog_analyser, analyser, t1_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A face cropped tight and shrunk to 60 px is below HOG's 80 px; the retry finds it
    (CenterFace finds it at once)."""
    t1 = load_image(t1_path).bgr
    face = max(hog_analyser.detect(t1), key=lambda f: f.area)
    x1, y1, x2, y2 = face.bbox.astype(int)
    crop = t1[y1:y2, x1:x2]
    small = cv2.resize(crop, (60, 60), interpolation=cv2.INTER_AREA)
    assert len(analyser.detect(small)) == 1
    assert hog_analyser.detect(small) == []
    faces = detect_robust(hog_analyser, small)
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


# --- an independent measurement (facecheck.py's method: livefuse.testing.facecheck) ------------

@pytest.fixture(scope="module")
def check() -> FaceCheck:
    return FaceCheck()


def test_shading_stays_the_targets_and_identity_moves_to_the_source(  # type: ignore[no-untyped-def]
        swapped_t1, check, astronaut_bgr) -> None:
    """Issue 11, item 6: no grey patch on the far cheek of a turned head, no seam at the jaw;
    issue 18: identity margin >= 0.06 on every face.

    Before issue 11: shading 8.8 19.8 8.9 10.7 3.8 9.5 (left to right), smallest identity
    margin 0.023; now about 3 and 0.09 (docs/CLASSIC.md).
    """
    _, t1, packet = swapped_t1
    shading = check.shading(t1, packet.output)
    assert len(shading) == 6
    assert max(shading) <= 6.0, [round(v, 1) for v in shading]
    margins = check.margins(astronaut_bgr, t1, packet.output)
    assert min(margins) >= 0.06, [round(v, 3) for v in margins]
    assert check.outside_faces(t1, packet.output) < 0.01


def test_skin_takes_the_targets_colour_patch_by_patch(swapped_t1, check) -> None:  # type: ignore[no-untyped-def]
    """Issue 18: the swapped skin was ashen, with grey-green patches (chroma ratio 0.94-0.96,
    dE up to 3.7, 7.7-9.9 % grey patches, p95 drop 11.5). Goals, every face: ratio 0.97-1.03,
    dE <= 2, patches <= 2 %, p95 drop <= 6.

    Those four held with the target's fine-scale colour alone, while the picture still showed
    grey where the source's relief darkens a pale part of the target; ``ashen`` catches that
    (over the target's own share, on average: 8.6 points before, 6.9 without the colour curve,
    about 3 with it)."""
    _, t1, packet = swapped_t1
    rows = check.colour(t1, packet.output)
    own = check.colour(t1, t1)
    assert len(rows) == 6
    show = [{k: round(v, 2) for k, v in r.items()} for r in rows]
    for r in rows:
        assert 0.97 <= r["ratio"] <= 1.03, show
        assert r["dE"] <= 2.0, show
        assert r["patches"] <= 2.0, show
        assert r["p95"] <= 6.0, show
    excess = [r["ashen"] - o["ashen"] for r, o in zip(rows, own, strict=True)]
    assert float(np.mean(excess)) <= 4.5, (show, [round(e, 1) for e in excess])


def test_a_near_profile_takes_its_own_shape_and_no_pale_strip(swapped_t1, check) -> None:  # type: ignore[no-untyped-def]
    """On Joey (t1.jpg's near-profile) the frontal source shape put the source's far cheek and
    nose over his profile edge: a pale, flat strip, 8.7 points of skin more ashen than his own
    (22.5 % against 13.8 %). Taking a turned face's own shape (``_TURN_FROM``) leaves 0.1."""
    _, t1, packet = swapped_t1
    rows, own = check.colour(t1, packet.output), check.colour(t1, t1)
    aside = [f for f in packet.faces if f.landmarks is not None and turned(f.landmarks) >= 0.95]
    assert len(aside) == 1, [round(turned(f.landmarks), 2) for f in packet.faces]
    centre = (aside[0].bbox[:2] + aside[0].bbox[2:]) / 2
    boxes = [box for box, _, _ in check.faces(t1)]  # the checker's own order, as rows'
    joey = min(range(len(boxes)), key=lambda i: float(np.hypot(
        boxes[i].center().x - centre[0], boxes[i].center().y - centre[1])))
    excess = rows[joey]["ashen"] - own[joey]["ashen"]
    assert excess <= 3.0, round(excess, 1)


def test_the_targets_shadow_under_the_nose_stays(swapped_t1, check) -> None:  # type: ignore[no-untyped-def]
    """The skin between nose and upper lip was left out of the target's low-pass with the nose
    wings and lips grown by 5 % of the face, so cheek light filled the shadow under the nose: a
    pale upper lip, 7-17 L levels over the target's (mean of the six faces' sizes 11.5). Grown by
    1 % (``_MOUTH_GROW``) it is -1 to 6 (mean size 2.5)."""
    _, t1, packet = swapped_t1
    paler = check.under_nose(t1, packet.output)
    assert len(paler) == 6
    assert float(np.mean(np.abs(paler))) <= 5.0, [round(v, 1) for v in paler]
    assert max(paler) <= 8.0, [round(v, 1) for v in paler]


def test_a_dark_target_dims_the_sources_relief(analyser, astronaut_path: Path,  # type: ignore[no-untyped-def]
                                              t1_path: Path, check) -> None:
    """A picture review: on t1.jpg darkened to 0.3, the source's eyelids and eye whites glowed
    (its relief added at full strength to a face three times darker) and its eyes showed red:
    each face's brightest skin came out 11-15 L levels above the target's (99th percentiles).
    The relief is dimmed by the ratio of the two faces' light (``_MIN_DIM``)."""
    engine = Engine(EngineConfig(), analyser=analyser)
    engine.set_source(load_image(astronaut_path))
    dark = np.clip(load_image(t1_path).bgr.astype(np.float32) * 0.3, 0, 255).astype(np.uint8)
    out = engine.process(dark, strict=True).output
    light = [cv2.cvtColor(x, cv2.COLOR_BGR2LAB)[..., 0].astype(np.float32) for x in (dark, out)]
    rises = []
    for _, lm, _ in check.faces(dark):
        hull = np.zeros(dark.shape[:2], np.uint8)
        cv2.fillConvexPoly(hull, cv2.convexHull(lm), 1)
        rises.append(float(np.percentile(light[1][hull > 0], 99)
                           - np.percentile(light[0][hull > 0], 99)))
    assert len(rises) >= 4 and max(rises) <= 6.0, [round(r, 1) for r in rises]


def _lips_below_cheeks(image: np.ndarray, landmarks: np.ndarray) -> float:
    """How many L levels (8-bit LAB) a face's lip band (outer lips without the inner mouth) is
    darker than its cheeks (below the eyes, beside the nose), medians."""
    light = cv2.cvtColor(image, cv2.COLOR_BGR2LAB)[..., 0].astype(np.float32)
    lm = np.round(landmarks).astype(np.int32)
    lips, cheeks = np.zeros(image.shape[:2], np.uint8), np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(lips, [lm[48:60]], 1)
    cv2.fillPoly(lips, [lm[60:68]], 0)
    for side in ([1, 2, 3, 48, 31, 39], [15, 14, 13, 54, 35, 42]):
        cv2.fillConvexPoly(cheeks, lm[side], 1)
    return float(np.median(light[cheeks > 0]) - np.median(light[lips > 0]))


def test_the_sources_teeth_are_found_and_never_laid_on_lips(swapped_t1, analyser,  # type: ignore[no-untyped-def]
                                                             astronaut_bgr) -> None:
    """The astronaut smiles with her teeth showing, and the 68-point fit puts her inner-lip
    points on them: her teeth reach into the lip band, and pasted with it they laid white lips on
    t1.jpg's closed mouths (medians: Rachel's lips 6 L levels lighter than her cheeks,
    Chandler's 4 darker; 54 and 30 darker in the original). :func:`source_teeth` finds them and
    the swap leaves them out, the target's own lips showing there: 27 and 10 darker."""
    face = max(analyser.detect(astronaut_bgr), key=lambda f: float(f.bbox[2] - f.bbox[0]))
    source = prepare_source(astronaut_bgr, face)
    assert source.teeth is not None
    inner = np.zeros(source.teeth.shape, np.uint8)
    cv2.fillPoly(inner, [np.round(source.landmarks[60:68]).astype(np.int32)], 255)
    beyond = int(np.count_nonzero(source.teeth & ~inner))
    assert beyond > 0.5 * np.count_nonzero(inner), (beyond, np.count_nonzero(inner))
    t1 = swapped_t1[1]
    for f in analyser.detect(t1):  # closed, dark or shaded mouths: no teeth taken for lips
        assert source_teeth(t1, f.landmarks) is None
    _, t1, packet = swapped_t1
    below = [_lips_below_cheeks(packet.output, f.landmarks) for f in packet.faces]
    assert min(below) >= 8.0, [round(b, 1) for b in below]


def test_the_shape_follows_a_turned_target_only() -> None:
    """:func:`turned` reads the nose tip against the jaw line along the eyes, whatever the roll;
    the destination shape is the source's on a frontal face and the target's on a profile."""
    rng = np.random.default_rng(0)
    src = (rng.random((68, 2)) * 100).astype(np.float32)
    frontal = src.copy()
    frontal[0], frontal[16], frontal[30] = (0, 50), (100, 50), (50, 60)
    frontal[36:42], frontal[42:48] = (30, 40), (70, 40)
    profile = frontal.copy()
    profile[30] = (2, 60)  # the nose tip on the far jaw end
    turn = cv2.getRotationMatrix2D((50.0, 50.0), 35.0, 1.0)
    assert turned(frontal) == pytest.approx(0.0)
    assert turned(profile) == pytest.approx(0.96)
    assert turned(cv2.transform(profile[None], turn)[0]) == pytest.approx(0.96, abs=1e-4)
    on_profile = destination_shape(src, profile, 0.0, 0.0)
    np.testing.assert_allclose(on_profile, profile, atol=1e-3)
    on_frontal = destination_shape(frontal, frontal, 0.0, 0.0)
    np.testing.assert_allclose(on_frontal, frontal, atol=1e-2)


@pytest.fixture(scope="module")
def grey_sources(tmp_path_factory: pytest.TempPathFactory, astronaut_bgr,  # type: ignore[no-untyped-def]
                 hanks_path: Path) -> dict[str, Path]:
    grey = tmp_path_factory.mktemp("grey") / "astronaut_grey.jpg"
    assert cv2.imwrite(str(grey), cv2.cvtColor(astronaut_bgr, cv2.COLOR_BGR2GRAY),
                       [cv2.IMWRITE_JPEG_QUALITY, 75])
    return {"grey astronaut JPEG": grey, "Tom_Hanks_54745.png": hanks_path}


@pytest.mark.parametrize("name", ["grey astronaut JPEG", "Tom_Hanks_54745.png"])
def test_grey_sources_take_the_target_skin_colour(name: str, grey_sources, analyser,  # type: ignore[no-untyped-def]
                                                  check, t1_path: Path) -> None:
    """Issue 10, item 5: a grey source gave blue-grey faces: the target's per-pixel chroma under
    the source's own lightness (dark patches with a highlight's pale chroma), and the target's
    shirt and hair chroma where the source face reached past the target's."""
    image = load_image(grey_sources[name])
    choice = choose_source_face(detect_robust(analyser, image.bgr), image.bgr, image.path)
    swapper = ClassicSwapper(EngineConfig())
    source = swapper.prepare(image.bgr, choice.face, image.path)
    t1 = load_image(t1_path).bgr
    out = t1.copy()
    faces = analyser.detect(t1)
    rois = paste_all(out, swapper.render(StagedFrame(host=t1), faces, source))
    assert sum(r is not None for r in rois) == 6

    t_lab = cv2.cvtColor(t1, cv2.COLOR_BGR2LAB).astype(np.float32) - 128
    o_lab = cv2.cvtColor(out, cv2.COLOR_BGR2LAB).astype(np.float32) - 128
    for box, lm, _ in check.faces(t1):
        skin = np.zeros(t1.shape[:2], np.uint8)  # the target's face without eyes, brows, lips
        cv2.fillConvexPoly(skin, cv2.convexHull(lm), 255)
        for part in (slice(17, 22), slice(22, 27), slice(36, 42), slice(42, 48), slice(48, 60)):
            cv2.fillConvexPoly(skin, cv2.convexHull(lm[part]), 0)
        target = t_lab[skin > 0][:, 1:].mean(axis=0)  # a, b around neutral 0
        swapped = o_lab[skin > 0][:, 1:].mean(axis=0)
        where = f"face at x={box.left()}"
        assert np.abs(swapped - target).max() <= 4.0, (where, target, swapped)
        assert np.hypot(*swapped) >= 0.85 * np.hypot(*target), (where, target, swapped)
    assert max(check.shading(t1, out)) <= 6.0
    assert check.outside_faces(t1, out) < 0.01


def test_a_black_and_white_target_stays_black_and_white(analyser, astronaut_path: Path,  # type: ignore[no-untyped-def]
                                                      t1_bgr: np.ndarray) -> None:
    """A new user's trial: the colour astronaut on a black-and-white t1.jpg gave pink lips and
    blue eye whites (4,775 px with chroma up to 19) in a grey picture. The source's own colour
    is carried only as far as the target face has colour of its own."""
    grey = cv2.cvtColor(cv2.cvtColor(t1_bgr, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    engine = Engine(EngineConfig(face_selector="many"), analyser=analyser)
    engine.set_source(load_image(astronaut_path))
    packet = engine.process(grey, strict=True)
    assert packet.swapped == 6 and packet.output is not None
    lab = cv2.cvtColor(packet.output, cv2.COLOR_BGR2LAB).astype(np.float32) - 128
    chroma = np.hypot(lab[..., 1], lab[..., 2])
    assert chroma.max() <= 3.0, chroma.max()  # 8-bit LAB rounding of grey
    assert np.abs(packet.output.astype(int) - grey).max() > 40  # swapped, not left alone


def test_seamless_blend_still_swaps(analyser, astronaut_bgr, t1_path: Path) -> None:  # type: ignore[no-untyped-def]
    swapper = ClassicSwapper(EngineConfig(blend="seamless"))
    source = swapper.prepare(astronaut_bgr, max(analyser.detect(astronaut_bgr),
                                                key=lambda f: f.score))
    t1 = load_image(t1_path).bgr
    for f in analyser.detect(t1):
        rendered = swapper.render_one(t1, f, source)
        assert rendered is not None and rendered.blend == "seamless"
        assert set(np.unique(rendered.alpha)) <= {0.0, 1.0}
        out = t1.copy()
        assert paste(out, rendered) is not None
        x1, y1, x2, y2 = f.bbox.astype(int)
        assert np.abs(out[y1:y2, x1:x2].astype(int) - t1[y1:y2, x1:x2]).mean() > 4.0


def test_a_face_far_larger_than_the_source_is_rendered_at_the_sources_detail(
        analyser, astronaut_bgr, t1_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """t1.jpg's Ross at 2.5x (a webcam close-up, ~280 px) from the 87 px astronaut: the patch is
    rendered at 1.5x the source's size and carried at that scale (half the pixels); pasted, it
    differs from the full-size render by under 2 levels on average, and t1's own faces (near the
    source's size) are rendered at full size."""
    import livefuse.swap.classic as classic

    swapper = ClassicSwapper(EngineConfig())
    source = swapper.prepare(astronaut_bgr, max(analyser.detect(astronaut_bgr),
                                                key=lambda f: f.score))
    t1 = load_image(t1_path).bgr
    for f in analyser.landmarks(t1, analyser.detect(t1)):
        patch = swapper.render_one(t1, f, source)
        assert patch is not None and patch.affine[0, 0] == 1.0  # a plain translation
    big = np.ascontiguousarray(cv2.resize(t1, None, fx=2.5, fy=2.5, interpolation=cv2.INTER_CUBIC))
    face = max(analyser.landmarks(big, analyser.detect(big)), key=lambda f: f.area)
    scaled = swapper.render_one(big, face, source)
    assert scaled is not None and 0.4 < scaled.affine[0, 0] < 0.8
    monkeypatch.setattr(classic, "_OVERSAMPLE", 100.0)
    full = swapper.render_one(big, face, source)
    assert full is not None and full.affine[0, 0] == 1.0
    a, b = big.copy(), big.copy()
    roi = paste(a, scaled)
    assert roi is not None and paste(b, full) is not None
    x0, y0, x1, y1 = roi
    assert np.abs(a[y0:y1, x0:x1].astype(int) - b[y0:y1, x0:x1]).mean() < 2.0


def test_the_source_face_does_not_depend_on_the_frames_seen_before(  # type: ignore[no-untyped-def]
        analyser, astronaut_path: Path) -> None:
    """The analyser scans wider every 30th detection of a video; the source photo's detection
    fell on that call after 29 frames of another test, and its source face (and every swap's
    identity margin, 0.052 against 0.087) changed with the tests run before."""
    kps = []
    for calls in (0, 29):
        analyser._calls = calls
        engine = Engine(EngineConfig(), analyser=analyser)
        engine.set_source(load_image(astronaut_path))
        assert engine.source_face is not None
        kps.append(engine.source_face.kps)
    np.testing.assert_array_equal(kps[0], kps[1])
