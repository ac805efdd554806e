"""The offline classic engine on real photos: identity moves to the source, shading and skin
colour stay the target's, detection is robust.

The shading and identity figures are computed here the way /work/shared/tools/facecheck.py does
(dlib's HOG with one upsampling on RGB, the 68-point predictor, the 128-d descriptor), with dlib
called directly, not through livefuse's analyser or swapper.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.errors import NoFaceError
from livefuse.faces.selection import choose_source_face, detect_robust
from livefuse.imaging import load_image, save_image
from livefuse.swap.classic import ClassicSwapper
from livefuse.swap.paste import paste, paste_all
from livefuse.types import Frame, StagedFrame


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


# --- an independent measurement (facecheck.py's method) -----------------------------------------

class _Check:
    """dlib's detector, 68-point predictor and 128-d descriptor, loaded from the weight files."""

    def __init__(self) -> None:
        import dlib

        spec = importlib.util.find_spec("face_recognition_models")
        assert spec is not None and spec.submodule_search_locations
        models = Path(next(iter(spec.submodule_search_locations))) / "models"
        self.det = dlib.get_frontal_face_detector()
        self.sp = dlib.shape_predictor(str(models / "shape_predictor_68_face_landmarks.dat"))
        self.rec = dlib.face_recognition_model_v1(
            str(models / "dlib_face_recognition_resnet_model_v1.dat"))
        self._seen: dict[bytes, list[tuple[Any, np.ndarray, np.ndarray]]] = {}

    def faces(self, bgr: Frame) -> list[tuple[Any, np.ndarray, np.ndarray]]:
        """(box, 68 landmarks, descriptor) per face, left to right (remembered per image)."""
        key = hashlib.sha1(np.ascontiguousarray(bgr).data).digest()
        if key not in self._seen:
            rgb = np.ascontiguousarray(bgr[..., ::-1])
            out = []
            for box in sorted(self.det(rgb, 1), key=lambda b: b.left()):
                shape = self.sp(rgb, box)
                lm = np.array([(p.x, p.y) for p in shape.parts()], np.int32)
                out.append((box, lm, np.array(self.rec.compute_face_descriptor(rgb, shape))))
            self._seen[key] = out
        return self._seen[key]

    @staticmethod
    def nearest(faces: list[Any], box: Any) -> Any:
        return min(faces, key=lambda e: (e[0].center().x - box.center().x) ** 2
                   + (e[0].center().y - box.center().y) ** 2)

    def margins(self, source: Frame, original: Frame, swapped: Frame) -> list[float]:
        """Per face of ``original``: distance to the original face - distance to the source."""
        src = max(self.faces(source), key=lambda e: e[0].area())[2]
        new = self.faces(swapped)
        return [float(np.linalg.norm(m[2] - d) - np.linalg.norm(m[2] - src))
                for box, _, d in self.faces(original) for m in [self.nearest(new, box)]]

    def _skin(self, original: Frame) -> list[tuple[Any, np.ndarray]]:
        """Per face of ``original``: its box and skin mask as facecheck.py colour takes it (the
        hull of jaw and brows, eyes and outer lips left out)."""
        out = []
        for box, lm, _ in self.faces(original):
            mask = np.zeros(original.shape[:2], np.uint8)
            cv2.fillPoly(mask, [cv2.convexHull(lm[[*range(17), 26, 25, 24, 19, 18, 17]])], 1)
            for part in (lm[36:42], lm[42:48], lm[48:60]):
                cv2.fillPoly(mask, [cv2.convexHull(part)], 0)
            out.append((box, mask > 0))
        return out

    def colour(self, original: Frame, swapped: Frame) -> list[dict[str, float]]:
        """Per face, facecheck.py colour's figures: mean chroma ratio, mean-colour dE, grey
        patches (% of skin whose local chroma dropped by more than 8) and their 95th percentile
        drop; plus ``ashen``: % of skin whose chroma is more than 8 under what the target face
        has at the swapped pixel's lightness (the median chroma of its lightness bin)."""
        la = cv2.cvtColor(original.astype(np.float32) / 255.0, cv2.COLOR_BGR2LAB)
        lb = cv2.cvtColor(swapped.astype(np.float32) / 255.0, cv2.COLOR_BGR2LAB)
        rows = []
        for box, skin in self._skin(original):
            s = max(box.width() / 32.0, 1.0)
            a, b = cv2.GaussianBlur(la, (0, 0), s), cv2.GaussianBlur(lb, (0, 0), s)
            ca, cb = np.hypot(a[..., 1], a[..., 2])[skin], np.hypot(b[..., 1], b[..., 2])[skin]
            drop = ca - cb
            order = np.argsort(a[..., 0][skin])
            bins = order[len(order) % 8:].reshape(8, -1)
            knots = np.median(a[..., 0][skin][bins], axis=1)
            expected = np.interp(b[..., 0][skin], knots, np.median(ca[bins], axis=1))
            rows.append({"ratio": float(cb.mean() / ca.mean()),
                         "dE": float(np.linalg.norm(la[skin].mean(0) - lb[skin].mean(0))),
                         "patches": float(np.mean(drop > 8) * 100),
                         "p95": float(np.percentile(drop, 95)),
                         "ashen": float(np.mean(expected - cb > 8) * 100)})
        return rows

    def shading(self, original: Frame, swapped: Frame) -> list[float]:
        """Per face: mean |low-pass L| difference in the face box, sigma = box width / 8."""
        la = cv2.cvtColor(original, cv2.COLOR_BGR2LAB)[..., 0].astype(np.float32)
        lb = cv2.cvtColor(swapped, cv2.COLOR_BGR2LAB)[..., 0].astype(np.float32)
        rows = []
        for box, _, _ in self.faces(original):
            x0, y0, x1, y1 = max(box.left(), 0), max(box.top(), 0), box.right(), box.bottom()
            sigma = max((x1 - x0) / 8.0, 1.0)
            pa = cv2.GaussianBlur(la, (0, 0), sigma)[y0:y1, x0:x1]
            pb = cv2.GaussianBlur(lb, (0, 0), sigma)[y0:y1, x0:x1]
            rows.append(float(np.mean(np.abs(pa - pb))))
        return rows


@pytest.fixture(scope="module")
def check() -> _Check:
    return _Check()


def _outside_target_faces(check: _Check, original: Frame, swapped: Frame) -> float:
    """Share of the changed pixels that lie outside every target face (its 68-point hull grown
    by a tenth of its box): a swap that spills onto hair, background or clothes."""
    hulls = np.zeros(original.shape[:2], np.uint8)
    for box, lm, _ in check.faces(original):
        face = np.zeros_like(hulls)
        cv2.fillConvexPoly(face, cv2.convexHull(lm), 255)
        k = int(0.1 * box.width()) | 1
        hulls |= cv2.dilate(face, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k)))
    changed = np.abs(swapped.astype(int) - original).sum(-1) > 30
    return float((changed & (hulls == 0)).sum() / max(changed.sum(), 1))


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
    assert _outside_target_faces(check, t1, packet.output) < 0.01


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
    assert _outside_target_faces(check, t1, out) < 0.01


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
