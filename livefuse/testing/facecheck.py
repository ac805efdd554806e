"""An independent face checker for tests and benchmarks: identity (dlib's 128-d descriptors),
shading and skin colour, computed the way the project's reviews do
(/work/shared/tools/facecheck.py): dlib's HOG with one upsampling on RGB, the 68-point
predictor and the descriptor, called directly, never through livefuse's analyser or swapper.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from livefuse.types import Frame


class FaceCheck:
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

    def under_nose(self, original: Frame, swapped: Frame) -> list[float]:
        """Per face: how many L levels (8-bit LAB) paler the swap leaves the skin between nose and
        upper lip (the hull of landmarks 31-35 and 48-54, nose wings and lips grown by 1 % of the
        face left out), as mean signed difference of skin-only low-passes (sigma 3 % of the face;
        face size: the square root of the 68-point hull's area). A swap that loses the target's
        shadow under the nose shows a pale upper lip: positive figures."""
        la = cv2.cvtColor(original, cv2.COLOR_BGR2LAB)[..., 0].astype(np.float32)
        lb = cv2.cvtColor(swapped, cv2.COLOR_BGR2LAB)[..., 0].astype(np.float32)
        rows = []
        for _, lm, _ in self.faces(original):
            face = _hull(lm, original.shape)
            size = float(np.sqrt(cv2.countNonZero(face)))
            k = 2 * max(1, round(0.01 * size)) + 1
            cores = np.asarray(cv2.dilate(
                _hull(lm[31:36], original.shape) | _hull(lm[48:60], original.shape),
                cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k))), np.uint8)
            skin = (face & ~cores).astype(np.float32) / 255.0
            region = (_hull(np.vstack([lm[31:36], lm[48:55]]), original.shape) & face & ~cores) > 0
            sigma = max(1.0, 0.03 * size)
            support = np.maximum(cv2.GaussianBlur(skin, (0, 0), sigma), 1e-3)
            diff = (cv2.GaussianBlur(lb * skin, (0, 0), sigma)
                    - cv2.GaussianBlur(la * skin, (0, 0), sigma)) / support
            rows.append(float(diff[region].mean()))
        return rows

    def outside_faces(self, original: Frame, swapped: Frame) -> float:
        """Share of the changed pixels that lie outside every target face (its 68-point hull grown
        by a tenth of its box): a swap that spills onto hair, background or clothes."""
        hulls = np.zeros(original.shape[:2], np.uint8)
        for box, lm, _ in self.faces(original):
            face = np.zeros_like(hulls)
            cv2.fillConvexPoly(face, cv2.convexHull(lm), 255)
            k = int(0.1 * box.width()) | 1
            grown = cv2.dilate(face, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k)))
            hulls = np.maximum(hulls, np.asarray(grown, np.uint8))
        changed = np.abs(swapped.astype(int) - original).sum(-1) > 30
        return float((changed & (hulls == 0)).sum() / max(changed.sum(), 1))


def _hull(points: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    mask = np.zeros(shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, cv2.convexHull(np.asarray(points, np.int32)), 255)
    return mask


__all__ = ["FaceCheck"]
