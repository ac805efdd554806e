"""The neural engine's landmarker: insightface's 106-point model (``2d106det`` of buffalo_l) on
the tracked faces, so the pose cache sees the mouth, the eyes and the head pose
(:func:`livefuse.cache.pose_key`) as it does with the classic engine's 68 landmarks.

What runs is what insightface's ``model_zoo/landmark.py`` (``Landmark.get``) does, for all faces
of a frame at once:

* the crop: a square of 1.5 times the bbox's longer side around the bbox centre, no rotation,
  resampled to the model's input (192 px) with ``cv2.warpAffine`` (bilinear, black outside);
* the input: RGB, ``(x - mean) / std`` with mean 0 and std 1 when the graph normalises its input
  itself (a ``Sub``/``_minus`` and a ``Mul``/``_mul`` node among its first 8, or ``bn_data``
  among its first 3: mxnet exports such as the released file), else 127.5 and 128;
* the output: ``(212,)`` = 106 × (x, y) in [-1, 1] of the crop, mapped by ``(p + 1) * 96`` to
  crop px and by the inverse crop affine back to frame px.

Two runners, chosen once when the engine is built: :class:`TorchLandmarker` (the ``.onnx`` run
by livefuse's ONNX-to-torch runner on the device that holds the staged frame, every face's crop
cut there in one ``grid_sample``, one small read-back per frame) and :class:`OrtLandmarker`
(onnxruntime on host crops, for the CPU, CoreML, DirectML and ORT-CUDA backends).

Used on the inference thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
import numpy.typing as npt

from livefuse.faces.analyser import AnyFrame, Landmarker, host_frame, landmarks_of
from livefuse.faces.insight import FaceModelError, SessionFactory, _load, _ort_session
from livefuse.faces.landmarks106 import COUNT
from livefuse.types import Face, StagedFrame

if TYPE_CHECKING:
    from livefuse.models.graph_cache import GraphCache, Owner

log = logging.getLogger(__name__)

INPUT_SIZE = 192
"""The released model's input side in px (insightface ``alignment/coordinate_reg``)."""
MAX_BATCH = 8
"""Faces a batched export runs at once (more run in chunks: one CUDA graph per chunk size)."""
CROP_SCALE = 1.5
"""The crop's side in multiples of the bbox's longer side (insightface ``Landmark.get``)."""


def crop_affine(bbox: npt.ArrayLike, size: int = INPUT_SIZE) -> npt.NDArray[np.float64]:
    """The ``(2, 3)`` affine frame px → crop px of insightface's landmark crop for ``bbox``
    (x1, y1, x2, y2): centre on the bbox centre, scale ``size / (1.5 · longer side)``."""
    x1, y1, x2, y2 = np.asarray(bbox, np.float64).reshape(4).tolist()
    s = size / (max(x2 - x1, y2 - y1, 1e-6) * CROP_SCALE)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    return np.array([[s, 0.0, size / 2 - s * cx], [0.0, s, size / 2 - s * cy]], np.float64)


def crop_region(affines: npt.NDArray[np.float64], frame_size: tuple[int, int],
                size: int = INPUT_SIZE) -> tuple[int, int, int, int] | None:
    """The part of a ``frame_size`` (w, h) frame that the crops of ``affines`` ``(N, 2, 3)``
    read, one px of bilinear reach included, as x0, y0, x1, y1; ``None`` when they read none
    of it (every crop outside the frame)."""
    w, h = frame_size
    corners = np.array([[-1.0, -1.0, 1.0], [size, -1.0, 1.0], [-1.0, size, 1.0],
                        [size, size, 1.0]])
    pts = np.concatenate([corners @ cv2.invertAffineTransform(m).T for m in affines])
    x0, y0 = np.floor(pts.min(0)).astype(int) - 1
    x1, y1 = np.ceil(pts.max(0)).astype(int) + 2
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
    return (int(x0), int(y0), int(x1), int(y1)) if x1 > x0 and y1 > y0 else None


