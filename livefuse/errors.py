"""Errors livefuse raises on bad input. Each one names the file and the problem.

The CLI catches :class:`LivefuseError` and prints its message with exit status 2 (1 for
:class:`NothingSwappedError`), so a user never sees a traceback from deep inside OpenCV, dlib or
FFmpeg.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

MIN_FACE_PX = 80
"""Smallest face width (px) to ask users for. Source: dlib's HOG frontal face detector (the
offline engine's) looks for faces of about 80x80 px or larger at ``upsample=0`` (dlib's
face_detection_ex.cpp: upsample once to find faces down to 40 px). A source face under half
of it is refused (:mod:`livefuse.faces.selection`)."""

SHARP_FACE_PX = 100
"""Source face width (px, bbox) from which a swap looks sharp: inswapper's aligned crop is 128 px
and holds the face box at about 0.8 of its side. Under it a note warns that the swap will look
soft, and every message asking for a source photo quotes this one number (a user told "at
least 80 px" by one message and "under 100 px: soft" by the next found them at odds)."""


def _restore(cls: type[LivefuseError], args: tuple[Any, ...]) -> LivefuseError:
    """Unpickle helper: a ``cls`` instance with ``args`` set, without calling ``cls.__init__``."""
    err = cls.__new__(cls)
    err.args = args
    return err


EXIT_FAILED = 1
"""The exit status when the job ran and an input gave no result: ``run`` swapped no face (its
output is not kept), or a ``batch`` item failed. Bad arguments and unreadable files exit 2
before any work, so a script can tell "fix the command" from "this target has no face"."""

EXIT_INCOMPLETE = 3
"""The exit status of ``run``, ``batch`` and ``live`` when an input video ended early or was
damaged: the output was written with every frame that could be decoded (the summary says how
many of how many)."""


class LivefuseError(Exception):
    """Base class for every error that is the input's fault, not a bug.

    Instances survive :mod:`pickle` (a worker process reports them to its parent) with their type,
    message and attributes, whatever a subclass's ``__init__`` signature: the default exception
    pickling calls ``cls(*self.args)``, which breaks for any subclass whose constructor takes
    other arguments than its message (``ImageLoadError(path, problem)`` got only the message).
    Here the state is restored as it was instead; ``__init__`` is not run again, so the message
    is the original one. Every attribute must itself be picklable.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.args), self.__dict__ or None)


class ImageLoadError(LivefuseError):
    """An image file is missing, empty, truncated or not an image."""

    def __init__(self, path: str | Path, problem: str, role: str | None = None) -> None:
        self.path = Path(path)
        self.problem = problem
        self.role = role
        what = f"the {role} image" if role else "image"
        super().__init__(f"cannot read {what} '{path}': {problem}")


class VideoError(LivefuseError):
    """A video file cannot be decoded or the output cannot be encoded; ``role`` names the file
    in the message (``video``, or ``recording`` for live's)."""

    def __init__(self, path: str | Path, problem: str,
                 role: Literal["video", "recording"] = "video") -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{role} '{path}': {problem}")


class NoFaceError(LivefuseError):
    """No face was found where one is required (the source photo, a reference photo)."""

    def __init__(self, path: str | Path | None, role: str = "source",
                 rejected: str | None = None) -> None:
        """``rejected``: why the detections that were found were not faces, when some were."""
        self.path = None if path is None else Path(path)
        self.rejected = rejected
        self.role = role
        where = f" '{path}'" if path is not None else ""
        why = f" ({rejected})" if rejected else ""
        super().__init__(
            f"no face in {role}{where}{why}: use a photo where one face is clearly visible, "
            f"frontal, about {SHARP_FACE_PX} px wide or more"
        )


class FaceTooSmallError(LivefuseError):
    """The source face is too small to swap from (fewer than :data:`MIN_FACE_PX` px wide)."""

    def __init__(self, path: str | Path | None, width: float) -> None:
        self.path = None if path is None else Path(path)
        self.width = width
        where = f" in '{path}'" if path is not None else ""
        super().__init__(
            f"the source face{where} is {width:.0f} px wide: too small to swap from (every "
            f"swapped face would be a blur); use a photo where the face is about "
            f"{SHARP_FACE_PX} px wide or more"
        )


class FaceIndexError(LivefuseError):
    """A requested face index does not exist in an image."""

    def __init__(self, index: int, count: int, path: str | Path | None = None) -> None:
        self.index, self.count = index, count
        self.path = None if path is None else Path(path)
        where = f" in '{path}'" if path is not None else ""
        faces = "face" if count == 1 else "faces"
        super().__init__(
            f"face index {index} is out of range: {count} {faces} found{where} "
            f"(valid: 0..{count - 1})" if count else f"face index {index}: no face found{where}"
        )


class ConfigError(LivefuseError):
    """A setting has a value outside its allowed set or range."""


class NothingSwappedError(LivefuseError):
    """A run finished without swapping a single face; the output would be a silent no-op, so it
    is not kept and the CLI exits :data:`EXIT_FAILED`."""
