"""SCRFD face detection (det_10g) in PyTorch, on the device that already holds the frame.

The network is the user's own ``.onnx`` file run by :class:`~livefuse.models.onnx_torch.OnnxModule`;
everything around it follows insightface's ``model_zoo/scrfd.py`` (``SCRFD.detect``) and runs on
the device too:

* letterbox: the frame keeps its aspect inside ``input_size``, top-left, zero padding; the resize
  reproduces ``cv2.resize(..., INTER_LINEAR)`` on uint8 bit for bit (its 11-bit fixed-point
  taps and rounding, OpenCV ``imgproc/src/resize.cpp``), so the network sees the very input
  insightface gives it;
* normalisation ``(x - 127.5) / 128`` in RGB order (``cv2.dnn.blobFromImage`` with swapRB);
* anchor centres (2 per cell on strides 8, 16, 32 for det_10g), ``distance2bbox``,
  ``distance2kps``, the score threshold, and insightface's greedy NMS (IoU with its ``+1`` box
  convention, suppression above ``nms_thresh``) computed as a fixed number of sync-free matrix
  iterations over the best ``max_candidates`` candidates; they reach greedy NMS's own answer
  (its unique fixed point) unless a suppression chain is longer than the iterations, which the
  one host read-back detects and finishes exactly.

One host sync per :meth:`TorchScrfd.detect`: a 3-integer read-back (face count, whether the NMS
iterations converged, candidate count). On CUDA the frame is copied into a static buffer per frame
size, and the letterbox, network, decoding, NMS and the packing of the answer replay as one CUDA
graph: a detection is one copy, one graph launch and one read-back into a pinned buffer that is
kept (at batch 1 the host's launches, not the GPU, set the time: docs/BENCHMARKS.md §7).

Graphs go through :class:`~livefuse.models.graph_cache.GraphCache` with one owner per frame size:
its static frame, its resize taps, the region inputs and every graph reading them live and are
evicted together (:data:`FRAME_BUFFERS` sizes kept). A frame size gets graphs at its second use,
so a source photo's one-off sizes run eagerly and never evict the stream's own size.

Thread safety: a :class:`TorchScrfd` holds static buffers; call it from one thread.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from livefuse.faces.insight import FaceModelError
from livefuse.models.graph_cache import (
    GraphCache,
    Owner,
    current_stream,
    host_wait,
    make_graph_cache,
)
from livefuse.models.onnx_torch import (
    OnnxModelError,
    OnnxModule,
    TorchRuntime,
    precision_dtype,
)
from livefuse.types import Face

log = logging.getLogger(__name__)

INPUT_MEAN = 127.5
INPUT_STD = 128.0
"""SCRFD input normalisation (insightface ``model_zoo/scrfd.py``: ``input_mean``, ``input_std``)."""
PAD_VALUE = (0.0 - INPUT_MEAN) / INPUT_STD
"""A letterbox padding pixel (0) after normalisation."""

LAYOUTS: dict[int, tuple[tuple[int, ...], int, bool]] = {
    6: ((8, 16, 32), 2, False), 9: ((8, 16, 32), 2, True),
    10: ((8, 16, 32, 64, 128), 1, False), 15: ((8, 16, 32, 64, 128), 1, True)}
"""Output count → (strides, anchors per cell, keypoints), as insightface's ``SCRFD._init_vars``."""

NMS_ITERATIONS = 8
"""Sync-free NMS iterations; a longer suppression chain is finished after the read-back."""
PACKED_ROWS = 64
"""Faces :meth:`TorchScrfd.detect_faces` reads back with its one sync; more take the exact path."""
FRAME_BUFFERS = 4
"""Frame sizes whose static frame, resize taps and graphs are kept, as one entry each (a new size
evicts the least recently used with everything it holds)."""
EAGER_TAPS = 8
"""Frame sizes whose resize taps the eager path (no CUDA graph) keeps."""
REGION_BATCHES = (1, 2, 4, 8)
"""Batch sizes :meth:`TorchScrfd.detect_regions` runs (one CUDA graph each): a call's crops are
padded up to the next one, more than 8 go in chunks of 8."""

_KPS_FRACTIONS = np.array([[0.34, 0.46], [0.66, 0.46], [0.5, 0.64], [0.37, 0.82],
                           [0.63, 0.82]], np.float32)
"""Rough kps as fractions of the bbox, for detector exports without a keypoint branch (as
:mod:`livefuse.faces.insight` does)."""


@dataclass(frozen=True)
class Launched:
    """A detection queued on the device by :meth:`TorchScrfd.launch`, not yet read.

    Attributes:
        host: the packed counts and rows: a pinned ``float32`` tensor the device copies into (a
            numpy copy off CUDA); valid once ``ready`` has completed.
        ready: a blocking ``torch.cuda.Event`` after the copy, or ``None`` (already there).
        rows: the packed rows (:data:`PACKED_ROWS` or fewer).
        candidates: the NMS's candidate capacity (more valid ones take the exact path).
    """

    host: Any
    ready: Any
    rows: int
    candidates: int


