"""Engine(config).process(frame) -> FramePacket, synchronous:

detect or track → select → pose-similarity cache → render (all faces of the frame as one batch)
→ paste-back.

One Engine serves the CLI, the live session and the GUI. It owns its analyser, renderer, tracker
and cache; it reads no global settings. On the GPU path (the torch renderer on CUDA) the frame is
staged on the device once (:class:`~livefuse.swap.gpu_frame.FrameStager`), every stage works on
it there, and only the pasted regions come back; the host or device form of the frame's stages
is chosen once, when the engine is built (:mod:`livefuse.swap.frame_path`).

On the GPU path every stage replays CUDA graphs, and a graph's capture stalls the device: the
first frame of a size (and the first frame after a setting that changes the graphs) runs
:meth:`Engine.warm_up`, a sweep over every face count and size the session can meet, so that a
face that walks in or leans towards the camera never captures a graph mid-stream.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from livefuse.cache import PoseCache, pose_key
from livefuse.config import MODEL_RELOAD_FIELDS, CacheConfig, EngineConfig
from livefuse.errors import FaceIndexError, NoFaceError
from livefuse.faces.analyser import Analyser, DetectsAhead, Landmarker, landmarks_of
from livefuse.faces.rotation import SweepPacer, detect_rotated
from livefuse.faces.selection import (
    SCORE_RATIO,
    choose_source_face,
    detect_robust,
    drop_weak,
    embedding_distance,
    same_person_limit,
    select_targets,
)
from livefuse.faces.smoothing import FaceSmoother
from livefuse.faces.tracking import FaceTracker, iou
from livefuse.imaging import LoadedImage
from livefuse.models.engine_choice import resolve_engine
from livefuse.swap.frame_path import FramePath, frame_path
from livefuse.swap.paste import Roi, rewarp

if TYPE_CHECKING:
    from livefuse.swap.enhance import FaceEnhancer
from livefuse.swap.renderer import Renderer
from livefuse.types import (
    Face,
    FloatArray,
    Frame,
    FramePacket,
    Patch,
    SkippedFace,
    StagedFrame,
)

log = logging.getLogger(__name__)

WARM_FACES = 8
"""Face counts the warm-up sweep covers with ``face_selector='many'`` (1 to this; 1 otherwise).
More faces in one frame still work; the first such frame captures its graphs then."""
WARM_FACE_RATIO = 1.12
"""Successive face sizes of the warm-up sweep differ by this factor (finer than every bucket
ladder of the graphs it warms: the paste box's 1.25, the tracker's region sizes)."""


def _ms(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / 1e6


def _union(a: Roi, b: Roi) -> Roi:
    return min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])


_STILL_UPSAMPLE = 1
"""Still images are detected one pyramid step finer than video frames (CenterFace at 640x480
instead of 320x240; SCRFD at twice its input): t1.jpg turned by 30 degrees lies on a 1550 px
canvas, where the fast pass sees a 93 px face at 16 px and misses it."""
_TOO_SMALL_PX = 24  # under this the renderers' crops hold too little of the face: not swapped


def unswapped_reason(face: Face, shape: tuple[int, ...]) -> str:
    """Why a selected face came back without a swap, in words for the user (the renderer
    returned nothing for it, or its patch fell outside the picture)."""
    h, w = shape[:2]
    b = face.bbox
    inside = max(0.0, min(float(b[2]), w) - max(float(b[0]), 0.0)) * \
        max(0.0, min(float(b[3]), h) - max(float(b[1]), 0.0))
    if inside < 0.5 * max(face.area, 1e-6):
        return "mostly outside the picture"
    if face.width < _TOO_SMALL_PX:
        return f"too small to swap ({face.width:.0f} px wide)"
    return "its landmarks give no face area to swap (a profile or a degenerate fit)"


# Landmarks that fix the re-warp of a cached face: brows, nose, eyes (iBUG 300-W 17..47); they
# move little with expression, like the points the classic renderer places the source shape with.
_REWARP_POINTS = slice(17, 48)


def alignment_points(face: Face) -> FloatArray:
    """The points a cached patch is re-warped by: the 68-point brow/eye/nose landmarks when the
    analyser gives them, else the 5 kps."""
    return face.landmarks[_REWARP_POINTS] if face.landmarks is not None else face.kps


_PREPARED_MEMO = 16
"""Prepared source photos an engine keeps (a streamer's presets; a few MB each at most)."""


@dataclass(frozen=True, eq=False)
class PreparedSource:
    """A source face found in its photo and prepared for one engine's renderer.

    Attributes:
        face: the chosen face in the photo.
        data: the renderer's prepared value (opaque; see :meth:`Renderer.prepare`).
        notes: what the user should be told about the choice (several faces, small, grey).
    """

    face: Face
    data: Any
    notes: tuple[str, ...] = ()


def _source_key(image: LoadedImage, face_index: int | None,
                face: Face | None) -> tuple[Any, ...] | None:
    """What identifies a prepared photo file: path, size, modification time, shape and the face
    choice; ``None`` (never memoised) for an image that is not an existing file."""
    if image.path is None:
        return None
    try:
        st = Path(image.path).stat()
    except OSError:
        return None
    box = None if face is None else tuple(round(float(v), 1) for v in face.bbox)
    return (str(image.path), st.st_size, st.st_mtime_ns, image.bgr.shape, face_index, box)


class Engine:
    """The synchronous frame path.

    Args:
        config: validated on construction.
        analyser: classic engine: the face analyser (the offline dlib one by default), e.g. to
            share one between engines.
        cache: the pose-similarity cache's settings (design.md section 4); off when omitted, so
            offline jobs render every frame afresh. It works with every renderer.
        components: ``(analyser, renderer)`` built by the caller (tests, custom models); by
            default the classic parts, or for ``engine='neural'`` the catalog's verified models
            (:func:`livefuse.swap.neural_engine.build_neural`); ``engine='auto'`` is resolved
            here (:func:`livefuse.models.engine_choice.resolve_engine`, kept in
            :attr:`engine_choice`) while :attr:`config` keeps the request.
        sync_timings: wait for the device at each stage boundary so ``timings_ms`` are the
            stages' own GPU times (benchmarks); off by default (it costs overlap).
        enhancer: a face enhancer built by the caller; by default the one ``config.enhancer``
            names (from the catalog), or none. It runs on each face right after its swap is
            pasted; with the cache on, only on cache misses (its patch is stored beside the
            swap's and re-warped with it).
        warm_up: before a frame size's first frame, capture every CUDA graph a session at that
            size will meet (:meth:`warm_up`, 5-7 s at 1080p on the H200), so that no frame of a
            live stream stalls when a face appears or grows. Live sessions ask for it
            (:func:`livefuse.live.default_engine_factory`); file jobs (``run``, ``batch``) leave
            it off: a first-use capture costs a file job nothing it can see, the sweep costs
            every worker seconds.
        landmarker: adds the landmarks the pose cache's key reads the mouth, the eyes and the
            head pose from, to faces whose analyser gives only kps (run on cache-on frames);
            for ``engine='neural'`` built from the config, the catalog's 2d106det by default
            (:func:`livefuse.swap.neural_engine.build_landmarker`). Without one such faces are
            never served from the cache.
        fitter: fits the landmarks the renderer needs and the analyser's detection leaves out,
            on the faces the engine uses (after selection) and on source photos; by default the
            classic engine's own ``DlibFaceAnalyser``, which detects without its 68 points (they
            cost 4-5 ms a face) when the engine built it.

    Raises:
        ConfigError: invalid config.
        LivefuseError: neural engine: a model is missing, corrupt or cannot be loaded (the
            message names the file and the `livefuse models` command that fixes it).
    """

    def __init__(self, config: EngineConfig, analyser: Analyser | None = None,
                 cache: CacheConfig | None = None,
                 components: tuple[Analyser, Renderer] | None = None,
                 sync_timings: bool = False, enhancer: FaceEnhancer | None = None,
                 landmarker: Landmarker | None = None, warm_up: bool = False,
                 fitter: Landmarker | None = None) -> None:
        self.config = config.validate()
        self.warm_up_first = warm_up
        self.engine_choice = resolve_engine(config)
        self.analyser: Analyser
        self.renderer: Renderer
        self.landmarker: Landmarker | None = landmarker
        self.fitter: Landmarker | None = fitter
        if components is not None:
            self.analyser, self.renderer = components
        elif self.engine_choice.engine == "neural":
            from livefuse.swap.neural_engine import build_landmarker, build_neural

            self.analyser, renderer = build_neural(config)
            self.renderer = renderer
            if landmarker is None:
                self.landmarker = build_landmarker(config, renderer)
        else:
            # dlib only when the classic engine is used: the neural path runs without it.
            from livefuse.faces.dlib_analyser import DlibFaceAnalyser

            if analyser is None:
                # its faces get their 68 landmarks after selection (self.fitter): a
                # stream that swaps one face of five fits one
                analyser = DlibFaceAnalyser(landmarks_on_detect=False)
            if fitter is None and isinstance(analyser, DlibFaceAnalyser):
                self.fitter = analyser  # fits what it left out, whoever built it
            from livefuse.swap.classic import ClassicSwapper

            self.analyser = analyser
            self.renderer = ClassicSwapper(config)
        self._source: Any = None
        self._prepared: dict[tuple[Any, ...], PreparedSource] = {}
        self.source_face: Face | None = None
        self.source_notes: tuple[str, ...] = ()
        self._reference: FloatArray | None = None
        self.reference_notes: tuple[str, ...] = ()
        """What the user should be told about the last reference photo (which of its faces)."""
        self.tracker = FaceTracker(config.detect_every)
        self.smoother = FaceSmoother()
        self._sweeps = SweepPacer()  # a video's faceless frames sweep the turns now and then
        # the analyser's own capability (SCRFD on the GPU path): see process(ahead=...)
        self._ahead: DetectsAhead | None = \
            self.analyser if isinstance(self.analyser, DetectsAhead) else None
        self.cache = PoseCache(cache or CacheConfig(enabled=False))
        self.sync_timings = sync_timings
        self.path: FramePath = frame_path(self.renderer.device)
        self.stager: Any = self.path.stager
        self._warm_key: Any = None
        self.warm_up_s = 0.0
        self.enhancer = enhancer
        if enhancer is None and config.enhancer is not None:
            from livefuse.swap.enhance import FaceEnhancer

            on_gpu = self.renderer.device.startswith("cuda")
            self.enhancer = FaceEnhancer(config.enhancer,
                                         backend="torch" if on_gpu else "onnxruntime",
                                         device=self.renderer.device, precision=config.precision,
                                         blend=config.enhancer_blend,
                                         models_dir=config.models_dir, cuda_graph=on_gpu)

    # -- source / reference -------------------------------------------------------------------
    def set_source(self, image: LoadedImage, face_index: int | None = None,
                   face: Face | None = None) -> Face:
        """Find the source face in a photo and prepare it once for every later render
        (:meth:`prepare_source`, then :meth:`use_source`); tracking starts afresh.

        Raises:
            NoFaceError, FaceIndexError: see :meth:`prepare_source`.
        """
        chosen = self.use_source(self.prepare_source(image, face_index, face))
        self.reset_tracking(same_stream=True)
        return chosen

    def prepare_source(self, image: LoadedImage, face_index: int | None = None,
                       face: Face | None = None) -> PreparedSource:
        """Find the source face in a photo and prepare it for the renderer, without using it
        yet: the frame path is not touched, so a photo without a face changes nothing.

        The default choice is the most confident detection that passes the landmark sanity
        check (:func:`livefuse.faces.selection.choose_source_face`); what was chosen and any
        warning (several faces, a tiny or grey source) is in its ``notes``. A photo file
        prepared before (same path, size and modification time, same choice) is taken from a
        small memo, so switching back to a preset costs no detection.

        Args:
            face_index: which face, left to right from 0 among the plausible ones.
            face: a face chosen elsewhere (e.g. by the app's picker, with another detector):
                this engine's own detection that overlaps it most is used.

        Raises:
            NoFaceError: no plausible face found even after the upscale/pad and rotation retries,
                or none at ``face``.
            FaceIndexError: ``face_index`` is outside the faces found.
        """
        key = _source_key(image, face_index, face)
        hit = None if key is None else self._prepared.get(key)
        if hit is not None:
            return hit
        # a photo's detection must not depend on how many video frames this analyser saw
        # before (its wide-scan cadence): every 30th call took another pass, and the same source
        # photo gave another source face, with an identity margin of 0.052 against 0.087
        self.analyser.reset()
        faces = detect_robust(self.analyser, image.bgr) or detect_rotated(
            lambda f: self.analyser.detect(f, 1), image.bgr, "auto", upright=[])
        # the sanity check reads the 68 landmarks too, and the renderer needs them
        faces = landmarks_of(self.fitter, image.bgr, faces)
        choice = choose_source_face(faces, image.bgr, image.path, face_index)
        chosen = choice.face
        if face is not None:
            best = max(choice.candidates, key=lambda f: iou(f.bbox, face.bbox))
            if iou(best.bbox, face.bbox) < 0.3:
                raise NoFaceError(image.path, "source (at the chosen face)")
            chosen = best
        prepared = PreparedSource(face=chosen, data=self.renderer.prepare(image.bgr, chosen,
                                                                          image.path),
                                  notes=choice.notes if face is None else ())
        if key is not None:
            while len(self._prepared) >= _PREPARED_MEMO:
                del self._prepared[next(iter(self._prepared))]
            self._prepared[key] = prepared
        return prepared

    def use_source(self, prepared: PreparedSource) -> Face:
        """Swap ``prepared`` (from this engine's :meth:`prepare_source`) in from the next frame
        on: the cache is dropped (its faces were rendered from the old source); the tracked
        target faces are kept (they are the same people), so the next frame costs what any
        frame costs. Cheap: no detection, no model run.

        Returns:
            The source face.
        """
        self._source = prepared.data
        self.source_face = prepared.face
        self.source_notes = prepared.notes
        self.cache.invalidate()
        return prepared.face

    def apply(self, config: EngineConfig) -> bool:
        """Take new engine settings in place when no model has to be loaded again.

        Detection interval, face selection, mouth and blend settings change at once (the cache is
        dropped: rendered faces may look different); a change of engine, precision, backend,
        device or models folder (:data:`~livefuse.config.MODEL_RELOAD_FIELDS`) cannot be taken.

        Returns:
            ``True`` when taken; ``False`` when the caller must build a new Engine.

        Raises:
            ConfigError: invalid settings.
        """
        config = config.validate()
        if any(getattr(config, f) != getattr(self.config, f) for f in MODEL_RELOAD_FIELDS):
            return False
        if config == self.config:
            return True
        self.config = config
        self.tracker.detect_every = config.detect_every
        if self.enhancer is not None:
            self.enhancer.blend = config.enhancer_blend
        self.renderer.configure(config)
        # the same stream goes on: its sweep pacer stays (a slider dragged in `live` applies
        # a config a frame, and each fresh pacer swept all eight turns on its first frame)
        self.reset_tracking(same_stream=True)
        self.cache.invalidate()
        return True

    def set_cache(self, config: CacheConfig) -> None:
        """Take new cache settings (between frames); a change drops every cached face.

        Raises:
            ConfigError: invalid settings.
        """
        self.cache.apply(config)

    def invalidate(self) -> None:
        """Drop every cached face (the next frame renders afresh)."""
        self.cache.invalidate()

    def set_reference(self, image: LoadedImage) -> None:
        """Use the largest face of ``image`` as the reference for ``face_selector='reference'``
        (after the detection policy, :func:`~livefuse.faces.selection.drop_weak`: a badge that
        dlib scores near zero is never the reference, however large).

        Raises:
            NoFaceError: the reference photo has no face.
        """
        self.analyser.reset()  # as for the source: not on the video's wide-scan cadence
        faces, _ = drop_weak(detect_robust(self.analyser, image.bgr))
        if not faces:
            raise NoFaceError(image.path, "reference photo")
        face = max(faces, key=lambda f: f.area)
        self._reference = self.analyser.embed(image.bgr, face)
        x1, y1, x2, y2 = (round(float(v)) for v in face.bbox)
        self.reference_notes = () if len(faces) == 1 else (
            f"{len(faces)} faces in '{image.path or 'the reference photo'}': the largest, at "
            f"{x1},{y1}-{x2},{y2}, is the reference (a photo of that person alone avoids "
            "the guess)",)
        self.reset_tracking(same_stream=True)

    def reset_tracking(self, same_stream: bool = False) -> None:
        """Forget tracked faces and the analyser's per-stream state (a new video, a new
        source); the next frame runs detection, as it would in a fresh process.

        ``same_stream``: the frames that follow are the same stream's (new settings, a new
        source photo): the turns ``--rotation auto`` found faces at and its pace are kept
        (:class:`~livefuse.faces.rotation.SweepPacer`), so its first frame is not swept again.
        """
        self.tracker.reset()
        self.smoother.reset()
        self.analyser.reset()
        if not same_stream:
            self._sweeps.reset()

    # -- the frame path -------------------------------------------------------------------------
    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        """A ``shape`` ``uint8`` buffer for the capture to write its next frame into: on the
        GPU path pinned memory that :meth:`stage` uploads without a copy; ``None`` on the host
        path or when every such buffer is still in use (any thread)."""
        return self.path.lend(shape)

    def stage(self, frame: Frame) -> StagedFrame:
        """``frame`` ready for :meth:`process`: on the GPU path uploaded once (any thread; the
        live session calls it on the capture thread), else just wrapped."""
        return self.path.stage(frame)

    def _sync(self) -> None:
        if self.sync_timings:
            self.path.synchronize()

    # -- warm-up ------------------------------------------------------------------------------
    def _warm_faces(self) -> int:
        return WARM_FACES if self.config.face_selector == "many" else 1

    def warm_key(self, shape: tuple[int, ...]) -> tuple[Any, ...]:
        """What the set of graphs a session meets depends on: the frame size and the settings
        that change graph shapes (a new key means a new :meth:`warm_up`)."""
        c = self.config
        return (tuple(shape), c.pixel_boost, self._warm_faces(), c.rotation,
                c.face_mask_types, self.enhancer is not None, self.precision_in_use)

    def warm_up(self, shape: tuple[int, ...]) -> float:
        """Capture every CUDA graph a session at this frame size will meet, before its first
        frame: the detector (at every quarter turn ``rotation`` tries), the tracker's regions,
        the align, masks, swap and enhancer for 1 to :data:`WARM_FACES` faces, and the paste for
        every box size, by running each stage on an empty frame with faces of every size.
        Nothing on the host path (nor on a device path without CUDA graphs); :meth:`process`
        calls it itself when needed.

        Returns:
            The seconds it took.
        """
        if not self.path.warms or self._source is None:
            return 0.0
        t0 = time.perf_counter()
        h, w = int(shape[0]), int(shape[1])
        staged = self.stage(np.zeros((h, w, 3), np.uint8))
        try:
            self.path.begin(staged)
            for _ in range(2):  # a detector frame size gets its graphs at its second use
                detect_rotated(self.analyser.detect, staged, self.config.rotation)
            # largest first: all graphs share one memory pool, and a capture reuses the blocks
            # earlier ones freed only where they are big enough; in rising order each new size
            # took a new segment of the pool
            sides = _face_sides(h)[::-1]
            boxes = _warm_boxes(w, h)[::-1]
            out = staged.host
            for n in range(self._warm_faces(), 0, -1):
                for side in sides:
                    self.analyser.track(staged, _warm_faces(n, side, w, h))
                faces = _warm_faces(n, h / 4, w, h)
                if self.cache.enabled and self.landmarker is not None:
                    # its eager kernels and cuDNN's choice for this batch size, now: the first
                    # frame with a 2nd face stalled 780 ms on the H200 without this
                    self.landmarker.landmarks(staged, faces)
                layers = [self.renderer.render(staged, faces, self._source)]
                if self.enhancer is not None:
                    layers.append(self.path.enhance(self.enhancer, staged, out,
                                                    [f.kps for f in faces]))
                for patches in layers:
                    for box in boxes:
                        rois = self.path.paste(staged, [_boxed(p, box, w, h) for p in patches],
                                               out)
                        self.path.fetch(staged, rois)
                self._verify()
        finally:
            if staged.release is not None:
                staged.release()
        self.path.release_cache()
        refreeze()
        self.warm_up_s = time.perf_counter() - t0
        log.info("warm-up at %dx%d: %.2f s", w, h, self.warm_up_s)
        return self.warm_up_s

    def _verify(self) -> bool:
        """Every deferred precision guard of the frame: ``False`` when one rejected its output
        (that model now runs in fp32: the faces must be rendered again)."""
        ok = self.renderer.verify()
        enhanced_ok = self.enhancer is None or self.enhancer.verify()
        return ok and enhanced_ok

    def _detect(self, frame: StagedFrame, still: bool, dropped: list[SkippedFace],
                index: int = 0) -> list[Face]:
        """A full detection pass on a target frame (still image or video), at every turn the
        rotation setting asks for, then the detection policy (:func:`drop_weak`) that sources
        and references get too; what either drops is appended to ``dropped``, with why."""
        # a still is detected once: the analyser's finer pass (small faces in a large photo)
        upsample = _STILL_UPSAMPLE if still else None
        faces, weak = drop_weak(detect_rotated(lambda f: self.analyser.detect(f, upsample), frame,
                                               self.config.rotation, still=still,
                                               dropped=dropped, pacer=self._sweeps,
                                               index=index, expected=self.tracker.previous))
        dropped += [SkippedFace(f.bbox, f"scored {f.score:.2f}, under {SCORE_RATIO:g}x the best "
                                "face of the frame", f.angle, f.score) for f in weak]
        if self.config.face_selector == "reference" and self._reference is not None:
            faces = [replace(f, embedding=self.analyser.embed(frame.host, f)) for f in faces]
        return faces

    def _find(self, frame: StagedFrame, strict: bool, t_s: float | None, packet: FramePacket
              ) -> list[Face]:
        """Detect or track, then select: this frame's target faces. Fills the packet's
        ``detected``, ``found``, ``dropped`` and (for the faces not selected) ``skipped``."""
        cfg = self.config
        carried = self.tracker.carry(frame, self.analyser)
        detected = carried is None
        faces = carried if carried is not None else \
            self.tracker.coast(frame, self.analyser, self._detect(frame, strict, packet.dropped,
                                                                  packet.index))
        kept = None
        if detected and cfg.face_selector == "one" and cfg.target_face_index is None:
            kept = self.tracker.continuing(faces)
        try:
            targets = [kept] if kept is not None else select_targets(
                faces, cfg.face_selector, cfg.target_face_index, self._reference)
        except FaceIndexError:
            if strict:
                raise
            targets = []
        small = [f for f in targets if f.width < _TOO_SMALL_PX]
        if small:  # found, but a swap of so few pixels is a smear (a new user's 12-16 px faces)
            targets = [f for f in targets if f.width >= _TOO_SMALL_PX]
            packet.skipped += [SkippedFace(f.bbox, f"too small to swap (under {_TOO_SMALL_PX} "
                                           "px wide)", f.angle, f.score) for f in small]
            packet.unswapped += small
        chosen = {id(f) for f in (*targets, *small)}
        others = [f for f in faces if id(f) not in chosen]
        targets = landmarks_of(self.fitter, frame, targets)
        packet.skipped += [SkippedFace(f.bbox, self._not_selected(f), f.angle, f.score)
                           for f in others]
        packet.unswapped += others
        targets = self.tracker.commit(targets, detected)
        self.cache.retain({f.track_id for f in targets})
        if cfg.smooth and t_s is not None:
            targets = self.smoother(targets, t_s)
        packet.detected, packet.found = detected, len(faces)
        return targets

    def _patches(self, frame: StagedFrame, faces: Sequence[Face]
                 ) -> tuple[list[Patch | None], list[Patch | None], list[int], list[Any], int]:
        """Swap patches per face: re-warped from the cache on a hit (with the enhancer's layer,
        when one was stored), rendered as one batch on a miss. Returns the swap patches, the
        cached enhancer patches, the misses' indices, the cache keys and the number of hits."""
        swap: list[Patch | None] = [None] * len(faces)
        enh: list[Patch | None] = [None] * len(faces)
        keys: list[Any] = [None] * len(faces)
        misses = []
        for i, face in enumerate(faces):
            if self.cache.enabled:
                keys[i] = pose_key(frame.host, face)
                hit = self.cache.lookup(face.track_id, keys[i])
                if hit is not None:
                    layers, points = hit
                    now = alignment_points(face)
                    swap[i] = rewarp(layers[0], points, now)
                    enh[i] = None if layers[1] is None else rewarp(layers[1], points, now)
                    continue
            misses.append(i)
        if misses:
            rendered = self.renderer.render(frame, [faces[i] for i in misses], self._source)
            for i, patch in zip(misses, rendered, strict=True):
                swap[i] = patch
        return swap, enh, misses, keys, len(faces) - len(misses)


    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False, ahead: StagedFrame | None = None) -> FramePacket:
        """Swap the source face onto the selected faces of one frame.

        Args:
            frame: ``(H, W, 3) uint8 BGR`` (or the same staged by :meth:`stage`); not modified
                unless ``in_place``. On the GPU path a staged frame without a device copy on
                this engine's device (e.g. captured while the engine was rebuilt) is staged
                here.
            index: frame number, carried into the packet.
            t_capture_ns: capture time (``time.perf_counter_ns``); now when omitted.
            strict: raise :class:`FaceIndexError` when ``target_face_index`` does not exist in this
                frame (for still images); otherwise the frame is left unswapped.
            in_place: write the output into ``frame`` itself (the caller owns it and does not need
                the original: saves a frame copy).
            ahead: the next frame of the same video, already staged by :meth:`stage`, which the
                caller processes next (a pipelined video job's processing thread holds it).
                When it will be detected whatever it holds (:meth:`FaceTracker.detects_next`)
                and the analyser can (:class:`~livefuse.faces.analyser.DetectsAhead`), its
                detection is queued on the device behind this frame's paste-back, so it runs
                while the host waits for this frame's regions and finishes it; the next call
                reads it instead of detecting. The faces found are the same.

        Returns:
            A :class:`FramePacket`; ``swapped`` counts the faces actually pasted.

        Raises:
            RuntimeError: no source face was set.
        """
        if self._source is None:
            raise RuntimeError("Engine.process called before set_source")
        staged, given = self._staged(frame)
        try:
            return self._process(staged, index, t_capture_ns, strict, in_place,
                                 None if strict else ahead)
        finally:
            for done in (staged, given):
                if done is not None and done.release is not None:
                    done.release()

    def track(self, frame: Frame | StagedFrame, index: int = 0,
              t_capture_ns: int | None = None) -> FramePacket:
        """Run only what carries into the next frames of a video: detection or tracking, the
        face selection and the smoothing; nothing is rendered or pasted (``packet.output`` is
        the frame as it came).

        For frames whose output nobody keeps: ``livefuse batch`` runs the warm-up second before
        each chunk through it, so that the chunk's first written frame meets the tracker and
        the smoothing in the state one run over the whole video leaves them in, without paying
        for swaps it throws away. With the pose cache on (its entries carry into the next frames
        too) the frame is processed whole, as it is when a live session's graph sweep is due.

        Args and errors as :meth:`process` (a still image has no next frame: no ``strict``);
        called on the thread that calls :meth:`process` (a video job's processing thread).
        """
        if self.cache.enabled or (self.warm_up_first and self.path.warms):
            return self.process(frame, index, t_capture_ns, in_place=True)
        if self._source is None:
            raise RuntimeError("Engine.track called before set_source")
        staged, given = self._staged(frame)
        try:
            t_cap = time.perf_counter_ns() if t_capture_ns is None else t_capture_ns
            packet = FramePacket(index=index, t_capture_ns=t_cap, frame=staged.host)
            self.path.begin(staged)
            t0 = time.perf_counter_ns()
            packet.faces = self._find(staged, False, t_cap / 1e9, packet)
            # the device reads the staged frame until here: its buffer may be lent again next
            self.path.synchronize()
            packet.timings_ms["detect" if packet.detected else "track"] = _ms(t0)
            packet.output = staged.host
            return packet
        finally:
            for done in (staged, given):
                if done is not None and done.release is not None:
                    done.release()

    def _staged(self, frame: Frame | StagedFrame) -> tuple[StagedFrame, StagedFrame | None]:
        """``frame`` staged on this engine's path, and the staged frame it came as when that had
        to be staged again (both are released after the frame's work)."""
        if not isinstance(frame, StagedFrame):
            return self.stage(frame), None
        if self.stager is not None and not self._staged_here(frame):
            # staged by no stager (captured while the engine was being rebuilt) or by another
            # engine's on another device: upload it now, from its host copy
            return self.stage(frame.host), frame
        return frame, None

    def _not_selected(self, face: Face) -> str:
        """Why a face found was left out by the face selector."""
        cfg = self.config
        if cfg.face_selector == "reference" and self._reference is not None and \
                face.embedding is not None:
            distance = embedding_distance(face.embedding, self._reference)
            limit = same_person_limit(self._reference)
            if distance > limit:
                return (f"not the reference person (identity distance {distance:.2f}; the same "
                        f"person is within {limit:.2f})")
            return "not selected (another face is nearer the reference)"
        return (f"not selected (face selector '{cfg.face_selector}'"
                + (f", target face index {cfg.target_face_index})"
                   if cfg.target_face_index is not None else ")"))

    def _staged_here(self, frame: StagedFrame) -> bool:
        """Whether ``frame`` has a device copy on this engine's device."""
        if frame.device is None:
            return False
        want, got = self.stager.device, frame.device.device
        return bool(got.type == want.type and (want.index is None or got.index == want.index))

    def _detect_ahead(self, frame: StagedFrame | None) -> None:
        """Queue ``frame``'s detection now (see :meth:`process`'s ``ahead``) when it is due."""
        if frame is not None and self._ahead is not None and self._staged_here(frame) and \
                self.tracker.detects_next():
            self._ahead.detect_ahead(frame)

    def _process(self, staged: StagedFrame, index: int, t_capture_ns: int | None, strict: bool,
                 in_place: bool, ahead: StagedFrame | None) -> FramePacket:
        t_cap = time.perf_counter_ns() if t_capture_ns is None else t_capture_ns
        packet = FramePacket(index=index, t_capture_ns=t_cap, frame=staged.host)
        if self.warm_up_first and self.path.warms and \
                self._warm_key != self.warm_key(staged.host.shape):
            # before this frame takes its size's work frame: the sweep writes into it
            self._warm_key = self.warm_key(staged.host.shape)
            packet.timings_ms["warm-up"] = self.warm_up(staged.host.shape) * 1e3
        self.path.begin(staged)
        t0 = time.perf_counter_ns()
        # still images are not smoothed: the filter needs a sequence of frames
        t_s = None if strict else packet.t_capture_ns / 1e9
        targets = self._find(staged, strict, t_s, packet)
        self._sync()
        packet.timings_ms["detect" if packet.detected else "track"] = _ms(t0)
        if self.cache.enabled and self.landmarker is not None and targets:
            t_lm = time.perf_counter_ns()
            targets = landmarks_of(self.landmarker, staged, targets)
            self._sync()
            packet.timings_ms["landmarks"] = _ms(t_lm)
        packet.faces = targets

        t1 = time.perf_counter_ns()
        swap, enh, misses, keys, packet.cache_hits = self._patches(staged, targets)
        self._sync()
        packet.timings_ms["render"] = _ms(t1)

        t2 = time.perf_counter_ns()
        out = staged.host if in_place else staged.host.copy()
        rois = self._compose(staged, targets, swap, enh, misses, out, packet)
        fetched = self.path.fetch(staged, rois, meanwhile=lambda: self._detect_ahead(ahead))
        if misses and not self._verify():
            # a precision guard rejected a swap, a mask or an enhancement (the device path
            # reads its verdicts only now): undo the pastes, render again (that model has
            # latched to fp32), paste again; ``out`` still holds the original
            self.path.restore(staged, rois, out)
            for i, patch in zip(misses, self.renderer.render(
                    staged, [targets[i] for i in misses], self._source), strict=True):
                swap[i], enh[i] = patch, None
            rois = self._compose(staged, targets, swap, enh, misses, out, packet)
            fetched = self.path.fetch(staged, rois)
        self.path.finish(out, fetched)
        # the paste stage's own time: the enhancer's runs are reported on their own
        packet.timings_ms["paste"] = _ms(t2) - packet.timings_ms.get("enhance", 0.0)
        if self.cache.enabled:
            for i in misses:
                tid = targets[i].track_id
                if swap[i] is None:
                    self.cache.invalidate(tid)
                else:
                    self.cache.store(tid, keys[i], ((swap[i], enh[i]),
                                                    alignment_points(targets[i])))
        packet.swapped = sum(r is not None for r in rois)
        packet.regions = [r for r in rois if r is not None]
        unrendered = [f for f, r in zip(targets, rois, strict=True) if r is None]
        packet.unswapped += unrendered
        packet.skipped += [SkippedFace(f.bbox, unswapped_reason(f, out.shape), f.angle, f.score)
                           for f in unrendered]
        packet.output = out
        return packet

    def _compose(self, staged: StagedFrame, targets: Sequence[Face], swap: list[Patch | None],
                 enh: list[Patch | None], misses: Sequence[int], out: Frame,
                 packet: FramePacket) -> list[Roi | None]:
        """Paste the swap layer, run the enhancer on the faces just swapped (on the frame with
        their swap pasted), paste its layer; returns the region each face covers (``enh`` is
        filled in for the misses)."""
        rois = self.path.paste(staged, swap, out)
        if self.enhancer is None:
            return rois
        todo = [i for i in misses if rois[i] is not None]
        if todo:
            self._sync()
            t3 = time.perf_counter_ns()
            patches = self.path.enhance(self.enhancer, staged, out, [targets[i].kps for i in todo])
            for i, p in zip(todo, patches, strict=True):
                enh[i] = p
            self._sync()
            packet.timings_ms["enhance"] = _ms(t3)
        enh_rois = self.path.paste(staged, enh, out)
        return [a if b is None else b if a is None else _union(a, b)
                for a, b in zip(rois, enh_rois, strict=True)]

    def process_image(self, frame: Frame) -> FramePacket:
        """A still image: detection only, nothing carried from or to other frames, and a
        ``target_face_index`` that does not exist raises.

        Raises:
            FaceIndexError: ``target_face_index`` is outside the faces found.
        """
        self.reset_tracking()
        try:
            return self.process(frame, strict=True)
        finally:
            self.reset_tracking()

    @property
    def precision_in_use(self) -> str:
        """The swap precision actually running, e.g. ``fp16`` or ``fp32 (fallback)``."""
        return self.renderer.precision_in_use

    @property
    def precision_reason(self) -> str:
        """Why the renderer runs that precision (``--precision`` and the device), one line."""
        return self.renderer.precision_reason

    @property
    def has_source(self) -> bool:
        return self._source is not None

    @property
    def source_path(self) -> Path | None:
        return None if self._source is None else self._source.path


