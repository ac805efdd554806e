"""Test clips for the video pipeline and the batch joiner: known timestamps, short GOPs (so a
clip has keyframes to cut at), B-frames, and one or two AAC tracks; each frame's index is painted
into it so a test can tell which frame went where."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from livefuse.io.synthetic import write_tone


def frame_picture(i: int, size: tuple[int, int]) -> np.ndarray:
    """A textured frame whose mean level follows ``i`` (x264 keeps it well within 1 level)."""
    w, h = size
    rng = np.random.default_rng(i // 7)
    base = rng.integers(0, 60, (h, w, 3), dtype=np.uint8)
    return (base + (i * 5) % 190).astype(np.uint8)


def write_clip(path: Path, pts: Sequence[int], time_base: Fraction, rate: Fraction,
               size: tuple[int, int] = (96, 64), gop: int = 12, audio_tracks: int = 1,
               open_gop: bool = False, pictures: Sequence[np.ndarray] | None = None,
               options: dict[str, str] | None = None, rotation: float | None = None,
               tags: Sequence[dict[str, str]] = (),
               matrix: Sequence[int] | None = None,
               container_tags: dict[str, str] | None = None) -> Path:
    """H.264 with B-frames at the given ``pts`` (in ``time_base``), a keyframe at least every
    ``gop`` frames, and ``audio_tracks`` AAC tones covering the video; the frames are
    ``pictures`` (``size`` px) or :func:`frame_picture`'s; ``options`` go to the muxer;
    ``rotation``: a display matrix turning the picture (degrees counter-clockwise, as a phone's
    portrait clip has) or ``matrix``: a whole display matrix (nine ints, FFmpeg's layout, a
    mirror too); ``tags``: each stream's tags in order (video first); ``container_tags``: the
    file's own (title, comment, creation_time...)."""
    if pictures is not None:
        size = (pictures[0].shape[1], pictures[0].shape[0])
    with av.open(str(path), "w", options=options or {}) as out:
        vs = out.add_stream("libx264", rate=rate, time_base=time_base)
        vs.width, vs.height, vs.pix_fmt = size[0], size[1], "yuv420p"
        params = f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes=2"
        if open_gop:
            params += ":open-gop=1"
        vs.options = {"crf": "20", "preset": "veryfast", "x264-params": params}
        tracks = [out.add_stream("aac", rate=48000) for _ in range(audio_tracks)]
        if rotation is not None:
            vs.set_display_rotation(rotation)
        if matrix is not None:
            vs.set_display_matrix(list(matrix))
        for stream, stream_tags in zip([vs, *tracks], tags, strict=False):
            stream.metadata.update(stream_tags)
        out.metadata.update(container_tags or {})
        for i, p in enumerate(pts):
            img = pictures[i] if pictures is not None else frame_picture(i, size)
            vf = av.VideoFrame.from_ndarray(img, format="bgr24")
            vf.pts, vf.time_base = int(p), time_base
            for pkt in vs.encode(vf):
                out.mux(pkt)
        for pkt in vs.encode(None):
            out.mux(pkt)
        seconds = float((pts[-1] - pts[0]) * time_base) + 0.2
        for k, astream in enumerate(tracks):
            write_tone(out, astream, seconds, 440 + 110 * k)
    return path


def ntsc_clip(path: Path, frames: int = 90, **kw: object) -> Path:
    """30000/1001 fps, time base 1/30000."""
    return write_clip(path, [1001 * i for i in range(frames)], Fraction(1, 30000),
                      Fraction(30000, 1001), **kw)  # type: ignore[arg-type]


def vfr_clip(path: Path, frames: int = 90, seed: int = 5, **kw: object) -> Path:
    """Variable frame rate in a 1 ms time base: intervals of 20..50 ms and one 300 ms stall."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(20, 51, frames - 1)
    steps[frames // 2] = 300
    times = np.concatenate([[0], np.cumsum(steps)]).tolist()
    return write_clip(path, times, Fraction(1, 1000), Fraction(30), **kw)  # type: ignore[arg-type]


def frame_times(path: Path) -> list[Fraction]:
    """Every decoded frame's timestamp in seconds, exact."""
    with av.open(str(path)) as c:
        vs = c.streams.video[0]
        return [Fraction(f.pts) * Fraction(vs.time_base) for f in c.decode(vs)]


def audio_packets(path: Path) -> list[tuple[int, Fraction, bytes]]:
    """``(stream number, time, bytes)`` of every audio packet."""
    with av.open(str(path)) as c:
        order = {s.index: k for k, s in enumerate(c.streams.audio)}
        return [(order[p.stream.index], Fraction(p.pts) * Fraction(p.time_base), bytes(p))
                for p in c.demux(*c.streams.audio) if p.dts is not None]


def face_clip(path: Path, photo: np.ndarray, face_bbox: Sequence[float], frames: int,
              size: tuple[int, int] = (320, 240), gop: int = 15, **kw: object) -> Path:
    """A 30000/1001 clip of camera motion over ``photo`` around the face at ``face_bbox``, one
    keyframe every ``gop`` frames (so it can be cut into chunks)."""
    from livefuse.io.synthetic import motion_clip

    x0, y0, x1, y1 = (float(v) for v in face_bbox)
    pictures = list(motion_clip(photo, size, frames, centre=((x0 + x1) / 2, (y0 + y1) / 2),
                                face_px=x1 - x0, face_width=110))
    return write_clip(path, [1001 * i for i in range(frames)], Fraction(1, 30000),
                      Fraction(30000, 1001), gop=gop, pictures=pictures,
                      **kw)  # type: ignore[arg-type]


def encoder_inputs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Record every frame handed to the video encoder, as (pts, sha1 of its yuv420p samples),
    from whichever thread encodes. Tests compare these, not the encoded bytes: libx264 in PyAV's
    wheel now and then encodes the same frames a little differently on a loaded machine (CI saw
    it; so did 1 run in 5 of a pipelined job here with both cores busy)."""
    import livefuse.io.video as video_mod
    from livefuse.io.pipeline import Passthrough

    seen: list[tuple[int, str]] = []
    sink = video_mod._Encoder.sink

    def recording(self: Any, item: Any) -> None:
        if not isinstance(item, Passthrough) and item.write:
            seen.append((int(item.out.pts), hashlib.sha1(
                item.out.to_ndarray(format="yuv420p").tobytes()).hexdigest()))
        sink(self, item)

    monkeypatch.setattr(video_mod._Encoder, "sink", recording)
    return seen
