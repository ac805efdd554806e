"""Join a video's chunks into one output: the swapped video by stream copy from the chunk files,
every audio stream by stream copy from the input, byte for byte.

Each chunk file holds the encoded frames of one keyframe-aligned span with the input's own
timestamps, so the join re-encodes nothing and moves no timestamp. Only the decode timestamps are
rebuilt when the chunks' own do not run strictly upwards across a boundary (each encoder started
its B-frame delay afresh): frame ``i`` in decode order gets the ``i``-th smallest presentation
time minus the largest reorder delay, which keeps every dts at or below its pts and strictly
increasing.
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av

from livefuse.errors import VideoError
from livefuse.io.codecs import open_video, plain_av_error
from livefuse.io.paths import part_path
from livefuse.io.streams import copy_container_tags, copy_stream
from livefuse.io.video import muxer_options, sound_goes_on


def _chunk_packets(chunks: Sequence[Path]) -> Iterator[tuple[Fraction, Any]]:
    """Every chunk's video packets in decode order, each with its chunk's time base."""
    for path in chunks:
        with open_video(path, "cpu").container as container:
            vs = container.streams.video[0]
            for pkt in container.demux(vs):
                if pkt.size == 0:
                    continue
                if pkt.pts is None:
                    raise VideoError(path, "a chunk packet has no timestamp")
                yield Fraction(vs.time_base), pkt


def _timestamps(chunks: Sequence[Path], tb: Fraction) -> tuple[list[int], list[int | None]]:
    """pts and dts of every video packet, in decode order, in ``tb`` (the first chunk's)."""
    pts: list[int] = []
    dts: list[int | None] = []
    for ctb, pkt in _chunk_packets(chunks):
        pts.append(int(pkt.pts * ctb / tb))
        dts.append(None if pkt.dts is None else int(pkt.dts * ctb / tb))
    return pts, dts


def _decode_times(pts: list[int], dts: list[int | None]) -> list[int]:
    """The chunks' own dts when they rise strictly across the whole video, else rebuilt."""
    if all(d is not None and d <= p for p, d in zip(pts, dts, strict=True)) and \
            all(b > a for a, b in itertools.pairwise(dts)):  # type: ignore[operator]
        return [int(d) for d in dts if d is not None]
    shown = sorted(pts)
    delay = max(0, max(s - p for s, p in zip(shown, pts, strict=True)))
    return [s - delay for s in shown]


@dataclass(frozen=True)
class Joined:
    """What :func:`join_chunks` wrote.

    Attributes:
        frames: video frames written.
        span: seconds from the first frame's timestamp to the last's (``0`` for one frame), for
            telling a cut input's early end (:func:`~livefuse.io.video.incomplete_reason`).
        gap, gap_at: the longest step between two frames (s) and where it starts (s from the
            first frame), for telling a hole (:func:`~livefuse.io.video.gap_reason`).
        sound_through_gap: the input's audio goes on through that step
            (:func:`~livefuse.io.video.sound_goes_on`): a paused picture, not a hole.
    """

    frames: int
    span: Fraction
    gap: Fraction = Fraction(0)
    gap_at: Fraction = Fraction(0)
    sound_through_gap: bool = False
    first: Fraction = Fraction(0)
    """The first frame's timestamp (s, the input's timeline)."""


def join_chunks(src: Path, chunks: Sequence[Path], dst: Path) -> Joined:
    """Write ``dst`` from the chunk files (video) and ``src`` (audio), atomically.

    Args:
        src: the input video the chunks were cut from (its audio is copied).
        chunks: chunk files in order.
        dst: the output (``.mp4``, ``.mkv``, ``.mov``).

    Returns:
        The frames written and the seconds they span.

    Raises:
        VideoError: a chunk or the input cannot be read, or the output cannot be written.
    """
    tmp = part_path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    first = open_video(chunks[0], "cpu").container
    inp = open_video(src, "cpu").container
    vtemplate = first.streams.video[0]
    tb = Fraction(vtemplate.time_base)
    try:
        with first, inp, av.open(str(tmp), "w", options=muxer_options(dst, tb)) as out:
            pts, dts = _timestamps(chunks, tb)
            if not pts:
                raise VideoError(src, "the chunks hold no video frame")
            decode_times = _decode_times(pts, dts)
            vout = copy_stream(out, vtemplate)
            vout.time_base = tb
            # the frame rate the output declares is the input's, as `run` declares it: the
            # template's is the first chunk's, and Matroska wrote its time base's 1000 fps as
            # the frame duration (a reader then expects 30x the frames: "input ended early")
            vin = inp.streams.video[0] if inp.streams.video else None
            rate = None if vin is None else vin.average_rate or vin.guessed_rate
            if rate:
                vout.codec_context.framerate = Fraction(rate)
            audio = {a.index: copy_stream(out, a) for a in inp.streams.audio}
            heard: list[tuple[Fraction, Fraction]] = []  # each audio packet's span (s)
            copy_container_tags(inp, out)

            def video() -> Iterator[tuple[Fraction, int, int, Any]]:
                packets = (pkt for _, pkt in _chunk_packets(chunks))
                for k, (pkt, p, d) in enumerate(zip(packets, pts, decode_times, strict=True)):
                    pkt.pts, pkt.dts, pkt.time_base = p, d, tb
                    pkt.stream = vout
                    yield d * tb, 0, k, pkt

            def sound() -> Iterator[tuple[Fraction, int, int, Any]]:
                if not audio:
                    return
                for k, pkt in enumerate(inp.demux(*inp.streams.audio)):
                    if pkt.dts is None:  # the demuxer's flush marker
                        continue
                    t = Fraction(pkt.dts) * Fraction(pkt.time_base)
                    if pkt.pts is not None:
                        t0 = Fraction(pkt.pts) * Fraction(pkt.time_base)
                        heard.append((t0, t0 + Fraction(pkt.duration or 0)
                                      * Fraction(pkt.time_base)))
                    pkt.stream = audio[pkt.stream.index]
                    yield t, 1, k, pkt

            for *_, pkt in heapq.merge(video(), sound(), key=lambda e: e[:3]):
                out.mux(pkt)
        os.replace(tmp, dst)
    except av.error.FFmpegError as exc:
        tmp.unlink(missing_ok=True)
        raise VideoError(dst, f"joining the chunks failed: {plain_av_error(exc)}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    shown = sorted(pts)
    step, at = max(((b - a, a) for a, b in itertools.pairwise(shown)), default=(0, shown[0]))
    return Joined(len(pts), (shown[-1] - shown[0]) * tb, step * tb, (at - shown[0]) * tb,
                  sound_goes_on(heard, at * tb, (at + step) * tb), shown[0] * tb)


__all__ = ["Joined", "join_chunks"]
