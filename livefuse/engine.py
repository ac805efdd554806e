"""Engine(config).process(frame) -> FramePacket, synchronous:

detect or track → select → pose-similarity cache → render (all faces of the frame as one batch)
→ paste-back.

One Engine serves the CLI, the live session and the GUI. It owns its analyser, renderer, tracker
and cache; it reads no global settings. On the GPU path (the torch renderer on CUDA) the frame is
staged on the device once (:class:`~livefuse.swap.gpu_frame.FrameStager`), every stage works on
it there, and only the pasted regions come back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from livefuse.cache import PoseCache, pose_key
from livefuse.config import MODEL_RELOAD_FIELDS, CacheConfig, EngineConfig
from livefuse.errors import FaceIndexError, NoFaceError
from livefuse.faces.analyser import Analyser, Landmarker, landmarks_of
from livefuse.faces.rotation import detect_rotated
from livefuse.faces.selection import choose_source_face, detect_robust, select_targets
from livefuse.faces.smoothing import FaceSmoother
from livefuse.faces.tracking import FaceTracker, iou
from livefuse.imaging import LoadedImage
from livefuse.swap.paste import Roi, paste_all, rewarp

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


def _ms(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / 1e6


def _union(a: Roi, b: Roi) -> Roi:
    return min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])


_STILL_UPSAMPLE = 1
"""Still images are detected one pyramid step finer than video frames (CenterFace at 640x480
instead of 320x240; SCRFD at twice its input): t1.jpg turned by 30 degrees lies on a 1550 px
canvas, where the fast pass sees a 93 px face at 16 px and misses it."""
_TOO_SMALL_PX = 24  # under this the renderers' crops hold too little of the face


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
            (:func:`livefuse.swap.neural_engine.build_neural`).
        sync_timings: wait for the device at each stage boundary so ``timings_ms`` are the
            stages' own GPU times (benchmarks); off by default (it costs overlap).
        enhancer: a face enhancer built by the caller; by default the one ``config.enhancer``
            names (from the catalog), or none. It runs on each face right after its swap is
            pasted; with the cache on, only on cache misses (its patch is stored beside the
            swap's and re-warped with it).
        landmarker: fits the landmarks the analyser's detection leaves out, for the faces the
            engine uses (:class:`~livefuse.faces.analyser.Landmarker`); by default the classic
            engine's own ``DlibFaceAnalyser``, which detects without them (its 68 points cost
            4-5 ms a face) when the engine built it.

    Raises:
        ConfigError: invalid config.
        LivefuseError: neural engine: a model is missing, corrupt or cannot be loaded (the
            message names the file and the `livefuse models` command that fixes it).
    """

    def __init__(self, config: EngineConfig, analyser: Analyser | None = None,
                 cache: CacheConfig | None = None,
                 components: tuple[Analyser, Renderer] | None = None,
                 sync_timings: bool = False, enhancer: FaceEnhancer | None = None,
                 landmarker: Landmarker | None = None) -> None:
        self.config = config.validate()
        self.analyser: Analyser
        self.renderer: Renderer
        self.landmarker: Landmarker | None = landmarker
        if components is not None:
            self.analyser, self.renderer = components
        elif config.engine == "neural":
            from livefuse.swap.neural_engine import build_neural

            self.analyser, self.renderer = build_neural(config)
        else:
            # dlib only when the classic engine is used: the neural path runs without it.
            from livefuse.faces.dlib_analyser import DlibFaceAnalyser

            if analyser is None:
                # its faces get their 68 landmarks after selection (self.landmarker): a
                # stream that swaps one face of five fits one
                analyser = DlibFaceAnalyser(landmarks_on_detect=False)
            if landmarker is None and isinstance(analyser, DlibFaceAnalyser):
                self.landmarker = analyser  # fits what it left out, whoever built it
            from livefuse.swap.classic import ClassicSwapper

            self.analyser = analyser
            self.renderer = ClassicSwapper(config)
        self._source: Any = None
        self.source_face: Face | None = None
        self.source_notes: tuple[str, ...] = ()
        self._reference: FloatArray | None = None
        self.tracker = FaceTracker(config.detect_every)
        self.smoother = FaceSmoother()
        self.cache = PoseCache(cache or CacheConfig(enabled=False))
        self.sync_timings = sync_timings
        self.stager: Any = None
        if self.renderer.device.startswith("cuda"):
            from livefuse.swap.gpu_frame import FrameStager

            self.stager = FrameStager(self.renderer.device)
        self.enhancer = enhancer
        if enhancer is None and config.enhancer is not None:
            from livefuse.swap.enhance import FaceEnhancer

            on_gpu = self.renderer.device.startswith("cuda")
            self.enhancer = FaceEnhancer(config.enhancer,
                                         backend="torch" if on_gpu else "onnxruntime",
                                         device=self.renderer.device, blend=config.enhancer_blend,
                                         models_dir=config.models_dir, cuda_graph=on_gpu)

    # -- source / reference -------------------------------------------------------------------
    def set_source(self, image: LoadedImage, face_index: int | None = None,
                   face: Face | None = None) -> Face:
        """Find the source face in a photo and prepare it once for every later render.

        The default choice is the most confident detection that passes the landmark sanity
        check (:func:`livefuse.faces.selection.choose_source_face`); what was chosen and any
        warning (several faces, a tiny or grey source) is in :attr:`source_notes`.

        Args:
            face_index: which face, left to right from 0 among the plausible ones.
            face: a face chosen elsewhere (e.g. by the app's picker, with another detector):
                this engine's own detection that overlaps it most is used.

        Raises:
            NoFaceError: no plausible face found even after the upscale/pad and rotation retries,
                or none at ``face``.
            FaceIndexError: ``face_index`` is outside the faces found.
        """
        faces = detect_robust(self.analyser, image.bgr) or detect_rotated(
            lambda f: self.analyser.detect(f, 1), image.bgr, "auto", upright=[])
        # the sanity check reads the 68 landmarks too, and the renderer needs them
        faces = landmarks_of(self.landmarker, image.bgr, faces)
        choice = choose_source_face(faces, image.bgr, image.path, face_index)
        chosen = choice.face
        if face is not None:
            best = max(choice.candidates, key=lambda f: iou(f.bbox, face.bbox))
            if iou(best.bbox, face.bbox) < 0.3:
                raise NoFaceError(image.path, "source (at the chosen face)")
            chosen = best
        self._source = self.renderer.prepare(image.bgr, chosen, image.path)
        self.source_face = chosen
        self.source_notes = choice.notes if face is None else ()
        self.reset_tracking()
        self.cache.invalidate()
        return chosen

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
        self.reset_tracking()
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
        self.tracker.reset()
        self.smoother.reset()

    # -- the frame path -------------------------------------------------------------------------
    def stage(self, frame: Frame) -> StagedFrame:
        """``frame`` ready for :meth:`process`: on the GPU path uploaded once (any thread; the
        live session calls it on the capture thread), else just wrapped."""
        if self.stager is None:
            return StagedFrame(host=frame)
        staged: StagedFrame = self.stager.stage(frame)
        return staged

    def _sync(self) -> None:
        if self.sync_timings and self.stager is not None:
            import torch

            torch.cuda.synchronize(self.stager.device)

    def _detect(self, frame: StagedFrame, still: bool, dropped: list[SkippedFace]
                ) -> list[Face]:
        # a still is detected once: the analyser's finer pass (small faces in a large photo)
        upsample = _STILL_UPSAMPLE if still else None
        faces = detect_rotated(lambda f: self.analyser.detect(f, upsample), frame,
                               self.config.rotation, still=still, dropped=dropped)
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
            self.tracker.coast(frame, self.analyser, self._detect(frame, strict, packet.dropped))
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
        chosen = {id(f) for f in targets}
        targets = landmarks_of(self.landmarker, frame, targets)
        packet.skipped += [SkippedFace(f.bbox, f"not selected (face selector '{cfg.face_selector}'"
                                       + (f", target face index {cfg.target_face_index})"
                                          if cfg.target_face_index is not None else ")"),
                                       f.angle, f.score)
                           for f in faces if id(f) not in chosen]
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

    def _paste(self, frame: StagedFrame, patches: Sequence[Patch | None],
               out: Frame) -> list[Roi | None]:
        """Paste one layer: into ``out`` on the host, or into the staged device frame (the
        regions come back in :meth:`_download`)."""
        if any(p is not None and p.on_device for p in patches):
            from livefuse.swap.gpu_frame import paste_patches

            return paste_patches(frame.device, patches, graphs=frame.graphs)
        return paste_all(out, patches)

    def _enhance(self, frame: StagedFrame, faces: Sequence[Face], swapped: Sequence[int],
                 out: Frame, on_device: bool) -> list[Patch | None]:
        """The enhancer's patches for the faces just swapped (``swapped`` indices), computed on
        the frame with their swap already pasted."""
        assert self.enhancer is not None
        target = frame.device if on_device else out
        return self.enhancer.enhance(target, [faces[i].kps for i in swapped])

    def process(self, frame: Frame | StagedFrame, index: int = 0,
                t_capture_ns: int | None = None, strict: bool = False,
                in_place: bool = False) -> FramePacket:
        """Swap the source face onto the selected faces of one frame.

        Args:
            frame: ``(H, W, 3) uint8 BGR`` (or the same staged by :meth:`stage`); not modified
                unless ``in_place``.
            index: frame number, carried into the packet.
            t_capture_ns: capture time (``time.perf_counter_ns``); now when omitted.
            strict: raise :class:`FaceIndexError` when ``target_face_index`` does not exist in this
                frame (for still images); otherwise the frame is left unswapped.
            in_place: write the output into ``frame`` itself (the caller owns it and does not need
                the original: saves a frame copy).

        Returns:
            A :class:`FramePacket`; ``swapped`` counts the faces actually pasted.

        Raises:
            RuntimeError: no source face was set.
        """
        if self._source is None:
            raise RuntimeError("Engine.process called before set_source")
        staged = frame if isinstance(frame, StagedFrame) else self.stage(frame)
        try:
            return self._process(staged, index, t_capture_ns, strict, in_place)
        finally:
            if staged.release is not None:
                staged.release()

    def _process(self, staged: StagedFrame, index: int, t_capture_ns: int | None, strict: bool,
                 in_place: bool) -> FramePacket:
        t_cap = time.perf_counter_ns() if t_capture_ns is None else t_capture_ns
        packet = FramePacket(index=index, t_capture_ns=t_cap, frame=staged.host)
        if self.stager is not None:
            self.stager.wait(staged)
        t0 = time.perf_counter_ns()
        # still images are not smoothed: the filter needs a sequence of frames
        t_s = None if strict else packet.t_capture_ns / 1e9
        targets = self._find(staged, strict, t_s, packet)
        packet.faces = targets
        self._sync()
        packet.timings_ms["detect" if packet.detected else "track"] = _ms(t0)

        t1 = time.perf_counter_ns()
        swap, enh, misses, keys, packet.cache_hits = self._patches(staged, targets)
        self._sync()
        packet.timings_ms["render"] = _ms(t1)

        t2 = time.perf_counter_ns()
        out = staged.host if in_place else staged.host.copy()
        on_device = any(p is not None and p.on_device for p in swap)
        rois = self._compose(staged, targets, swap, enh, misses, out, on_device, packet)
        if on_device:
            from livefuse.swap.gpu_frame import fetch_rois, restore_rois, write_rois

            pending = fetch_rois(staged.device, rois)
            if misses and not self.renderer.verify():
                # the fp16 guard rejected a swap: undo the pastes, swap again in fp32 (the
                # renderer has latched to it), paste again; ``out`` still holds the original
                restore_rois(staged.device, rois, out)
                for i, patch in zip(misses, self.renderer.render(
                        staged, [targets[i] for i in misses], self._source), strict=True):
                    swap[i], enh[i] = patch, None
                rois = self._compose(staged, targets, swap, enh, misses, out, on_device,
                                     packet)
                pending = fetch_rois(staged.device, rois)
            write_rois(out, pending)
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
        packet.skipped += [SkippedFace(f.bbox, unswapped_reason(f, out.shape), f.angle, f.score)
                           for f, r in zip(targets, rois, strict=True) if r is None]
        packet.output = out
        return packet

    def _compose(self, staged: StagedFrame, targets: Sequence[Face], swap: list[Patch | None],
                 enh: list[Patch | None], misses: Sequence[int], out: Frame, on_device: bool,
                 packet: FramePacket) -> list[Roi | None]:
        """Paste the swap layer, run the enhancer on the faces just swapped, paste its layer;
        returns the region each face covers (``enh`` is filled in for the misses)."""
        rois = self._paste(staged, swap, out)
        if self.enhancer is None:
            return rois
        todo = [i for i in misses if rois[i] is not None]
        if todo:
            self._sync()
            t3 = time.perf_counter_ns()
            for i, p in zip(todo, self._enhance(staged, targets, todo, out, on_device),
                            strict=True):
                enh[i] = p
            self._sync()
            packet.timings_ms["enhance"] = _ms(t3)
        enh_rois = self._paste(staged, enh, out)
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
    def has_source(self) -> bool:
        return self._source is not None

    @property
    def source_path(self) -> Path | None:
        return None if self._source is None else self._source.path


__all__ = ["Engine", "alignment_points", "unswapped_reason"]
