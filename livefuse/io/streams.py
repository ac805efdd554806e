"""What an output video keeps of its input's streams besides their packets: the tags players
show (a track's language and name) and the display matrix (how the picture is turned on screen).

A phone stores a portrait clip as landscape pictures with a matrix that turns them a quarter
turn; an output without it plays sideways. An audio track keeps its bytes when copied, but
PyAV's template copy leaves its tags behind, so a second language track became an unnamed one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt

KEPT_TAGS = ("language", "title", "handler_name", "creation_time")
"""Stream tags an output takes from its input: the track's language (ISO 639-2), its name,
MP4/MOV's handler name, which players also show as the name, and when it was recorded. Tags the
muxer writes itself (``DURATION``, ``encoder``) are not copied. FFmpeg reads an MP4/MOV track's
name back as ``name``: it is copied as the ``title`` it was written from."""

MUXER_TAGS = frozenset({"encoder", "major_brand", "minor_version", "compatible_brands",
                        "duration"})
"""Container tags (lower case) the output's muxer writes itself, so not copied from the input."""

_IDENTITY = (65536, 0, 0, 0, 65536, 0, 0, 0, 1 << 30)


def copy_tags(src: Any, dst: Any) -> None:
    """Copy :data:`KEPT_TAGS` from the stream ``src`` to the output stream ``dst`` (before the
    output's header is written: its first packet)."""
    for key in KEPT_TAGS:
        value = src.metadata.get(key) or (src.metadata.get("name") if key == "title" else None)
        if value:
            dst.metadata[key] = value


def copy_container_tags(src: Any, dst: Any) -> None:
    """Copy the input container ``src``'s tags (title, comment, ``creation_time``, a phone's
    make, model and place...) to the output container ``dst``, but :data:`MUXER_TAGS`; before
    its header is written. A new user's trial lost a clip's title and recording date, by which
    phone galleries sort. Each muxer keeps those its format can hold (MP4 a known set, Matroska
    any)."""
    for key, value in src.metadata.items():
        if key.lower() not in MUXER_TAGS and value:
            dst.metadata[key] = value


def dropped_streams_note(container: Any) -> str | None:
    """What an output leaves out of the input ``container``: its subtitle, data and attachment
    streams (livefuse writes the video and copies the audio), as one note; ``None`` when
    there are none. A new user's trial lost an SRT track without a word."""
    kinds: dict[str, list[str]] = {}
    for stream in container.streams:
        if stream.type in ("subtitle", "data", "attachment"):
            # a data or attachment stream has no codec context: its own name ("klv", a font)
            codec = getattr(stream.codec_context, "name", None) if stream.codec_context else None
            kinds.setdefault(stream.type, []).append(codec or getattr(stream, "name", None)
                                                     or "unknown")
    if not kinds:
        return None
    parts = [f"{len(c)} {kind} stream{'s' if len(c) > 1 else ''} ({', '.join(sorted(set(c)))})"
             for kind, c in kinds.items()]
    them = "them" if sum(len(c) for c in kinds.values()) > 1 else "it"
    return (f"input has {' and '.join(parts)}; the output leaves {them} out (livefuse writes "
            "the video and copies the audio tracks)")


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


@dataclass(frozen=True)
class Upright:
    """How to show a stored picture as a player does: ``turns`` quarter turns counter-clockwise
    (``numpy.rot90``), then its rows and/or columns reversed (a mirrored display matrix).

    Attributes:
        turns: 0-3.
        flip_rows: upside down after the turns (FFmpeg's ``vflip``).
        flip_cols: left-right after the turns (``hflip``).
    """

    turns: int = 0
    flip_rows: bool = False
    flip_cols: bool = False

    @property
    def swaps_size(self) -> bool:
        """Whether the shown picture's width is the stored picture's height."""
        return self.turns % 2 == 1

    def apply(self, img: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """``img`` ``(H, W, C) uint8`` as shown: ``(W, H, C)`` when :attr:`swaps_size`; a view
        (no copy) of it."""
        if self.turns:
            img = np.rot90(img, self.turns)
        if self.flip_rows:
            img = img[::-1]
        if self.flip_cols:
            img = img[:, ::-1]
        return img


def upright_for(matrix: tuple[int, ...] | None) -> Upright:
    """The :class:`Upright` of a display matrix (nine ``int32``, FFmpeg's layout), as FFmpeg's
    own command line turns and mirrors a picture it decodes (``fftools/ffmpeg_filter.c``: a
    quarter-turn rotation through ``transpose``, mirrors through ``hflip``/``vflip``, chosen by
    the signs of the matrix's entries). An angle that is no multiple of 90 degrees is rounded
    to the nearest quarter turn (FFmpeg rotates by it, filling the corners)."""
    if matrix is None:
        return Upright()
    a, b, c, d = (float(v) / 65536.0 for v in (matrix[0], matrix[1], matrix[3], matrix[4]))
    sa, sb = math.hypot(a, c), math.hypot(b, d)
    if sa == 0.0 or sb == 0.0:  # not a picture's transform: shown as stored
        return Upright()
    # av_display_rotation_get gives the counter-clockwise angle; theta is clockwise, in [0, 360)
    theta = round(math.degrees(math.atan2(b / sb, a / sa))) % 360
    quarter = round(theta / 90) % 4
    if quarter == 1:  # "transpose=cclock_flip" (a transpose) or "clock"
        return Upright(1, flip_rows=True) if matrix[3] > 0 else Upright(3)
    if quarter == 2:
        return Upright(0, flip_rows=matrix[4] < 0, flip_cols=matrix[0] < 0)
    if quarter == 3:  # "transpose=clock_flip" or "cclock"
        return Upright(3, flip_rows=True) if matrix[3] < 0 else Upright(1)
    return Upright(0, flip_rows=matrix[4] < 0)


def upright(path: Path) -> Upright:
    """How to show ``path``'s pictures as a player does (:func:`upright_for` of its first
    decoded frame's display matrix); as stored when there is none or nothing decodes."""
    return upright_for(display_matrix(path))


__all__ = ["KEPT_TAGS", "Upright", "copy_stream", "copy_tags", "display_matrix", "upright",
           "upright_for"]
