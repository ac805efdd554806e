"""The GPU frame path: a frame crosses the bus once each way.

* :class:`FrameStager` uploads a frame once, from a pinned host buffer, on its own CUDA stream:
  in a live session the capture thread stages frame n+1 while the inference thread works on n.
* :func:`align_crops` cuts the aligned crops of every face of the frame in one ``grid_sample``.
* :func:`paste_patches` blends every swapped face back in one ``grid_sample`` (per patch size),
  into the frame that is already on the device.
* :func:`download_rois` brings back only the regions that were pasted (pinned, one sync), into
  the host output; the rest of the output is the host frame itself, so the full frame never
  comes back and never makes a round trip per face.

The host (OpenCV) twins of the align and paste are in :mod:`livefuse.swap.paste`; on the CPU
those run instead. Everything here imports torch lazily, so ``import livefuse`` needs no torch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from livefuse.swap.paste import Roi, patch_roi
from livefuse.types import Affine, Frame, Patch, StagedFrame

if TYPE_CHECKING:
    import torch


def upload(arr: np.ndarray, device: torch.device) -> torch.Tensor:
    """A small host array on ``device`` without a stream sync: a copy from pageable memory makes
    CUDA wait for every kernel queued before it, one from pinned memory does not (CUDA runtime
    API, "API synchronization behavior")."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(arr))
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _grids(affines: np.ndarray, out_w: int, out_h: int, in_w: int, in_h: int,
           offsets: np.ndarray, device: torch.device) -> torch.Tensor:
    """Sampling grids ``(N, out_h, out_w, 2)`` for ``grid_sample(align_corners=False)``.

    Args:
        affines: ``(N, 2, 3)`` output px → input px.
        offsets: ``(N, 2)`` px added to the output coordinates (an ROI's top-left corner).
    """
    import torch

    m = upload(np.asarray(affines, np.float32), device)
    off = upload(np.asarray(offsets, np.float32), device)
    xs = torch.arange(out_w, device=device, dtype=torch.float32)
    ys = torch.arange(out_h, device=device, dtype=torch.float32)
    gx = xs[None, None, :] + off[:, 0, None, None]  # (N, 1, W)
    gy = ys[None, :, None] + off[:, 1, None, None]  # (N, H, 1)
    sx = m[:, 0, 0, None, None] * gx + m[:, 0, 1, None, None] * gy + m[:, 0, 2, None, None]
    sy = m[:, 1, 0, None, None] * gx + m[:, 1, 1, None, None] * gy + m[:, 1, 2, None, None]
    # pixel centres: px p <-> normalised (2p + 1) / n - 1
    return torch.stack(((2 * sx + 1) / in_w - 1, (2 * sy + 1) / in_h - 1), dim=-1)


def frame_rgb(frame_t: torch.Tensor) -> torch.Tensor:
    """``(H, W, 3) uint8 BGR`` → ``(1, 3, H, W) float32`` RGB in [0, 1] (one kernel chain)."""
    return frame_t.flip(-1).permute(2, 0, 1)[None].float().div_(255.0)


def align_crops(frame_t: torch.Tensor, affines: Sequence[Affine], size: int = 128,
                rgb: torch.Tensor | None = None) -> torch.Tensor:
    """Aligned crops of several faces of a frame that is on the device, in one ``grid_sample``.

    Args:
        frame_t: ``(H, W, 3) uint8 BGR`` tensor.
        affines: per face, ``(2, 3)`` frame px → crop px.
        rgb: :func:`frame_rgb` of ``frame_t`` when the caller has it already.

    Returns:
        ``(N, 3, size, size) float32`` RGB in [0, 1] (the swapper's input), zeros outside the frame.
    """
    import torch.nn.functional as F

    h, w = frame_t.shape[:2]
    inv = np.stack([cv2.invertAffineTransform(np.asarray(a, np.float64)) for a in affines])
    grid = _grids(inv, size, size, w, h, np.zeros((len(affines), 2)), frame_t.device)
    src = frame_rgb(frame_t) if rgb is None else rgb
    return F.grid_sample(src.expand(len(affines), -1, -1, -1), grid, mode="bilinear",
                         padding_mode="zeros", align_corners=False)


