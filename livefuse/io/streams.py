"""What an output video keeps of its input's streams besides their packets: the tags players
show (a track's language and name) and the display matrix (how the picture is turned on screen).

A phone stores a portrait clip as landscape pictures with a matrix that turns them a quarter
turn; an output without it plays sideways. An audio track keeps its bytes when copied, but
PyAV's template copy leaves its tags behind, so a second language track became an unnamed one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import av
import numpy as np

KEPT_TAGS = ("language", "title", "handler_name")
"""Stream tags an output takes from its input: the track's language (ISO 639-2), its name, and
MP4/MOV's handler name, which players also show as the name. Tags the muxer writes itself
(``DURATION``, ``encoder``) are not copied. FFmpeg reads an MP4/MOV track's name back as
``name``: it is copied as the ``title`` it was written from."""

_IDENTITY = (65536, 0, 0, 0, 65536, 0, 0, 0, 1 << 30)


def copy_tags(src: Any, dst: Any) -> None:
    """Copy :data:`KEPT_TAGS` from the stream ``src`` to the output stream ``dst`` (before the
    output's header is written: its first packet)."""
    for key in KEPT_TAGS:
        value = src.metadata.get(key) or (src.metadata.get("name") if key == "title" else None)
        if value:
            dst.metadata[key] = value


def copy_stream(out: Any, template: Any) -> Any:
    """A stream of the output container ``out`` for ``template``'s packets, unchanged (stream
    copy), with its tags (:func:`copy_tags`)."""
    stream = out.add_stream_from_template(template)
    copy_tags(template, stream)
    return stream


def display_matrix(path: Path) -> tuple[int, ...] | None:
    """The display matrix of ``path``'s first video stream, as its first decoded frame carries it:
    nine ``int32`` in FFmpeg's ``AV_PKT_DATA_DISPLAYMATRIX`` layout (16.16 fixed point, 2.30 in
    the last column); ``None`` when there is none, it turns nothing, or nothing decodes (the
    job's own decoding then says why). Opens the file once more and decodes one frame."""
    try:
        with av.open(str(path)) as container:
            for frame in container.decode(video=0):
                side: Any = frame.side_data.get("DISPLAYMATRIX")  # a buffer (PyAV's SideData)
                data = b"" if side is None else bytes(side)
                if len(data) != 36:
                    return None
                matrix = tuple(int(v) for v in np.frombuffer(data, np.int32))
                return None if matrix == _IDENTITY else matrix
    except (av.error.FFmpegError, OSError, ValueError):
        return None
    return None


def quarter_turns(path: Path) -> int:
    """How many quarter turns counter-clockwise (0-3, for ``numpy.rot90``) show ``path``'s
    pictures upright, from the rotation of its first decoded frame's display matrix (a mirror in
    the matrix is not applied); 0 when there is none or nothing decodes."""
    try:
        with av.open(str(path)) as container:
            for frame in container.decode(video=0):
                return round(frame.rotation / 90) % 4
    except (av.error.FFmpegError, OSError, ValueError):
        return 0
    return 0


__all__ = ["KEPT_TAGS", "copy_stream", "copy_tags", "display_matrix", "quarter_turns"]
