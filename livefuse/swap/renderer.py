"""The renderer's contract, one for every swapper (classic, PyTorch, onnxruntime).

A renderer prepares a source face once, then renders the swapped face for a batch of target
faces of one frame into :class:`~livefuse.types.Patch` es. It never writes into the frame:
:func:`livefuse.swap.paste.paste_all` (host) or :func:`livefuse.swap.gpu_frame.paste_patches`
(device) does, for every renderer alike, and the pose-similarity cache stores and re-warps the
same patches (:func:`livefuse.swap.paste.rewarp`), so a cache hit and a miss blend the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from livefuse.config import EngineConfig
from livefuse.types import Face, Frame, Patch, StagedFrame


class Renderer(Protocol):
    """Renders swapped faces; called on the inference thread only.

    Attributes:
        device: where it renders: ``cpu`` (host patches) or ``cuda[:N]`` (device patches).
        precision_in_use: e.g. ``fp16``, ``fp32 (fallback)``, ``n/a (classic engine)``.
        precision_reason: why that precision, one line (what ``--precision`` asked and what
            the device allows: :func:`livefuse.precision.resolve_precision`).
    """

    @property
    def device(self) -> str: ...

    @property
    def precision_in_use(self) -> str: ...

    @property
    def precision_reason(self) -> str: ...

    def prepare(self, image: Frame, face: Face, path: Path | None = None) -> Any:
        """The source face of ``image`` prepared once for every later render (an opaque value:
        the classic renderer's warped crop, the neural renderer's latent)."""
        ...

    def configure(self, config: EngineConfig) -> None:
        """Take settings that need no model reload (mouth, blend, ...) between frames."""
        ...

    def render(self, frame: StagedFrame, faces: Sequence[Face], source: Any) -> list[Patch | None]:
        """One patch per face (all faces of the frame as one batch), ``None`` for a face that
        cannot be rendered (outside the frame, no landmarks)."""
        ...

    def verify(self) -> bool:
        """Whether the last :meth:`render` passed the precision guard, asked after the frame's
        download (a device renderer defers the guard's read-back to it). ``False``: the renderer
        has fallen back to fp32 and the faces must be rendered again."""
        ...


__all__ = ["Renderer"]