def refreeze() -> None:
    """Collect all garbage, then take every object left out of the collector's view
    (``gc.freeze``). Called by :meth:`Engine.warm_up` on the inference thread.

    The models, graphs and buffers live as long as the session: a full collection that walks
    them all stalls a frame by tens of ms. Frozen objects are never collected, though, so the
    earlier freezes are undone first: an engine dropped since (a settings change, a new stream)
    is freed here with its VRAM, not kept until the process ends."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _face_sides(frame_h: int) -> list[float]:
    """Face sizes (bbox side, px) of the warm-up sweep: 2 % to 140 % of the frame height (a face
    rolled by 45° spans √2 times its size)."""
    sides = [0.02 * frame_h]
    while sides[-1] < 1.4 * frame_h:
        sides.append(sides[-1] * WARM_FACE_RATIO)
    return sides


def _warm_boxes(w: int, h: int) -> list[int]:
    """Sides of the squares the warm-up pastes into: one per paste box bucket of a ``w``×``h``
    frame (:data:`~livefuse.swap.gpu_frame.BOX_SIDES`, clipped to the frame)."""
    from livefuse.swap.gpu_frame import BOX_SIDES

    # patch_roi adds up to 4 px around a patch: 6 px less keeps each square in its bucket
    return [b - 6 for b in BOX_SIDES if b - 6 <= max(w, h)] + [max(w, h) + 64]


def _warm_faces(n: int, side: float, w: int, h: int) -> list[Face]:
    """``n`` upright faces of bbox side ``side`` px, side by side around the frame's centre."""
    from livefuse.faces.align import ARCFACE_DST

    # the ArcFace template's kps span about half the crop, whose face box is ~0.9 of it
    unit = (np.asarray(ARCFACE_DST, np.float32) - 56.0) / 112.0 / 0.9
    out = []
    for k in range(n):
        cx = w / 2 + (k - (n - 1) / 2) * min(side, w / max(n, 1)) * 0.5
        cy = h / 2
        kps = (unit * side + np.array([cx, cy], np.float32)).astype(np.float32)
        bbox = np.array([cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2], np.float32)
        out.append(Face(bbox=bbox, kps=kps, score=0.9, track_id=k))
    return out


def _boxed(patch: Patch | None, side: int, w: int, h: int) -> Patch | None:
    """``patch`` moved so that it covers a ``side`` × ``side`` square at the frame's centre (its
    paste samples that box size)."""
    if patch is None:
        return None
    ph, pw = (int(d) for d in patch.alpha.shape[-2:])
    x0, y0 = w / 2 - side / 2, h / 2 - side / 2
    affine = np.array([[pw / side, 0.0, -x0 * pw / side],
                       [0.0, ph / side, -y0 * ph / side]], np.float64)
    return replace(patch, affine=affine)


__all__ = ["WARM_FACES", "Engine", "PreparedSource", "alignment_points", "unswapped_reason"]
