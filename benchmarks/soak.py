#!/usr/bin/env python3
"""Soak: ``allsmi serve --ledger`` for an accelerated hour under scrapers, JSON readers and exports.

``allsmi serve --simulate mixed --interval 0.05 --ledger FILE`` runs with
``ALLSMI_SIMULATE_SPEED = 3600 / WALL``: simulated time (snapshot timestamps,
the ledger's minutes, the devices' values) runs that many times faster than
wall time, so one simulated hour passes in ``WALL`` seconds of wall time while
the collector still samples every 0.05 s of wall time (each cycle
``0.05 x SPEED`` simulated seconds after the previous). Meanwhile:

* ``--scrapers`` threads request ``/metrics`` (text; OpenMetrics gzip, as
  Prometheus asks) and ``/api/v1/snapshot`` (plain and gzip) back to back on
  keep-alive connections; any answer other than a whole 200 is an error;
* every ``--export-every`` seconds ``allsmi export --ledger`` (a subprocess, as
  cron runs it) bills the ledger from the start to the current simulated time
  while the exporter keeps writing into it.

Reported: the serve process's RSS, open file descriptors, threads and child
processes after a warm-up and at the end (they must be flat), scrape errors
(must be 0), export failures, and the ledger's observed device time against
the simulated time that passed (whole minutes between the first and the last
snapshot, times the 37 devices of the node; must be >= 99.5 %).

Usage::

    python benchmarks/soak.py [--wall 240] [--scrapers 4] [--export-every 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import http.client
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import describe  # noqa: E402

import psutil  # noqa: E402

INTERVAL = 0.05
DEVICES = 37  # the mixed node: 34 boards and 3 MIG instances
REQUESTS = [("/metrics", {}),
            ("/metrics", {"Accept": "application/openmetrics-text;version=1.0.0",
                          "Accept-Encoding": "gzip"}),
            ("/api/v1/snapshot", {}),
            ("/api/v1/snapshot", {"Accept-Encoding": "gzip"})]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def allsmi() -> list[str]:
    return [sys.executable, "-m", "allsmi"]


def resources(pid: int) -> dict[str, float]:
    proc = psutil.Process(pid)
    return {"rss_mib": proc.memory_info().rss / 2**20, "fds": proc.num_fds(),
            "threads": proc.num_threads(), "children": len(proc.children(recursive=True))}


def parse_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Scraper(threading.Thread):
    """Requests the endpoints back to back on a keep-alive connection; counts what fails."""

    def __init__(self, port: int, stop: threading.Event, offset: int) -> None:
        super().__init__(daemon=True)
        self.port, self.stop, self.offset = port, stop, offset
        self.ok = 0
        self.errors: list[str] = []
        self.latencies: list[float] = []

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        i = self.offset
        while not self.stop.is_set():
            path, headers = REQUESTS[i % len(REQUESTS)]
            i += 1
            started = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{path}: HTTP {resp.status}")
                if resp.getheader("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if path.startswith("/api") and not json.loads(body)["devices"]:
                    raise RuntimeError(f"{path}: no devices")
                if path == "/metrics" and b"allsmi_device_info" not in body:
                    raise RuntimeError(f"{path}: no devices")
                self.ok += 1
                self.latencies.append(time.perf_counter() - started)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                self.errors.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.close()


def snapshot_time(port: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/api/v1/snapshot")
        return parse_time(json.loads(conn.getresponse().read())["timestamp"])
    finally:
        conn.close()


def export(ledger: Path, since: float, until: float, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    result = subprocess.run([*allsmi(), "export", "--ledger", str(ledger), "--since", iso(since),
                             "--until", iso(until), "--format", "json",
                             "--group-by", "resource_group"],
                            capture_output=True, text=True, env=env, timeout=120)
    try:
        doc = json.loads(result.stdout) if result.stdout else {}
    except ValueError:
        doc = {}
    return result.returncode, doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wall", type=float, default=240.0,
                        help="wall seconds for one simulated hour (default 240: speed 15)")
    parser.add_argument("--scrapers", type=int, default=4)
    parser.add_argument("--export-every", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    args = parser.parse_args()
    speed = 3600.0 / args.wall
    work = Path(tempfile.mkdtemp(prefix="allsmi-soak-"))
    ledger = work / "ledger.db"
    port = free_port()
    env = {**os.environ, "ALLSMI_CONFIG": os.devnull, "ALLSMI_SIMULATE_SPEED": f"{speed:g}"}
    log = open(work / "serve.log", "wb")  # noqa: SIM115 - closed at the end
    serve = subprocess.Popen([*allsmi(), "serve", "--simulate", "mixed", "--interval", str(INTERVAL),
                              "--ledger", str(ledger), "--listen", f"127.0.0.1:{port}"],
                             stdout=log, stderr=subprocess.STDOUT, env=env)
    stop = threading.Event()
    scrapers: list[Scraper] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                first = snapshot_time(port)
                break
            except (OSError, ValueError, KeyError, http.client.HTTPException):
                if time.monotonic() > deadline or serve.poll() is not None:
                    raise SystemExit(f"allsmi serve did not come up: {(work / 'serve.log').read_text()}")
                time.sleep(0.01)
        wall_start = time.monotonic()
        scrapers = [Scraper(port, stop, i) for i in range(args.scrapers)]
        for scraper in scrapers:
            scraper.start()
        time.sleep(args.warmup)
        start = resources(serve.pid)
        samples = [start]
        exports = failures = 0
        next_export = time.monotonic()
        while time.monotonic() - wall_start < args.wall:
            time.sleep(1.0)
            samples.append(resources(serve.pid))
            if time.monotonic() >= next_export:
                next_export += args.export_every
                rc, doc = export(ledger, first, snapshot_time(port), env)
                exports += 1
                if rc not in (0, 3) or "rows" not in doc:  # 3: the minute in progress is short
                    failures += 1
        end = resources(serve.pid)
        last = snapshot_time(port)
    finally:
        stop.set()
        for scraper in scrapers:
            scraper.join(15)
        serve.send_signal(signal.SIGTERM)
        try:
            code = serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()
            code = serve.wait()
        log.close()
    since = math.ceil(first / 60) * 60
    until = math.floor(last / 60) * 60
    rc, doc = export(ledger, since, until, env)
    observed = sum(row["observed_device_hours"] for row in doc.get("rows", []))
    expected = DEVICES * (until - since) / 3600
    latencies = sorted(x for s in scrapers for x in s.latencies)
    errors = [e for s in scrapers for e in s.errors]

    def row(name: str, key: str, fmt: str = "{:.0f}") -> str:
        values = [s[key] for s in samples]
        middle = samples[len(samples) // 2][key]
        return (f"| {name} | {fmt.format(start[key])} | {fmt.format(middle)} | "
                f"{fmt.format(end[key])} | {fmt.format(min(values))} to {fmt.format(max(values))} |")

    print(f"Machine: {describe()}")
    print(f"allsmi serve --simulate mixed --interval {INTERVAL} --ledger, ALLSMI_SIMULATE_SPEED="
          f"{speed:g}: {(last - first) / 3600:.2f} simulated hours in "
          f"{time.monotonic() - wall_start:.0f} s of wall time; exit status {code}")
    print()
    print(f"| measure (serve process) | after {args.warmup:g} s | half-way | end | range over the run |")
    print("|---|---:|---:|---:|---:|")
    print(row("RSS, MiB", "rss_mib", "{:.1f}"))
    print(row("open file descriptors", "fds"))
    print(row("threads", "threads"))
    print(row("child processes", "children"))
    print()
    print(f"Requests: {sum(s.ok for s in scrapers)} answered 200 by {args.scrapers} scrapers "
          f"(/metrics text and OpenMetrics gzip, /api/v1/snapshot plain and gzip), "
          f"{len(errors)} errors; latency median "
          f"{statistics.median(latencies) * 1000:.1f} ms, p99 "
          f"{latencies[int(0.99 * (len(latencies) - 1))] * 1000:.1f} ms" if latencies else "no requests")
    for error in sorted(set(errors))[:10]:
        print(f"  error: {error}")
    print(f"Exports during the run: {exports}, failed: {failures}")
    print(f"Ledger observed device time {iso(since)} to {iso(until)}: {observed:.3f} of "
          f"{expected:.3f} device-hours = {100 * observed / expected:.2f} % (export exit {rc})"
          if expected else "Ledger: no whole minute between the first and the last snapshot")
    print(f"(work files in {work})")


if __name__ == "__main__":
    main()
