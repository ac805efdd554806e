"""Long videos cut at keyframes, each chunk processed on its own, joined by stream copy: the same
frames in the same order, every timestamp equal to the input's, every audio packet byte-identical
(issue 16). No Ray here: the chunks go through ``transcode`` one after another."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from clips import audio_packets, frame_times, ntsc_clip, vfr_clip
from render_count import RenderCount

from livefuse.batch.join import _decode_times, join_chunks
from livefuse.batch.plan import chunk_spans, key_index
from livefuse.io.video import read_frames, transcode


def _mark(frame: np.ndarray, index: int) -> np.ndarray:
    frame[:16, :16] = 30 + 14 * (index % 14)
    return frame


def _marks(path: Path) -> list[int]:
    """Each frame's painted index modulo 14 (marks are 14 levels apart, far above the codec's
    error of about 3)."""
    return [round((float(f[4:12, 4:12].mean()) - 30) / 14) for f in read_frames(path)]


def _expected(n: int) -> list[int]:
    return [i % 14 for i in range(n)]


def _chunked(src: Path, out: Path, chunk_s: float) -> int:
    index = key_index(src)
    assert index is not None
    spans = chunk_spans(index, chunk_s)
    parts = []
    for k, span in enumerate(spans):
        part = out.parent / f"chunk-{k}.mp4"
        transcode(src, part, _mark, span=span)
        parts.append(part)
    join_chunks(src, parts, out)
    return len(spans)


@pytest.mark.parametrize("kind", ["ntsc", "vfr", "ts"])
def test_split_and_join_is_exact(tmp_path: Path, kind: str) -> None:
    if kind == "ntsc":  # 30000/1001 with B-frames and two AAC tracks
        src = ntsc_clip(tmp_path / "in.mp4", frames=120, audio_tracks=2)
    elif kind == "ts":  # MPEG-TS (OBS's recordings), B-frames: its demuxer seeks by dts
        src = ntsc_clip(tmp_path / "in.ts", frames=120, audio_tracks=1)
    else:  # variable frame rate, 1 ms time base, a 300 ms stall, Matroska
        src = vfr_clip(tmp_path / "in.mkv", frames=120)
    out = tmp_path / "out.mp4"
    whole = tmp_path / "whole.mp4"
    transcode(src, whole, _mark)
    assert _chunked(src, out, chunk_s=0.8) >= 3
    # every frame, at its own timestamp, in its own place
    assert frame_times(out) == frame_times(src) == frame_times(whole)
    assert _marks(out) == _marks(whole) == _expected(120)
    # every audio packet copied byte for byte, at its own time, from the input (less the ADTS
    # header each AAC packet carries in MPEG-TS, which MP4 keeps in the stream's own header)
    given, got = audio_packets(src), audio_packets(out)
    if kind == "ts":
        assert all(data[:2] == b"\xff\xf1" for _, _, data in given)  # ADTS sync, no CRC
        given = [(k, t, data[7:]) for k, t, data in given]
        # MPEG-TS's 90 kHz ticks in MP4's 48 kHz audio time base: within a tick
        assert all(abs(a[1] - b[1]) <= Fraction(1, 48000) for a, b in zip(given, got, strict=True))
        got = [(k, given_t, data) for (k, _, data), (_, given_t, _) in zip(got, given, strict=True)]
    assert got == given
    assert len(given) > 20


def test_an_open_gop_keyframe_is_never_a_cut(tmp_path: Path) -> None:
    src = ntsc_clip(tmp_path / "open.mp4", frames=96, open_gop=True, gop=12)
    index = key_index(src)
    assert index is not None
    # x264's open GOPs: keyframes whose leading B-frames are shown before them are not cuts
    assert 0 < len(index.cuts) < len(index.keyframes)
    out = tmp_path / "out.mp4"
    _chunked(src, out, chunk_s=0.5)
    assert frame_times(out) == frame_times(src)
    assert _marks(out) == _expected(96)


@pytest.mark.parametrize("suffix", [".mp4", ".ts"])
def test_chunks_warm_up_on_the_detection_phase(tmp_path: Path, suffix: str) -> None:
    """Each chunk decodes from the keyframe before its warm-up, in MPEG-TS too (whose demuxer
    seeks by decode timestamp: a seek to a keyframe's pts landed one packet past it and lost
    the GOP); the first chunk reads the file from its start, with no seek at all."""
    src = ntsc_clip(tmp_path / f"in{suffix}", frames=150, gop=15)
    index = key_index(src)
    assert index is not None
    spans = chunk_spans(index, 1.0, warmup_s=0.5, detect_every=4)
    assert len(spans) >= 3 and spans[0].seek is None
    seen: list[list[int]] = []
    for k, span in enumerate(spans[1:]):
        start = index.pts.index(span.start)
        # the warm-up starts half a second before the chunk, on a multiple of detect_every
        assert span.first_index % 4 == 0 and start - 19 <= span.first_index <= start - 15
        got: list[int] = []

        def record(frame: np.ndarray, i: int, got: list[int] = got) -> np.ndarray:
            got.append(i)
            return frame

        transcode(src, tmp_path / f"c{k}.mp4", record, span=span)
        end = len(index.pts) if span.end is None else index.pts.index(span.end)
        # frames from the warm-up on are processed in order, with their indices in the video
        assert got == list(range(span.first_index, end))
        seen.append(got)
    assert len(read_frames(tmp_path / "c0.mp4")) == len(seen[0]) - (
        index.pts.index(spans[1].start) - spans[1].first_index)


def test_decode_times_are_rebuilt_only_when_chunks_overlap() -> None:
    # a B-frame stream: decode order 0 3 1 2 6 4 5, encoder dts rising and <= pts: kept
    pts = [0, 3, 1, 2, 6, 4, 5]
    dts: list[int | None] = [-2, -1, 0, 1, 2, 3, 4]
    assert _decode_times(pts, dts) == dts
    # two chunks whose encoders each began at pts - 2: dts fall back at the join: rebuilt,
    # strictly rising and never after their pts
    dts2: list[int | None] = [-2, -1, 0, 1, 1, 2, 3]
    rebuilt = _decode_times(pts, dts2)
    assert all(b > a for a, b in itertools.pairwise(rebuilt))
    assert all(d <= p for d, p in zip(rebuilt, pts, strict=True))
    assert rebuilt != dts2


def test_a_vfr_clip_chunked_keeps_its_stall(tmp_path: Path) -> None:
    src = vfr_clip(tmp_path / "in.mkv", frames=60, seed=9)
    out = tmp_path / "out.mkv"
    _chunked(src, out, chunk_s=0.5)
    times = frame_times(out)
    assert max(b - a for a, b in itertools.pairwise(times)) == Fraction(300, 1000)
    assert times == frame_times(src)


def test_the_join_shows_no_jump_in_tracking(tmp_path: Path, t1_path: Path,
                                            analyser) -> None:  # type: ignore[no-untyped-def]
    """Each chunk starts with a fresh detection, yet after its warm-up second the tracked and
    smoothed landmarks at its first frames are the ones one run over the whole video has (to
    1/20 px; without the warm-up they were up to 0.77 px off, a visible shake at each cut)."""
    from clips import face_clip

    from livefuse.config import EngineConfig
    from livefuse.engine import Engine
    from livefuse.imaging import LoadedImage, load_image
    from livefuse.samples import astronaut

    photo = load_image(t1_path).bgr
    face = max(analyser.detect(photo), key=lambda f: f.area)
    src = face_clip(tmp_path / "talk.mp4", photo, face.bbox, 90, gop=15, audio_tracks=0)

    class Recorder:
        def __init__(self) -> None:
            self.engine = Engine(EngineConfig(engine="classic", detect_every=3),
                                 analyser=analyser)
            self.engine.set_source(LoadedImage(bgr=astronaut(), alpha=None,
                                               path=Path("astronaut.png")))
            self.kps: dict[int, np.ndarray] = {}

        def stage(self, frame: np.ndarray) -> object:
            return self.engine.stage(frame)

        def process(self, staged: object, index: int, t_s: float,
                    following: object = None) -> np.ndarray:
            p = self.engine.process(staged, index=index,  # type: ignore[arg-type]
                                    t_capture_ns=round(t_s * 1e9), in_place=True,
                                    ahead=following)  # type: ignore[arg-type]
            if p.faces:
                self.kps[index] = p.faces[0].kps.copy()
            assert p.output is not None
            return p.output

        def warm(self, staged: object, index: int, t_s: float) -> None:
            p = self.engine.track(staged, index=index,  # type: ignore[arg-type]
                                  t_capture_ns=round(t_s * 1e9))
            if p.faces:
                self.kps[index] = p.faces[0].kps.copy()

    whole = Recorder()
    transcode(src, tmp_path / "whole.mp4", processor=whole)
    index = key_index(src)
    assert index is not None
    spans = chunk_spans(index, 1.0, detect_every=3)
    assert len(spans) >= 2
    worst = 0.0
    for k, span in enumerate(spans[1:]):
        part = Recorder()
        transcode(src, tmp_path / f"c{k}.mp4", processor=part, span=span)
        start = index.pts.index(span.start)
        for i in range(start, start + 5):
            worst = max(worst, float(np.abs(part.kps[i] - whole.kps[i]).max()))
    assert worst < 0.05


def test_chunks_cut_at_the_clean_cut_nearest_to_their_length() -> None:
    """A new user's 20 s clip with a keyframe every 8.3 s ran whole with 10 s chunks: the first
    cut past 10 s (16.7 s) left 3.3 s, too short to stand alone. The nearest one (8.3 s) cuts."""
    from fractions import Fraction

    from livefuse.batch.plan import KeyIndex

    pts = tuple(range(600))  # 20 s at 30 fps, time base 1/30
    index = KeyIndex(pts, (0, 250, 500), (0, 250, 500), Fraction(1, 30), Fraction(30))
    assert [s.start for s in chunk_spans(index, 10.0)] == [0, 250]
    # keyframes every second: the cuts land on the chunk length, as before
    every_s = KeyIndex(pts, tuple(range(0, 600, 30)), tuple(range(0, 600, 30)), Fraction(1, 30),
                       Fraction(30))
    assert [s.start for s in chunk_spans(every_s, 5.0)] == [0, 150, 300, 450]


@pytest.mark.parametrize("cache", [False, True])
def test_warm_up_frames_are_tracked_not_swapped(tmp_path: Path, t1_path: Path, analyser,  # type: ignore[no-untyped-def]
                                                cache: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk's warm-up second is not written, so its frames go through ``Engine.track``: no
    swap is rendered for them, and the chunk comes out pixel for pixel as it did when they were
    swapped whole. With the pose cache on (its entries carry into the chunk) they still are."""
    from clips import encoder_inputs, face_clip

    from livefuse.config import CacheConfig, EngineConfig
    from livefuse.engine import Engine
    from livefuse.imaging import LoadedImage, load_image
    from livefuse.run import EngineProcessor, RunSummary
    from livefuse.samples import astronaut

    photo = load_image(t1_path).bgr
    face = max(analyser.detect(photo), key=lambda f: f.area)
    src = face_clip(tmp_path / "talk.mp4", photo, face.bbox, 60, gop=15, audio_tracks=0)
    index = key_index(src)
    assert index is not None
    span = chunk_spans(index, 1.0, warmup_s=0.5)[1]
    warm = index.pts.index(span.start) - span.first_index
    assert warm == 15

    def chunk(name: str, swap_warm_up: bool) -> tuple[list[tuple[int, str]], int]:
        engine = Engine(EngineConfig(engine="classic", detect_every=3), analyser=analyser,
                        cache=CacheConfig(enabled=cache))
        engine.set_source(LoadedImage(bgr=astronaut(), alpha=None, path=Path("a.png")))
        renders = RenderCount(engine)
        processor = EngineProcessor(engine, RunSummary(src, tmp_path / name))
        if swap_warm_up:  # how chunks ran before: every warm-up frame swapped and thrown away
            processor.warm = lambda staged, i, t_s: processor.process(  # type: ignore[method-assign]
                staged, i, t_s) and None
        seen = encoder_inputs(monkeypatch)
        transcode(src, tmp_path / name, processor=processor, span=span)
        monkeypatch.undo()
        return seen, renders.n

    tracked, renders = chunk("tracked.mp4", False)
    swapped, renders_before = chunk("swapped.mp4", True)
    assert len(tracked) == len(swapped) > 0
    assert tracked == swapped  # the frames given to the encoder (not its bytes: clips.py)
    if cache:
        assert renders == renders_before
    else:  # one swap per written frame, none for the warm-up's
        assert (renders, renders_before) == (len(tracked), len(tracked) + warm)