def _inverse(m: npt.NDArray[np.float64]) -> tuple[float, float, float, float, float, float]:
    """The inverse of the affine ``m`` ``(2, 3)`` (``cv2.invertAffineTransform``'s values), as
    ``a, b, tx, c, d, ty`` Python floats: on one face a frame, a few float operations where
    numpy and cv2 calls cost microseconds each (host CPU on every cached frame)."""
    (a, b, tx), (c, d, ty) = m.tolist()
    det = a * d - b * c
    det = 1.0 / det if det else 0.0
    ia, ib, ic, id_ = d * det, -b * det, -c * det, a * det
    return ia, ib, -(ia * tx + ib * ty), ic, id_, -(ic * tx + id_ * ty)


def crop_theta(affines: npt.NDArray[np.float64], region: tuple[int, int, int, int],
               size: int = INPUT_SIZE) -> npt.NDArray[np.float32]:
    """``(N, 2, 3) float32`` matrices for ``F.affine_grid(align_corners=False)`` that sample
    the crops of ``affines`` (frame px → crop px) from ``region`` (x0, y0, x1, y1 of the frame)
    exactly where ``cv2.warpAffine`` samples the whole frame (pixel centres on integers)."""
    x0, y0, x1, y1 = region
    # the grid's normalised crop coordinate u is crop px (u + 1)·size/2 - 1/2, and frame px p
    # is read at the region's normalised (2·(p - x0) + 1) / rw - 1: theta is
    # region_norm @ inverse(affine) @ out_px, multiplied out
    half, mid = size / 2, (size - 1) / 2
    sx, sy = 2.0 / (x1 - x0), 2.0 / (y1 - y0)
    ox, oy = (1 - 2 * x0) / (x1 - x0) - 1, (1 - 2 * y0) / (y1 - y0) - 1
    rows = []
    for m in affines:
        a, b, tx, c, d, ty = _inverse(m)
        rows.append(((sx * a * half, sx * b * half, sx * ((a + b) * mid + tx) + ox),
                     (sy * c * half, sy * d * half, sy * ((c + d) * mid + ty) + oy)))
    return np.array(rows, np.float32).reshape(len(affines), 2, 3)


def _crops_t(frame_t: Any, theta: Any, size: int, mean: float, std: float) -> Any:
    """Graph-capturable crops: ``theta`` ``(N, 2, 3) float32`` from :func:`crop_theta` for the
    part of the frame ``frame_t`` is (``(H, W, 3) uint8 BGR``) → ``(N, 3, size, size) float32``
    RGB, whole levels, normalised by ``mean`` and ``std``."""
    import torch.nn.functional as F

    n = int(theta.shape[0])
    img = frame_t.permute(2, 0, 1).flip(0)[None].float()  # RGB
    grid = F.affine_grid(theta, [n, 3, size, size], align_corners=False)
    crops = F.grid_sample(img.expand(n, -1, -1, -1), grid, mode="bilinear",
                          padding_mode="zeros", align_corners=False).round_()
    if (mean, std) != (0.0, 1.0):
        crops = (crops - mean) / std
    return crops


