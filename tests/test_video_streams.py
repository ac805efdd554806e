"""An output keeps what players read from its input's streams besides the packets: the display
matrix (a phone's portrait clip plays upright) and each track's language and name, through
`run`, a chunked `batch` job and its join (livefuse/io/streams.py)."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from clips import audio_packets, frame_times, ntsc_clip

from livefuse.batch.join import join_chunks
from livefuse.batch.plan import chunk_spans, key_index
from livefuse.io.streams import display_matrix
from livefuse.io.video import VideoOptions, read_frames, transcode

TAGS = [{"language": "jpn", "title": "Kamera"},  # MOV reads "deu" as none (it knows "ger")
        {"language": "eng", "title": "English"},
        {"language": "fra", "title": "Commentary"}]


def _same(frame: np.ndarray, index: int) -> np.ndarray:
    return frame


FILE_TAGS = {"title": "Raid night", "comment": "week 3",
             "creation_time": "2026-11-30T20:00:00.000000Z"}


def _seen(path: Path) -> tuple[int, list[dict[str, str]], dict[str, str]]:
    """The first frame's rotation, each stream's language and title (MP4 stores a title as
    its ``name``), and the file's own :data:`FILE_TAGS`."""
    with av.open(str(path)) as c:
        tags = [{"language": s.metadata.get("language", ""),
                 "title": s.metadata.get("title", s.metadata.get("name", ""))}
                for s in c.streams]
        rotation = next(iter(c.decode(video=0))).rotation
        own = {k: c.metadata.get(k, c.metadata.get(k.upper(), "")) for k in FILE_TAGS}
    return rotation, tags, own


@pytest.fixture
def phone_clip(tmp_path: Path) -> Path:
    return ntsc_clip(tmp_path / "in.mkv", frames=60, audio_tracks=2, rotation=-90, tags=TAGS,
                     container_tags=FILE_TAGS)


@pytest.mark.parametrize("suffix", [".mkv", ".mp4", ".mov"])
@pytest.mark.parametrize("pipelined", [False, True], ids=["serial", "pipelined"])
def test_run_keeps_the_rotation_and_the_track_tags(tmp_path: Path, phone_clip: Path,
                                                   suffix: str, pipelined: bool) -> None:
    assert _seen(phone_clip) == (-90, TAGS, FILE_TAGS)
    out = tmp_path / f"out{suffix}"
    transcode(phone_clip, out, _same, options=VideoOptions(pipelined=pipelined))
    assert _seen(out) == (-90, TAGS, FILE_TAGS)  # a gallery sorts by the recording's date
    assert audio_packets(out) == audio_packets(phone_clip)


def test_a_chunked_job_and_its_join_keep_them(tmp_path: Path, phone_clip: Path) -> None:
    index = key_index(phone_clip)
    assert index is not None
    parts = []
    for k, span in enumerate(chunk_spans(index, 0.6)):
        parts.append(tmp_path / f"chunk-{k}.mp4")
        transcode(phone_clip, parts[-1], _same, span=span)
    assert len(parts) >= 2
    out = tmp_path / "out.mkv"
    join_chunks(phone_clip, parts, out)
    assert _seen(out) == (-90, TAGS, FILE_TAGS)
    assert frame_times(out) == frame_times(phone_clip)


def test_an_upright_clip_gets_no_matrix(tmp_path: Path) -> None:
    plain = ntsc_clip(tmp_path / "plain.mp4", frames=6, audio_tracks=0)
    assert display_matrix(plain) is None
    turned = ntsc_clip(tmp_path / "turned.mp4", frames=6, audio_tracks=0, rotation=90)
    matrix = display_matrix(turned)
    assert matrix is not None and len(matrix) == 9
    assert display_matrix(tmp_path / "missing.mp4") is None  # the job's own open says why


