"""Engine(config).process(frame) -> FramePacket: detect (or track) -> select -> swap, synchronous.

One Engine serves the CLI, the live runner and the GUI. It owns its analyser, swapper and
tracking state; it reads no global settings.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol


from livefuse.config import EngineConfig
from livefuse.errors import ConfigError, FaceIndexError, NoFaceError
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.faces.selection import detect_robust, pick_source_face, select_targets
from livefuse.imaging import LoadedImage
from livefuse.swap.classic import ClassicSwapper, prepare_source
from livefuse.types import Face, FloatArray, Frame, FramePacket


class Swapper(Protocol):
    def swap(self, frame: Frame, target: Face, source: Any) -> bool: ...


def _ms(t0: int) -> float:
    return (time.perf_counter_ns() - t0) / 1e6


class Engine:
    """The synchronous frame path.

    Args:
        config: validated on construction.
        analyser: face analyser; the offline dlib one by default.

    Raises:
        ConfigError: invalid config, or an engine that is not available.
    """

    def __init__(self, config: EngineConfig, analyser: DlibFaceAnalyser | None = None) -> None:
        self.config = config.validate()
        if config.engine != "classic":
            raise ConfigError(
                f"engine '{config.engine}' is not available in this build; use --engine classic")
        self.analyser = analyser or DlibFaceAnalyser()
        self.swapper: Swapper = ClassicSwapper(config)
        self._source: Any = None
        self.source_face: Face | None = None
        self._reference: FloatArray | None = None
        self._tracked: list[Face] = []
        self._since_detect = 0
        self._next_track_id = 0

    # -- source / reference -------------------------------------------------------------------
    def set_source(self, image: LoadedImage, face_index: int | None = None) -> Face:
        """Find the source face in a photo and prepare it once for every later swap.

        Raises:
            NoFaceError: no face found even after the upscale/pad retry.
            FaceIndexError: ``face_index`` is outside the faces found.
        """
        faces = detect_robust(self.analyser, image.bgr)
        face = pick_source_face(faces, image.path, face_index)
        self._source = prepare_source(image.bgr, face, image.path)
        self.source_face = face
        self.reset_tracking()
        return face

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
        self._since_detect = 0

    # -- the frame path -------------------------------------------------------------------------
    def _detect(self, frame: Frame) -> list[Face]:
        faces = self.analyser.detect(frame)
        if self.config.face_selector == "reference" and self._reference is not None:
            faces = [Face(bbox=f.bbox, kps=f.kps, score=f.score, landmarks=f.landmarks,
                          embedding=self.analyser.embed(frame, f)) for f in faces]
        return faces

    def _with_ids(self, faces: list[Face]) -> list[Face]:
        out = []
        for f in faces:
            out.append(Face(bbox=f.bbox, kps=f.kps, score=f.score, landmarks=f.landmarks,
                            embedding=f.embedding, track_id=self._next_track_id))
            self._next_track_id += 1
        return out

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
            faces = self._detect(frame)
            self._since_detect = 0
            packet.detected = True
            packet.timings_ms["detect"] = _ms(t0)
        self._since_detect += 1

        try:
            targets = select_targets(faces, cfg.face_selector, cfg.target_face_index,
                                     self._reference)
        except FaceIndexError:
            if strict:
                raise
            targets = []
        if packet.detected:
            targets = self._with_ids(targets)
        self._tracked = targets if cfg.detect_every > 1 else []
        packet.faces = targets

        t1 = time.perf_counter_ns()
        out = frame.copy()
        packet.swapped = sum(bool(self.swapper.swap(out, f, self._source)) for f in targets)
        packet.timings_ms["swap"] = _ms(t1)
        packet.output = out
        return packet

    @property
    def has_source(self) -> bool:
        return self._source is not None

    @property
    def source_path(self) -> Path | None:
        return None if self._source is None else self._source.path


__all__ = ["Engine", "Swapper"]