def decode(pred: npt.ArrayLike, affines: npt.NDArray[np.float64],
           size: int = INPUT_SIZE) -> npt.NDArray[np.float32]:
    """Network output ``(N, 212)`` (x, y in [-1, 1] of the crop) → ``(N, 106, 2) float32``
    frame px, through the inverse of each face's crop affine ``(N, 2, 3)``."""
    p = np.asarray(pred, np.float64).reshape(len(affines), -1, 2)[:, -COUNT:]
    k = float(size // 2)
    out = np.empty(p.shape, np.float32)
    for i, m in enumerate(affines):
        a, b, tx, c, d, ty = _inverse(m)
        # (p + 1)·k in crop px, then the inverse affine: folded into one matrix and offset
        out[i] = p[i] @ np.array([[a * k, c * k], [b * k, d * k]]) + (
            (a + b) * k + tx, (c + d) * k + ty)
    return out


def input_normalisation(node_names: Sequence[str]) -> tuple[float, float]:
    """``(mean, std)`` of the input, by insightface's test on the graph's first node names
    (``Landmark.__init__``): ``(0, 1)`` when the graph normalises itself, else ``(127.5, 128)``."""
    first = list(node_names[:8])
    sub = any(n.startswith(("Sub", "_minus")) for n in first)
    mul = any(n.startswith(("Mul", "_mul")) for n in first)
    if "bn_data" in first[:3]:
        sub = mul = True
    return (0.0, 1.0) if sub and mul else (127.5, 128.0)


def _check_output(path: Path, points2: int | None) -> None:
    if points2 != 2 * COUNT:
        raise FaceModelError(path, f"output of {points2} values per face: not insightface's "
                             f"2-d {COUNT}-point landmark model (2d106det gives {2 * COUNT})")


def _with_landmarks(faces: Sequence[Face], lms: npt.NDArray[np.float32]) -> list[Face]:
    return [replace(f, landmarks_106=lm) for f, lm in zip(faces, lms, strict=True)]


class OrtLandmarker:
    """The 106-point landmarker on onnxruntime (host crops; faces one by one when the file's
    batch dimension is fixed, as the released one's is).

    Args:
        path: the ``2d106det.onnx`` file.
        providers: onnxruntime execution providers in priority order.
        session_factory: ``(path, providers) -> InferenceSession`` (tests).

    Raises:
        FaceModelError: the file is missing, unreadable or not a 106-point landmark model.
    """

    def __init__(self, path: str | Path, providers: Sequence[str] = ("CPUExecutionProvider",),
                 session_factory: SessionFactory = _ort_session) -> None:
        import onnx

        self.path = Path(path)
        self.session = _load(self.path, providers, session_factory)
        try:
            nodes = [n.name for n in onnx.load(str(self.path), load_external_data=False)
                     .graph.node[:8]]
        except Exception as exc:  # protobuf's own errors
            raise FaceModelError(self.path, f"{type(exc).__name__}: {exc}") from exc
        self.input_mean, self.input_std = input_normalisation(nodes)
        inp = self.session.get_inputs()[0]
        self.input_name = inp.name
        side = inp.shape[2] if len(inp.shape) == 4 and isinstance(inp.shape[2], int) else None
        self.input_size = int(side or INPUT_SIZE)
        self.batched = not isinstance(inp.shape[0], int)
        outs = self.session.get_outputs()
        dim = outs[0].shape[1] if len(outs) == 1 and len(outs[0].shape) == 2 else None
        _check_output(self.path, dim if isinstance(dim, int) else None)

    def _blob(self, host: npt.NDArray[np.uint8], m: npt.NDArray[np.float64]) -> Any:
        s = self.input_size
        crop = cv2.warpAffine(host, m, (s, s), borderValue=0.0)
        return cv2.dnn.blobFromImage(crop, 1.0 / self.input_std, (s, s),
                                     (self.input_mean,) * 3, swapRB=True)

    def landmarks(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face]:
        if not faces:
            return []
        host = host_frame(frame)
        affines = np.stack([crop_affine(f.bbox, self.input_size) for f in faces])
        blobs = [self._blob(host, m) for m in affines]
        if self.batched:
            pred = self.session.run(None, {self.input_name: np.concatenate(blobs)})[0]
        else:
            pred = np.concatenate([self.session.run(None, {self.input_name: b})[0]
                                   for b in blobs])
        return _with_landmarks(faces, decode(pred, affines, self.input_size))


class TorchLandmarker:
    """The 106-point landmarker in PyTorch on the device that holds the frame: every face's crop
    in one ``grid_sample`` of the staged frame, one network run (one per face when the export
    fixes its batch at 1 inside the graph), one read-back of ``(N, 212)``. On a frame staged with
    its size's graph-cache entry (the live path) crops and network replay as one CUDA graph of
    that entry (:meth:`_fused`); otherwise the network replays a CUDA graph per batch size
    (:class:`~livefuse.models.graph_runner.TorchGraph`). Both are captured by the engine's
    warm-up (:meth:`livefuse.engine.Engine.warm_up`).

    Args:
        path: the ``2d106det.onnx`` file, run by :class:`~livefuse.models.onnx_torch.OnnxModule`.
        device: ``cuda[:N]``, or ``cpu`` (tests).
        precision: ``fp32``, ``fp16`` or ``bf16`` (the network; crops and decoding float32);
            resolved by :func:`livefuse.precision.resolve_precision` (bf16 needs CUDA ≥ 8.0).
        graphs: a graph cache to replay from instead of a CUDA one (tests:
            :class:`~livefuse.models.graph_cache.EagerGraphs` on the CPU).

    Raises:
        FaceModelError: the file is missing, unreadable, a node cannot run, or it is not a
            106-point landmark model.
    """

    def __init__(self, path: str | Path, device: str = "cpu", precision: str = "fp32",
                 graphs: GraphCache | None = None) -> None:
        import torch

        from livefuse.faces.arcface_torch import open_image_net
        from livefuse.models.graph_runner import TorchGraph
        from livefuse.models.onnx_torch import OnnxModelError

        self.path = Path(path)
        self.device = torch.device(device)
        if not self.path.is_file():
            raise FaceModelError(self.path, "no such file (run `livefuse models fetch NAME`)")
        net, side = open_image_net(self.path, "a landmark model")
        self.input_size = int(side or INPUT_SIZE)
        self.input_mean, self.input_std = input_normalisation(net.node_names)
        try:
            out = net.output_shapes((1, 3, self.input_size, self.input_size))[0]
        except OnnxModelError as exc:
            raise FaceModelError(self.path, exc.problem) from exc
        _check_output(self.path, int(out[1]) if len(out) == 2 else None)
        s = self.input_size
        try:  # an export may fix its batch of 1 in a Reshape: then faces go one at a time
            self.batched = net.output_shapes((2, 3, s, s))[0] == (2, 2 * COUNT)
        except OnnxModelError:
            self.batched = False
        # one CUDA graph per batch size on a CUDA device: run eagerly, the network's ~170 kernel
        # launches a face cost 4-5 ms of host CPU on every cached frame (docs/BENCHMARKS.md
        # §12.1); the runner also holds the precision guard (fp32 from the file's weights)
        self.runner = TorchGraph(net, path=self.path, device=device, precision=precision,
                                 cuda_graph=True, max_batch=MAX_BATCH if self.batched else 1,
                                 graphs=graphs)
        self._pinned: Any = None  # the read-back's pinned buffer, per output shape

    def _frame_tensor(self, frame: AnyFrame) -> Any:
        import torch

        if isinstance(frame, StagedFrame) and frame.device is not None:
            return frame.device
        return torch.from_numpy(np.ascontiguousarray(host_frame(frame))).to(self.device)

    def crops(self, frame_t: Any, affines: npt.NDArray[np.float64],
              graphs: Owner | None = None) -> Any:
        """The network's input for the crops of ``affines`` ``(N, 2, 3)`` (frame px → crop px)
        of ``frame_t`` (``(H, W, 3) uint8 BGR`` on the device): ``(N, 3, S, S) float32`` RGB,
        whole levels (as ``cv2.warpAffine`` writes), zeros outside the frame, normalised.

        With ``graphs`` (the frame size's owner, which holds ``frame_t``, its static work
        frame) the crops replay as one CUDA graph over the whole frame, with the matrices as its
        one upload: the eager form costs ~0.7 ms of host CPU a frame in kernel launches
        (cProfile on the H200, docs/BENCHMARKS.md §12.4), on every frame the cache serves.
        Without, only the region the crops read is turned to floats."""
        import torch

        n, s = len(affines), self.input_size
        h, w = int(frame_t.shape[0]), int(frame_t.shape[1])
        mean, std = self.input_mean, self.input_std
        if graphs is not None:
            key = ("landmark crops", n, s)
            theta_t = graphs.params(key, crop_theta(affines, (0, 0, w, h), s))
            return graphs.run(key, lambda f, t: (_crops_t(f, t, s, mean, std),),
                              (frame_t, theta_t))[0]
        region = crop_region(affines, (w, h), s)
        if region is None:
            return torch.full((n, 3, s, s), -mean / std, device=frame_t.device)
        x0, y0, x1, y1 = region
        theta = torch.from_numpy(crop_theta(affines, region, s))
        if frame_t.device.type == "cuda":
            # a pageable upload waits for all the frame's queued work: this one does not
            theta = theta.pin_memory()
        theta = theta.to(frame_t.device, non_blocking=True)
        return _crops_t(frame_t[y0:y1, x0:x1], theta, s, mean, std)

    def _read_back(self, out: Any) -> npt.NDArray[np.float32]:
        """``out`` ``(N, 212)`` on the host, a copy of its own. On CUDA through a pinned buffer
        and a sleeping wait (:func:`~livefuse.models.graph_cache.host_wait`): ``.cpu()`` would
        spin a core for as long as the crops and the network take on the device."""
        import torch

        if out.device.type != "cuda":
            return np.array(out.float().cpu().numpy(), np.float32)
        from livefuse.models.graph_cache import host_wait

        host = self._pinned
        if host is None or tuple(host.shape) != tuple(out.shape):
            host = self._pinned = torch.empty(tuple(out.shape), dtype=torch.float32,
                                              pin_memory=True)
        host.copy_(out, non_blocking=True)
        host_wait(out.device)
        return np.array(host.numpy(), np.float32)

    def landmarks(self, frame: AnyFrame, faces: Sequence[Face]) -> list[Face]:
        import torch

        if not faces:
            return []
        affines = np.stack([crop_affine(f.bbox, self.input_size) for f in faces])
        graphs = frame.graphs if isinstance(frame, StagedFrame) else None
        with torch.inference_mode():
            frame_t = self._frame_tensor(frame)
            out = None if graphs is None else self._fused(frame_t, affines, graphs)
            if out is None:
                out = self.runner.run_tensors(self.crops(frame_t, affines, graphs),
                                              read_by_caller=True)[0]
            # one wait for the device a frame: the guard checks the points on the host, where
            # they come anyway (a check on the device would be more launches and a second
            # read-back); a non-finite reduced-precision output is computed again in fp32, and
            # the runner stays in fp32 (as the swapper does)
            pred = self._read_back(out)
            if self.runner.guarded and not np.isfinite(pred).all():
                x = self.crops(frame_t, affines)  # eager: no capture for this one-off
                pred = self._read_back(self.runner.run_tensors(x)[0])  # checked: latches fp32
        return _with_landmarks(faces, decode(pred, affines, self.input_size))

    def _fused(self, frame_t: Any, affines: npt.NDArray[np.float64], graphs: Owner) -> Any:
        """Crops and network as ONE graph of the frame size's owner (``graphs``, which holds
        ``frame_t``), the crop matrices its one upload: ``(N, 212) float32`` on the device, not
        yet checked; ``None`` when the faces are more than one run of the network takes.

        Apart, the crops' graph, the cast, the copy into the network's static input, its graph
        and the cast back are five launches where one replay does (the landmarker's host CPU
        on the H200: 0.41-0.49 ms a frame fused, 0.43-0.58 apart, docs/BENCHMARKS.md §12.5;
        it runs on every frame the cache serves). The graph is keyed by the runner's
        :attr:`~livefuse.models.graph_runner.TorchGraph.generation`: after an fp32 latch the
        next frame captures one around the fp32 module."""
        runner, n, s = self.runner, len(affines), self.input_size
        if n > runner.max_batch:
            return None
        h, w = int(frame_t.shape[0]), int(frame_t.shape[1])
        mean, std, dtype = self.input_mean, self.input_std, runner.dtype
        theta_t = graphs.params(("landmark crops", n, s), crop_theta(affines, (0, 0, w, h), s))

        def run(f: Any, t: Any) -> tuple[Any]:
            return (runner.forward(_crops_t(f, t, s, mean, std).to(dtype))[0].float(),)

        return graphs.run(("landmarks", n, s, runner.generation), run, (frame_t, theta_t),
                          warmup=3)[0]

    @property
    def net(self) -> Any:
        """The network module now running (its precision: :attr:`dtype`)."""
        return self.runner.module

    @property
    def precision(self) -> str:
        """``fp32``, ``fp16``, ``bf16``, or ``fp32 (fallback)`` after the guard latched."""
        return self.runner.precision_in_use

    @property
    def dtype(self) -> Any:
        return self.runner.dtype

    @property
    def graphs(self) -> GraphCache | None:
        """Its CUDA graphs (one owner per batch size), ``None`` when it runs eagerly."""
        return self.runner.graphs


__all__ = ["CROP_SCALE", "INPUT_SIZE", "Landmarker", "OrtLandmarker", "TorchLandmarker",
           "crop_affine", "crop_region", "crop_theta", "decode", "input_normalisation",
           "landmarks_of"]