@dataclass(frozen=True)
class Detections:
    """Faces found in one frame, sorted by score (descending), on the detector's device.

    Attributes:
        bboxes: ``(N, 4) float32`` x1, y1, x2, y2 in frame px.
        scores: ``(N,) float32`` detector scores in [0, 1].
        kps: ``(N, 5, 2) float32`` keypoints in frame px (insightface order).
    """

    bboxes: torch.Tensor
    scores: torch.Tensor
    kps: torch.Tensor

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def to_faces(self) -> list[Face]:
        """Host copies as :class:`~livefuse.types.Face` (one device→host copy), score order."""
        packed = torch.cat((self.bboxes, self.scores[:, None], self.kps.reshape(-1, 10)), 1)
        host = packed.cpu().numpy()
        return [Face(bbox=row[:4].copy(), kps=row[5:].reshape(5, 2).copy(), score=float(row[4]))
                for row in host]


@dataclass(frozen=True)
class Detection:
    """The best face in one region (see :meth:`TorchScrfd.detect_regions`), as read back.

    Attributes:
        host: score, bbox (4) and kps (10) in frame px: ``(15,) float32`` on the host.
        device: the detector's device, where :attr:`bbox` and :attr:`kps` are put on demand.
    """

    host: npt.NDArray[np.float32]
    device: torch.device

    @property
    def score(self) -> float:
        """The detector score."""
        return float(self.host[0])

    @property
    def bbox(self) -> torch.Tensor:
        """``(4,) float32`` tensor on the device, frame px (uploaded when asked: the tracker
        reads the host values, and device views of the packed rows were four torch calls per
        tracked frame)."""
        import torch

        return torch.from_numpy(self.host[1:5].copy()).to(self.device)

    @property
    def kps(self) -> torch.Tensor:
        """``(5, 2) float32`` tensor on the device, frame px (uploaded when asked)."""
        import torch

        return torch.from_numpy(self.host[5:15].reshape(5, 2).copy()).to(self.device)

    def to_face(self) -> Face:
        return Face(bbox=self.host[1:5].copy(), kps=self.host[5:15].reshape(5, 2).copy(),
                    score=self.score)


# ----------------------------------------------------------------------------------- letterbox

def letterbox_size(frame_hw: tuple[int, int], input_size: tuple[int, int]) -> tuple[int, int,
                                                                                     float]:
    """``(new_w, new_h, det_scale)`` of the resized frame inside ``input_size`` (w, h), as
    insightface's ``SCRFD._detect_candidates`` computes them."""
    h, w = frame_hw
    im_ratio = float(h) / w
    model_ratio = float(input_size[1]) / input_size[0]
    if im_ratio > model_ratio:
        new_h = input_size[1]
        new_w = int(new_h / im_ratio)
    else:
        new_w = input_size[0]
        new_h = int(new_w * im_ratio)
    new_w, new_h = max(new_w, 1), max(new_h, 1)
    return new_w, new_h, float(new_h) / h


