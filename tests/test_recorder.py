"""The live recorder (issues 15 item 7, 17 item 7): it encodes on its own thread and never holds
up the inference thread; a recording of a video file keeps the file's timestamps and rate and
copies its audio in sync, even when the live loop drops frames or loops the file."""

from __future__ import annotations

import threading
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from clips import audio_packets, frame_times, ntsc_clip, write_clip

from livefuse.io.sinks import RecorderSink
from livefuse.io.video import read_frames


def test_the_recorder_encodes_on_its_own_thread_and_send_never_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[str] = set()
    real = RecorderSink._encode

    def slow_encode(self: RecorderSink, frame: np.ndarray, t: int) -> None:
        threads.add(threading.current_thread().name)
        time.sleep(0.05)  # x264 on a busy CPU
        real(self, frame, t)

    monkeypatch.setattr(RecorderSink, "_encode", slow_encode)
    rec = RecorderSink(tmp_path / "rec.mp4")
    waits = []
    for i in range(20):
        t = time.perf_counter()
        rec.send(np.full((48, 64, 3), i * 10, np.uint8), i * 33_333_333)
        waits.append(time.perf_counter() - t)
    assert max(waits) < 0.02  # 20 frames handed over while one took 50 ms to encode
    rec.close()
    assert threads == {"livefuse-recorder"}
    assert len(read_frames(tmp_path / "rec.mp4")) == 20 and rec.dropped == 0


def test_a_full_buffer_drops_the_oldest_frame_and_counts_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    real = RecorderSink._encode

    def blocked(self: RecorderSink, frame: np.ndarray, t: int) -> None:
        gate.wait(10)
        real(self, frame, t)

    monkeypatch.setattr(RecorderSink, "_encode", blocked)
    monkeypatch.setattr("livefuse.io.sinks.RECORDER_BUFFER_BYTES", 5 * 48 * 64 * 3)
    rec = RecorderSink(tmp_path / "rec.mp4")
    for i in range(12):
        rec.send(np.full((48, 64, 3), i * 10, np.uint8), i * 33_333_333)
    gate.set()
    rec.close()
    assert rec.dropped >= 6
    assert any("dropped" in n for n in rec.notes)


class FakeClock:
    """A file's timeline with chosen capture stamps: frame k of the file was delivered at
    ``stamps[k]``; looping passes begin at ``starts``."""

    def __init__(self, path: Path, times: list[Fraction], tb: Fraction, rate: Fraction,
                 starts: list[Fraction] | None = None) -> None:
        self.path, self.times, self.tb, self.rate = path, times, tb, rate
        self.starts = starts or [Fraction(0)]

    def media_time(self, t_capture_ns: int) -> Fraction | None:
        return self.times[t_capture_ns] if 0 <= t_capture_ns < len(self.times) else None

    def timing(self) -> tuple[Fraction, Fraction]:
        return self.tb, self.rate

    def pass_starts(self) -> list[Fraction]:
        return self.starts

    def origin(self) -> Fraction:
        return Fraction(0)  # its media times are the file's own


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_a_file_recording_keeps_its_timestamps_rate_and_audio_in_sync(
        tmp_path: Path, suffix: str) -> None:
    src = ntsc_clip(tmp_path / "in.mp4", frames=90, audio_tracks=1,
                    tags=[{}, {"language": "fra"}])
    times = frame_times(src)
    frames = read_frames(src)
    clock = FakeClock(src, times, Fraction(1, 30000), Fraction(30000, 1001))
    out = tmp_path / f"rec{suffix}"
    kept = [k for k in range(15, 90) if k % 4 != 1]  # the live loop dropped every 4th frame
    with RecorderSink(out, fps=30, clock=clock) as rec:
        for k in kept:
            rec.send(frames[k], k)  # the capture stamp is k (FakeClock maps it)
    got = frame_times(out)
    t0 = times[kept[0]]
    tick = Fraction(1, 1000) if suffix == ".mkv" else 0  # Matroska counts in ms
    # each frame where it is in the file
    assert len(got) == len(kept)
    assert all(abs(g - (times[k] - t0)) <= tick for g, k in zip(got, kept, strict=True))
    with av.open(str(out)) as c:
        vs = c.streams.video[0]
        assert vs.base_rate == Fraction(30000, 1001)  # the file's rate, not the loop's pace
        assert len(c.streams.audio) == 1
        assert c.streams.audio[0].metadata.get("language") == "fra"  # the track's own tags
    # every audio packet from the first recorded frame on: the file's bytes, moved by t0
    want = [(0, t - t0, data) for _, t, data in audio_packets(src)
            if t0 <= t < times[kept[-1]] + Fraction(1001, 30000)]
    rec_audio = audio_packets(out)
    assert [d for _, _, d in rec_audio] == [d for _, _, d in want]
    assert max(abs(a[1] - b[1]) for a, b in zip(rec_audio, want, strict=True)) < \
        Fraction(1, 1000)  # Matroska counts in ms; MP4 exactly


def test_a_looped_file_keeps_counting_and_repeats_its_audio(tmp_path: Path) -> None:
    src = write_clip(tmp_path / "in.mp4", [i for i in range(30)], Fraction(1, 30),
                     Fraction(30), audio_tracks=1)
    times = frame_times(src)
    second = times[-1] + Fraction(1, 30)  # the second pass starts one frame after the last
    clock = FakeClock(src, times + [second + t for t in times], Fraction(1, 30), Fraction(30),
                      starts=[Fraction(0), second])
    frames = read_frames(src)
    out = tmp_path / "rec.mp4"
    with RecorderSink(out, clock=clock) as rec:
        for k in range(60):
            rec.send(frames[k % 30], k)
    assert frame_times(out) == [Fraction(k, 30) for k in range(60)]
    one_pass = [d for _, t, d in audio_packets(src) if t >= 0 and t < second]
    assert [d for _, _, d in audio_packets(out)][:2 * len(one_pass)] == one_pass * 2


