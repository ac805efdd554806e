"""Live measurements: frame rates, stage times, end-to-end latency, drops, cache counters, memory.

:class:`Metrics` is written by the live runner's threads and read through :meth:`Metrics.snapshot`,
a frozen value the UI and the CLI print. An optional Prometheus endpoint serves the same numbers.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from livefuse.config import GUARD_CHOICES, VRAM_LIMIT
from livefuse.guard import GuardState

RATE_WINDOW_S = 2.0
"""Frame rates count the frames captured in the last this many seconds."""


class WindowRate:
    """Events per second over a sliding window, keyed on each frame's *capture* time.

    Input, processed and output rates all count capture timestamps in the same window, so a
    frame counts as output only if it was captured in the window too: output fps can never
    exceed input fps (an EMA of output intervals could, after a burst).
    """

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_ns = int(window_s * 1e9)
        self._ts: deque[int] = deque()
        self.count = 0

    def tick(self, t_ns: int) -> None:
        self._ts.append(t_ns)
        self.count += 1

    def rate(self, now_ns: int, start_ns: int) -> float:
        """Frames per second in ``(now - window, now]``; the window is shortened to
        ``now - start_ns`` during the first seconds of a session."""
        lo = now_ns - self.window_ns
        while self._ts and self._ts[0] <= lo:
            self._ts.popleft()
        span = min(self.window_ns, now_ns - start_ns)
        if span <= 0:
            return 0.0
        return sum(1 for t in self._ts if t <= now_ns) * 1e9 / span


@dataclass(frozen=True)
class MetricsSnapshot:
    """One reading of every live measurement.

    Attributes:
        input_fps, processed_fps, output_fps: frames/s captured, through the engine, sent (over
            :data:`RATE_WINDOW_S`, by capture time: output <= processed <= input).
        stage_ms: mean ms per engine stage (``detect``, ``track``, ``swap``, ...) over the window.
        latency_p50_ms, latency_p95_ms: send time minus capture time, over the window: the
            virtual camera's send when one is open, else the hand-off to the sinks.
        frames_in, frames_processed, frames_out: counts since start.
        dropped: frames dropped at each hand-off (``capture->engine``, per sink).
        unsent: per sink, frames it had nowhere to send (a virtual camera without a device).
        cache_hits, cache_misses, cache_forced_refreshes: pose-similarity cache counters.
        vram_allocated_mib, vram_reserved_mib: torch's CUDA allocator, ``None`` without CUDA.
        vram_process_mib: this process's GPU memory per NVML, ``None`` without a GPU.
        rss_mib: resident set size of this process, ``None`` without psutil.
        vram_total_mib: the device's memory (the VRAM guard's line is
            :data:`livefuse.config.VRAM_LIMIT` of it), ``None`` without CUDA.
        precision_fallbacks: engines whose fp16 output failed the check and fell back to fp32.
        guard: the privacy guard's state after the last frame, and the frames it altered.
    """

    input_fps: float = 0.0
    processed_fps: float = 0.0
    output_fps: float = 0.0
    stage_ms: dict[str, float] = field(default_factory=dict)
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    frames_in: int = 0
    frames_processed: int = 0
    frames_out: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    unsent: dict[str, int] = field(default_factory=dict)
    cache_hits: int = 0
    cache_misses: int = 0
    cache_forced_refreshes: int = 0
    vram_allocated_mib: float | None = None
    vram_reserved_mib: float | None = None
    vram_process_mib: float | None = None
    rss_mib: float | None = None
    vram_total_mib: float | None = None
    precision_fallbacks: int = 0
    guard: GuardState = field(default_factory=GuardState)

    def line(self) -> str:
        """One human-readable line (the CLI prints it every second)."""
        lat = ("-" if self.latency_p50_ms is None else
               f"{self.latency_p50_ms:.0f}/{self.latency_p95_ms:.0f} ms")
        stages = " ".join(f"{k} {v:.1f}" for k, v in sorted(self.stage_ms.items())) or "-"
        drops = sum(self.dropped.values())
        unsent = sum(self.unsent.values())
        total = self.cache_hits + self.cache_misses + self.cache_forced_refreshes
        cache = f"cache {self.cache_hits / total:.0%}" if total else "cache -"
        mem = "" if self.rss_mib is None else f" rss {self.rss_mib:.0f} MiB"
        if self.vram_process_mib is not None:
            mem += f" vram {self.vram_process_mib:.0f} MiB"
        guard = "" if self.guard.mode == "off" else f" | {self.guard.line()}"
        return (f"in {self.input_fps:.1f} proc {self.processed_fps:.1f} out {self.output_fps:.1f}"
                f" fps | latency p50/p95 {lat} | {stages} ms | dropped {drops}"
                + (f" (+{unsent} unsent: no device)" if unsent else "") + f" | {cache}{mem}"
                + guard)


def _rss_mib() -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    return float(psutil.Process().memory_info().rss) / 2**20


def _torch_vram() -> tuple[float | None, float | None, float | None]:
    """torch's allocated and reserved MiB and the device's total MiB (``None`` without CUDA)."""
    import sys
    torch: Any = sys.modules.get("torch")  # never import torch just to read a zero
    if torch is None or not torch.cuda.is_available():
        return None, None, None
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return (torch.cuda.memory_allocated() / 2**20, torch.cuda.memory_reserved() / 2**20,
            total / 2**20)


class _Nvml:
    """This process's GPU memory through NVML (nvidia-ml-py); inert without a GPU."""

    def __init__(self) -> None:
        self._ok: bool | None = None
        self._mod: Any = None

    def process_mib(self) -> float | None:
        if self._ok is None:
            try:
                import pynvml
                pynvml.nvmlInit()
                self._mod, self._ok = pynvml, pynvml.nvmlDeviceGetCount() > 0
            except Exception:  # no library, no driver, no GPU: all mean "not measurable"
                self._ok = False
        if not self._ok:
            return None
        import os
        nv, pid, total = self._mod, os.getpid(), 0
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                if p.pid == pid and p.usedGpuMemory:
                    total += p.usedGpuMemory
        return total / 2**20


