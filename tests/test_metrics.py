"""Metrics: rates, latency percentiles, snapshot, Prometheus endpoint."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from livefuse.metrics import Metrics, RateEMA, start_prometheus


def test_rate_ema_converges_and_stalls_to_zero() -> None:
    r = RateEMA()
    for i in range(50):
        r.tick(i * 40_000_000)  # 25 fps
    assert r.rate(49 * 40_000_000) == pytest.approx(25.0, rel=1e-6)
    assert r.rate(49 * 40_000_000 + 3_000_000_000) == 0.0


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
    assert s.vram_process_mib is None  # no GPU here
    assert "p50/p95 50/95 ms" in s.line() and "cache 73%" in s.line()


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
