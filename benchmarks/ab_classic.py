"""The classic engine's CPU tables (docs/BENCHMARKS.md §1 and §3) for two source trees in one
run, interleaved, so a loaded or noisy machine affects both alike.

Usage: python benchmarks/ab_classic.py --base /path/to/old/tree [--frames 60] [--seconds 6]
(the new tree is this checkout). Each tree runs its own ``benchmarks/bench_classic.py`` and
``benchmarks/bench_live.py`` in a subprocess with its own ``livefuse`` first on the path.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def run(tree: Path, script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(tree / "benchmarks" / script), *args], env=env,
                         cwd=tree, capture_output=True, text=True, check=True)
    return out.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="the old tree")
    ap.add_argument("--frames", default="60")
    ap.add_argument("--seconds", default="6")
    args = ap.parse_args()
    trees = {"base": args.base.resolve(), "new": HERE}
    for script, extra in (("bench_classic.py", ("--frames", args.frames)),
                          ("bench_live.py", ("--seconds", args.seconds))):
        for name, tree in trees.items():
            print(f"## {script} — {name} ({tree})", flush=True)
            print(run(tree, script, *extra), flush=True)


if __name__ == "__main__":
    main()