def test_the_live_file_source_turns_a_phone_clip_upright(tmp_path: Path) -> None:
    """`live --video FILE`: the preview, the virtual camera and a recording show the clip as a
    player does (a 96x64 picture turned a quarter clockwise comes out 64 wide, 96 high)."""
    from livefuse.io.sources import VideoFileSource

    raw = read_frames(ntsc_clip(tmp_path / "raw.mp4", frames=4, audio_tracks=0))
    phone = ntsc_clip(tmp_path / "phone.mp4", frames=4, audio_tracks=0, rotation=-90)
    src = VideoFileSource(phone)
    info = src.open()
    try:
        assert (info.width, info.height) == (64, 96)
        first = src.read()
        assert first is not None and first.shape == (96, 64, 3)
        turned = np.rot90(raw[0], 3)  # a quarter turn clockwise
        assert np.abs(first.astype(int) - turned).mean() < 1.0
    finally:
        src.close()
    plain = VideoFileSource(tmp_path / "raw.mp4")
    info = plain.open()
    assert (info.width, info.height) == (96, 64)
    plain.close()


# (a, b, c, d) of a display matrix: a stored pixel (x, y) is shown at (a x + c y, b x + d y)
_DIHEDRAL = [(1, 0, 0, 1), (0, 1, -1, 0), (-1, 0, 0, -1), (0, -1, 1, 0),
             (-1, 0, 0, 1), (1, 0, 0, -1), (0, 1, 1, 0), (0, -1, -1, 0)]


def _matrix(a: int, b: int, c: int, d: int) -> tuple[int, ...]:
    return (a << 16, b << 16, 0, c << 16, d << 16, 0, 0, 0, 1 << 30)


def _shown(img: np.ndarray, a: int, b: int, c: int, d: int) -> np.ndarray:
    """``img`` as the matrix says to show it, pixel by pixel."""
    h, w = img.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w]
    sx, sy = a * xs + c * ys, b * xs + d * ys
    sx, sy = sx - sx.min(), sy - sy.min()
    out = np.zeros((sy.max() + 1, sx.max() + 1, *img.shape[2:]), img.dtype)
    out[sy, sx] = img[ys, xs]
    return out


@pytest.mark.parametrize("abcd", _DIHEDRAL)
def test_every_quarter_turn_and_mirror_of_a_display_matrix_is_shown_as_it_says(
        abcd: tuple[int, int, int, int]) -> None:
    from livefuse.io.streams import upright_for

    img = np.arange(2 * 3 * 1, dtype=np.uint8).reshape(2, 3, 1)
    got = upright_for(_matrix(*abcd)).apply(img)
    np.testing.assert_array_equal(got, _shown(img, *abcd))


def test_the_live_file_source_shows_a_mirrored_clip_as_a_player_does(tmp_path: Path) -> None:
    """A selfie camera's clip can carry a mirror in its matrix; only the rotation was applied."""
    from livefuse.io.sources import VideoFileSource

    raw = read_frames(ntsc_clip(tmp_path / "raw.mp4", frames=3, audio_tracks=0))
    for abcd in [(-1, 0, 0, 1), (0, 1, 1, 0)]:  # a mirror; a mirror and a quarter turn
        clip = ntsc_clip(tmp_path / "m.mp4", frames=3, audio_tracks=0, matrix=_matrix(*abcd))
        src = VideoFileSource(clip)
        info = src.open()
        try:
            first = src.read()
            want = _shown(raw[0], *abcd)
            assert first is not None and first.shape == want.shape
            assert (info.width, info.height) == (want.shape[1], want.shape[0])
            assert np.abs(first.astype(int) - want).mean() < 1.0
        finally:
            src.close()


