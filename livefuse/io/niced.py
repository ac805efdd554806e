"""FFmpeg's codec threads below the job's own threads in CPU priority.

A video job's Python threads (decode, stage, process, convert, encode) take turns on one GIL,
and the engine's thread waits for it after every device call. FFmpeg's own worker threads (the
decoder's frame threads, x264's frame and lookahead threads: 49 of them on the H200's 16 cores)
need no GIL and keep most cores busy. When the scheduler runs one of them instead of the thread
that holds the GIL, or instead of the engine's thread as it wakes, every Python thread waits.

FFmpeg creates a codec's worker threads when the codec opens, and on Linux a new thread starts
with its creator's nice value. So a context opened from a short-lived thread with a raised nice
value has all its workers at that value, while every thread of livefuse keeps its own (an
unprivileged process cannot lower a nice value again, so only a thread that ends at once may
take the raised one).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

CODEC_NICE = 10
"""Nice steps added to FFmpeg's codec worker threads in a video job. On the H200, three rounds in
one device call (1080p, 30 s, one face, user defaults; docs/BENCHMARKS.md §13, 2026-12-04): the
pipelined run 173.6 / 189.6 / 197.7 fps with the workers at nice 0, 189.5 / 199.8 / 203.0 at 10,
188.3 / 200.4 / 203.9 at 19. 10 leaves room below it for what a user runs at a lower priority."""


def open_niced(ctx: Any, nice: int = CODEC_NICE) -> bool:
    """Open a PyAV codec context from a short-lived thread ``nice`` steps below the caller, so
    that the worker threads FFmpeg starts for it run at that lower priority.

    Called by the thread that sets the context up, after its options and thread settings (they
    are read at the open) and before its first frame. Does nothing on other systems than Linux
    (there a thread's priority is not its own, or new threads do not inherit it), for a context
    already open, or with ``nice`` 0.

    Args:
        ctx: an ``av.CodecContext`` (a decoder's or an encoder's).
        nice: steps to add to the calling thread's nice value (capped at 19, the lowest).

    Returns:
        Whether the context is now open. ``False`` also when FFmpeg refused to open it: the
        context is left as it was, and its first use opens it and reports the error where it
        always did (the chain's error handling names the file).
    """
    if not sys.platform.startswith("linux") or nice <= 0 or ctx.is_open:
        return bool(ctx.is_open)
    done: list[bool] = []
    finished = threading.Event()

    def opener() -> None:
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid,
                           min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
            ctx.open(strict=False)
            done.append(True)
        except Exception:  # the first use opens it again and says why
            done.append(False)
        finally:
            finished.set()

    threading.Thread(target=opener, name="livefuse-codec-open", daemon=True).start()
    stopped: BaseException | None = None
    while not finished.is_set():
        # not Thread.join: a Ctrl-C inside it can leave the thread reported as ended early
        try:
            finished.wait()
        except BaseException as exc:  # Ctrl-C, SIGTERM's exit: the caller closes the container
            stopped = exc  # only once FFmpeg has finished opening this context in it
    if stopped is not None:
        raise stopped
    return bool(done and done[0])


__all__ = ["CODEC_NICE", "open_niced"]
