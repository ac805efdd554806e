"""Metrics: rates, latency percentiles, snapshot, Prometheus endpoint."""

from __future__ import annotations

import os
import socket
import sys
import urllib.request
from typing import Any

import pytest

from livefuse.metrics import Metrics, WindowRate, start_prometheus


def test_window_rate_counts_the_window_and_stalls_to_zero() -> None:
    r = WindowRate(window_s=2.0)
    for i in range(100):
        r.tick(i * 40_000_000)  # 25 fps for 4 s
    now = 99 * 40_000_000
    assert r.rate(now, start_ns=0) == pytest.approx(25.0, abs=0.5)
    # one second in: the window is the second so far
    early = WindowRate(window_s=2.0)
    for i in range(26):
        early.tick(i * 40_000_000)
    assert early.rate(1_000_000_000, start_ns=0) == pytest.approx(26.0)
    assert r.rate(now + 3_000_000_000, start_ns=0) == 0.0


def test_output_fps_never_exceeds_input_fps_after_a_burst() -> None:
    """A stalled engine that catches up sends frames in a burst; an EMA of send intervals read
    that as a rate far above the camera's (the new-user trial saw output > input)."""
    m = Metrics()
    t0 = 1_000_000_000
    period = 33_333_333
    for i in range(120):  # 30 fps capture for 4 s
        m.frame_in(t0 + i * period)
    for i in range(0, 120, 4):  # the engine took every 4th frame...
        m.frame_processed({}, t0 + i * period)
    for i in range(0, 120, 4):  # ...and sent them all at once at the end
        m.frame_out(t0 + i * period, t0 + 119 * period + i * 1000)
    s = m.snapshot(memory=False, now_ns=t0 + 119 * period + 200_000)
    assert s.input_fps == pytest.approx(30.0, abs=1.0)
    assert s.output_fps <= s.input_fps
    assert s.output_fps == pytest.approx(7.5, abs=1.0)


def test_snapshot_latency_and_counts() -> None:
    m = Metrics(window=100)
    for i in range(100):
        m.frame_in()
        m.frame_processed({"swap": float(i % 10)})
        m.frame_out(0, (i + 1) * 1_000_000)  # latencies 1..100 ms
    m.set_dropped("capture->engine", 7)
    m.set_cache(8, 1, 2)
    s = m.snapshot()
    assert s.latency_p50_ms == pytest.approx(50.5)
    assert s.latency_p95_ms == pytest.approx(95.05)
    assert s.stage_ms["swap"] == pytest.approx(4.5)
    assert s.frames_out == 100 and s.dropped == {"capture->engine": 7} and s.cache_hits == 8
    assert s.rss_mib is not None and s.rss_mib > 10
    assert "p50/p95 50/95 ms" in s.line() and "cache 73%" in s.line()


class _FakeNvml:
    """pynvml's calls that Metrics makes, for a machine with ``gpus`` devices on which this
    process holds ``mib`` MiB on each."""

    def __init__(self, gpus: int, mib: int) -> None:
        self.gpus, self.mib = gpus, mib

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        from types import SimpleNamespace

        return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=self.mib * 2**20),
                SimpleNamespace(pid=os.getpid() + 1, usedGpuMemory=999 * 2**20)]


@pytest.mark.parametrize(("gpus", "want"), [(0, None), (2, 2 * 300.0)])
def test_vram_is_this_process_memory_on_every_gpu_or_none_without_one(
        monkeypatch: pytest.MonkeyPatch, gpus: int, want: float | None) -> None:
    """Read through NVML whatever the machine has (CI has no GPU, the H200 has one): only this
    process's memory counts, summed over the devices; no GPU (or no NVML) reads None."""
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(gpus, 300))
    s = Metrics().snapshot()
    assert s.vram_process_mib == want
    assert ("vram 600 MiB" in s.line()) == (want is not None)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert Metrics().snapshot().vram_process_mib is None


def test_prometheus_endpoint_is_local() -> None:
    m = Metrics()
    m.set_cache(3, 1, 0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = start_prometheus(m, port)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        text = body.decode()
        assert 'livefuse_cache_total{result="hit"} 3.0' in text
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()


def test_prometheus_shows_the_guard_fallbacks_and_vram_series_everywhere() -> None:
    """The Grafana board's series exist on every machine: VRAM is NaN without a GPU, the guard
    and the fp16 fallbacks are there from the start."""
    from livefuse.guard import GuardState

    m = Metrics()
    m.add_precision_fallback()
    m.set_guard(GuardState(mode="hold", action="hold", regions=2, lost=1, frames_held=7), 0.4)
    s = m.snapshot()
    assert s.precision_fallbacks == 1 and s.guard.frames_held == 7 and s.stage_ms["guard"] == 0.4
    assert "guard hold: holding the last swapped frame (1 lost)" in s.line()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = start_prometheus(m, port)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    for line in ("livefuse_precision_fallbacks_total 1.0", 'livefuse_guard_mode{mode="hold"} 1.0',
                 'livefuse_guard_mode{mode="off"} 0.0', "livefuse_guard_active 1.0",
                 "livefuse_guard_regions 2.0", 'livefuse_guard_frames_total{action="hold"} 7.0',
                 "livefuse_vram_total_mib NaN", "livefuse_vram_guard_mib NaN",
                 "livefuse_vram_process_mib NaN"):
        assert line in text, line
    m.set_guard(GuardState(mode="off"))  # turned off: the guard's stage time goes too
    assert "guard" not in m.snapshot(memory=False).stage_ms