def _linear_taps(src: int, dst: int, clamp_fraction: bool) -> tuple[np.ndarray, ...]:
    """One axis of ``cv2.resize`` INTER_LINEAR on uint8 (OpenCV ``resize.cpp``,
    ``resizeGeneric_``): for each output px the two source indices and their 11-bit weights.

    OpenCV clamps the x fraction at the borders (``fx = 0`` outside the image) but not the y
    fraction, whose rows are only clamped as indices: ``clamp_fraction`` picks which.
    """
    scale = 1.0 / (dst / src)
    f = ((np.arange(dst, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    i0 = np.floor(f).astype(np.int64)
    f = (f - i0.astype(np.float32)).astype(np.float32)
    if clamp_fraction:
        low = i0 < 0
        f[low], i0[low] = 0.0, 0
        high = i0 >= src - 1
        f[high], i0[high] = 0.0, src - 1
    w1 = np.rint(f * np.float32(2048)).astype(np.int32)
    w0 = np.rint((np.float32(1) - f) * np.float32(2048)).astype(np.int32)
    return np.clip(i0, 0, src - 1), np.clip(i0 + 1, 0, src - 1), w0, w1


class _ResizeTaps:
    """A frame size's resize taps on the device (cached per frame size)."""

    def __init__(self, hw: tuple[int, int], new_wh: tuple[int, int], device: torch.device):
        xs = _linear_taps(hw[1], new_wh[0], True)
        ys = _linear_taps(hw[0], new_wh[1], False)
        self.x0, self.x1 = (torch.from_numpy(a).to(device) for a in xs[:2])
        self.ax0, self.ax1 = (torch.from_numpy(a).to(device)[None, :, None] for a in xs[2:])
        self.y0, self.y1 = (torch.from_numpy(a).to(device) for a in ys[:2])
        self.by0, self.by1 = (torch.from_numpy(a).to(device)[:, None, None] for a in ys[2:])

    def _horizontal(self, rows: torch.Tensor) -> torch.Tensor:
        f = rows.to(torch.int32)
        return f.index_select(1, self.x0) * self.ax0 + f.index_select(1, self.x1) * self.ax1

    def __call__(self, frame_t: torch.Tensor) -> torch.Tensor:
        """``(H, W, 3) uint8`` → ``(new_h, new_w, 3) int32``, equal to ``cv2.resize``."""
        # the horizontal pass on just the rows the vertical pass reads (same values, fewer rows)
        r0, r1 = (self._horizontal(frame_t.index_select(0, y)) for y in (self.y0, self.y1))
        # OpenCV's SIMD vertical pass (VResizeLinearVec_32s8u): >>4, 16-bit multiply-high, +2 >>2
        out = (((r0 >> 4) * self.by0) >> 16) + (((r1 >> 4) * self.by1) >> 16)
        return ((out + 2) >> 2).clamp_(0, 255)


# ----------------------------------------------------------------------------------- anchors / NMS

@dataclass(frozen=True)
class _Anchors:
    centres: torch.Tensor  # (N, 2) float32, input px
    strides: torch.Tensor  # (N, 1) float32
    cells: tuple[int, ...]  # anchors per stride level


def _anchors(input_wh: tuple[int, int], strides: Sequence[int], per_cell: int,
             device: torch.device) -> _Anchors:
    """Anchor centres in insightface's order: per stride, row-major cells, ``per_cell``
    consecutive anchors per cell (``SCRFD.forward``'s ``anchor_centers``)."""
    w, h = input_wh
    cs, ss, cells = [], [], []
    for s in strides:
        ys, xs = np.mgrid[:h // s, :w // s]
        c = (np.stack([xs, ys], -1).reshape(-1, 2) * s).astype(np.float32)
        c = np.repeat(c, per_cell, axis=0)
        cs.append(c)
        ss.append(np.full((len(c), 1), s, np.float32))
        cells.append(len(c))
    return _Anchors(torch.from_numpy(np.concatenate(cs)).to(device),
                    torch.from_numpy(np.concatenate(ss)).to(device), tuple(cells))


def greedy_nms(boxes: torch.Tensor, valid: torch.Tensor, thresh: float, iterations: int,
               keep: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy NMS as insightface's ``SCRFD.nms`` on boxes sorted by score, without host syncs.

    Box ``i`` is kept iff it is valid and no kept box before it overlaps it by IoU > ``thresh``
    (IoU with the ``+1`` px convention of insightface). That rule has one solution, which
    ``keep ← valid ∧ ¬(any kept earlier box overlapping)`` reaches from any start: after
    ``t`` iterations the first ``t`` boxes are final, in practice all of them after 2-4.

    Args:
        boxes: ``(K, 4) float32`` sorted by score, descending.
        valid: ``(K,) bool`` (score above the threshold).
        iterations: matrix iterations to run.
        keep: where to start (``valid`` by default), e.g. a previous call's unfinished answer.

    Returns:
        ``keep (K,) bool`` and ``converged () bool`` (``keep`` is the greedy answer if true).
    """
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    w = (torch.minimum(x2[:, None], x2[None]) - torch.maximum(x1[:, None], x1[None]) + 1
         ).clamp_(min=0)
    h = (torch.minimum(y2[:, None], y2[None]) - torch.maximum(y1[:, None], y1[None]) + 1
         ).clamp_(min=0)
    inter = w * h
    ovr = inter / (areas[:, None] + areas[None] - inter)
    k = boxes.shape[0]
    earlier = torch.ones(k, k, dtype=torch.bool, device=boxes.device).triu_(1)
    suppress = (ovr > thresh) & earlier  # [j, i]: box j (earlier) suppresses box i
    keep = valid if keep is None else keep
    prev = keep
    for _ in range(iterations):
        prev = keep
        keep = valid & ~(suppress & keep[:, None]).any(0)
    return keep, (keep == prev).all()


# ----------------------------------------------------------------------------------- detector

def resolve_runtime(device: str | torch.device = "cpu", precision: str = "fp32",
                    cuda_graph: bool | None = None) -> TorchRuntime:
    """Where a :class:`TorchScrfd` with these arguments runs, without loading a model (for
    ``livefuse doctor``): ``cuda`` becomes the current CUDA device, ``cuda_graph=None`` is on
    for CUDA devices.

    Raises:
        ConfigError: an unknown precision.
        ValueError: ``cuda_graph=True`` on a device that is not CUDA.
    """
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    precision_dtype(precision)
    graph = (dev.type == "cuda") if cuda_graph is None else bool(cuda_graph)
    if graph and dev.type != "cuda":
        raise ValueError("cuda_graph needs a CUDA device")
    return TorchRuntime(str(dev), precision, graph)


class TorchScrfd:
    """SCRFD on a torch device (see the module docstring).

    Args:
        path: the detector ``.onnx`` (det_10g or another SCRFD export: 6/9 or 10/15 outputs).
        device: ``cpu``, ``cuda``, ``cuda:N``.
        precision: ``fp32``, ``fp16`` or ``bf16`` (the network; decoding is float32).
        input_size: detector input ``(width, height)`` in px, multiples of the largest stride.
        det_thresh: minimum score; nms_thresh: NMS IoU threshold (insightface's 0.5 and 0.4).
        cuda_graph: replay the network, decoding and NMS as a CUDA graph; ``None`` = on for CUDA.
        graphs: the graph cache to use instead (tests: an
            :class:`~livefuse.models.graph_cache.EagerGraphs` one on the CPU).
        max_candidates: candidates NMS considers in the graph (the best-scoring ones); more above
            the threshold are handled exactly after the read-back, at the cost of extra syncs.
        channels_last: run the network in NHWC; ``None`` = on for CUDA devices. cuDNN's fast
            fp16 convolutions are NHWC: with NCHW tensors every conv adds two layout transposes,
            kernels that a CUDA graph replays too.

    Raises:
        FaceModelError: the file is missing or unreadable, a node cannot run, or its outputs are
            not an SCRFD's (the message names the file).
        ConfigError: an unknown precision.
        ValueError: an input size that is not a multiple of the largest stride.
    """

    def __init__(self, path: str | Path, device: str | torch.device = "cpu",
                 precision: str = "fp32", input_size: tuple[int, int] = (640, 640),
                 det_thresh: float = 0.5, nms_thresh: float = 0.4,
                 cuda_graph: bool | None = None, max_candidates: int = 512,
                 channels_last: bool | None = None, graphs: GraphCache | None = None) -> None:
        self.path = Path(path)
        rt = resolve_runtime(device, precision, cuda_graph)
        self.device = torch.device(rt.device)
        self.precision = precision
        self.dtype = precision_dtype(precision)
        self.cuda_graph = rt.cuda_graph
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self.det_thresh = float(det_thresh)
        self.nms_thresh = float(nms_thresh)
        self.max_candidates = int(max_candidates)
        try:
            net = OnnxModule(self.path)
        except OnnxModelError as exc:
            raise FaceModelError(self.path, exc.problem) from exc
        layout = LAYOUTS.get(len(net.output_names))
        if layout is None:
            raise FaceModelError(self.path, f"{len(net.output_names)} outputs: not an SCRFD "
                                 "detector (it has 6 or 9 outputs for 3 strides, 10 or 15 for 5)")
        self.strides, self.per_cell, self.use_kps = layout
        top = max(self.strides)
        if self.input_size[0] % top or self.input_size[1] % top:
            raise ValueError(f"input_size {self.input_size} must be a multiple of {top}")
        self.channels_last = self.device.type == "cuda" if channels_last is None \
            else bool(channels_last)
        self._format = torch.channels_last if self.channels_last else torch.contiguous_format
        self.net = net.to(self.device, self.dtype).eval()
        if self.channels_last:
            # Module.to takes memory_format at run time; torch's type stubs omit it
            self.net = self.net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self._taps: dict[tuple[int, int], _ResizeTaps | None] = {}  # the eager path's
        self._anchors: dict[tuple[int, int], _Anchors] = {}
        self._graphs = graphs if graphs is not None else make_graph_cache(
            self.device, self.cuda_graph, FRAME_BUFFERS, capture_after=2)
        self._planned: set[tuple[int, int, int, int]] = set()
        w, h = self.input_size
        self._input = torch.full((1, 3, h, w), PAD_VALUE, dtype=self.dtype, device=self.device
                                 ).contiguous(memory_format=self._format)
        self._scale = torch.ones((), dtype=torch.float32, device=self.device)
        self._kps_fractions = torch.from_numpy(_KPS_FRACTIONS.reshape(-1)).to(self.device)
        self._pinned: dict[Any, torch.Tensor] = {}
        self._ahead_ready: torch.cuda.Event | None = None
        self._check_outputs((1, 3, h, w))
        log.info("SCRFD %s on %s", self.path.name, self.runtime)

    @property
    def runtime(self) -> TorchRuntime:
        """Device, precision and CUDA graph in use (for ``livefuse doctor``)."""
        return TorchRuntime(str(self.device), self.precision, self.cuda_graph)

    # -- network and decoding -------------------------------------------------------------------

    def _anchors_for(self, wh: tuple[int, int]) -> _Anchors:
        a = self._anchors.get(wh)
        if a is None:
            a = self._anchors[wh] = _anchors(wh, self.strides, self.per_cell, self.device)
        return a

    def _check_outputs(self, shape: tuple[int, int, int, int]) -> None:
        """Plan the network for an input ``shape`` and check its outputs are an SCRFD's."""
        if shape in self._planned:
            return
        self._planned.add(shape)
        try:
            shapes = self.net.output_shapes(shape)
        except OnnxModelError as exc:
            raise FaceModelError(self.path, exc.problem) from exc
        b, _, h, w = shape
        widths = (1, 4, 10)
        for j, got in enumerate(shapes):
            s = self.strides[j % len(self.strides)]
            want = b * (h // s) * (w // s) * self.per_cell * widths[j // len(self.strides)]
            if int(np.prod(got)) != want:
                raise FaceModelError(
                    self.path, f"output '{self.net.output_names[j]}' has shape {got} for a "
                    f"{w}x{h} input, an SCRFD output for stride {s} has {want} values")

    def _decode(self, outs: tuple[torch.Tensor, ...], batch: int, anchors: _Anchors
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Network outputs → scores ``(B, N)``, bboxes ``(B, N, 4)``, kps ``(B, N, 10)``, float32
        in detector-input px (``distance2bbox`` / ``distance2kps``)."""
        n = len(self.strides)
        scores = torch.cat([outs[i].reshape(batch, -1) for i in range(n)], 1).float()
        dist = torch.cat([outs[n + i].reshape(batch, -1, 4) for i in range(n)], 1).float()
        dist = dist * anchors.strides
        c = anchors.centres
        bboxes = torch.cat((c - dist[..., :2], c + dist[..., 2:]), -1)
        if self.use_kps:
            kd = torch.cat([outs[2 * n + i].reshape(batch, -1, 10) for i in range(n)], 1).float()
            kps = kd * anchors.strides + c.repeat(1, 5)
        else:
            wh = (bboxes[..., 2:] - bboxes[..., :2]).repeat(1, 1, 5)
            kps = bboxes[..., :2].repeat(1, 1, 5) + wh * self._kps_fractions
        return scores, bboxes, kps

    def _detect_core(self, inp: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The graph-capturable part of :meth:`detect`: network, decoding, top candidates, NMS.

        Returns the kept bboxes ``(K, 4)``, scores ``(K,)``, kps ``(K, 10)`` first in score
        order, ``stats`` ``(3,) int64`` (kept count, converged, candidates above the threshold),
        and all decoded scores ``(N,)``, bboxes ``(N, 4)``, kps ``(N, 10)`` in frame px.
        """
        anchors = self._anchors_for(self.input_size)
        scores, bboxes, kps = self._decode(self.net(inp), 1, anchors)
        scores, bboxes, kps = scores[0], bboxes[0] / scale, kps[0] / scale
        # insightface orders candidates by a stable descending sort over the stride-ordered list
        top, idx = torch.sort(scores, descending=True, stable=True)
        k = min(self.max_candidates, scores.shape[0])
        top, idx = top[:k], idx[:k]
        cb, ck = bboxes.index_select(0, idx), kps.index_select(0, idx)
        valid = top >= self.det_thresh
        keep, converged = greedy_nms(cb, valid, self.nms_thresh, NMS_ITERATIONS)
        n_valid = (scores >= self.det_thresh).sum()
        return (*self._compact(cb, top, ck, keep, converged, n_valid), scores, bboxes, kps)

    def _detect_frame(self, frame_t: torch.Tensor, taps: _ResizeTaps | None
                      ) -> tuple[torch.Tensor, ...]:
        """The whole graph-capturable detection of one frame: letterbox (with ``taps``, this
        frame size's resize) into the static input, :meth:`_detect_core`, then the answer packed
        for one read-back: ``(3 + 15 R,) float32`` = stats, then ``R`` = min(:data:`PACKED_ROWS`,
        K) rows of bboxes, scores, kps."""
        self._scale.fill_(self._letterbox(frame_t, taps))
        core = self._detect_core(self._input, self._scale)
        bboxes, scores, kps, stats = core[:4]
        k = min(PACKED_ROWS, int(bboxes.shape[0]))
        packed = torch.cat((stats.to(torch.float32), bboxes[:k].reshape(-1), scores[:k],
                            kps[:k].reshape(-1)))
        return (*core, packed)

    @staticmethod
    def _compact(cb: torch.Tensor, top: torch.Tensor, ck: torch.Tensor, keep: torch.Tensor,
                 converged: torch.Tensor, n_valid: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # kept rows first, still in score order: a stable sort on the keep flag, no sync
        order = torch.sort(keep.to(torch.uint8), descending=True, stable=True).indices
        stats = torch.stack((keep.sum(), converged.to(torch.int64), n_valid))
        return (cb.index_select(0, order), top.index_select(0, order),
                ck.index_select(0, order), stats)

    # -- letterbox ------------------------------------------------------------------------------

    def _check_frame(self, frame_t: torch.Tensor) -> None:
        if frame_t.dim() != 3 or frame_t.shape[2] != 3 or frame_t.dtype != torch.uint8:
            raise ValueError(f"frame_t must be (H, W, 3) uint8 BGR, got {tuple(frame_t.shape)} "
                             f"{frame_t.dtype}")
        if frame_t.device != self.device:
            raise ValueError(f"frame_t is on {frame_t.device}, the detector on {self.device}")

    def _make_taps(self, hw: tuple[int, int]) -> _ResizeTaps | None:
        """The resize taps of a frame size (``None``: the frame fits the input unresized)."""
        new_w, new_h, _ = letterbox_size(hw, self.input_size)
        return None if (new_h, new_w) == hw else _ResizeTaps(hw, (new_w, new_h), self.device)

    def _eager_taps(self, hw: tuple[int, int]) -> _ResizeTaps | None:
        if hw not in self._taps:
            if len(self._taps) >= EAGER_TAPS:
                self._taps.pop(next(iter(self._taps)))
            self._taps[hw] = self._make_taps(hw)
        return self._taps[hw]

    def _letterbox(self, frame_t: torch.Tensor, taps: _ResizeTaps | None) -> float:
        """Write the normalised letterboxed frame into the static input; return det_scale."""
        h, w = int(frame_t.shape[0]), int(frame_t.shape[1])
        new_w, new_h, det_scale = letterbox_size((h, w), self.input_size)
        img = frame_t if taps is None else taps(frame_t)
        rgb = img.flip(-1).permute(2, 0, 1).to(torch.float32)
        self._input.fill_(PAD_VALUE)
        self._input[0, :, :new_h, :new_w] = (rgb - INPUT_MEAN) / INPUT_STD
        return det_scale

    # -- public ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def detect(self, frame_t: torch.Tensor) -> Detections:
        """Detect faces in a frame already on the device.

        Args:
            frame_t: ``(H, W, 3) uint8 BGR`` tensor on this detector's device, any size.

        Returns:
            :class:`Detections` in frame px, score order, on the device (fresh tensors, safe to
            keep). One host sync (the face count).

        Raises:
            ValueError: ``frame_t`` is not an ``(H, W, 3) uint8`` tensor on the device.
        """
        bboxes, scores, kps, stats, all_s, all_b, all_k, _ = self._run(frame_t)
        n, converged, n_valid = (int(v) for v in stats.tolist())
        if not converged or n_valid > bboxes.shape[0]:
            bboxes, scores, kps, n = self._finish_exact(all_s, all_b, all_k, n_valid)
        return Detections(bboxes[:n].clone(), scores[:n].clone(),
                          kps[:n].reshape(-1, 5, 2).clone())

    def _owner(self, frame_t: torch.Tensor) -> Owner | None:
        """The graph-cache entry of ``frame_t``'s size, or ``None``: run eagerly (no graphs,
        or a size not seen often enough yet)."""
        hw = (int(frame_t.shape[0]), int(frame_t.shape[1]))
        if self._graphs is None or not self._graphs.admit(hw):
            return None
        return self._graphs.owner(hw)

    @staticmethod
    def _frame_in(owner: Owner, frame_t: torch.Tensor) -> torch.Tensor:
        """``frame_t`` copied into its size's static frame (what the graphs read)."""
        buf = owner.buffer("frame", tuple(frame_t.shape), frame_t.dtype)
        buf.copy_(frame_t)
        return buf

    def _run(self, frame_t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`_detect_frame` on ``frame_t`` (a graph replay over a static copy of it once
        its size has an entry); its outputs, on the device, no host sync."""
        self._check_frame(frame_t)
        hw = (int(frame_t.shape[0]), int(frame_t.shape[1]))
        owner = self._owner(frame_t)
        if owner is None:
            return self._detect_frame(frame_t, self._eager_taps(hw))
        taps = owner.value("taps", lambda: self._make_taps(hw))

        def detect(frame: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return self._detect_frame(frame, taps)

        return owner.run("detect", detect, (self._frame_in(owner, frame_t),), warmup=3)

    def _copy_back(self, key: Any, packed: torch.Tensor) -> Any:
        """Queue ``packed``'s copy to a pinned host tensor kept per ``key`` and shape (read it
        after :func:`host_wait`); on the CPU, a copy of its values now (a graph's output is
        overwritten by its next replay)."""
        if self.device.type != "cuda":
            return packed.numpy().copy()
        host = self._pinned.get((key, tuple(packed.shape)))
        if host is None:
            host = self._pinned[(key, tuple(packed.shape))] = torch.empty(
                packed.shape, dtype=packed.dtype, pin_memory=True)
        host.copy_(packed, non_blocking=True)
        return host

    def _read_back(self, key: Any, packed: torch.Tensor) -> npt.NDArray[np.float32]:
        """``packed`` on the host through a pinned buffer kept per ``key`` (one sync)."""
        host = self._copy_back(key, packed)
        if self.device.type != "cuda":
            return np.asarray(host)
        host_wait(self.device)
        return np.asarray(host.numpy())

    @torch.inference_mode()
    def detect_faces(self, frame_t: torch.Tensor, limit: int = 64,
                     launched: Launched | None = None) -> list[Face]:
        """:meth:`detect`, returning host :class:`~livefuse.types.Face` s (score order) with ONE
        read-back: the counts and the best :data:`PACKED_ROWS` rows come to pinned memory
        together (the frame path's only detection sync). More faces than ``limit`` (at most
        :data:`PACKED_ROWS`), or an NMS that did not converge, take :meth:`detect`'s exact path.

        Args:
            frame_t: the frame on the device.
            limit: see above.
            launched: this frame's detection already queued by :meth:`launch` (on the frame's
                own pixels, e.g. before it was copied to the work frame that ``frame_t`` is
                now); only its read-back is waited for.

        Raises:
            ValueError: ``frame_t`` is not an ``(H, W, 3) uint8`` tensor on the device.
        """
        if launched is None:
            out = self._run(frame_t)
            rows, candidates = (int(out[-1].shape[0]) - 3) // 15, int(out[0].shape[0])
            h = self._read_back("detect", out[-1])
        else:
            rows, candidates = launched.rows, launched.candidates
            if launched.ready is not None:
                launched.ready.synchronize()
            h = np.asarray(launched.host) if self.device.type != "cuda" else \
                np.asarray(launched.host.numpy())
        k = min(limit, rows)
        n, converged, n_valid = int(h[0]), bool(h[1]), int(h[2])
        if not converged or n_valid > candidates or n > k:
            return self.detect(frame_t).to_faces()
        b = h[3:3 + 4 * rows].reshape(rows, 4)
        sc = h[3 + 4 * rows:3 + 5 * rows]
        kp = h[3 + 5 * rows:].reshape(rows, 5, 2)
        return [Face(bbox=b[i].copy(), kps=kp[i].copy(), score=float(sc[i])) for i in range(n)]

    @torch.inference_mode()
    def launch(self, frame_t: torch.Tensor) -> Launched:
        """Queue :meth:`detect_faces`'s device work on ``frame_t`` and its copy to pinned memory,
        without waiting: pass the result to :meth:`detect_faces` (``launched``) to read it. One
        launch at a time: the next one reuses its pinned buffer and event.

        Raises:
            ValueError: ``frame_t`` is not an ``(H, W, 3) uint8`` tensor on the device.
        """
        out = self._run(frame_t)
        host = self._copy_back("ahead", out[-1])
        ready = None
        if self.device.type == "cuda":
            if self._ahead_ready is None:
                self._ahead_ready = torch.cuda.Event(blocking=True)
            ready = self._ahead_ready
            ready.record(current_stream(self.device))
        return Launched(host, ready, (int(out[-1].shape[0]) - 3) // 15, int(out[0].shape[0]))

    def _finish_exact(self, scores: torch.Tensor, bboxes: torch.Tensor, kps: torch.Tensor,
                      n_valid: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Greedy NMS over every candidate, iterating until it converges (the rare case of more
        candidates than ``max_candidates`` or a suppression chain longer than the iterations)."""
        k = max(n_valid, 1)
        top, idx = torch.sort(scores, descending=True, stable=True)
        top, idx = top[:k], idx[:k]
        cb, ck = bboxes.index_select(0, idx), kps.index_select(0, idx)
        valid = top >= self.det_thresh
        keep: torch.Tensor | None = None
        while True:
            keep, converged = greedy_nms(cb, valid, self.nms_thresh, NMS_ITERATIONS, keep)
            if bool(converged):
                break
        log.debug("SCRFD: exact NMS over %d candidates", n_valid)
        cb, top, ck, stats = self._compact(cb, top, ck, keep, converged, valid.sum())
        return cb, top, ck, int(stats[0])

    @torch.inference_mode()
    def detect_regions(self, frame_t: torch.Tensor,
                       rects: Sequence[Sequence[float]] | npt.NDArray[np.floating] | torch.Tensor,
                       size: int = 192) -> list[Detection | None]:
        """The best face in each region of a frame, for tracking between full detections.

        Each rect ``(x0, y0, x1, y1)`` (frame px, any aspect) is widened to the square with the
        same centre and side ``max(w, h)`` (no distortion, a little more context), sampled
        bilinearly to ``size × size`` (zeros outside the frame, as the letterbox padding), and
        all regions run as one batch (padded up to 1, 2, 4 or 8; more than 8 in chunks). Per
        region the highest-scoring anchor at or above the threshold is the face: the first
        detection insightface's NMS would keep on that crop.

        Args:
            frame_t: ``(H, W, 3) uint8 BGR`` tensor on the device.
            rects: ``(R, 4)`` rects in frame px (host sequence/array, or a tensor).
            size: detector input side, a multiple of the largest stride (192 = 6 cells of 32).

        Returns:
            One :class:`Detection` (frame px) or ``None`` per rect, in order. One host sync
            (the results of every chunk).

        Raises:
            ValueError: a bad frame or ``size``.
        """
        return self.detect_region_groups(frame_t, [(rects, size)])[0]

    @torch.inference_mode()
    def detect_region_groups(
            self, frame_t: torch.Tensor,
            groups: Sequence[tuple[Sequence[Sequence[float]] | npt.NDArray[np.floating]
                                   | torch.Tensor, int]]) -> list[list[Detection | None]]:
        """:meth:`detect_regions` for several groups of rects, each at its own detector
        ``size``, with one host sync for all: every group's batch is queued, then the results
        come back together. Faces of different sizes fall into different groups (the tracker
        keeps each at its full-pass scale); with a sync per group, 4 tracked faces took 6.3 ms
        and a detection frame that re-tracked 3 lost ones 10.7 ms on the H200
        (docs/BENCHMARKS.md §12.7).

        Returns:
            Per group, one :class:`Detection` or ``None`` per rect, in order.

        Raises:
            ValueError: a bad frame or ``size``.
        """
        self._check_frame(frame_t)
        top = max(self.strides)
        asked: list[tuple[npt.NDArray[np.float32], int]] = []
        for rects, size in groups:
            if size <= 0 or size % top:
                raise ValueError(f"size {size} must be a positive multiple of {top}")
            # on the host as numpy: the squares are worked out there (torch's per-call
            # overhead on one or two rects is host CPU on every tracked frame)
            asked.append(((rects.detach().cpu().numpy() if isinstance(rects, torch.Tensor)
                           else np.asarray(rects)).astype(np.float32).reshape(-1, 4), size))
        # a call with no region is no use of the frame size's graphs
        owner = self._owner(frame_t) if any(len(r) for r, _ in asked) else None
        frame_in: torch.Tensor | None = None
        launched: list[tuple[int, int, Any]] = []
        biggest = REGION_BATCHES[-1]
        for g, (r, size) in enumerate(asked):
            for start in range(0, len(r), biggest):
                if owner is not None and frame_in is None:
                    frame_in = self._frame_in(owner, frame_t)  # once for every group
                chunk = r[start:start + biggest]
                packed = self._regions_chunk(frame_t, owner, frame_in, chunk, size)
                # a pinned buffer per chunk of the call: two chunks may share a graph key
                launched.append((g, len(chunk), self._copy_back(("regions", len(launched)),
                                                                packed)))
        if launched and self.device.type == "cuda":
            host_wait(self.device)
        results: list[list[Detection | None]] = [[] for _ in groups]
        for g, n, host in launched:
            h = np.asarray(host.numpy() if isinstance(host, torch.Tensor) else host)
            results[g] += [None if h[i, 0] < self.det_thresh else
                           Detection(h[i, :15].copy(), self.device) for i in range(n)]
        return results

    def _regions_chunk(self, frame_t: torch.Tensor, owner: Owner | None,
                       frame_in: torch.Tensor | None, r: npt.NDArray[np.float32], size: int
                       ) -> torch.Tensor:
        """Queue the detection of up to :data:`REGION_BATCHES` ``[-1]`` regions: their packed
        ``(B, 15)`` rows on the device (a graph's output when ``owner`` is given: overwritten
        by its next replay), no host sync."""
        n = int(r.shape[0])
        batch = next(b for b in REGION_BATCHES if b >= n)
        key = ("regions", batch, size)
        # x0, y0, side of the square around each rect; padding rows repeat the first
        side = np.maximum(np.maximum(r[:, 2] - r[:, 0], r[:, 3] - r[:, 1]), 1.0)
        sq = np.empty((batch, 3), np.float32)
        sq[:n] = np.stack(((r[:, 0] + r[:, 2]) / 2 - side / 2, (r[:, 1] + r[:, 3]) / 2 - side / 2,
                           side), 1)
        sq[n:] = sq[0]
        shape = (batch, 3, size, size)
        self._check_outputs(shape)
        if owner is None or frame_in is None:
            inp = torch.zeros(shape, dtype=self.dtype, device=self.device
                              ).contiguous(memory_format=self._format)
            squares = torch.from_numpy(sq).to(self.device)
            return self._regions_frame(frame_t, squares, inp)[0]
        inp = owner.buffer(("region input", batch, size), shape, self.dtype,
                           memory_format=self._format)

        def run(frame: torch.Tensor, squares: torch.Tensor) -> tuple[torch.Tensor]:
            return self._regions_frame(frame, squares, inp)

        packed: torch.Tensor = owner.run(key, run, (frame_in, owner.params(("squares", batch),
                                                                           sq)), warmup=3)[0]
        return packed

    def _regions_frame(self, frame_t: torch.Tensor, squares: torch.Tensor, inp: torch.Tensor
                       ) -> tuple[torch.Tensor]:
        """Graph-capturable: the square crops of ``frame_t`` sampled into ``inp`` (the static
        detector input of this batch and size), then :meth:`_regions_core`."""
        batch, size = int(inp.shape[0]), int(inp.shape[2])
        frame = frame_t.permute(2, 0, 1)[None].to(torch.float32)
        h, w = frame.shape[2], frame.shape[3]
        # crop px u samples frame x0 + (u + 0.5)·side/size - 0.5 (cv2.resize's pixel mapping);
        # grid_sample(align_corners=False) reads frame px p at (2p + 1)/W - 1
        u = (torch.arange(size, device=self.device, dtype=torch.float32) + 0.5) / size
        step = squares[:, 2:3]
        gx = (2 * (squares[:, 0:1] + u[None] * step) / w - 1)[:, None, :].expand(batch, size,
                                                                                 size)
        gy = (2 * (squares[:, 1:2] + u[None] * step) / h - 1)[:, :, None].expand(batch, size,
                                                                                 size)
        crops = F.grid_sample(frame.expand(batch, -1, -1, -1), torch.stack((gx, gy), -1),
                              mode="bilinear", padding_mode="zeros", align_corners=False)
        # whole levels, as the uint8 crop insightface would resize (cv2.resize writes uint8)
        inp.copy_((crops.round_().flip(1) - INPUT_MEAN) / INPUT_STD)
        return self._regions_core(inp, squares)

    def _regions_core(self, inp: torch.Tensor, squares: torch.Tensor) -> tuple[torch.Tensor]:
        """Graph-capturable: network, decoding and the best anchor per crop, mapped to frame
        px; ``(B, 15)`` rows of score, bbox (4), kps (10)."""
        batch, size = inp.shape[0], inp.shape[2]
        anchors = self._anchors_for((size, size))
        scores, bboxes, kps = self._decode(self.net(inp), batch, anchors)
        best_s, best = scores.max(1)
        pick = best[:, None, None]
        bb = torch.gather(bboxes, 1, pick.expand(-1, 1, 4))[:, 0]
        kk = torch.gather(kps, 1, pick.expand(-1, 1, 10))[:, 0]
        ratio = squares[:, 2:3] / size
        x0, y0 = squares[:, 0:1], squares[:, 1:2]
        offset = torch.cat((x0, y0), 1)
        bb = bb * ratio + offset.repeat(1, 2)
        kk = kk * ratio + offset.repeat(1, 5)
        return (torch.cat((best_s[:, None], bb, kk), 1),)