def test_live_records_a_video_file_with_its_audio_and_timestamps(
        tmp_path: Path, astronaut_path: Path) -> None:
    from livefuse.cli import main

    src = ntsc_clip(tmp_path / "in.mp4", frames=45, audio_tracks=1, size=(160, 120))
    out = tmp_path / "rec.mp4"
    assert main(["live", "-s", str(astronaut_path), "--video", str(src), "--record", str(out),
                 "--engine", "classic"]) == 0
    grid = set(frame_times(src))
    got = frame_times(out)
    assert len(got) >= 5
    # every recorded frame sits on the file's own frame grid (shifted to start at 0)
    _offset(got, grid)
    with av.open(str(out)) as c:
        assert len(c.streams.audio) == 1
        assert c.streams.video[0].base_rate == Fraction(30000, 1001)
    assert len(audio_packets(out)) >= 10


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_live_records_a_file_whose_video_starts_after_its_audio_in_sync(
        tmp_path: Path, astronaut_path: Path, suffix: str) -> None:
    """A new user's trial: a video starting 0.5 s into the file (an OBS FLV or TS starts its
    video a B-frame delay late) was recorded with its sound 500 ms (67 ms) late, exit 0: the
    video was put at 0 and the audio kept the file's own times."""
    from clips import write_clip

    from livefuse.cli import main

    late = 15  # frames: the video's first timestamp is 0.5 s, the audio's 0
    src = write_clip(tmp_path / f"in{suffix}", [1001 * (late + i) for i in range(45)],
                     Fraction(1, 30000), Fraction(30000, 1001), size=(160, 120),
                     audio_tracks=1)
    assert frame_times(src)[0] >= Fraction(1, 2) and audio_packets(src)[0][1] < Fraction(1, 10)
    out = tmp_path / "rec.mp4"
    assert main(["live", "-s", str(astronaut_path), "--video", str(src), "--record", str(out),
                 "--engine", "classic"]) == 0
    got = frame_times(out)
    first = _offset(got, set(frame_times(src)))  # the file time of the first recorded frame
    end = first + got[-1] + Fraction(1001, 30000)
    want = [(t - first, data) for _, t, data in audio_packets(src) if first <= t < end]
    rec_audio = [(t, data) for _, t, data in audio_packets(out)]
    assert len(rec_audio) >= 10 and [d for _, d in rec_audio] == [d for _, d in want]
    assert max(abs(a[0] - b[0]) for a, b in zip(rec_audio, want, strict=True)) < \
        Fraction(1, 1000)


def _offset(got: list[Fraction], grid: set[Fraction]) -> Fraction:
    """The file time of the first recorded frame: the grid point that puts every recorded
    frame on the grid."""
    for g in sorted(grid):
        if all(t + g in grid for t in got):
            return g
    raise AssertionError("the recorded frames are not on the file's frame grid")


def test_a_relative_recording_path_lands_where_it_was_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file opens on the writer thread after the first frame: a chdir in between (the app's
    file dialogs) must not move the recording."""
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    rec = RecorderSink("rec.mp4")
    monkeypatch.chdir(tmp_path / "elsewhere")
    for i in range(3):
        rec.send(np.full((48, 64, 3), i * 10, np.uint8), i * 33_333_333)
    rec.close()
    assert (tmp_path / "here" / "rec.mp4").is_file()
    assert not (tmp_path / "elsewhere" / "rec.mp4").exists()


def test_a_folder_given_as_the_recording_is_called_a_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`live --record .` said "unsupported recording suffix ''" (a new user's trial)."""
    from livefuse.errors import VideoError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "clips.mp4").mkdir()
    for given in (".", "clips.mp4"):
        with pytest.raises(VideoError, match="is a folder; give the recording a file name"):
            RecorderSink(given)


def test_a_recording_says_how_its_colours_are_encoded(tmp_path: Path) -> None:
    """Untagged, an HD recording is decoded by players as BT.709 while it was encoded as BT.601
    (a new user's trial: a BT.709 input came out shifted)."""
    bars = np.zeros((720, 1280, 3), np.uint8)
    bars[:, :320], bars[:, 320:640], bars[:, 640:960] = (0, 0, 230), (0, 200, 0), (220, 0, 0)
    bars[:, 960:] = (40, 180, 220)
    with RecorderSink(tmp_path / "rec.mp4", fps=30) as rec:
        for i in range(3):
            rec.send(bars, i * 33_333_333)
    with av.open(str(tmp_path / "rec.mp4")) as c:
        ctx = c.streams.video[0].codec_context
        assert (ctx.colorspace, ctx.color_range) == (6, 1)  # BT.601, limited
        got = next(c.decode(video=0)).to_ndarray(format="bgr24").astype(int)
    for x in (160, 480, 800, 1120):
        assert np.abs(got[:, x] - bars[:, x].astype(int)).max() <= 4, x


def test_live_says_when_its_recording_replaced_a_file(
        tmp_path: Path, astronaut_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As `run` says it; a new user's trial found the file replaced without a word."""
    from livefuse.cli import main

    src = ntsc_clip(tmp_path / "in.mp4", frames=6, audio_tracks=0, size=(160, 120))
    out = tmp_path / "rec.mp4"
    args = ["live", "-s", str(astronaut_path), "--video", str(src), "--record", str(out),
            "--engine", "classic"]
    assert main(args) == 0
    assert "was there before" not in capsys.readouterr().out
    assert main(args) == 0
    assert f"note: '{out}' was there before and has been replaced" in capsys.readouterr().out
