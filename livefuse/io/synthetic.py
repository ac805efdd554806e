"""Test material built from real photos: a clip with synthetic camera motion, and its writer.

Used by ``livefuse demo``, the benchmarks and the tests, so all three measure the same frames.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from livefuse.io.paths import part_path
from livefuse.types import Frame


def motion_clip(photo: Frame, size: tuple[int, int] = (640, 480), frames: int = 60,
                centre: tuple[float, float] | None = None, face_px: float | None = None,
                face_width: float = 150.0) -> Iterator[Frame]:
    """Frames of a virtual camera moving over ``photo``: a slow pan, a zoom and a small roll.

    Args:
        photo: ``(H, W, 3) uint8 BGR`` source photo.
        size: output ``(width, height)`` in px.
        frames: number of frames.
        centre: the point of ``photo`` the camera looks at (px); the photo centre by default.
        face_px: width of a face at ``centre`` in the photo (px); with it, the zoom is chosen so
            that face appears ``face_width`` px wide in the output.

    Yields:
        ``(height, width, 3) uint8 BGR`` frames. Motion: +-4 % of the width pan, 0.92-1.08 zoom,
        +-6 degrees roll, one period over the clip.
    """
    w, h = size
    cx, cy = centre if centre is not None else (photo.shape[1] / 2, photo.shape[0] / 2)
    base = face_width / face_px if face_px else min(w / photo.shape[1], h / photo.shape[0])
    for i in range(frames):
        t = 2 * math.pi * i / max(frames, 1)
        zoom = base * (1.0 + 0.08 * math.sin(t))
        angle = 6.0 * math.sin(0.5 * t)
        m = cv2.getRotationMatrix2D((cx, cy), angle, zoom)
        m[0, 2] += w / 2 - cx + 0.04 * w * math.sin(t)
        m[1, 2] += h / 2 - cy + 0.02 * h * math.cos(t)
        yield np.asarray(cv2.warpAffine(photo, m, (w, h), flags=cv2.INTER_LINEAR,
                                        borderMode=cv2.BORDER_REFLECT_101), dtype=np.uint8)


def write_clip(frames: list[Frame] | Iterator[Frame], path: str | os.PathLike[str],
               rate: Fraction = Fraction(30), audio: bool = True,
               audio_first: bool = False) -> Path:
    """Encode frames as H.264 with an optional 440 Hz AAC tone.

    Odd sizes are written as yuv444p (4:2:0 cannot hold them), as some cameras and phones do.

    ``audio_first`` puts the audio stream before the video stream (a case players must handle).
    """
    p = Path(path)
    frames = list(frames)
    # under a part name, renamed when complete: the demo writes its clip here, and a Ctrl-C
    # left half a clip.mp4 while it said no partial output was kept (a new user's trial)
    tmp = part_path(p)
    try:
        _encode_clip(tmp, frames, rate, audio, audio_first)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def _encode_clip(p: Path, frames: list[Frame], rate: Fraction, audio: bool,
                 audio_first: bool) -> None:
    h, w = frames[0].shape[:2]
    with av.open(str(p), "w") as out:
        astream = None
        if audio and audio_first:
            astream = out.add_stream("aac", rate=48000)
        vs = out.add_stream("libx264", rate=rate)
        vs.width, vs.height = w, h
        vs.pix_fmt = "yuv420p" if w % 2 == 0 and h % 2 == 0 else "yuv444p"
        vs.options = {"crf": "18", "preset": "veryfast"}
        if audio and astream is None:
            astream = out.add_stream("aac", rate=48000)
        for i, f in enumerate(frames):
            vf = av.VideoFrame.from_ndarray(f, format="bgr24")
            vf.pts, vf.time_base = i, 1 / rate
            for pkt in vs.encode(vf):
                out.mux(pkt)
        for pkt in vs.encode(None):
            out.mux(pkt)
        if astream is not None:
            write_tone(out, astream, len(frames) / float(rate))


def write_tone(out: Any, stream: Any, seconds: float, hz: float = 440.0) -> None:
    """Encode and mux ``seconds`` of a mono sine tone at ``hz`` into ``stream`` (an audio stream
    of ``out``, e.g. ``out.add_stream("aac", rate=48000)``), flushing the encoder at the end."""
    rate = stream.codec_context.sample_rate or 48000
    n = int(rate * seconds)
    tone = (0.2 * np.sin(2 * np.pi * hz * np.arange(n) / rate)).astype(np.float32)
    for start in range(0, n, 1024):
        af = av.AudioFrame.from_ndarray(tone[None, start:start + 1024], format="fltp",
                                        layout="mono")
        af.sample_rate, af.pts = rate, start
        for pkt in stream.encode(af):
            out.mux(pkt)
    for pkt in stream.encode(None):
        out.mux(pkt)
