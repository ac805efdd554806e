"""A video job re-encodes only what processing changed (issue 16): outside the regions a
processor reports, the output carries the decoded input's own YUV samples, bit for bit with a
lossless encoder; inside them the BGR result is converted in the input's own colour description;
and the output says the colours are what the input said (a BT.709 recording stays BT.709)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from clips import write_clip

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.imaging import LoadedImage
from livefuse.io.video import Processed, VideoOptions, transcode
from livefuse.run import EngineProcessor, RunSummary

LOSSLESS = 0  # x264's CRF 0: what was given to the encoder comes back out


def _clip(path: Path, size: tuple[int, int], colorspace: int = 2, color_range: int = 0,
          frames: int = 6, picture: np.ndarray | None = None) -> Path:
    """A short H.264 clip tagged with ``colorspace``/``color_range`` (FFmpeg's codes), its
    samples converted from a photo in that description."""
    w, h = size
    if picture is None:
        from skimage import data
        picture = cv2.resize(np.ascontiguousarray(data.astronaut()[:, :, ::-1]), (w, h))
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"crf": "10"}
        s.codec_context.colorspace, s.codec_context.color_range = colorspace, color_range
        for i in range(frames):
            f = av.VideoFrame.from_ndarray(picture, format="bgr24").reformat(
                format="yuv420p", dst_colorspace=colorspace, dst_color_range=color_range or None)
            f.pts = i
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)
    return path


def _loaded(bgr: np.ndarray) -> LoadedImage:
    return LoadedImage(bgr=bgr, alpha=None, path=None)


def _decoded(path: Path) -> tuple[list[np.ndarray], av.VideoFrame]:
    with av.open(str(path)) as c:
        frames = list(c.decode(video=0))
        return [f.to_ndarray(format=f.format.name).astype(int) for f in frames], frames[0]


def _luma(yuv: np.ndarray, h: int) -> np.ndarray:
    return yuv[:h]


def _invert(box: tuple[int, int, int, int]):  # type: ignore[no-untyped-def]
    x0, y0, x1, y1 = box

    def fn(frame: np.ndarray, index: int) -> Processed:
        frame[y0:y1, x0:x1] = 255 - frame[y0:y1, x0:x1]
        return Processed(frame, [box])
    return fn


@pytest.mark.parametrize("size", [(160, 120), (160, 118)])  # 118: chroma planes off row bounds
@pytest.mark.parametrize("pipelined", [False, True])
def test_outside_the_regions_the_input_samples_are_kept(tmp_path: Path, size: tuple[int, int],
                                                         pipelined: bool) -> None:
    w, h = size
    src = _clip(tmp_path / "in.mp4", size, colorspace=1, color_range=1)
    box = (41, 27, 97, 83)  # odd edges: the region grows to whole 2x2 chroma blocks
    out = tmp_path / "out.mkv"
    transcode(src, out, _invert(box), crf=LOSSLESS,
              options=VideoOptions(pipelined=pipelined, depth=2))
    got, _ = _decoded(out)
    want, first = _decoded(src)
    assert len(got) == len(want) == 6
    outside = np.ones((h, w), bool)
    outside[26:84, 40:98] = False
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(_luma(a, h)[outside], _luma(b, h)[outside])
        # inside: the inverted picture, converted back in the input's own description
        inv = 255 - first.to_ndarray(format="bgr24")
        back = av.VideoFrame.from_ndarray(np.ascontiguousarray(inv), format="bgr24").reformat(
            format="yuv420p", dst_colorspace=1, dst_color_range=1).to_ndarray().astype(int)
        x0, y0, x1, y1 = box
        assert np.abs(_luma(a, h)[y0:y1, x0:x1] - back[y0:y1, x0:x1]).mean() < 2.0


def test_without_regions_the_whole_frame_is_converted(tmp_path: Path) -> None:
    # a plain function may change anything: every pixel goes through the conversion
    src = _clip(tmp_path / "in.mp4", (160, 120))
    out = tmp_path / "out.mkv"

    def paint(frame: np.ndarray, index: int) -> np.ndarray:
        frame[:, :80] = (0, 0, 255)
        return frame
    transcode(src, out, paint, crf=LOSSLESS)
    _, first = _decoded(out)
    red = first.to_ndarray(format="bgr24")[:, :80].reshape(-1, 3).mean(0)
    assert red[2] > 240 and red[0] < 10 and red[1] < 10


@pytest.mark.parametrize(("colorspace", "color_range"), [(1, 1), (5, 1), (1, 2)])
def test_colours_survive_and_are_described_as_the_input_did(
        tmp_path: Path, colorspace: int, color_range: int) -> None:
    """Saturated colours through a whole-frame conversion come back where they were: a BT.709
    input decoded as 709 and encoded as 601 shifted pure red by about 20 levels."""
    picture = np.zeros((96, 128, 3), np.uint8)
    picture[:, :32] = (0, 0, 230)
    picture[:, 32:64] = (0, 200, 0)
    picture[:, 64:96] = (220, 0, 0)
    picture[:, 96:] = (40, 180, 220)
    src = _clip(tmp_path / "in.mp4", (128, 96), colorspace, color_range, picture=picture)
    out = tmp_path / "out.mkv"
    transcode(src, out, lambda f, i: f, crf=LOSSLESS)
    with av.open(str(src)) as c:
        before = next(c.decode(video=0)).to_ndarray(format="bgr24").astype(int)
    with av.open(str(out)) as c:
        vs = c.streams.video[0].codec_context
        assert (vs.colorspace, vs.color_range) == (colorspace, color_range)
        after = next(c.decode(video=0)).to_ndarray(format="bgr24").astype(int)
    for x in (16, 48, 80, 112):  # the middle of each bar, away from chroma edges
        assert np.abs(after[:, x] - before[:, x]).max() <= 3, x


def test_the_engine_reports_every_region_it_changed(t1_bgr: np.ndarray,
                                                   astronaut_bgr: np.ndarray) -> None:
    engine = Engine(EngineConfig(engine="classic"))
    engine.set_source(_loaded(astronaut_bgr))
    frame = np.ascontiguousarray(t1_bgr)
    packet = engine.process(frame, strict=False)
    assert packet.output is not None and packet.swapped >= 1
    assert len(packet.regions) == packet.swapped
    changed = np.any(packet.output != frame, axis=2)
    covered = np.zeros_like(changed)
    for x0, y0, x1, y1 in packet.regions:
        covered[y0:y1, x0:x1] = True
    assert changed.any() and not (changed & ~covered).any()


def test_a_clip_of_a_face_keeps_its_background_samples(tmp_path: Path, t1_bgr: np.ndarray,
                                                      astronaut_bgr: np.ndarray) -> None:
    """What ``livefuse run`` does to a clip, lossless: every pixel away from the swapped faces
    is the input's own sample."""
    h, w = (t1_bgr.shape[0] // 2) & ~1, (t1_bgr.shape[1] // 2) & ~1
    picture = cv2.resize(t1_bgr, (w, h))
    src = write_clip(tmp_path / "in.mp4", list(range(4)), Fraction(1, 30), Fraction(30),
                     audio_tracks=0, pictures=[picture] * 4)
    out = tmp_path / "out.mkv"
    engine = Engine(EngineConfig(engine="classic"))
    engine.set_source(_loaded(astronaut_bgr))
    summary = RunSummary(target=src, output=out)
    transcode(src, out, processor=EngineProcessor(engine, summary), crf=LOSSLESS)
    assert summary.faces_swapped >= 4
    got, _ = _decoded(out)
    want, _ = _decoded(src)
    pairs = list(zip(got, want, strict=True))
    differ = np.mean([np.mean(_luma(a, h) != _luma(b, h)) for a, b in pairs])
    assert 0.01 < differ < 0.2  # faces were swapped; the rest is the input's, sample for sample
