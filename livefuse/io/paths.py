"""The one rule for output paths: an output is never one of the inputs.

Every entry point that writes a file checks its outputs here before any work: ``livefuse run``
(the output image or video), the live :class:`~livefuse.session.Session` (the recording, and so
``livefuse live --record`` and the app's record path). Inputs are the target or the video standing
in for the camera, the source photo and the reference photo.

Two spellings name the same file when both exist and are one file on disk (``os.path.samefile``:
``./``, ``..``, symlinks to the file or to a folder above it, hard links), or, when one of them
does not exist yet, when they resolve to the same absolute path (symlinks followed first, then
``..`` applied: ``link/../x`` is where the link points, not beside it).
"""

from __future__ import annotations

import glob
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from livefuse.errors import LivefuseError
from livefuse.names import NAME_MAX, short_name

PathLike = str | os.PathLike[str]


class OutputIsInputError(LivefuseError):
    """An output path names one of the inputs; writing it would destroy that input.

    Attributes:
        output: the output as the user spelled it.
        role: which input it is (``target``, ``video input``, ``source``, ``reference``).
        input: the input as the user spelled it.
    """

    def __init__(self, output: PathLike, role: str, input_path: PathLike,
                 what: str = "output") -> None:
        self.output, self.role, self.input = Path(output), role, Path(input_path)
        spelled = "" if str(output) == str(input_path) else f" ('{input_path}')"
        super().__init__(f"{what} '{output}' is the {role} itself{spelled}; inputs are never "
                         "overwritten: choose another file name")


def _resolved(path: Path) -> str:
    try:
        full = path.expanduser().resolve()  # follows every symlink that exists, then ``..``
    except (OSError, RuntimeError):  # a symlink loop: compare the plain absolute path
        full = Path(os.path.abspath(path))
    return os.path.normcase(str(full))


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` name the same file (see the module docstring); never raises."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return _resolved(pa) == _resolved(pb)


class ProtectedOutputError(LivefuseError):
    """An existing output that its owner protected from writing: a rename would replace it all
    the same (a new user's trial: a 0444 file, and another user's file, were replaced with a
    note, exit 0), so it is refused as ``cp`` or a shell's ``>`` refuse it."""


def check_replaceable(output: PathLike, what: str = "output",
                      hint: str = "or choose another name") -> None:
    """Refuse to replace an existing ``output`` this user may not write, or that nobody may
    write (no write bit at all: refused even for root, which ``os.access`` lets through). A
    symlink is replaced as a link, its target untouched: never refused.

    Raises:
        ProtectedOutputError: naming the file; ``hint`` says what else to do.
    """
    path = Path(output)
    try:
        st = path.lstat()
    except OSError:  # nothing there
        return
    if stat.S_ISLNK(st.st_mode):
        return
    if not os.access(path, os.W_OK) or not st.st_mode & 0o222:
        raise ProtectedOutputError(f"{what} '{output}' exists and is write-protected; it is not "
                                   f"replaced: make it writable, {hint}")


def check_output(output: PathLike, inputs: Mapping[str, PathLike | None],
                 what: str = "output", replacing: bool = True) -> None:
    """Refuse ``output`` when it is one of ``inputs``, or when it exists write-protected.

    Args:
        output: the file about to be written (it may not exist yet).
        inputs: role (``target``, ``video input``, ``source``, ``reference``) -> path, or
            ``None`` for an input not given.
        what: how the message names the output (``output``, ``recording``).
        replacing: the caller replaces an existing ``output`` (``False``: it decides that
            later, as ``batch`` skips finished outputs, and calls :func:`check_replaceable`).

    Raises:
        OutputIsInputError: naming the output and the input it would overwrite.
        ProtectedOutputError: an existing output that may not be written.
    """
    for role, path in inputs.items():
        if path is not None and same_file(output, path):
            raise OutputIsInputError(output, role, path, what)
    if replacing:
        check_replaceable(output, what)


PART_INFIX = ".livefuse-part"
"""Temp outputs are ``.{stem}.livefuse-part-{pid}-{random}{suffix}`` beside the destination
(:func:`part_path`)."""


_PART_TAIL = len(f"{PART_INFIX}-4194304-{secrets.token_hex(3)}") + 1
"""What a part name adds to the destination's stem: the dot, the infix, the largest Linux
process id and the random tag."""


def _part_stem(dst: Path) -> str:
    """``dst``'s stem as its part names carry it: cut so that a part name stays a legal file name
    (a new user's trial: a 236-character ``live --record`` name streamed a whole session, then
    lost the recording to "File name too long" from its part file)."""
    return short_name(dst.stem, NAME_MAX - _PART_TAIL - len(os.fsencode(dst.suffix)))


def part_path(dst: Path) -> Path:
    """A new temp name for ``dst`` to be written under until it is complete: hidden, beside it,
    with its suffix last (the muxer takes the container from it), this process's id and a random
    tag, so that no two writers share one part file (a new user's trial: a second
    `live --record same.mp4` took the first one's part, one recording was lost and the other
    session failed at its rename; the app restarting a recording while the last one closes is
    one process). A stem too long for that is cut (:func:`short_name`)."""
    return dst.with_name(f".{_part_stem(dst)}{PART_INFIX}-{os.getpid()}-"
                         f"{secrets.token_hex(3)}{dst.suffix}")


def free_name(path: Path) -> Path:
    """``path`` when nothing is there, else the first of ``stem-2.ext``, ``stem-3.ext``, ...
    that is free (the app's next recording: a new user's trial lost the last one to the next
    Start, which wrote over it unasked)."""
    if not path.exists():
        return path
    n = 2
    while (candidate := path.with_name(f"{path.stem}-{n}{path.suffix}")).exists():
        n += 1
    return candidate


def other_writer(dst: Path) -> int | None:
    """The id of another running process writing ``dst`` now (its part file is there), or
    ``None``. A part file whose process has ended is left over from a crash and does not count.
    POSIX only (on Windows ``os.kill(pid, 0)`` would end the process): ``None`` there."""
    if os.name != "posix":
        return None
    head = f".{_part_stem(dst)}{PART_INFIX}-"
    for part in part_paths(dst):
        pid_text = part.name[len(head):].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            continue
        except PermissionError:  # alive, another user's
            pass
        return int(pid_text)
    return None


def part_paths(dst: Path) -> list[Path]:
    """Every process's part file of ``dst`` (a batch's clean-up, after its workers stopped)."""
    if not dst.parent.is_dir():
        return []
    return list(dst.parent.glob(f".{glob.escape(_part_stem(dst))}{PART_INFIX}-*"
                                f"{glob.escape(dst.suffix)}"))


__all__ = ["PART_INFIX", "OutputIsInputError", "ProtectedOutputError", "check_output",
           "check_replaceable", "free_name", "other_writer", "part_path", "part_paths",
           "same_file"]
