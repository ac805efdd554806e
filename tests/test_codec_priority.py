"""FFmpeg's codec worker threads run below a video job's own threads (livefuse/io/niced.py): the
decoder's and x264's workers at CODEC_NICE steps lower, every Python thread of the job as it was."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import av
import numpy as np
import pytest
from clips import ntsc_clip

from livefuse.io.niced import CODEC_NICE, open_niced
from livefuse.io.video import VideoOptions, transcode

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="per-thread nice values are Linux's")


def _nice_by_thread() -> dict[int, int]:
    """Every thread of this process (its kernel id) and its nice value, from /proc."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        out[int(tid)] = int(fields[16])  # stat field 19: nice (fields after the name's ')')
    return out


def _base() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux_only
@pytest.mark.parametrize("pipelined", [False, True], ids=["serial", "pipelined"])
def test_codec_workers_run_below_the_jobs_own_threads(tmp_path: Path, pipelined: bool) -> None:
    base = _base()
    if base >= 19:
        pytest.skip("this test already runs at the lowest priority")
    src = ntsc_clip(tmp_path / "in.mp4", frames=8, audio_tracks=0, size=(128, 96))
    seen: list[tuple[dict[int, int], set[int], int]] = []

    def process(frame: np.ndarray, index: int) -> np.ndarray:
        if index == 3:
            python = {t.native_id for t in threading.enumerate() if t.native_id is not None}
            seen.append((_nice_by_thread(), python, threading.get_native_id()))
        return frame

    low = min(19, base + CODEC_NICE)
    before = {t for t, v in _nice_by_thread().items() if v == low}  # another test's, if any
    transcode(src, tmp_path / "out.mp4", process,
              options=VideoOptions(pipelined=pipelined, threads=2))
    nice, python, here = seen[0]
    workers = {t for t, v in nice.items() if v == low} - before
    # two decoder threads and x264's at the lower priority...
    assert len(workers) >= 3, nice
    # ...and not one of the job's own threads (the engine's thread included)
    assert nice[here] == base
    assert {nice[t] for t in python if t in nice} == {base}
    # the worker threads end with the job
    assert not workers & set(_nice_by_thread())


@linux_only
def test_a_codec_that_does_not_open_is_left_for_its_first_use() -> None:
    """The error then comes where it always did (the chain names the file), and the caller's
    priority is untouched."""
    base = _base()
    ctx = av.CodecContext.create("libx264", "w")  # no size: x264 refuses to open
    assert open_niced(ctx) is False
    assert not ctx.is_open
    assert _base() == base
    with pytest.raises(av.error.FFmpegError):
        ctx.open()


def test_other_systems_open_at_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """Elsewhere a thread's nice value is the process's (or not inherited): nothing is done."""
    monkeypatch.setattr(sys, "platform", "darwin")
    ctx = av.CodecContext.create("libx264", "w")
    ctx.width, ctx.height, ctx.pix_fmt = 64, 64, "yuv420p"
    assert open_niced(ctx) is False
    assert not ctx.is_open


@linux_only
def test_a_codec_opens_and_the_caller_keeps_its_priority() -> None:
    base = _base()
    ctx = av.CodecContext.create("libx264", "w")
    ctx.width, ctx.height, ctx.pix_fmt = 64, 64, "yuv420p"
    assert open_niced(ctx) is True and ctx.is_open
    assert open_niced(ctx) is True  # already open: nothing more
    assert _base() == base


@linux_only
def test_a_ctrl_c_during_the_open_waits_for_it_before_going_on() -> None:
    """The caller closes the container on its way out: FFmpeg must not still be opening a
    context of it on the helper thread."""
    import signal
    import time

    class SlowContext:
        is_open = False
        finished_at: float | None = None

        def open(self, strict: bool = True) -> None:
            time.sleep(0.5)
            self.is_open = True
            self.finished_at = time.monotonic()

    ctx = SlowContext()
    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        try:
            open_niced(ctx)
        finally:
            raised_at = time.monotonic()
    assert ctx.finished_at is not None and ctx.finished_at <= raised_at