def paste_patches(frame_t: torch.Tensor, patches: Sequence[Patch | None]) -> list[Roi | None]:
    """Blend device patches into ``frame_t`` in place, each within the region it covers.

    Patches of one size are resampled together (one ``grid_sample`` over ``(N, 4, S, S)``: the
    image and its alpha), then blended in order, so a later face lies over an earlier one.

    Args:
        frame_t: ``(H, W, 3) uint8 BGR`` tensor on the device, modified in place.
        patches: device patches (``image (3, S, S)`` float RGB [0, 1], ``alpha (S, S)``), or
            ``None`` entries (skipped).

    Returns:
        Per patch the ROI written, or ``None`` (skipped, or wholly outside the frame).

    Raises:
        ValueError: a patch asks for the seamless blend (host only).
    """
    import torch
    import torch.nn.functional as F

    rois: list[Roi | None] = [None] * len(patches)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, p in enumerate(patches):
        if p is None:
            continue
        if p.blend != "feather":
            raise ValueError("the GPU paste blends with an alpha; 'seamless' runs on the host")
        ph, pw = p.alpha.shape[-2:]
        x0, y0, x1, y1 = patch_roi(p.affine, (pw, ph), tuple(frame_t.shape))
        if x1 - x0 >= 4 and y1 - y0 >= 4:
            rois[i] = (x0, y0, x1, y1)
            groups.setdefault((ph, pw), []).append(i)
    sampled: dict[int, torch.Tensor] = {}
    for (ph, pw), idx in groups.items():
        boxes = [rois[i] for i in idx]
        mw = max(b[2] - b[0] for b in boxes if b is not None)
        mh = max(b[3] - b[1] for b in boxes if b is not None)
        offsets = np.array([(b[0], b[1]) for b in boxes if b is not None], np.float64)
        affines = np.stack([patches[i].affine for i in idx])  # type: ignore[union-attr]
        grid = _grids(affines, mw, mh, pw, ph, offsets, frame_t.device)
        src = torch.cat([torch.stack([patches[i].image for i in idx]).float()  # type: ignore[union-attr]
                         .flip(1).mul(255.0),
                         torch.stack([patches[i].alpha for i in idx]).float()[:, None]],  # type: ignore[union-attr]
                        dim=1)
        out = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros",
                            align_corners=False)
        for k, i in enumerate(idx):
            sampled[i] = out[k]
    for i, roi in enumerate(rois):
        if roi is None:
            continue
        x0, y0, x1, y1 = roi
        s = sampled[i][:, :y1 - y0, :x1 - x0]
        fake, alpha = s[:3].permute(1, 2, 0), s[3, ..., None]
        region = frame_t[y0:y1, x0:x1]
        cur = region.float()
        region.copy_(cur.add_(alpha * (fake - cur)).round_().clamp_(0, 255).to(torch.uint8))
    return rois


Pending = list[tuple[Roi, "torch.Tensor"]]


def fetch_rois(frame_t: torch.Tensor, rois: Sequence[Roi | None]) -> Pending:
    """Copy the given regions of a device frame to pinned host buffers (torch's caching host
    allocator reuses them): all copies queued on the current stream, then one synchronisation.
    :func:`write_rois` puts them into the host frame."""
    import torch

    pending: Pending = []
    cuda = frame_t.device.type == "cuda"
    for roi in rois:
        if roi is None:
            continue
        x0, y0, x1, y1 = roi
        src = frame_t[y0:y1, x0:x1]
        dst = torch.empty(tuple(src.shape), dtype=torch.uint8, pin_memory=cuda)
        dst.copy_(src, non_blocking=cuda)
        pending.append((roi, dst))
    if pending and cuda:
        torch.cuda.current_stream(frame_t.device).synchronize()
    return pending


def write_rois(out: Frame, pending: Pending) -> None:
    """Write fetched regions into the host frame ``out`` (in place)."""
    for (x0, y0, x1, y1), dst in pending:
        out[y0:y1, x0:x1] = dst.numpy()