def test_an_mkv_output_of_a_finer_time_base_says_its_timestamps_are_rounded(
        tmp_path: Path) -> None:
    """OBS's MPEG-TS counts in 1/90000 s, Matroska in 1 ms: 'every frame keeps its timestamp'
    was said of frames moved by up to half a millisecond."""
    from fractions import Fraction

    from clips import write_clip

    src = write_clip(tmp_path / "rec.ts", [3003 * i for i in range(6)], Fraction(1, 90000),
                     Fraction(30000, 1001), audio_tracks=1)
    assert transcode(src, tmp_path / "o.mkv", _same).time_base_written == Fraction(1, 1000)
    assert transcode(src, tmp_path / "o.mp4", _same).time_base_written is None
    assert transcode(tmp_path / "o.mkv", tmp_path / "again.mkv", _same
                     ).time_base_written is None


def _late_mkv(path: Path, frames: int = 45) -> Path:
    """Matroska (it declares only the file's duration) whose video starts 0.5 s after its
    audio."""
    from fractions import Fraction

    from clips import write_clip

    return write_clip(path, [1001 * (15 + i) for i in range(frames)], Fraction(1, 30000),
                      Fraction(30000, 1001), audio_tracks=1)


def test_a_video_starting_after_its_audio_is_not_taken_for_a_cut_file(tmp_path: Path) -> None:
    """The 0.5 s before the video counted as missing frames: "input ended early: 45 frames,
    1.5 s of 2.0 s", exit 3, on a whole file."""
    from livefuse.io.sources import EndOfStream, VideoFileSource

    src = _late_mkv(tmp_path / "late.mkv")
    assert transcode(src, tmp_path / "o.mkv", _same).incomplete is None
    live = VideoFileSource(src)
    live.open()
    try:
        with pytest.raises(EndOfStream) as ended:
            while True:
                live.read()
        assert not str(ended.value), ended.value
    finally:
        live.close()


def test_live_says_a_cut_matroska_file_ended_early(tmp_path: Path) -> None:
    """A new user's trial: `live --video` on a cut-off MKV said "source ended", exit 0, where
    `run` said "input ended early" (Matroska declares a duration, not a frame count)."""
    from livefuse.io.sources import EndOfStream, VideoFileSource

    whole = ntsc_clip(tmp_path / "whole.mkv", frames=120, audio_tracks=1)
    cut = tmp_path / "cut.mkv"
    data = whole.read_bytes()
    cut.write_bytes(data[:len(data) * 2 // 5])
    assert "input ended early" in str(transcode(cut, tmp_path / "o.mkv", _same).incomplete)
    live = VideoFileSource(cut)
    live.open()
    try:
        with pytest.raises(EndOfStream, match=r"input ended early: .* frames, .* s of"):
            while True:
                live.read()
    finally:
        live.close()


def test_a_subtitle_track_left_out_is_said(tmp_path: Path) -> None:
    """A new user's trial: an SRT track of an .mkv was left out of the output without a word.
    livefuse writes the video and copies the audio; what else the input holds is named."""
    srt = tmp_path / "subs.srt"
    srt.write_text("1\n00:00:00,100 --> 00:00:01,000\nHello\n\n2\n00:00:01,200 --> "
                   "00:00:01,800\nchat\n", encoding="utf-8")
    plain = ntsc_clip(tmp_path / "plain.mp4", frames=60)
    src = tmp_path / "subbed.mkv"
    with av.open(str(plain)) as a, av.open(str(srt)) as b, av.open(str(src), "w") as out:
        streams = {(0, s.index): out.add_stream_from_template(s) for s in a.streams}
        streams[(1, 0)] = out.add_stream_from_template(b.streams[0])
        packets = [(k, p) for k, c in enumerate((a, b)) for p in c.demux() if p.dts is not None]
        packets.sort(key=lambda kp: kp[1].dts * kp[1].time_base)
        for k, p in packets:
            p.stream = streams[(k, p.stream.index)]
            out.mux(p)
    result = transcode(src, tmp_path / "out.mkv", _same)
    assert result.frames == 60
    assert "input has 1 subtitle stream (srt); the output leaves it out (livefuse writes " \
           "the video and copies the audio tracks)" in result.notes
    assert not any("subtitle" in n for n in transcode(plain, tmp_path / "plain.mkv",
                                                      _same).notes)
