"""The neural analyser: SCRFD detection and ArcFace recognition through insightface's classes.

* Detector: SCRFD (Guo et al. 2021, "Sample and Computation Redistribution for Efficient Face
  Detection"), ``det_10g.onnx`` of insightface's buffalo_l pack, through
  ``insightface.model_zoo.scrfd.SCRFD`` (anchor decoding, NMS, letterboxing into ``det_size``).
* Recogniser: ArcFace (Deng et al. 2019) ResNet-50 ``w600k_r50.onnx`` through
  ``insightface.model_zoo.arcface_onnx.ArcFaceONNX`` (input normalisation); the aligned crop is
  insightface's ``face_align.norm_crop`` (5-point similarity to the ArcFace template, 112 px).

The onnxruntime sessions are created here with the execution providers the caller asks for
(insightface's own default would pick them itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from livefuse.errors import LivefuseError
from livefuse.faces.analyser import AnyFrame, host_frame
from livefuse.faces.tracking import iou
from livefuse.types import Face, FloatArray, Frame

TRACK_CONTEXT = 2.0
"""The tracked region's side, in multiples of the last bbox's longer side (room for the motion
of a few frames)."""
_STRIDE = 32  # SCRFD's coarsest stride: detector inputs are multiples of it

SessionFactory = Callable[[str, Sequence[str]], Any]


class FaceModelError(LivefuseError):
    """A detector or recogniser model file is missing or onnxruntime cannot load it."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"cannot load face model '{path}': {problem}. Check it with "
                         "`livefuse models verify`")


def _ort_session(path: str, providers: Sequence[str]) -> Any:
    import onnxruntime

    return onnxruntime.InferenceSession(path, providers=list(providers))


def _load(path: str | Path, providers: Sequence[str], factory: SessionFactory) -> Any:
    p = Path(path)
    if not p.is_file():
        raise FaceModelError(p, "no such file (run `livefuse models fetch NAME`)")
    try:
        return factory(str(p), providers)
    except Exception as exc:  # onnxruntime raises its own pybind classes (InvalidProtobuf, ...)
        raise FaceModelError(p, f"{type(exc).__name__}: {exc}") from exc


