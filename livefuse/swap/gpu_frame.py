"""The GPU frame path: a frame crosses the bus once each way.

* :class:`FrameStager` uploads a frame once, from a pinned host buffer, on its own CUDA stream:
  in a live session the capture thread stages frame n+1 while the inference thread works on n.
* :func:`align_crops` cuts the aligned crops of every face of the frame in one ``grid_sample``.
* :func:`paste_patches` blends every swapped face back in one ``grid_sample`` (per patch size),
  into the frame that is already on the device.
* :func:`download_rois` brings back only the regions that were pasted (pinned, one sync), into
  the host output; the rest of the output is the host frame itself, so the full frame never
  comes back and never makes a round trip per face.

With ``graphs`` (the stager's :class:`~livefuse.models.graph_cache.Owner` of the frame size,
which holds its static work frame) the align and the paste each replay as one CUDA graph: at one
face the frame path is bound by the host's kernel launches, not by the GPU (docs/BENCHMARKS.md
§7), and a graph is one launch. A paste's box is rounded up to one of :data:`BOX_SIDES`, so a
face that moves or grows replays a graph that the session's warm-up already captured. Without
``graphs`` the same functions run eagerly.

The host (OpenCV) twins of the align and paste are in :mod:`livefuse.swap.paste`; on the CPU
those run instead. Everything here imports torch lazily, so ``import livefuse`` needs no torch.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from livefuse.models.graph_cache import (
    GraphCache,
    Owner,
    bucket,
    current_stream,
    ladder,
    make_graph_cache,
    stream_mark,
)
from livefuse.swap.host_pool import HostBufferPool
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


def _grids_t(m: torch.Tensor, off: torch.Tensor, out_w: int, out_h: int, in_w: int,
             in_h: int) -> torch.Tensor:
    """Sampling grids ``(N, out_h, out_w, 2)`` for ``grid_sample(align_corners=False)``, from
    device tensors (graph-capturable).

    Args:
        m: ``(N, 2, 3) float32`` output px → input px.
        off: ``(N, 2) float32`` px added to the output coordinates (a region's top-left corner).
    """
    import torch

    xs = torch.arange(out_w, device=m.device, dtype=torch.float32)
    ys = torch.arange(out_h, device=m.device, dtype=torch.float32)
    gx = xs[None, None, :] + off[:, 0, None, None]  # (N, 1, W)
    gy = ys[None, :, None] + off[:, 1, None, None]  # (N, H, 1)
    sx = m[:, 0, 0, None, None] * gx + m[:, 0, 1, None, None] * gy + m[:, 0, 2, None, None]
    sy = m[:, 1, 0, None, None] * gx + m[:, 1, 1, None, None] * gy + m[:, 1, 2, None, None]
    # pixel centres: px p <-> normalised (2p + 1) / n - 1
    return torch.stack(((2 * sx + 1) / in_w - 1, (2 * sy + 1) / in_h - 1), dim=-1)


def frame_rgb(frame_t: torch.Tensor) -> torch.Tensor:
    """``(H, W, 3) uint8 BGR`` → ``(1, 3, H, W) float32`` RGB in [0, 1] (one kernel chain)."""
    return frame_t.flip(-1).permute(2, 0, 1)[None].float().div_(255.0)


def _align_t(frame_t: torch.Tensor, params: torch.Tensor, size: int) -> torch.Tensor:
    """Graph-capturable align: ``params (N, 6) float32`` inverse affines (crop px → frame px)."""
    import torch
    import torch.nn.functional as F

    n = int(params.shape[0])
    h, w = int(frame_t.shape[0]), int(frame_t.shape[1])
    off = torch.zeros(n, 2, dtype=torch.float32, device=params.device)
    grid = _grids_t(params.view(n, 2, 3), off, size, size, w, h)
    return F.grid_sample(frame_rgb(frame_t).expand(n, -1, -1, -1), grid, mode="bilinear",
                         padding_mode="zeros", align_corners=False)


def align_crops(frame_t: torch.Tensor, affines: Sequence[Affine], size: int = 128,
                graphs: Owner | None = None) -> torch.Tensor:
    """Aligned crops of several faces of a frame that is on the device, in one ``grid_sample``.

    Args:
        frame_t: ``(H, W, 3) uint8 BGR`` tensor.
        affines: per face, ``(2, 3)`` frame px → crop px.
        graphs: replay it as a CUDA graph of this owner, which holds ``frame_t`` (its static
            work frame).

    Returns:
        ``(N, 3, size, size) float32`` RGB in [0, 1] (the swapper's input), zeros outside the
        frame. With ``graphs`` it is the graph's static output: use it before the next align of
        as many faces.
    """
    inv = np.stack([cv2.invertAffineTransform(np.asarray(a, np.float64))
                    for a in affines]).reshape(len(affines), 6).astype(np.float32)
    if graphs is not None:
        key = ("align", len(affines), size)
        return graphs.run(key, lambda f, q: (_align_t(f, q, size),),
                          (frame_t, graphs.params(key, inv)))[0]
    return _align_t(frame_t, upload(inv, frame_t.device), size)


BOX_SIDES = ladder(64, 4096, 1.25, 32)
"""With CUDA graphs a paste samples a square box whose side is the first of these that holds the
faces' regions (clipped to the frame): 18 sizes from 64 to 4800 px, each about 1.25 times the last,
so a face that moves or grows replays a graph already captured (the warm-up captures them all),
for at most 1.56 times the area sampled."""


def _paste_t(frame_t: torch.Tensor, images: torch.Tensor, alphas: torch.Tensor,
             params: torch.Tensor, box: tuple[int, int]) -> None:
    """Graph-capturable paste of ``N`` patches of one size into ``frame_t`` (in place).

    Args:
        images: ``(N, 3, S, S)`` float RGB [0, 1]; alphas: ``(N, S, S)``.
        params: ``(N, 12) float32``: the affine (frame px → patch px, 6), the box's top-left
            corner (2) and the exact region ``x0, y0, x1, y1`` (4), frame px.
        box: ``(bw, bh)`` the box every patch is sampled into, inside the frame; px of the box
            outside a patch's exact region keep the frame's value (alpha 0).
    """
    import torch
    import torch.nn.functional as F

    n, s = int(images.shape[0]), int(images.shape[-1])
    bw, bh = box
    xs = torch.arange(bw, device=frame_t.device, dtype=torch.float32)
    ys = torch.arange(bh, device=frame_t.device, dtype=torch.float32)
    # one face at a time, in order (a later face lies over an earlier one): a graph's
    # intermediates are then one box's (a full-frame box is ~130 MB in float32), not N boxes'
    for k in range(n):
        grid = _grids_t(params[k:k + 1, :6].reshape(1, 2, 3), params[k:k + 1, 6:8], bw, bh, s, s)
        src = torch.cat((images[k:k + 1].float().flip(1).mul(255.0),
                         alphas[k:k + 1].float()[:, None]), dim=1)
        out = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros",
                            align_corners=False)[0]
        cols, rows = params[k, 6] + xs, params[k, 7] + ys
        inside = (((cols >= params[k, 8]) & (cols < params[k, 10]))[None, :]
                  & ((rows >= params[k, 9]) & (rows < params[k, 11]))[:, None])
        idx = (rows.long()[:, None], cols.long()[None, :])
        cur = frame_t[idx].float()
        fake, alpha = out[:3].permute(1, 2, 0), (out[3] * inside)[..., None]
        frame_t[idx] = cur.add_(alpha * (fake - cur)).round_().clamp_(0, 255).to(torch.uint8)


def _round_up(v: int, step: int, limit: int) -> int:
    return min(-(-v // step) * step, limit)


def paste_box(boxes: Sequence[Roi], frame_wh: tuple[int, int], graphs: bool,
              step: int | None = None) -> tuple[int, int]:
    """The ``(bw, bh)`` box a paste of these regions samples: exact, sides rounded up to a
    multiple of ``step``, or (with graphs) the square of the first :data:`BOX_SIDES` entry that
    holds them, clipped to the frame."""
    fw, fh = frame_wh
    w = max(b[2] - b[0] for b in boxes)
    h = max(b[3] - b[1] for b in boxes)
    if step is not None or not graphs:
        k = step or 1
        return _round_up(w, k, fw), _round_up(h, k, fh)
    side = bucket(max(w, h), BOX_SIDES)
    return min(side, fw), min(side, fh)


def paste_patches(frame_t: torch.Tensor, patches: Sequence[Patch | None],
                  graphs: Owner | None = None, step: int | None = None
                  ) -> list[Roi | None]:
    """Blend device patches into ``frame_t`` in place, each within the region it covers.

    Patches of one size are resampled together (one ``grid_sample`` over ``(N, 4, S, S)``: the
    image and its alpha), then blended in order, so a later face lies over an earlier one.

    Args:
        frame_t: ``(H, W, 3) uint8 BGR`` tensor on the device, modified in place.
        patches: device patches (``image (3, S, S)`` float RGB [0, 1], ``alpha (S, S)``), or
            ``None`` entries (skipped).
        graphs: replay each patch size's paste as a CUDA graph of this owner, which holds
            ``frame_t`` (its static work frame).
        step: round the sampled box's sides up to a multiple of this (default: the
            :data:`BOX_SIDES` square with ``graphs``, else exact); the pixels written are the
            same.

    Returns:
        Per patch the ROI written, or ``None`` (skipped, or wholly outside the frame).

    Raises:
        ValueError: a patch asks for the seamless blend (host only).
    """
    import torch

    fh, fw = int(frame_t.shape[0]), int(frame_t.shape[1])
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
    for (ph, pw), idx in groups.items():
        boxes = [r for r in (rois[i] for i in idx) if r is not None]
        bw, bh = paste_box(boxes, (fw, fh), graphs is not None, step)
        params = np.array([[*np.asarray(patches[i].affine, np.float64).reshape(6),  # type: ignore[union-attr]
                            min(b[0], fw - bw), min(b[1], fh - bh), *b]
                           for i, b in zip(idx, boxes, strict=True)], np.float32)
        images = [patches[i].image for i in idx]  # type: ignore[union-attr]
        alphas = [patches[i].alpha for i in idx]  # type: ignore[union-attr]
        if graphs is None:
            _paste_t(frame_t, torch.stack(images), torch.stack(alphas),
                     upload(params, frame_t.device), (bw, bh))
            continue
        key = ("paste", len(idx), ph, pw, images[0].dtype, alphas[0].dtype)
        imgs = graphs.buffer((*key, "images"), (len(idx), 3, ph, pw), images[0].dtype)
        alps = graphs.buffer((*key, "alphas"), (len(idx), ph, pw), alphas[0].dtype)
        held = graphs.value((*key, "held"), lambda: [()])
        sources = (*images, *alphas)
        if not _holds(held[0], sources):
            torch.stack(images, out=imgs)
            torch.stack(alphas, out=alps)
            held[0] = _stamp(sources)
        q = graphs.params(key, params)

        def run(f: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                box: tuple[int, int] = (bw, bh)) -> tuple[torch.Tensor, ...]:
            _paste_t(f, a, b, c, box)
            return ()

        graphs.run((*key, bw, bh), run, (frame_t, imgs, alps, q), mutates=0)
    return rois


Stamp = tuple[tuple["weakref.ref[torch.Tensor]", int], ...]


def _stamp(tensors: Sequence[torch.Tensor]) -> Stamp:
    """Which tensors, at which version, a paste's static buffers were last filled from: weak
    references (a kept value of the owner must not keep patches alive, and its tensors are
    freed with it) and torch's in-place write counters."""
    return tuple((weakref.ref(t), t._version) for t in tensors)


def _holds(stamp: Stamp, tensors: Sequence[torch.Tensor]) -> bool:
    """Whether the buffers stamped ``stamp`` already hold ``tensors``: the same objects, not
    written since. A cache hit pastes the cached patch again with a new affine (about 4 frames
    in 5 at the live defaults), and its two stacks into the buffers were about a quarter of the
    paste's host CPU on the H200's host (docs/BENCHMARKS.md §12.7). Patches are the renderer's
    own tensors (the swapper's output is a clone, not a graph's static output, which a replay
    would rewrite without a version bump)."""
    return len(stamp) == len(tensors) and all(
        ref() is t and version == t._version for (ref, version), t in zip(stamp, tensors,
                                                                          strict=True))


Pending = list[tuple[Roi, "torch.Tensor"]]


def fetch_rois(frame_t: torch.Tensor, rois: Sequence[Roi | None],
               meanwhile: Callable[[], None] | None = None) -> Pending:
    """Copy the given regions of a device frame to pinned host buffers (torch's caching host
    allocator reuses them): all copies queued on the current stream, then one synchronisation.
    :func:`write_rois` puts them into the host frame. ``meanwhile`` runs between the two: what
    it queues on the stream is not waited for (the next frame's detection)."""
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
    mark = stream_mark(frame_t.device) if pending and cuda else None
    if meanwhile is not None:
        meanwhile()
    if mark is not None:
        mark.synchronize()
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


def _pinned(shape: tuple[int, ...]) -> torch.Tensor:
    import torch

    return torch.empty(shape, dtype=torch.uint8, pin_memory=True)


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

    :attr:`graphs` holds one entry per frame size (:data:`WORK_FRAMES` kept): the static work
    frame :meth:`wait` copies each frame into, and the align and paste graphs bound to it.
    """

    def __init__(self, device: str, slots: int = 3, graphs: GraphCache | None = None) -> None:
        import torch

        self.device = torch.device(device)
        self.slots = slots
        self._ring: dict[tuple[int, ...], list[_Slot]] = {}
        self._lock = threading.Lock()
        self._stream: Any = None
        self.staged = 0
        self.fallbacks = 0
        self.copies = 0
        self.pool = HostBufferPool(_pinned, LEND_LIMIT)
        cache = graphs if graphs is not None else make_graph_cache(self.device, True, WORK_FRAMES)
        assert cache is not None
        self.graphs: GraphCache = cache

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

    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        """A pinned ``shape`` ``uint8`` array for the capture to write its next frame into
        (:class:`~livefuse.swap.host_pool.HostBufferPool`), or ``None`` when each of the
        :data:`LEND_LIMIT` buffers of that size is still held. Any thread."""
        return self.pool.lend(shape)

    def stage(self, frame: Frame) -> StagedFrame:
        """Start the upload of ``frame`` ``(H, W, 3) uint8``: straight from it when it is an
        array :meth:`lend` handed out, else after a copy into a pinned buffer.

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
        lent = self.pool.owner(frame)
        if lent is None:
            self.copies += 1
            np.copyto(slot.host_np, frame)
        src = slot.host if lent is None else lent.tensor
        ready = torch.cuda.Event()
        prev = current_stream(torch.cuda.current_device())
        if prev.device_index == self._stream.device_index:
            # ``torch.cuda.stream``'s context without its Python device lookups (host CPU
            # on every frame of a live session); the current stream is the thread's own
            torch.cuda.set_stream(self._stream)
            try:
                slot.device.copy_(src, non_blocking=True)
            finally:
                torch.cuda.set_stream(prev)
        else:
            with torch.cuda.stream(self._stream):
                slot.device.copy_(src, non_blocking=True)
        ready.record(self._stream)
        slot.uploaded = ready
        if lent is not None:
            lent.uploaded = ready  # not lent again before the upload has read it
        done = threading.Event()

        def release() -> None:
            if not done.is_set():
                done.set()
                self._free(slot)

        return StagedFrame(host=frame, device=slot.device, ready=ready, release=release)

    def wait(self, staged: StagedFrame) -> None:
        """Make the current stream wait until ``staged.device`` holds the frame, then copy it
        into this size's static work frame (a device-to-device copy) and point ``staged.device``
        at it and ``staged.graphs`` at the size's graph-cache entry (which holds it), so the
        frame's align and paste replay graphs bound to one address. Called on the inference
        thread, once per frame."""

        if staged.device is None:
            return
        if staged.ready is not None:
            current_stream(staged.device.device).wait_event(staged.ready)
            staged.ready = None
        _to_work_frame(self.graphs, staged)


def _to_work_frame(graphs: GraphCache, staged: StagedFrame) -> None:
    """Copy ``staged.device`` into its size's static work frame and point ``staged`` at it."""
    import torch

    if staged.graphs is not None:
        return
    owner = graphs.owner(tuple(staged.device.shape))
    work = owner.buffer("frame", tuple(staged.device.shape), torch.uint8)
    work.copy_(staged.device)
    staged.device = work
    staged.graphs = owner


class TensorStager:
    """:class:`FrameStager`'s contract on any torch device, without pinned memory or streams:
    the GPU frame path on CPU tensors (tests), its graphs on
    :class:`~livefuse.models.graph_cache.EagerGraphs` by default."""

    def __init__(self, device: str = "cpu", graphs: GraphCache | None = None) -> None:
        import torch

        from livefuse.models.graph_cache import EagerGraphs

        self.device = torch.device(device)
        self.graphs = graphs if graphs is not None else GraphCache(EagerGraphs(self.device),
                                                                   WORK_FRAMES)
        self.staged = 0
        self.fallbacks = 0
        self.copies = 0
        self.pool = HostBufferPool(
            lambda shape: torch.empty(shape, dtype=torch.uint8), LEND_LIMIT)

    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        """As :meth:`FrameStager.lend`, in plain host memory."""
        return self.pool.lend(shape)

    def stage(self, frame: Frame) -> StagedFrame:
        import torch

        self.staged += 1
        lent = self.pool.owner(frame)
        if lent is not None:  # the device copy is the one copy, as on CUDA
            return StagedFrame(host=frame, device=lent.tensor.to(self.device, copy=True))
        self.copies += 1
        return StagedFrame(host=frame, device=torch.from_numpy(
            np.ascontiguousarray(frame).copy()).to(self.device))

    def wait(self, staged: StagedFrame) -> None:
        if staged.device is not None:
            _to_work_frame(self.graphs, staged)


LEND_LIMIT = 6
"""Pinned buffers per frame size that :meth:`FrameStager.lend` hands out: one being captured,
one in the latest-frame slot, one in the engine, and the sinks' (preview, virtual camera,
recorder) hold on to a frame each for a while."""

WORK_FRAMES = 4
"""Frame sizes whose static work frame and graphs a :class:`FrameStager` keeps."""


__all__ = ["BOX_SIDES", "LEND_LIMIT", "FrameStager", "TensorStager", "align_crops", "download_rois",
           "fetch_rois", "frame_rgb", "paste_box", "paste_patches", "restore_rois", "upload",
           "write_rois"]
