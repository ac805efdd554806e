"""InsightAnalyser on synthetic SCRFD / ArcFace models with known outputs."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from synthetic_faces import (
    SCORE_WHITE,
    arcface_matrix,
    build_arcface,
    build_scrfd,
    expected_detection,
)

from livefuse.faces.insight import FaceModelError, InsightAnalyser
from livefuse.types import Face


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("synthetic_models")
    return build_scrfd(d / "det.onnx"), build_arcface(d / "rec.onnx")


@pytest.fixture(scope="module")
def analyser(models: tuple[Path, Path]) -> InsightAnalyser:
    return InsightAnalyser(*models)


def _frame_1080(cells: list[tuple[int, int]]) -> np.ndarray:
    """1920x1080 black frame; each stride-32 detector cell (cx, cy) gets a white block.

    The detector letterboxes 1920x1080 into 640x640 at scale 1/3, so a detector cell is a
    96x96 block starting at (96 cx, 96 cy) in the frame.
    """
    frame = np.zeros((1080, 1920, 3), np.uint8)
    for cx, cy in cells:
        frame[96 * cy:96 * (cy + 1), 96 * cx:96 * (cx + 1)] = 255
    return frame


def test_detect_1080p_gives_the_known_bbox_kps_and_score(analyser: InsightAnalyser) -> None:
    faces = analyser.detect(_frame_1080([(10, 5)]))
    assert len(faces) == 1
    bbox, kps = expected_detection(10, 5, scale=1 / 3)
    np.testing.assert_allclose(faces[0].bbox, bbox, atol=1e-3)
    np.testing.assert_allclose(faces[0].kps, kps, atol=1e-3)
    assert faces[0].score == pytest.approx(SCORE_WHITE, abs=1e-6)
    assert faces[0].bbox.dtype == np.float32 and faces[0].kps.shape == (5, 2)
    # bbox (768, 288, 1152, 672): centre of the 96 px block's top-left corner +- 192 px
    np.testing.assert_allclose(faces[0].bbox, [768, 288, 1152, 672], atol=1e-3)


def test_faces_sorted_left_to_right(analyser: InsightAnalyser) -> None:
    faces = analyser.detect(_frame_1080([(16, 3), (4, 8), (10, 5)]))
    assert len(faces) == 3
    centres = [float(f.bbox[0] + f.bbox[2]) / 2 for f in faces]
    assert centres == sorted(centres)
    np.testing.assert_allclose(faces[0].bbox, expected_detection(4, 8, 1 / 3)[0], atol=1e-3)
    np.testing.assert_allclose(faces[2].kps, expected_detection(16, 3, 1 / 3)[1], atol=1e-3)


def test_empty_frame_gives_no_face(analyser: InsightAnalyser) -> None:
    assert analyser.detect(np.zeros((720, 1280, 3), np.uint8)) == []


@pytest.mark.parametrize("factor", [2, 4])
def test_4k_and_8k_downscale_to_same_detector_input_and_map_kps_back(
        analyser: InsightAnalyser, factor: int, monkeypatch: pytest.MonkeyPatch) -> None:
    small = _frame_1080([(10, 5), (3, 2)])
    big: np.ndarray = cv2.resize(small, None, fx=factor, fy=factor,
                                 interpolation=cv2.INTER_NEAREST)
    seen: list[tuple[int, ...]] = []
    real = analyser._detector.detect

    def spy(img: np.ndarray, **kw: object) -> object:
        seen.append(img.shape)
        return real(img, **kw)

    monkeypatch.setattr(analyser._detector, "detect", spy)
    ref = analyser.detect(small)
    out = analyser.detect(big)
    assert seen == [(1080, 1920, 3), (1080, 1920, 3)]  # the 4K/8K frame reached SCRFD at 1080p
    assert len(out) == len(ref) == 2
    for a, b in zip(out, ref, strict=True):
        np.testing.assert_allclose(a.kps, b.kps * factor, atol=1e-2)
        np.testing.assert_allclose(a.bbox, b.bbox * factor, atol=1e-2)
    bbox, kps = expected_detection(10, 5, scale=1 / (3 * factor))
    np.testing.assert_allclose(out[1].bbox, bbox, atol=1e-2)
    np.testing.assert_allclose(out[1].kps, kps, atol=1e-2)


def test_without_downscale_the_same_big_frame_maps_identically(models) -> None:
    # max_side above the frame: only SCRFD's own letterbox scale applies
    plain = InsightAnalyser(models[0], None, max_side=10_000)
    big: np.ndarray = cv2.resize(_frame_1080([(10, 5)]), None, fx=2, fy=2,
                                 interpolation=cv2.INTER_NEAREST)
    (face,) = plain.detect(big)
    np.testing.assert_allclose(face.bbox, expected_detection(10, 5, 1 / 6)[0], atol=1e-2)


def test_upsample_doubles_detector_input(analyser: InsightAnalyser,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[object] = []
    real = analyser._detector.detect

    def spy(img: np.ndarray, **kw: object) -> object:
        sizes.append(kw.get("input_size"))
        return real(img, **kw)

    monkeypatch.setattr(analyser._detector, "detect", spy)
    frame = _frame_1080([(10, 5)])
    faces = analyser.detect(frame, upsample=1)
    assert sizes == [(1280, 1280)]
    # At 1280 px input (scale 2/3) the 96 px block covers stride-32 cells (20..21, 10..11).
    # NMS at IoU 0.4 keeps (20, 10) and removes its edge neighbours (IoU 0.6) but not the
    # diagonal (21, 11) (IoU 0.39).
    assert len(faces) == 2
    for face, cell in zip(faces, [(20, 10), (21, 11)], strict=True):
        np.testing.assert_allclose(face.bbox, expected_detection(*cell, 2 / 3)[0], atol=1e-2)


def _face_at(x: float, y: float, size: float) -> Face:
    kps = np.array([[0.34, 0.46], [0.66, 0.46], [0.5, 0.64], [0.37, 0.82], [0.63, 0.82]],
                   np.float32) * size + np.array([x, y], np.float32)
    return Face(bbox=np.array([x, y, x + size, y + size], np.float32), kps=kps.astype(np.float32))


def test_embed_matches_the_models_own_math(analyser: InsightAnalyser) -> None:
    from insightface.utils import face_align
    from skimage import data

    frame = np.ascontiguousarray(data.astronaut()[..., ::-1])
    face = _face_at(150, 60, 140)
    emb = analyser.embed(frame, face)
    assert emb.shape == (512,) and emb.dtype == np.float32
    assert float(np.linalg.norm(emb)) == pytest.approx(1.0, abs=1e-5)
    crop = face_align.norm_crop(frame, landmark=face.kps, image_size=112)
    x = (crop[..., ::-1].astype(np.float32) - 127.5) / 127.5  # RGB, ArcFace normalisation
    pooled = x.reshape(14, 8, 14, 8, 3).mean(axis=(1, 3)).transpose(2, 0, 1).reshape(-1)
    want = pooled @ arcface_matrix()
    want /= np.linalg.norm(want)
    np.testing.assert_allclose(emb, want, atol=1e-4)


def test_embed_follows_the_face_not_the_frame(analyser: InsightAnalyser) -> None:
    from skimage import data

    frame = np.ascontiguousarray(data.astronaut()[..., ::-1])
    face = _face_at(150, 60, 140)
    shifted = np.zeros((600, 700, 3), np.uint8)
    shifted[40:552, 100:612] = frame
    moved = _face_at(250, 100, 140)
    a, b = analyser.embed(frame, face), analyser.embed(shifted, moved)
    other = analyser.embed(frame, _face_at(300, 300, 140))
    assert float(a @ b) > 0.999
    assert float(a @ other) < float(a @ b) - 0.01


def test_track_follows_the_face_and_drops_it_when_it_leaves(analyser: InsightAnalyser) -> None:
    """Between detections a face is found again in a region around its last bbox, detected at
    the full pass's scale (the same kps a full detection gives); once the face has left, the
    region holds no face and the tracker says so instead of carrying it onto the background."""
    first = analyser.detect(_frame_1080([(10, 5)]))[0]
    tracked = Face(bbox=first.bbox, kps=first.kps, score=first.score, track_id=7)
    for cell in ((11, 5), (11, 6), (12, 6), (12, 7)):  # one detector cell (96 px) a frame
        frame = _frame_1080([cell])
        [moved] = analyser.track(frame, [tracked])
        [full] = analyser.detect(frame)
        assert moved is not None and moved.track_id == 7
        np.testing.assert_allclose(moved.kps, full.kps, atol=1e-3)
        np.testing.assert_allclose(moved.bbox, full.bbox, atol=1e-3)
        tracked = moved
    assert analyser.track(_frame_1080([]), [tracked]) == [None]  # it left the picture
    # another face elsewhere in the frame is not the tracked one
    assert analyser.track(_frame_1080([(2, 1)]), [tracked]) == [None]


def test_detector_only_analyser_refuses_embed(models) -> None:
    det_only = InsightAnalyser(models[0], None)
    with pytest.raises(Exception, match="no recogniser"):
        det_only.embed(np.zeros((64, 64, 3), np.uint8), _face_at(0, 0, 32))


def test_missing_and_garbage_model_files_give_clear_errors(tmp_path: Path, models) -> None:
    with pytest.raises(FaceModelError, match="no such file"):
        InsightAnalyser(tmp_path / "nope.onnx")
    html = tmp_path / "det_10g.onnx"
    html.write_bytes(b"<html><body>404</body></html>")
    with pytest.raises(FaceModelError, match=r"det_10g\.onnx"):
        InsightAnalyser(html)
    with pytest.raises(FaceModelError, match=r"rec\.onnx"):
        InsightAnalyser(models[0], tmp_path / "rec.onnx")


def test_providers_reach_the_session_factory(models) -> None:
    calls: list[tuple[str, tuple[str, ...]]] = []

    def factory(path: str, providers) -> object:
        import onnxruntime

        calls.append((Path(path).name, tuple(providers)))
        return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])

    InsightAnalyser(models[0], models[1],
                    providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
                    session_factory=factory)
    assert calls == [("det.onnx", ("CUDAExecutionProvider", "CPUExecutionProvider")),
                     ("rec.onnx", ("CUDAExecutionProvider", "CPUExecutionProvider"))]
