"""`transcode` keeps every frame of a variable-frame-rate clip at its exact timestamp.

Phones record VFR: millisecond timestamps, jitter, a stall, bursts. The clips here are written
with PyAV in a 1 ms time base (mp4 and mkv, with an AAC track) in the three patterns that used to
fail with "non monotonically increasing dts to muxer" after ~20 frames.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from livefuse.io.synthetic import write_clip, write_tone
from livefuse.io.video import probe, transcode

_RNG = np.random.default_rng(3)
PATTERNS_MS: dict[str, list[int]] = {
    # 30 fps with one 200 ms stall in the middle (the phone paused for a moment)
    "gap": [33 * i for i in range(30)] + [29 * 33 + 200 + 33 * i for i in range(30)],
    # every interval between 25 and 42 ms
    "jitter": np.cumsum(np.r_[0, _RNG.integers(25, 43, 59)]).tolist(),
    # bursts of four frames 5 ms apart, then an 85 ms hole
    "burst": np.cumsum(np.r_[0, np.tile([5, 5, 5, 85], 15)[:59]]).tolist(),
}


def write_vfr_clip(path: Path, times_ms: list[int], audio: bool = True) -> Path:
    """H.264 frames at ``times_ms`` (1/1000 time base) plus a 440 Hz AAC tone."""
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=30, time_base=Fraction(1, 1000))
        vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
        astream = out.add_stream("aac", rate=48000) if audio else None
        for i, t in enumerate(times_ms):
            img = np.full((48, 64, 3), (i * 7) % 250, np.uint8)
            vf = av.VideoFrame.from_ndarray(img, format="bgr24")
            vf.pts, vf.time_base = int(t), Fraction(1, 1000)
            for pkt in vs.encode(vf):
                out.mux(pkt)
        for pkt in vs.encode(None):
            out.mux(pkt)
        if astream is not None:
            write_tone(out, astream, times_ms[-1] / 1000 + 0.1)
    return path


def _frame_times(path: Path) -> list[float]:
    with av.open(str(path)) as c:
        return [float(f.pts * f.time_base) for f in c.decode(video=0)]


def _audio_packets(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for p in c.demux(audio=0) if p.dts is not None)


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
@pytest.mark.parametrize("pattern", sorted(PATTERNS_MS))
def test_vfr_keeps_every_frame_and_timestamp(tmp_path: Path, pattern: str, suffix: str) -> None:
    times = PATTERNS_MS[pattern]
    clip = write_vfr_clip(tmp_path / f"in{suffix}", times)
    src_times = _frame_times(clip)
    # the clip really is what the test claims: 1 ms timestamps with the pattern's intervals
    np.testing.assert_allclose(src_times, np.array(times) / 1000, atol=1e-9)
    out = tmp_path / f"out{suffix}"
    result = transcode(clip, out, lambda f, i: 255 - f)
    assert result.frames == len(times)
    out_times = _frame_times(out)
    assert len(out_times) == len(src_times)
    np.testing.assert_allclose(out_times, src_times, rtol=0, atol=1e-6)
    assert _audio_packets(out) == _audio_packets(clip)


def test_vfr_across_containers(tmp_path: Path) -> None:
    """mp4 (16 kHz timescale) in, mkv (1 ms) out: the millisecond timestamps survive.

    Matroska cannot start below zero, so the muxer shifts every stream by the AAC priming delay
    (the copied audio starts at -1024 samples): the intervals are compared, not the origin.
    """
    times = PATTERNS_MS["burst"]
    clip = write_vfr_clip(tmp_path / "in.mp4", times)
    out = tmp_path / "out.mkv"
    transcode(clip, out, lambda f, i: f)
    got = np.array(_frame_times(out))
    assert len(got) == len(times)
    np.testing.assert_allclose(got - got[0], np.array(times) / 1000, rtol=0, atol=1e-6)


def test_constant_rate_keeps_exact_rational_rate(tmp_path: Path) -> None:
    frames = [np.full((48, 64, 3), i * 9, np.uint8) for i in range(20)]
    clip = write_clip(frames, tmp_path / "ntsc.mp4", rate=Fraction(30000, 1001))
    out = tmp_path / "out.mp4"
    result = transcode(clip, out, lambda f, i: f)
    assert result.rate == Fraction(30000, 1001)
    assert probe(out).rate == Fraction(30000, 1001)
    np.testing.assert_allclose(_frame_times(out), _frame_times(clip), rtol=0, atol=1e-6)


def test_the_summary_says_rates_in_fps() -> None:
    """A VFR clip's average was printed as "frame rate 640000/66053"."""
    from livefuse.run import rate_text

    assert rate_text(Fraction(640000, 66053)) == "average frame rate 9.69 fps"
    assert rate_text(Fraction(30000, 1001)) == "frame rate 30000/1001 (29.97 fps)"
    assert rate_text(Fraction(25)) == "frame rate 25 fps"


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_the_summary_rate_comes_from_the_timestamps(tmp_path: Path, suffix: str) -> None:
    """A Matroska VFR clip's stream says 30 fps whatever its frames do; the summary gives the
    average the timestamps give (59 intervals over the clip's span)."""
    from livefuse.run import rate_text

    times = PATTERNS_MS["burst"]
    clip = write_vfr_clip(tmp_path / f"in{suffix}", times, audio=False)
    result = transcode(clip, tmp_path / f"out{suffix}", lambda f, i: f)
    want = (len(times) - 1) / (times[-1] / 1000)
    assert result.measured_rate is not None
    assert abs(float(result.measured_rate) - want) < 1e-6
    text = rate_text(result.rate, result.measured_rate)
    # mp4 stores an average close to the timestamps' (its text is "average frame rate ..."),
    # Matroska a nominal 30 (the text then gives the timestamps' average)
    fps = float(text.split(" fps")[0].split()[-1])
    assert abs(fps / want - 1) < 0.02, text
    if suffix == ".mkv":
        assert float(result.rate) == 30
        assert text == f"variable frame rate, {want:.3g} fps on average"


def test_a_constant_rate_clip_keeps_its_exact_rate_text(tmp_path: Path) -> None:
    from livefuse.run import rate_text

    frames = [np.full((48, 64, 3), 10 * i, np.uint8) for i in range(12)]
    clip = write_clip(frames, tmp_path / "ntsc.mp4", rate=Fraction(30000, 1001))
    result = transcode(clip, tmp_path / "out.mp4", lambda f, i: f)
    assert rate_text(result.rate, result.measured_rate) == "frame rate 30000/1001 (29.97 fps)"
