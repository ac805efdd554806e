"""Classic engine fps on the demo clip (t1.jpg with camera motion); see livefuse.bench.

Usage: python benchmarks/bench_classic.py [--frames 120]
"""

from __future__ import annotations

import argparse

from livefuse.bench import bench_classic

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=120)
    bench_classic(ap.parse_args().frames)
