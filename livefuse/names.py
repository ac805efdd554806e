"""File names that fit the file system: temp files beside an output add to its name, and a name
the user could create must still get one (a new user's trial: names of 236-255 bytes were
refused, or lost a whole live recording at its end). Imports nothing of livefuse: the imaging
module below the I/O layer uses it too."""

from __future__ import annotations

import hashlib
from pathlib import Path

NAME_MAX = 255
"""Bytes in one file name (Linux and macOS file systems; NTFS counts 255 UTF-16 units)."""


def short_name(name: str, room: int) -> str:
    """``name``, or when its UTF-8 form is longer than ``room`` bytes, its start cut to fit at a
    character boundary, then ``~`` and 8 hex digits of the whole name's SHA-1 (two long names
    that share a start still get apart temp names)."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= room:
        return name
    tag = "~" + hashlib.sha1(raw).hexdigest()[:8]
    return raw[:max(room - len(tag), 1)].decode("utf-8", "ignore") + tag


def temp_prefix(dst: Path, tail: int) -> str:
    """The hidden prefix of a temp file beside ``dst`` whose name adds ``tail`` bytes after it
    (an image's ``tempfile.mkstemp`` part: 8 random characters and ``.part``), cut so that the
    temp name stays a legal file name."""
    return f".{short_name(dst.name, NAME_MAX - 2 - tail)}."


IMAGE_PART_TAIL = len(".XXXXXXXX.part")
"""What ``tempfile.mkstemp`` adds after :func:`temp_prefix` for an image's temp file."""


__all__ = ["IMAGE_PART_TAIL", "NAME_MAX", "short_name", "temp_prefix"]
