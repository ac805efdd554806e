"""Engine(config).process(frame) -> FramePacket: detect (or track) -> select -> swap, synchronous.

One Engine serves the CLI, the live runner and the GUI. It owns its analyser, swapper and
tracking state; it reads no global settings.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import cv2
import numpy as np

from livefuse.cache import PoseCache, pose_key
from livefuse.config import CacheConfig, EngineConfig
from livefuse.errors import FaceIndexError, NoFaceError
from livefuse.faces.selection import detect_robust, pick_source_face, select_targets
from livefuse.imaging import LoadedImage
from livefuse.swap.classic import ClassicSwapper, RenderedFace
from livefuse.types import Face, FloatArray, Frame, FramePacket


class Swapper(Protocol):
    """What the Engine needs of a swapper (classic and neural both provide it).

    Swappers that also have ``render(frame, target, source) -> RenderedFace | None`` and
    ``paste(frame, rendered)`` get the pose-similarity cache.
    """

    def prepare(self, image: Frame, face: Face, path: Path | None = None) -> Any: ...
    def swap(self, frame: Frame, target: Face, source: Any) -> bool: ...


class Analyser(Protocol):
    """What the Engine needs of a face analyser (dlib's or SCRFD + ArcFace)."""

    def detect(self, frame: Frame, upsample: int | None = None) -> list[Face]: ...
    def track(self, frame: Frame, face: Face) -> Face | None: ...
    def embed(self, frame: Frame, face: Face) -> FloatArray: ...


def _ms(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / 1e6


# Landmarks that fix the re-warp of a cached face: brows, nose, eyes (iBUG 300-W 17..47); they
# move little with expression, like the points the classic swapper places the source shape with.
_REWARP_POINTS = slice(17, 48)
_MATCH_IOU = 0.3  # a detection continues a track when its bbox overlaps the track's this much
_MATCH_EMBEDDING = 0.6  # dlib's same-person distance (its model card); larger: not the same face
# A tracked face the detector misses (HOG loses turned heads) is kept by landmark tracking for at
# most this many detection rounds in a row, so it does not flicker back to the original.
_MAX_COAST = 2


def _iou(a: FloatArray, b: FloatArray) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _similarity_lstsq(src: FloatArray, dst: FloatArray) -> np.ndarray:
    """Least-squares similarity transform (Umeyama 1991) mapping ``src`` to ``dst``, ``(2, 3)``."""
    ms, md = src.mean(0), dst.mean(0)
    s, d = src - ms, dst - md
    var = float((s ** 2).sum()) or 1.0
    a = float((s * d).sum()) / var
    b = float((s[:, 0] * d[:, 1] - s[:, 1] * d[:, 0]).sum()) / var
    m = np.array([[a, -b, 0.0], [b, a, 0.0]])
    m[:, 2] = md - m[:, :2] @ ms
    return m


def _points(face: Face) -> FloatArray:
    return face.landmarks[_REWARP_POINTS] if face.landmarks is not None else face.kps


def rewarp(cached: RenderedFace, points_then: FloatArray, points_now: FloatArray,
           frame_size: tuple[int, int]) -> RenderedFace | None:
    """Move a cached rendered face onto the face's current position.

    Args:
        cached: the rendered face stored on a miss.
        points_then, points_now: ``(N, 2) float32`` the face's alignment points when it was
            stored and now; a least-squares similarity transform between them is the affine.
        frame_size: ``(width, height)`` px of the current frame.

    Returns:
        The re-warped face, or ``None`` when it would fall (almost) outside the frame.
    """
    m = _similarity_lstsq(points_then.astype(np.float64), points_now.astype(np.float64))
    x0, y0 = cached.origin
    ph, pw = cached.face.shape[:2]
    corners = np.array([[x0, y0], [x0 + pw, y0], [x0, y0 + ph], [x0 + pw, y0 + ph]], np.float64)
    moved = corners @ m[:, :2].T + m[:, 2]
    w, h = frame_size
    nx0, ny0 = max(int(np.floor(moved[:, 0].min())), 0), max(int(np.floor(moved[:, 1].min())), 0)
    nx1 = min(int(np.ceil(moved[:, 0].max())) + 1, w)
    ny1 = min(int(np.ceil(moved[:, 1].max())) + 1, h)
    if nx1 - nx0 < 8 or ny1 - ny0 < 8:
        return None
    # patch(then) -> frame: m @ (p + origin); then frame -> new patch: - (nx0, ny0).
    local = m.copy()
    local[:, 2] = m[:, :2] @ np.array([x0, y0], np.float64) + m[:, 2] - (nx0, ny0)
    size = (nx1 - nx0, ny1 - ny0)
    face = cv2.warpAffine(cached.face, local, size, flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REPLICATE).astype(np.uint8, copy=False)
    alpha = cv2.warpAffine(cached.alpha, local, size, flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_CONSTANT, borderValue=0
                           ).astype(np.uint8, copy=False)
    if cached.blend == "seamless":
        alpha = np.where(alpha >= 128, 255, 0).astype(np.uint8)
    return RenderedFace(origin=(nx0, ny0), face=face, alpha=alpha, blend=cached.blend)


class Engine:
    """The synchronous frame path.

    Args:
        config: validated on construction.
        analyser: classic engine: the face analyser (the offline dlib one by default), e.g. to
            share one between engines.
        cache: the pose-similarity cache's settings (design.md section 4); off when omitted, so
            offline jobs swap every frame afresh. It works with swappers that can ``render`` and
            ``paste`` separately (classic and neural, except the neural GPU-paste path).
        components: ``(analyser, swapper)`` built by the caller (tests, custom models); by
            default the classic parts, or for ``engine='neural'`` the catalog's verified models
            (:func:`livefuse.swap.neural_engine.build_neural`).

    Raises:
        ConfigError: invalid config.
        LivefuseError: neural engine: a model is missing, corrupt or cannot be loaded (the
            message names the file and the `livefuse models` command that fixes it).
    """

    def __init__(self, config: EngineConfig, analyser: Analyser | None = None,
                 cache: CacheConfig | None = None,
                 components: tuple[Analyser, Swapper] | None = None) -> None:
        self.config = config.validate()
        self.analyser: Analyser
        self.swapper: Swapper
        if components is not None:
            self.analyser, self.swapper = components
        elif config.engine == "neural":
            from livefuse.swap.neural_engine import build_neural

            self.analyser, self.swapper = build_neural(config)
        else:
            if analyser is None:
                # dlib only when the classic engine is used: the neural path runs without it.
                from livefuse.faces.dlib_analyser import DlibFaceAnalyser

                analyser = DlibFaceAnalyser()
            self.analyser = analyser
            self.swapper = ClassicSwapper(config)
        self._source: Any = None
        self.source_face: Face | None = None
        self._reference: FloatArray | None = None
        self._tracked: list[Face] = []
        self._since_detect = 0
        self._next_track_id = 0
        self._previous: list[Face] = []  # last frame's targets, for identity across detections
        self._coasting: dict[int, int] = {}  # track id -> detection rounds missed in a row
        self.cache = PoseCache(cache or CacheConfig(enabled=False))

    # -- source / reference -------------------------------------------------------------------
    def set_source(self, image: LoadedImage, face_index: int | None = None) -> Face:
        """Find the source face in a photo and prepare it once for every later swap.

        Raises:
            NoFaceError: no face found even after the upscale/pad retry.
            FaceIndexError: ``face_index`` is outside the faces found.
        """
        faces = detect_robust(self.analyser, image.bgr)
        face = pick_source_face(faces, image.path, face_index)
        self._source = self.swapper.prepare(image.bgr, face, image.path)
        self.source_face = face
        self.reset_tracking()
        self.cache.invalidate()
        return face

    def set_cache(self, config: CacheConfig) -> None:
        """Take new cache settings (between frames); a change drops every cached face.

        Raises:
            ConfigError: invalid settings.
        """
        self.cache.apply(config)

    def invalidate(self) -> None:
        """Drop every cached face (the next frame swaps afresh)."""
        self.cache.invalidate()

    def set_reference(self, image: LoadedImage) -> None:
        """Use the largest face of ``image`` as the reference for ``face_selector='reference'``.

        Raises:
            NoFaceError: the reference photo has no face.
        """
        faces = detect_robust(self.analyser, image.bgr)
        if not faces:
            raise NoFaceError(image.path, "reference photo")
        face = max(faces, key=lambda f: f.area)
        self._reference = self.analyser.embed(image.bgr, face)
        self.reset_tracking()

    def reset_tracking(self) -> None:
        """Forget tracked faces (a new video, a new source); the next frame runs detection."""
        self._tracked = []
        self._previous = []
        self._coasting = {}
        self._since_detect = 0

    # -- the frame path -------------------------------------------------------------------------
    def _detect(self, frame: Frame) -> list[Face]:
        faces = self.analyser.detect(frame)
        if self.config.face_selector == "reference" and self._reference is not None:
            faces = [Face(bbox=f.bbox, kps=f.kps, score=f.score, landmarks=f.landmarks,
                          embedding=self.analyser.embed(frame, f)) for f in faces]
        return faces

    def _same_face(self, prev: Face, face: Face) -> float:
        """IoU of the boxes, or 0 when both carry embeddings that name different people."""
        if prev.embedding is not None and face.embedding is not None and \
                prev.embedding.shape == face.embedding.shape and \
                float(np.linalg.norm(prev.embedding - face.embedding)) > _MATCH_EMBEDDING:
            return 0.0
        return _iou(prev.bbox, face.bbox)

    def _with_ids(self, faces: list[Face]) -> list[Face]:
        """Give detected faces the track ids of the previous frame's faces they continue.

        Greedy matching by IoU (>= 0.3), vetoed by the embeddings when both faces carry one;
        an unmatched face starts a new track.
        """
        pairs = sorted(((self._same_face(p, f), i, j) for i, p in enumerate(self._previous)
                        for j, f in enumerate(faces)), reverse=True)
        ids: dict[int, int] = {}
        used: set[int] = set()
        for score, i, j in pairs:
            if score < _MATCH_IOU:
                break
            if i not in used and j not in ids:
                ids[j] = self._previous[i].track_id
                used.add(i)
        out = []
        for j, f in enumerate(faces):
            tid = ids.get(j)
            if tid is None:
                tid = self._next_track_id
                self._next_track_id += 1
            out.append(Face(bbox=f.bbox, kps=f.kps, score=f.score, landmarks=f.landmarks,
                            embedding=f.embedding, track_id=tid))
        return out

    def _coast(self, frame: Frame, detected: list[Face]) -> list[Face]:
        """Add the previous frame's targets that no detection continues, tracked instead,
        while each has missed fewer than ``_MAX_COAST`` detection rounds in a row."""
        out = list(detected)
        coasting: dict[int, int] = {}
        for prev in self._previous:
            if any(self._same_face(prev, f) >= _MATCH_IOU for f in detected):
                continue
            missed = self._coasting.get(prev.track_id, 0) + 1
            if missed > _MAX_COAST:
                continue
            moved = self.analyser.track(frame, prev)
            if moved is not None:
                out.append(moved)
                coasting[prev.track_id] = missed
        self._coasting = coasting
        out.sort(key=lambda f: float(f.bbox[0] + f.bbox[2]))
        return out

    def _keep_identity(self, faces: list[Face]) -> Face | None:
        """With ``face_selector='one'`` and no index: the detection continuing the current
        target (so a bigger face walking in does not steal the swap), if any."""
        if len(self._previous) != 1 or not faces:
            return None
        prev = self._previous[0]
        best = max(faces, key=lambda f: self._same_face(prev, f))
        return best if self._same_face(prev, best) >= _MATCH_IOU else None

    def process(self, frame: Frame, index: int = 0, t_capture_ns: int | None = None,
                strict: bool = False) -> FramePacket:
        """Swap the source face onto the selected faces of one frame.

        Args:
            frame: ``(H, W, 3) uint8 BGR``; not modified.
            index: frame number, carried into the packet.
            t_capture_ns: capture time (``time.perf_counter_ns``); now when omitted.
            strict: raise :class:`FaceIndexError` when ``target_face_index`` does not exist in this
                frame (for still images); otherwise the frame is left unswapped.

        Returns:
            A :class:`FramePacket` whose ``output`` is a new array.

        Raises:
            RuntimeError: no source face was set.
        """
        if self._source is None:
            raise RuntimeError("Engine.process called before set_source")
        cfg = self.config
        packet = FramePacket(index=index, t_capture_ns=t_capture_ns or time.perf_counter_ns(),
                             frame=frame)
        t0 = time.perf_counter_ns()
        tracked: list[Face] = []
        if self._tracked and self._since_detect < cfg.detect_every:
            for f in self._tracked:
                moved = self.analyser.track(frame, f)
                if moved is None:  # lost: fall back to a full detection now
                    tracked = []
                    break
                tracked.append(moved)
        if tracked:
            faces = tracked
            packet.timings_ms["track"] = _ms(t0)
        else:
            faces = self._coast(frame, self._detect(frame))
            self._since_detect = 0
            packet.detected = True
            packet.timings_ms["detect"] = _ms(t0)
        self._since_detect += 1

        kept = None
        if packet.detected and cfg.face_selector == "one" and cfg.target_face_index is None:
            kept = self._keep_identity(faces)
        try:
            targets = [kept] if kept is not None else select_targets(
                faces, cfg.face_selector, cfg.target_face_index, self._reference)
        except FaceIndexError:
            if strict:
                raise
            targets = []
        if packet.detected:
            targets = self._with_ids(targets)
        self._tracked = targets if cfg.detect_every > 1 else []
        self._previous = targets
        self.retain_tracks()
        packet.faces = targets

        t1 = time.perf_counter_ns()
        out = frame.copy()
        packet.swapped = sum(self._swap_one(out, f) for f in targets)
        packet.timings_ms["swap"] = _ms(t1)
        packet.output = out
        return packet

    def _swap_one(self, out: Frame, face: Face) -> bool:
        """Swap one face into ``out``, through the pose-similarity cache when it is on."""
        sw: Any = self.swapper
        cacheable = hasattr(sw, "render") and hasattr(sw, "paste") and \
            getattr(sw, "supports_cache", True)
        if not (self.cache.enabled and cacheable):
            return bool(sw.swap(out, face, self._source))
        h, w = out.shape[:2]
        key = pose_key(out, face)
        hit = self.cache.lookup(face.track_id, key)
        if hit is not None:
            rendered, points = hit
            moved = rewarp(rendered, points, _points(face), (w, h))
            if moved is not None:
                sw.paste(out, moved)
                return True
        rendered = sw.render(out, face, self._source)
        if rendered is None:
            self.cache.invalidate(face.track_id)
            return False
        self.cache.store(face.track_id, key, (rendered, _points(face)))
        sw.paste(out, rendered)
        return True

    def retain_tracks(self) -> None:
        """Drop cached faces whose track is gone (called once per frame by :meth:`process`)."""
        self.cache.retain({f.track_id for f in self._previous})

    @property
    def precision_in_use(self) -> str:
        """The swap precision actually running, e.g. ``fp16`` or ``fp32 (fallback)``."""
        return str(getattr(self.swapper, "precision_in_use", "n/a (classic engine)"))

    @property
    def has_source(self) -> bool:
        return self._source is not None

    @property
    def source_path(self) -> Path | None:
        return None if self._source is None else self._source.path


__all__ = ["Engine", "Swapper"]

