"""The neural analyser on the GPU: SCRFD and ArcFace in PyTorch, on the frame already there.

The same models as :class:`livefuse.faces.insight.InsightAnalyser` (the user's ``det_10g.onnx``
and ``w600k_r50.onnx``, run by :class:`~livefuse.models.onnx_torch.OnnxModule`), with the letterbox,
anchor decoding and NMS on the device (:mod:`livefuse.faces.scrfd_torch`): a staged frame is
never read back for detection, and only the faces' boxes and kps come to the host (one small
read-back per call). Tracking between detections detects in a region around each face's last
bbox, at the full pass's scale, all faces in one batch.

Used on the inference thread only (the detector keeps static CUDA-graph buffers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from livefuse.faces.analyser import AnyFrame
from livefuse.faces.arcface_torch import TorchArcFace
from livefuse.faces.insight import TRACK_CONTEXT
from livefuse.faces.scrfd_torch import Launched, TorchScrfd
from livefuse.faces.tracking import MATCH_IOU, iou
from livefuse.models.graph_cache import current_stream
from livefuse.types import Face, FloatArray, Frame, StagedFrame

REGION_SIZES = (64, 96, 128, 160, 192, 256, 320)
"""Detector input sides (px) a tracked region may take: a face is detected at the full pass's
scale rounded to one of these, so only this many CUDA graphs exist per batch size."""


class TorchInsightAnalyser:
    """SCRFD + ArcFace on a torch device (see the module docstring).

    Args:
        det_path, rec_path: the detector and recogniser ``.onnx`` files.
        device: ``cuda[:N]`` (or ``cpu`` for tests).
        precision: ``fp32``, ``fp16`` or ``bf16`` for both networks (decoding stays float32).
        det_size: detector input ``(width, height)`` px; det_thresh: minimum score.

    Raises:
        FaceModelError: a model file is missing, unreadable or not an SCRFD / ArcFace graph.
    """

    def __init__(self, det_path: str | Path, rec_path: str | Path | None, device: str = "cuda",
                 precision: str = "fp16", det_size: tuple[int, int] = (640, 640),
                 det_thresh: float = 0.5) -> None:
        import torch

        self.device = torch.device(device)
        self.det_size = (int(det_size[0]), int(det_size[1]))
        self.detector = TorchScrfd(det_path, self.device, precision, self.det_size, det_thresh)
        self.recogniser = None if rec_path is None else TorchArcFace(rec_path, self.device,
                                                                       precision)
        self._staged: StagedFrame | None = None
        self._ahead: tuple[StagedFrame, Launched] | None = None

    def _tensor(self, frame: AnyFrame) -> Any:
        import torch

        if isinstance(frame, StagedFrame) and frame.device is not None:
            self._staged = frame
            return frame.device
        host = frame.host if isinstance(frame, StagedFrame) else frame
        staged = self._staged
        if staged is not None and staged.host is host:
            # embed() gets the host frame the engine just detected in (the reference selector,
            # per face): its device copy is already there
            return staged.device
        self._staged = None
        return torch.from_numpy(np.ascontiguousarray(host)).to(self.device)

    def detect(self, frame: AnyFrame, upsample: int | None = None) -> list[Face]:
        """Faces in ``frame`` (bbox, kps, score in frame px), left to right. ``upsample`` is
        accepted for the analyser contract; SCRFD at 640 px finds faces down to ~16 px. A
        detection :meth:`detect_ahead` queued for this very staged frame is read, not run
        again."""
        ahead, self._ahead = self._ahead, None
        tensor = self._tensor(frame)
        launched = ahead[1] if ahead is not None and ahead[0] is frame else None
        faces = self.detector.detect_faces(tensor, launched=launched)
        faces.sort(key=lambda f: float(f.bbox[0] + f.bbox[2]))
        return faces

    def detect_ahead(self, frame: StagedFrame) -> None:
        """Queue the detection of a staged frame that is still to come, on the calling
        thread's stream, without waiting; the next :meth:`detect` of that same frame object
        reads it (any other call drops it). Reads the frame where it was staged, after its
        upload (``frame.ready``), so it may run while another frame is in the work frame."""
        self._ahead = None
        if frame.device is None:
            return
        if frame.ready is not None:
            current_stream(frame.device.device).wait_event(frame.ready)
        self._ahead = (frame, self.detector.launch(frame.device))

    def reset(self) -> None:
        self._ahead = None  # a detection queued before a reset is of another stream

    def track(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face | None]:
        """Each face found again in a region around its last bbox (``TRACK_CONTEXT`` times its
        size, at the full pass's scale); ``None`` where the region holds no face overlapping the
        last bbox (the face left, or is covered)."""
        if not faces:
            return []
        frame_t = self._tensor(frame)
        h, w = int(frame_t.shape[0]), int(frame_t.shape[1])
        scale = min(self.det_size[0] / w, self.det_size[1] / h)
        groups: dict[int, list[int]] = {}
        for i, f in enumerate(faces):
            want = TRACK_CONTEXT * max(f.width, f.height) * scale
            size = min(REGION_SIZES, key=lambda s: abs(s - want))
            groups.setdefault(size, []).append(i)
        out: list[Face | None] = [None] * len(faces)
        asks: list[tuple[list[tuple[float, float, float, float]], int]] = []
        for size, idx in groups.items():
            side = size / scale  # frame px: the region is detected at exactly the full scale
            rects = []
            for i in idx:
                b = faces[i].bbox
                cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
                rects.append((cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2))
            asks.append((rects, size))
        # every size group in one read-back (a sync per group cost ~1.5 ms a face on the H200)
        found_groups = self.detector.detect_region_groups(frame_t, asks)
        for idx, dets in zip(groups.values(), found_groups, strict=True):
            for i, det in zip(idx, dets, strict=True):
                if det is None:
                    continue
                found = det.to_face()
                if iou(found.bbox, faces[i].bbox) >= MATCH_IOU:
                    out[i] = replace(faces[i], bbox=found.bbox, kps=found.kps,
                                     score=found.score)
        return out

    def embed(self, frame: Frame, face: Face) -> FloatArray:
        """ArcFace embedding ``(512,) float32``, L2-normalised.

        Raises:
            LivefuseError: the analyser was built without a recogniser.
        """
        from livefuse.errors import LivefuseError

        if self.recogniser is None:
            raise LivefuseError("this analyser has no recogniser model (rec_path=None)")
        emb = self.recogniser.embed(self._tensor(frame), face.kps[None])
        return np.asarray(emb[0].float().cpu().numpy(), np.float32)


__all__ = ["REGION_SIZES", "TorchInsightAnalyser"]
