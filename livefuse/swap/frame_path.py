"""Where a frame lives while the engine works on it: on the host, or staged on the GPU.

The engine picks one :class:`FramePath` when it is built (:func:`frame_path`), from where its
renderer runs, so the per-frame code never asks what kind of frame or patch it holds:

* :class:`HostPath`: the frame is a numpy array; patches are pasted into the output by OpenCV
  (:func:`livefuse.swap.paste.paste_all`) and the enhancer cuts its crops on the host.
* :class:`DevicePath`: the frame is uploaded once (:class:`~livefuse.swap.gpu_frame.FrameStager`,
  on the capture thread in a live session), patches are pasted into the device frame by CUDA
  graphs, the enhancer cuts its crops there, and only the pasted regions come back, after the
  frame's one synchronisation.

Both are used from the inference thread (``stage`` from any one thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from livefuse.swap.paste import Roi, paste_all
from livefuse.types import Frame, Patch, StagedFrame

if TYPE_CHECKING:
    from livefuse.swap.enhance import FaceEnhancer
    from livefuse.types import FloatArray


class FramePath(Protocol):
    """The host or device form of the engine's frame-handling stages."""

    stager: Any
    """The :class:`~livefuse.swap.gpu_frame.FrameStager` (device path), else ``None``."""
    warms: bool
    """Whether the engine sweeps its stages before a frame size's first frame (CUDA graphs)."""

    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        """A buffer for the capture to write its next ``shape`` frame into, which
        :meth:`stage` then uploads without a copy (pinned memory), or ``None``."""
        ...

    def stage(self, frame: Frame) -> StagedFrame:
        """``frame`` ready for the engine (any one thread)."""
        ...

    def begin(self, staged: StagedFrame) -> None:
        """Before the frame's work (inference thread): wait for its upload."""
        ...

    def paste(self, staged: StagedFrame, patches: Sequence[Patch | None],
              out: Frame) -> list[Roi | None]:
        """Blend ``patches`` into the frame; the region each covers (or ``None``)."""
        ...

    def enhance(self, enhancer: FaceEnhancer, staged: StagedFrame, out: Frame,
                kps: Sequence[FloatArray]) -> list[Patch | None]:
        """The enhancer's patches for faces at ``kps`` of the frame as pasted so far."""
        ...

    def fetch(self, staged: StagedFrame, rois: Sequence[Roi | None],
              meanwhile: Callable[[], None] | None = None) -> Any:
        """Start bringing the pasted regions to the host; returns what :meth:`finish` writes.
        Waits for the device: afterwards every deferred guard verdict can be read.
        ``meanwhile`` is called once the copies are queued and before the wait: device work it
        queues runs while the host waits, and is not waited for."""
        ...

    def restore(self, staged: StagedFrame, rois: Sequence[Roi | None], out: Frame) -> None:
        """Undo the pastes in ``rois`` (a rejected fp16 result), from ``out``'s pixels."""
        ...

    def finish(self, out: Frame, fetched: Any) -> None:
        """Write what :meth:`fetch` brought into ``out``."""
        ...

    def synchronize(self) -> None:
        """Wait for the device (stage timings); nothing on the host path."""
        ...

    def release_cache(self) -> None:
        """Give memory cached by a warm-up's eager runs back to the device."""
        ...


class HostPath:
    """The frame stays a host array (classic engine, onnxruntime, torch on the CPU)."""

    stager = None
    warms = False

    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        return None  # nothing to upload: the capture's own array is as good

    def stage(self, frame: Frame) -> StagedFrame:
        return StagedFrame(host=frame)

    def begin(self, staged: StagedFrame) -> None:
        pass

    def paste(self, staged: StagedFrame, patches: Sequence[Patch | None],
              out: Frame) -> list[Roi | None]:
        return paste_all(out, patches)

    def enhance(self, enhancer: FaceEnhancer, staged: StagedFrame, out: Frame,
                kps: Sequence[FloatArray]) -> list[Patch | None]:
        return enhancer.enhance_host(out, kps)

    def fetch(self, staged: StagedFrame, rois: Sequence[Roi | None],
              meanwhile: Callable[[], None] | None = None) -> Any:
        if meanwhile is not None:
            meanwhile()
        return None

    def restore(self, staged: StagedFrame, rois: Sequence[Roi | None], out: Frame) -> None:
        # host renderers check their output before they return it: nothing is ever pasted
        # unverified on this path, so there is nothing to undo
        raise RuntimeError("the host frame path pastes verified patches only")

    def finish(self, out: Frame, fetched: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def release_cache(self) -> None:
        pass


class DevicePath:
    """The frame is staged on a CUDA device once and stays there until the pasted regions come
    back (see the module docstring).

    Args:
        device: the CUDA device.
        stager: another stager (tests: :class:`~livefuse.swap.gpu_frame.TensorStager`, the same
            path on CPU tensors).
    """

    def __init__(self, device: str = "cuda", stager: Any = None) -> None:
        if stager is None:
            from livefuse.swap.gpu_frame import FrameStager

            stager = FrameStager(device)
        self.stager = stager
        self.cuda = self.stager.device.type == "cuda"
        self.warms = self.cuda

    def lend(self, shape: tuple[int, ...]) -> Frame | None:
        lent: Frame | None = self.stager.lend(shape)
        return lent

    def stage(self, frame: Frame) -> StagedFrame:
        staged: StagedFrame = self.stager.stage(frame)
        return staged

    def begin(self, staged: StagedFrame) -> None:
        self.stager.wait(staged)

    def paste(self, staged: StagedFrame, patches: Sequence[Patch | None],
              out: Frame) -> list[Roi | None]:
        from livefuse.swap.gpu_frame import paste_patches

        return paste_patches(staged.device, patches, graphs=staged.graphs)

    def enhance(self, enhancer: FaceEnhancer, staged: StagedFrame, out: Frame,
                kps: Sequence[FloatArray]) -> list[Patch | None]:
        return enhancer.enhance_device(staged.device, kps)

    def fetch(self, staged: StagedFrame, rois: Sequence[Roi | None],
              meanwhile: Callable[[], None] | None = None) -> Any:
        from livefuse.swap.gpu_frame import fetch_rois

        return fetch_rois(staged.device, rois, meanwhile)

    def restore(self, staged: StagedFrame, rois: Sequence[Roi | None], out: Frame) -> None:
        from livefuse.swap.gpu_frame import restore_rois

        restore_rois(staged.device, rois, out)

    def finish(self, out: Frame, fetched: Any) -> None:
        from livefuse.swap.gpu_frame import write_rois

        write_rois(out, fetched)

    def synchronize(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.stager.device)

    def release_cache(self) -> None:
        """After a warm-up: hand the blocks its eager runs left in torch's cache back to the
        device (no graph uses them; reserved memory then stays near what is allocated)."""
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.stager.device)
            torch.cuda.empty_cache()


def frame_path(device: str) -> FramePath:
    """:class:`DevicePath` for a renderer on CUDA (``cuda``, ``cuda:N``), else
    :class:`HostPath`."""
    return DevicePath(device) if device.startswith("cuda") else HostPath()


__all__ = ["DevicePath", "FramePath", "HostPath", "frame_path"]