class Metrics:
    """Thread-safe accumulator of live measurements.

    Args:
        window: how many recent frames the latency percentiles and stage means cover.
    """

    def __init__(self, window: int = 120) -> None:
        self._lock = threading.Lock()
        self._input = WindowRate()
        self._processed = WindowRate()
        self._output = WindowRate()
        self._start_ns: int | None = None
        self._latency_ms: deque[float] = deque(maxlen=window)
        self._stages: dict[str, deque[float]] = {}
        self._window = window
        self._dropped: dict[str, int] = {}
        self._unsent: dict[str, int] = {}
        self._cache = (0, 0, 0)
        self._fallbacks = 0
        self._guard: GuardState | None = None
        self._nvml = _Nvml()

    def _now(self, t_ns: int | None) -> int:
        t = time.perf_counter_ns() if t_ns is None else t_ns
        if self._start_ns is None:
            self._start_ns = t
        return t

    def frame_in(self, t_capture_ns: int | None = None) -> None:
        """A frame was captured (capture thread)."""
        with self._lock:
            self._input.tick(self._now(t_capture_ns))

    def frame_processed(self, timings_ms: dict[str, float],
                        t_capture_ns: int | None = None) -> None:
        """The engine finished a frame (inference thread); ``timings_ms`` per stage."""
        with self._lock:
            self._processed.tick(self._now(t_capture_ns))
            for k, v in timings_ms.items():
                self._stages.setdefault(k, deque(maxlen=self._window)).append(v)

    def frame_out(self, t_capture_ns: int, t_sent_ns: int | None = None) -> None:
        """A frame was sent (the virtual camera's thread, or the inference thread at the
        hand-off); latency = send time - capture time."""
        now = time.perf_counter_ns() if t_sent_ns is None else t_sent_ns
        with self._lock:
            self._output.tick(self._now(t_capture_ns))
            self._latency_ms.append((now - t_capture_ns) / 1e6)

    def set_dropped(self, where: str, count: int) -> None:
        with self._lock:
            self._dropped[where] = count

    def set_unsent(self, where: str, count: int) -> None:
        with self._lock:
            self._unsent[where] = count

    def set_cache(self, hits: int, misses: int, forced_refreshes: int) -> None:
        with self._lock:
            self._cache = (hits, misses, forced_refreshes)

    def add_precision_fallback(self) -> None:
        """An engine's fp16 output failed the check; it runs fp32 from now on."""
        with self._lock:
            self._fallbacks += 1

    def set_guard(self, state: GuardState, ms: float | None = None) -> None:
        """The privacy guard's state after a frame, and its own time on it (the ``guard``
        stage), from the inference thread."""
        with self._lock:
            self._guard = state
            if ms is not None:
                self._stages.setdefault("guard", deque(maxlen=self._window)).append(ms)
            else:
                self._stages.pop("guard", None)

    def snapshot(self, memory: bool = True, now_ns: int | None = None) -> MetricsSnapshot:
        """A frozen reading; ``memory=False`` skips the RSS/VRAM queries (cheaper)."""
        now = time.perf_counter_ns() if now_ns is None else now_ns
        with self._lock:
            start = self._start_ns if self._start_ns is not None else now
            lat = np.array(self._latency_ms) if self._latency_ms else None
            stages = {k: float(np.mean(v)) for k, v in self._stages.items() if v}
            snap = dict(
                input_fps=self._input.rate(now, start),
                processed_fps=self._processed.rate(now, start),
                output_fps=self._output.rate(now, start), stage_ms=stages,
                latency_p50_ms=None if lat is None else float(np.percentile(lat, 50)),
                latency_p95_ms=None if lat is None else float(np.percentile(lat, 95)),
                frames_in=self._input.count, frames_processed=self._processed.count,
                frames_out=self._output.count, dropped=dict(self._dropped),
                unsent=dict(self._unsent),
                cache_hits=self._cache[0], cache_misses=self._cache[1],
                cache_forced_refreshes=self._cache[2], precision_fallbacks=self._fallbacks)
            if self._guard is not None:
                snap.update(guard=self._guard)
        if memory:
            alloc, reserved, total = _torch_vram()
            snap.update(vram_allocated_mib=alloc, vram_reserved_mib=reserved,
                        vram_total_mib=total, vram_process_mib=self._nvml.process_mib(),
                        rss_mib=_rss_mib())
        return MetricsSnapshot(**snap)  # type: ignore[arg-type]