def test_chunks_are_equal_and_the_auto_length_gives_every_worker_as_many() -> None:
    """60 s with a keyframe every second in 7.5 s chunks came out as eight 7 s chunks and a 4 s
    one (each cut placed from the one before, its error carried on), so on four workers one ran
    540 frames while three ran 420. Cuts now go nearest to an even division of the video."""
    from fractions import Fraction

    from livefuse.batch.plan import Item, KeyIndex, auto_chunk_seconds

    pts = tuple(range(1800))  # 60 s at 30 fps, time base 1/30
    every_s = tuple(range(0, 1800, 30))
    index = KeyIndex(pts, every_s, every_s, Fraction(1, 30), Fraction(30))
    lengths = [((b or 1800) - a) / 30 for a, b in itertools.pairwise(
        [s.start for s in chunk_spans(index, 7.5)] + [None])]
    assert len(lengths) == 8 and sorted(lengths) == [7.0] * 4 + [8.0] * 4
    assert [s.start for s in chunk_spans(index, 15.0)] == [0, 450, 900, 1350]

    def video(seconds: float) -> Item:
        return Item(Path("in.mp4"), Path("out.mp4"), "video", seconds=seconds)

    # as many chunks for every worker: one each while two each would be under 10 s
    assert auto_chunk_seconds([video(60.0)], 4) == 15.0
    assert auto_chunk_seconds([video(200.0)], 4) == 25.0
    assert auto_chunk_seconds([video(60.0)], 1) == 0.0


@pytest.mark.parametrize("suffix", [".mkv", ".mp4", ".mov"])
def test_a_joined_video_declares_the_inputs_frame_rate(tmp_path: Path, suffix: str) -> None:
    """A new user's trial: a chunked Matroska output declared 1000 fps (its time base) where
    the input and the same video done whole declare 30; read back, `run` then called it cut
    short ("input ended early: 129 frames ... about 6037")."""
    import av
    from clips import write_clip

    src = write_clip(tmp_path / "in.mkv", [round(i * 1000 / 30) for i in range(90)],
                     Fraction(1, 1000), Fraction(30), gop=15, audio_tracks=1)
    whole, out = tmp_path / f"whole{suffix}", tmp_path / f"out{suffix}"
    transcode(src, whole, _mark)
    assert _chunked(src, out, chunk_s=0.8) >= 3
    rates = []
    for path in (src, whole, out):
        with av.open(str(path)) as c:
            rates.append(c.streams.video[0].average_rate)
    assert rates[2] == rates[1] and abs(float(rates[2]) - 30) < 0.05, rates
