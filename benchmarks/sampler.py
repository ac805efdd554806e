"""What the machine was doing during a benchmark: the cores busy (``/proc/stat``) and the GPU's
utilisation (``nvidia-smi``: the share of time a kernel ran), sampled every ``period`` seconds, so
a throughput figure comes with whether the CPU or the GPU was the wall it hit.

    with Sampler() as s:
        t0 = time.monotonic(); ...; t1 = time.monotonic()
    print(s.window(t0, t1))
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass


@dataclass
class Window:
    seconds: float
    cores_busy: float  # mean number of cores busy (user + system + irq), of ``cores``
    cores: int
    cpu_seconds: float
    gpu_util: float | None  # mean % of time a kernel ran; None without nvidia-smi

    def text(self, frames: int) -> str:
        gpu = "-" if self.gpu_util is None else f"{self.gpu_util:.0f} %"
        per = f", {self.cpu_seconds / frames * 1e3:.1f} CPU ms/frame" if frames else ""
        return (f"cores busy {self.cores_busy:.1f} of {self.cores}{per}, GPU busy {gpu} "
                f"({self.seconds:.1f} s)")


def _cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all cores since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return float(sum(v) - idle), float(sum(v))


class Sampler:
    def __init__(self, period: float = 0.25) -> None:
        self.period = period
        self.cpu: list[tuple[float, float, float]] = []  # (t, busy, total)
        self.gpu: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._smi: subprocess.Popen[str] | None = None

    def __enter__(self) -> Sampler:
        threading.Thread(target=self._run_cpu, daemon=True).start()
        if shutil.which("nvidia-smi"):
            self._smi = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                 f"-lms={int(self.period * 1000)}"], stdout=subprocess.PIPE, text=True)
            threading.Thread(target=self._run_gpu, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._smi is not None:
            self._smi.kill()
            self._smi.wait()

    def _run_cpu(self) -> None:
        while not self._stop.is_set():
            self.cpu.append((time.monotonic(), *_cpu()))
            time.sleep(self.period)

    def _run_gpu(self) -> None:
        assert self._smi is not None and self._smi.stdout is not None
        for line in self._smi.stdout:
            try:
                self.gpu.append((time.monotonic(), float(line.split(",")[0])))
            except ValueError:
                continue

    def window(self, t0: float, t1: float) -> Window:
        inside = [s for s in self.cpu if t0 <= s[0] <= t1]
        cores = os.cpu_count() or 1
        busy = cpu_s = 0.0
        if len(inside) >= 2:
            (ta, ba, na), (tb, bb, nb) = inside[0], inside[-1]
            share = (bb - ba) / max(1.0, nb - na)
            busy, cpu_s = share * cores, share * cores * (tb - ta)
            cpu_s *= (t1 - t0) / max(1e-9, tb - ta)
        g = [u for t, u in self.gpu if t0 <= t <= t1]
        return Window(t1 - t0, busy, cores, cpu_s, sum(g) / len(g) if g else None)