class InsightAnalyser:
    """Detect and embed faces with SCRFD and ArcFace (the models of insightface's buffalo_l).

    Args:
        det_path: SCRFD ``.onnx`` (9 outputs: scores, bbox, kps for strides 8, 16, 32).
        rec_path: ArcFace ``.onnx`` (``(1, 3, 112, 112)`` -> ``(1, 512)``), or ``None`` to
            detect only.
        providers: onnxruntime execution providers in priority order (default CPU).
        det_size: detector input ``(width, height)`` in px; frames are letterboxed into it.
        max_side: frames whose longest side exceeds this (px) are first downscaled to it with
            area averaging, and bboxes/kps mapped back, so a 4K or 8K frame gives the detector
            the same input (and the resize the same cost) as a 1080p frame.
        det_thresh: minimum detector score.
        session_factory: ``(path, providers) -> InferenceSession``; onnxruntime's by default.

    Raises:
        FaceModelError: a model file is missing or not loadable.
    """

    def __init__(self, det_path: str | Path, rec_path: str | Path | None = None,
                 providers: Sequence[str] = ("CPUExecutionProvider",),
                 det_size: tuple[int, int] = (640, 640), max_side: int = 1920,
                 det_thresh: float = 0.5, session_factory: SessionFactory = _ort_session) -> None:
        from insightface.model_zoo.arcface_onnx import ArcFaceONNX
        from insightface.model_zoo.scrfd import SCRFD

        self.providers = tuple(providers)
        self.det_size = (int(det_size[0]), int(det_size[1]))
        self.max_side = int(max_side)
        det_session = _load(det_path, self.providers, session_factory)
        self._detector = SCRFD(model_file=str(det_path), session=det_session)
        # ctx_id 0 keeps our providers (a negative id would force CPU).
        self._detector.prepare(0, input_size=self.det_size, det_thresh=det_thresh)
        self._recogniser: Any = None
        if rec_path is not None:
            rec_session = _load(rec_path, self.providers, session_factory)
            try:
                self._recogniser = ArcFaceONNX(model_file=str(rec_path), session=rec_session)
            except Exception as exc:
                raise FaceModelError(rec_path, f"{type(exc).__name__}: {exc}") from exc

    def _detector_frame(self, frame: Frame) -> tuple[Frame, FloatArray]:
        """The (possibly downscaled) copy given to SCRFD and its ``(sx, sy)`` scale."""
        h, w = frame.shape[:2]
        scale = min(1.0, self.max_side / max(h, w))
        if scale == 1.0:
            return frame, np.ones(2, np.float32)
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        small = np.asarray(cv2.resize(frame, size, interpolation=cv2.INTER_AREA), np.uint8)
        # map back with the exact per-axis ratios of the rounded size
        return small, np.array([size[0] / w, size[1] / h], np.float32)

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        """Find faces.

        Args:
            frame: ``(H, W, 3) uint8 BGR``.
            upsample: pyramid steps, as in the classic analyser: each step doubles the detector
                input (finds faces half as small, ~4x the cost). Has no effect on an SCRFD export
                with a fixed input size.

        Returns:
            Faces (bbox ``(4,) float32``, kps ``(5, 2) float32`` in ``frame`` px, SCRFD score),
            sorted left to right by bbox centre.
        """
        small, scale = self._detector_frame(host_frame(frame))
        size = self.det_size
        if upsample:
            size = (size[0] << upsample, size[1] << upsample)
        dets, kpss = self._detector.detect(small, input_size=size)
        faces = []
        for i in range(dets.shape[0]):
            bbox = (dets[i, :4] / np.tile(scale, 2)).astype(np.float32)
            kps = (kpss[i] / scale).astype(np.float32) if kpss is not None else \
                _kps_from_bbox(bbox)
            faces.append(Face(bbox=bbox, kps=kps, score=float(dets[i, 4])))
        faces.sort(key=lambda f: float(f.bbox[0] + f.bbox[2]))
        return faces

    def reset(self) -> None:
        pass  # no per-stream state

    def track(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face | None]:
        """Carry faces between full detections by detecting in a region around each one.

        Each face's region, a square of :data:`TRACK_CONTEXT` times its bbox's longer side
        centred on it, is detected at the scale of the full-frame pass (so the face looks to
        SCRFD as it did at its last detection, and kps agree with a full detection): a 150 px
        face in a 1080p frame is a 96 px detector input instead of 640 px, ~40x less work. The
        detection overlapping the last bbox most is the face now; none there means the face is
        gone (left the picture, covered), so it is never carried onto the background.

        Returns:
            Per face the moved face (bbox, kps and score of the new detection; same
            ``track_id`` and embedding), or ``None``.
        """
        host = host_frame(frame)
        h, w = host.shape[:2]
        # the full pass's frame px -> detector px scale (the max_side downscale cancels out of
        # the letterbox's fit)
        scale = min(self.det_size[0] / w, self.det_size[1] / h)
        return [self._track_one(host, face, scale) for face in faces]

    def _track_one(self, host: Frame, face: Face, scale: float) -> Face | None:
        h, w = host.shape[:2]
        side_in = max(2, int(np.ceil(TRACK_CONTEXT * max(face.width, face.height) * scale
                                     / _STRIDE))) * _STRIDE
        side = side_in / scale  # frame px, so the region is detected at exactly ``scale``
        cx, cy = (face.bbox[0] + face.bbox[2]) / 2, (face.bbox[1] + face.bbox[3]) / 2
        x0, y0 = round(float(cx) - side / 2), round(float(cy) - side / 2)
        n = round(side)
        if x0 >= w or y0 >= h or x0 + n <= 0 or y0 + n <= 0:
            return None
        region = host[max(y0, 0):min(y0 + n, h), max(x0, 0):min(x0 + n, w)]
        # zero padding where the region leaves the frame keeps the detector's scale exact
        region = np.asarray(cv2.copyMakeBorder(region, max(-y0, 0), max(y0 + n - h, 0),
                                               max(-x0, 0), max(x0 + n - w, 0),
                                               cv2.BORDER_CONSTANT, value=0), np.uint8)
        dets, kpss = self._detector.detect(region, input_size=(side_in, side_in))
        off = np.array([x0, y0], np.float32)
        best: Face | None = None
        best_iou = 0.0
        for i in range(dets.shape[0]):
            bbox = (dets[i, :4] + np.tile(off, 2)).astype(np.float32)
            overlap = iou(bbox, face.bbox)
            if overlap > best_iou:
                kps = (kpss[i] + off).astype(np.float32) if kpss is not None else \
                    _kps_from_bbox(bbox)
                best_iou = overlap
                best = replace(face, bbox=bbox, kps=kps, score=float(dets[i, 4]))
        return best

    def embed(self, frame: Frame, face: Face) -> FloatArray:
        """ArcFace identity embedding, L2-normalised: ``(512,) float32`` (cosine similarity).

        Raises:
            LivefuseError: the analyser was built without a recogniser.
        """
        if self._recogniser is None:
            raise LivefuseError("this InsightAnalyser has no recogniser model (rec_path=None)")
        from insightface.utils import face_align

        crop = face_align.norm_crop(frame, landmark=face.kps,
                                    image_size=self._recogniser.input_size[0])
        feat = np.asarray(self._recogniser.get_feat(crop), np.float32).reshape(-1)
        norm = float(np.linalg.norm(feat))
        return (feat / norm if norm > 0 else feat).astype(np.float32)


def _kps_from_bbox(bbox: FloatArray) -> FloatArray:
    """Rough kps for a detector export without keypoints (fractions of the ArcFace template)."""
    x1, y1, x2, y2 = (float(v) for v in bbox)
    w, h = x2 - x1, y2 - y1
    frac = np.array([[0.34, 0.46], [0.66, 0.46], [0.5, 0.64], [0.37, 0.82], [0.63, 0.82]],
                    np.float32)
    return (frac * np.array([w, h], np.float32) + np.array([x1, y1], np.float32)).astype(
        np.float32)
