"""The offline face analyser: dlib's HOG detector, 68-point predictor and ResNet embedding.

All weights ship inside PyPI packages, so nothing is downloaded:

* HOG + linear SVM frontal detector: inside ``dlib`` / ``dlib-bin`` (Dalal & Triggs 2005; dlib's
  ``get_frontal_face_detector``). Finds faces of roughly 80 px and larger at ``upsample=0``.
* ``shape_predictor_68_face_landmarks.dat`` (Kazemi & Sullivan 2014, ERT) in
  ``face_recognition_models``. Trained on iBUG 300-W, whose licence excludes commercial use.
* ``dlib_face_recognition_resnet_model_v1.dat`` (dlib's 128-d metric-learning ResNet, 99.38 % on
  LFW per its model card) in ``face_recognition_models``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import cv2
import dlib
import numpy as np

from livefuse.faces.align import arcface_affine
from livefuse.faces.analyser import AnyFrame, host_frame
from livefuse.faces.landmarks import kps_from_landmarks
from livefuse.types import Face, FloatArray, Frame

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


class DlibFaceAnalyser:
    """Detect, landmark, track and embed faces with dlib.

    Args:
        upsample: HOG pyramid upsampling steps (each doubles cost; 1 finds faces down to ~40 px).
        max_side: frames larger than this (px, longest side) are downscaled for detection and the
            boxes mapped back, so a 4K frame costs what a 1280-px frame costs.
    """

    def __init__(self, upsample: int = 0, max_side: int = 1280) -> None:
        self.upsample = upsample
        self.max_side = max_side
        self._detector = dlib.get_frontal_face_detector()
        self._predictor = dlib.shape_predictor(
            str(model_path(PREDICTOR_68)))

    @cached_property
    def _encoder(self) -> Any:
        return dlib.face_recognition_model_v1(str(model_path(RESNET_EMBEDDER)))

    def _fit(self, gray: Frame, bbox: FloatArray) -> FloatArray:
        shape = self._predictor(gray, _rect(bbox))
        return np.array([(p.x, p.y) for p in shape.parts()], dtype=np.float32)

    def _face(self, gray: Frame, bbox: FloatArray, score: float, track_id: int = -1) -> Face:
        lm = self._fit(gray, bbox)
        kps = kps_from_landmarks(lm)
        return Face(bbox=bbox, kps=kps, score=score, landmarks=lm, track_id=track_id,
                    template=appearance_template(gray, kps))

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        """Find faces.

        Args:
            frame: ``(H, W, 3) uint8 BGR``.
            upsample: overrides the constructor's value for this call.

        Returns:
            Faces with bbox, 68 landmarks, kps and appearance template, sorted left to right
            by bbox centre.
        """
        gray = _gray(host_frame(frame))
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
        lm = self._fit(gray, bbox)
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
        """dlib's 128-d identity descriptor ``(128,) float32`` (Euclidean; same person < 0.6)."""
        rgb = np.ascontiguousarray(frame[..., ::-1])
        shape = self._predictor(_gray(frame), _rect(face.bbox))
        return np.array(self._encoder.compute_face_descriptor(rgb, shape), dtype=np.float32)
