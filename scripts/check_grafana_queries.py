"""Check every PromQL query of the Grafana board against a real Prometheus scraping a running
`livefuse live`: every query must return series.

Grafana itself is not needed: the script reads resources/grafana/livefuse.json, starts
`livefuse live --video CLIP --loop --engine classic --privacy-guard blur --metrics-port P` on a
clip it generates (two people, one swapped: the guard has work), starts Prometheus (Debian's
`prometheus` package: `apt-get install prometheus`) scraping it every second, waits, then runs
each panel's query (Grafana's `$__rate_interval` and variables substituted) through
Prometheus's HTTP API and prints one line per query with the series it returned. Exit status 1
when a query returns no series or fails; 0 otherwise.

    python scripts/check_grafana_queries.py [--seconds 40] [--prometheus /usr/bin/prometheus]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BOARD = ROOT / "resources" / "grafana" / "livefuse.json"
SUBSTITUTE = {"$__rate_interval": "20s", "$__interval": "5s", "$instance": ".+"}
"""Grafana's own variables as Grafana would fill them at a 5 s scrape interval (rate interval =
4 scrape intervals); ``$instance`` = the board's "All"."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def board_queries(board: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(panel title, refId, expr)`` for every target of every panel, and the variables'
    ``label_values`` queries as their metric selectors."""
    out = []
    for panel in board["panels"]:
        targets = panel.get("targets", [])
        if not targets:
            raise SystemExit(f"panel '{panel['title']}' has no query")
        for t in targets:
            out.append((panel["title"], t["refId"], t["expr"]))
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"]
            metric = q[q.index("(") + 1:q.index(",")].strip()
            out.append((f"variable ${var['name']}", "-", metric))
    return out


def fill(expr: str) -> str:
    for k, v in SUBSTITUTE.items():
        expr = expr.replace(k, v)
    return expr


def query(prom: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        answer = json.loads(resp.read())
    if answer.get("status") != "success":
        raise RuntimeError(answer.get("error", answer))
    return list(answer["data"]["result"])


def wait_for(url: str, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return True
        except OSError:
            time.sleep(0.5)
    return False


def make_inputs(folder: Path) -> tuple[Path, Path]:
    from livefuse.imaging import load_image, save_image
    from livefuse.io.synthetic import write_clip
    from livefuse.samples import astronaut, insightface_image
    from livefuse.testing.guard_clip import guard_clip

    clip = guard_clip(load_image(insightface_image("t1.jpg")).bgr)
    video = write_clip(clip.frames, folder / "clip.mp4", audio=False)
    return video, save_image(folder / "source.png", astronaut())


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="scrape this long before the "
                                                                "queries")
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    args = ap.parse_args()
    board = json.loads(BOARD.read_text(encoding="utf-8"))
    queries = board_queries(board)
    print(f"board: {BOARD.relative_to(ROOT)}: {len(board['panels'])} panels, "
          f"{len(queries)} queries")
    tmp = Path(tempfile.mkdtemp(prefix="livefuse-grafana-check-"))
    video, source = make_inputs(tmp)
    mport, pport = free_port(), free_port()
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp / "config"))
    live = subprocess.Popen(
        [sys.executable, "-m", "livefuse.cli", "live", "-s", str(source), "--video", str(video),
         "--loop", "--engine", "classic", "--privacy-guard", "blur", "--metrics-port",
         str(mport), "--duration", str(args.seconds + 60)],
        stdout=(tmp / "live.out").open("wb"), stderr=subprocess.STDOUT, env=env)
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        f"  - job_name: livefuse\n    static_configs:\n      - targets: ['127.0.0.1:{mport}']\n",
        encoding="utf-8")
    prom_proc = subprocess.Popen(
        [args.prometheus, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{pport}"],
        stdout=(tmp / "prometheus.out").open("wb"), stderr=subprocess.STDOUT)
    prom = f"http://127.0.0.1:{pport}"
    failures = 0
    try:
        if not wait_for(f"http://127.0.0.1:{mport}/metrics", 120):
            print((tmp / "live.out").read_text(errors="replace"))
            raise SystemExit("livefuse live did not serve its metrics")
        if not wait_for(f"{prom}/-/ready", 60):
            raise SystemExit("prometheus did not start: " +
                             (tmp / "prometheus.out").read_text(errors="replace")[-2000:])
        version = json.loads(urllib.request.urlopen(f"{prom}/api/v1/status/buildinfo",
                                                    timeout=5).read())["data"]["version"]
        print(f"prometheus {version} scraping livefuse live on 127.0.0.1:{mport} every 1 s; "
              f"waiting {args.seconds:.0f} s")
        time.sleep(args.seconds)
        up = query(prom, 'up{job="livefuse"}')
        print(f"up{{job=\"livefuse\"}} = {up[0]['value'][1] if up else 'no target'}")
        for title, ref, expr in queries:
            try:
                result = query(prom, fill(expr))
            except Exception as exc:
                failures += 1
                print(f"FAIL  {title} [{ref}] {expr}\n      error: {exc}")
                continue
            values = []
            for series in result[:4]:
                labels = {k: v for k, v in series["metric"].items()
                          if k not in ("job", "instance", "__name__")}
                v = float(series["value"][1])
                text = "NaN" if math.isnan(v) else f"{v:.3g}"
                values.append(f"{labels or ''}={text}".lstrip("="))
            ok = bool(result)
            failures += not ok
            more = f" (+{len(result) - 4})" if len(result) > 4 else ""
            print(f"{'ok  ' if ok else 'FAIL'}  {title} [{ref}] {len(result)} series: "
                  f"{', '.join(values)}{more}\n      {expr}")
    finally:
        stop(prom_proc)
        stop(live)
    tail = (tmp / "live.out").read_text(errors="replace").strip().splitlines()[-2:]
    print("livefuse live: " + " / ".join(tail))
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(queries) - failures} of {len(queries)} queries returned series")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