def start_prometheus(metrics: Metrics, port: int, addr: str = "127.0.0.1") -> Any:
    """Serve ``metrics`` at ``http://addr:port/metrics`` (prometheus_client), local only.

    Returns:
        The server object (``shutdown()`` stops it; prometheus_client >= 0.17).

    Raises:
        RuntimeError: prometheus_client is not installed.
        OSError: the port is taken.
    """
    try:
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    except ImportError as exc:
        from livefuse.extras import install_hint

        raise RuntimeError(f"prometheus_client is not installed: {install_hint('metrics')}"
                           ) from exc

    class _Collector:
        def collect(self) -> Any:
            s = metrics.snapshot()
            for name, fps in (("input", s.input_fps), ("processed", s.processed_fps),
                              ("output", s.output_fps)):
                g = GaugeMetricFamily(f"livefuse_{name}_fps", f"{name} frames per second (EMA)")
                g.add_metric([], fps)
                yield g
            g = GaugeMetricFamily("livefuse_latency_ms", "end-to-end latency", labels=["q"])
            for q, lat in (("0.5", s.latency_p50_ms), ("0.95", s.latency_p95_ms)):
                if lat is not None:
                    g.add_metric([q], lat)
            yield g
            g = GaugeMetricFamily("livefuse_stage_ms", "mean stage time", labels=["stage"])
            for k, v in s.stage_ms.items():
                g.add_metric([k], v)
            yield g
            c = CounterMetricFamily("livefuse_dropped_frames", "dropped frames", labels=["at"])
            for k, n in s.dropped.items():
                c.add_metric([k], n)
            yield c
            c = CounterMetricFamily("livefuse_cache", "pose cache lookups", labels=["result"])
            for k, n in (("hit", s.cache_hits), ("miss", s.cache_misses),
                         ("forced_refresh", s.cache_forced_refreshes)):
                c.add_metric([k], n)
            yield c
            if s.rss_mib is not None:
                g = GaugeMetricFamily("livefuse_rss_mib", "resident set size, MiB")
                g.add_metric([], s.rss_mib)
                yield g
            # VRAM series exist on every machine (NaN = no GPU), so a dashboard's queries
            # resolve everywhere and show "no value" rather than "no such metric"
            guard_mib = None if s.vram_total_mib is None else s.vram_total_mib * VRAM_LIMIT
            for name, mib, text in (
                    ("vram_process_mib", s.vram_process_mib, "this process's GPU memory (NVML)"),
                    ("vram_allocated_mib", s.vram_allocated_mib, "torch allocated"),
                    ("vram_reserved_mib", s.vram_reserved_mib, "torch reserved"),
                    ("vram_total_mib", s.vram_total_mib, "device memory"),
                    ("vram_guard_mib", guard_mib,
                     f"VRAM guard: no new session above {VRAM_LIMIT:.0%} of device memory")):
                g = GaugeMetricFamily(f"livefuse_{name}", f"{text}, MiB (NaN: no GPU)")
                g.add_metric([], math.nan if mib is None else mib)
                yield g
            c = CounterMetricFamily("livefuse_precision_fallbacks",
                                    "engines whose fp16 output failed the check (now fp32)")
            c.add_metric([], s.precision_fallbacks)
            yield c
            g = GaugeMetricFamily("livefuse_guard_mode", "privacy guard mode (1 = current)",
                                  labels=["mode"])
            for mode in GUARD_CHOICES:
                g.add_metric([mode], float(mode == s.guard.mode))
            yield g
            g = GaugeMetricFamily("livefuse_guard_active",
                                  "1 when the privacy guard altered the last frame")
            g.add_metric([], float(s.guard.active))
            yield g
            g = GaugeMetricFamily("livefuse_guard_regions",
                                  "face regions the privacy guard hid in the last frame")
            g.add_metric([], s.guard.regions)
            yield g
            c = CounterMetricFamily("livefuse_guard_frames",
                                    "frames the privacy guard altered", labels=["action"])
            c.add_metric(["blur"], s.guard.frames_blurred)
            c.add_metric(["hold"], s.guard.frames_held)
            yield c

    registry = CollectorRegistry()
    registry.register(_Collector())
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server


__all__ = ["RATE_WINDOW_S", "Metrics", "MetricsSnapshot", "WindowRate", "start_prometheus"]