def download_rois(frame_t: torch.Tensor, rois: Sequence[Roi | None], out: Frame) -> None:
    """:func:`fetch_rois` then :func:`write_rois`: the pasted regions into the host output."""
    write_rois(out, fetch_rois(frame_t, rois))


def restore_rois(frame_t: torch.Tensor, rois: Sequence[Roi | None], host: Frame) -> None:
    """Put the host frame's own pixels back into the given regions of the device frame (undo a
    paste, e.g. of a swap the precision guard rejected)."""
    for roi in rois:
        if roi is None:
            continue
        x0, y0, x1, y1 = roi
        frame_t[y0:y1, x0:x1].copy_(upload(host[y0:y1, x0:x1], frame_t.device))


class _Slot:
    def __init__(self, shape: tuple[int, ...], device: torch.device) -> None:
        import torch

        self.host = torch.empty(shape, dtype=torch.uint8, pin_memory=True)
        self.host_np = self.host.numpy()
        self.device = torch.empty(shape, dtype=torch.uint8, device=device)
        self.busy = False
        self.uploaded: Any = None  # the event of the last upload from ``host``

    def free(self) -> bool:
        # a dropped frame is released before its upload may have finished reading ``host``
        return not self.busy and (self.uploaded is None or bool(self.uploaded.query()))


class FrameStager:
    """Uploads frames to the device once, from a ring of pinned host buffers, on its own stream.

    Args:
        device: a CUDA device (``cuda``, ``cuda:N``).
        slots: buffers per frame size. A live session needs 3 (one frame being processed, one
            waiting in the latest-frame slot, one being staged); more are added, up to
            ``2 * slots``, if a caller holds on to frames longer, and beyond that a stage is a
            plain synchronous upload.

    :meth:`stage` is called from any one thread (the capture thread in a live session); a staged
    frame's device copy stays valid until its ``release`` is called (the engine does, at the end
    of :meth:`livefuse.engine.Engine.process`; the live runner does for frames it drops).
    """

    def __init__(self, device: str, slots: int = 3) -> None:
        import torch

        self.device = torch.device(device)
        self.slots = slots
        self._ring: dict[tuple[int, ...], list[_Slot]] = {}
        self._lock = threading.Lock()
        self._stream: Any = None
        self.staged = 0
        self.fallbacks = 0

    def _take(self, shape: tuple[int, ...]) -> _Slot | None:
        with self._lock:
            ring = self._ring.setdefault(shape, [])
            for s in ring:
                if s.free():
                    s.busy = True
                    return s
            if len(ring) < 2 * self.slots:
                s = _Slot(shape, self.device)
                s.busy = True
                ring.append(s)
                return s
        return None

    def _free(self, slot: _Slot) -> None:
        with self._lock:
            slot.busy = False

    def stage(self, frame: Frame) -> StagedFrame:
        """Copy ``frame`` ``(H, W, 3) uint8`` into a pinned buffer and start its upload.

        Returns:
            A :class:`StagedFrame` whose ``device`` tensor is ready once its ``ready`` event has
            completed; :meth:`wait` makes the calling thread's stream wait for it.
        """
        import torch

        self.staged += 1
        slot = self._take(tuple(frame.shape))
        if slot is None:  # every buffer held: no overlap for this frame, but no error either
            self.fallbacks += 1
            return StagedFrame(host=frame, device=torch.from_numpy(
                np.ascontiguousarray(frame)).to(self.device))
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        np.copyto(slot.host_np, frame)
        with torch.cuda.stream(self._stream):
            slot.device.copy_(slot.host, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(self._stream)
        slot.uploaded = ready
        done = threading.Event()

        def release() -> None:
            if not done.is_set():
                done.set()
                self._free(slot)

        return StagedFrame(host=frame, device=slot.device, ready=ready, release=release)

    @staticmethod
    def wait(staged: StagedFrame) -> None:
        """Make the current stream wait until ``staged.device`` holds the frame."""
        if staged.ready is not None:
            import torch

            torch.cuda.current_stream(staged.device.device).wait_event(staged.ready)
            staged.ready = None


__all__ = ["FrameStager", "align_crops", "download_rois", "fetch_rois", "frame_rgb",
           "paste_patches", "restore_rois", "upload", "write_rois"]
