#!/usr/bin/env python3
"""Holder churn: the cost of 1000 holders appearing and leaving a minute (issue 36, item 6).

Two ``allsmi serve --simulate mixed --interval 1`` run side by side over the same windows, each
with its own job-mapping directory (``ALLSMI_HPC_JOB_DIR``): the *churned* one's directory is
rewritten every ``--period`` seconds with new job ids for 8 GPUs (so 1000 new holders a minute,
each leaving at the next rewrite), the *quiet* one's holds the same 8 job ids throughout. Both
are scraped every 15 s (Prometheus' default). Printed: each exporter's CPU (% of one core,
median of the windows), RSS at the start, the peak and the end, and the holder series it
exposes (at most ``[serve] max_holder_series``, default 1000, beyond which holders are counted
in each device's overflow holder), then RSS again after a quiet minute once the churn stops.

Usage: ``python benchmarks/holder_churn.py [--minutes 5] [--per-minute 1000] [--period 6]
[--allsmi .venv/bin/allsmi] [--max-holder-series N]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402
from _progress import progress  # noqa: E402
from startup import ENV, _cpu_seconds, _port  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: The simulated node's GPUs whose holders churn (``mixed`` names its NVIDIA GPUs so).
DEVICES = [f"nvidia{i}" for i in range(8)]
HOLDER = re.compile(rb"^allsmi_holder_allocated_seconds_total\{", re.M)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for {pid}")


def write_jobs(directory: Path, ids: dict[str, list[str]]) -> None:
    for name, jobs in ids.items():
        tmp = directory / f".{name}.tmp"
        tmp.write_text("".join(j + "\n" for j in jobs))
        os.replace(tmp, directory / name)


class Churn(threading.Thread):
    """Every ``period`` s, new job ids for every device: ``per_minute`` new holders a minute."""

    def __init__(self, directory: Path, per_minute: int, period: float) -> None:
        super().__init__(daemon=True)
        self.directory, self.period = directory, period
        self.per_round = max(len(DEVICES), round(per_minute * period / 60))
        self.started = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            ids: dict[str, list[str]] = {name: [] for name in DEVICES}
            for i in range(self.per_round):
                ids[DEVICES[i % len(DEVICES)]].append(str(1_000_000 + self.started + i))
            self.started += self.per_round
            write_jobs(self.directory, ids)
            self.stop.wait(self.period)


class Server:
    def __init__(self, allsmi: str, jobs: Path, extra: list[str]) -> None:
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.proc = subprocess.Popen(
            [allsmi, "serve", "--simulate", "mixed", "--interval", "1", "--listen",
             f"127.0.0.1:{self.port}", *extra],
            env={**ENV, "ALLSMI_HPC_JOB_DIR": str(jobs)}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def scrape(self) -> bytes:
        return urllib.request.urlopen(self.url, timeout=10).read()

    def wait(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"allsmi serve exited with {self.proc.returncode}")
            try:
                self.scrape()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("allsmi serve did not answer within 60 s") from None
                time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--per-minute", type=int, default=1000)
    parser.add_argument("--period", type=float, default=6.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--allsmi", default=str(REPO / ".venv" / "bin" / "allsmi"))
    parser.add_argument("--max-holder-series", type=int)
    args = parser.parse_args()
    extra = [] if args.max_holder_series is None else ["--max-holder-series", str(args.max_holder_series)]
    work = Path(tempfile.mkdtemp(prefix="allsmi-churn-"))
    dirs = {"quiet": work / "quiet", "churned": work / "churned"}
    for d in dirs.values():
        d.mkdir()
        write_jobs(d, {name: [f"steady-{name}"] for name in DEVICES})
    servers = {name: Server(args.allsmi, d, extra) for name, d in dirs.items()}
    churn = Churn(dirs["churned"], args.per_minute, args.period)
    try:
        for server in servers.values():
            server.wait()
        time.sleep(5)
        start_rss = {n: rss_mib(s.proc.pid) for n, s in servers.items()}
        peak = dict(start_rss)
        cpu: dict[str, list[float]] = {n: [] for n in servers}
        churn.start()
        end = time.monotonic() + 60 * args.minutes
        next_scrape = time.monotonic()
        with progress("churn windows", total=int(-(-60 * args.minutes // args.window))) as windows:
            while time.monotonic() < end:
                before = {n: _cpu_seconds(s.proc.pid) for n, s in servers.items()}
                started = time.monotonic()
                while time.monotonic() - started < args.window:
                    if time.monotonic() >= next_scrape:
                        for server in servers.values():
                            server.scrape()
                        next_scrape += 15
                    time.sleep(0.5)
                    for n, s in servers.items():
                        peak[n] = max(peak[n], rss_mib(s.proc.pid))
                wall = time.monotonic() - started
                for n, s in servers.items():
                    cpu[n].append(100 * (_cpu_seconds(s.proc.pid) - before[n]) / wall)
                windows.advance()
        churned_rss = {n: rss_mib(s.proc.pid) for n, s in servers.items()}
        holders = {n: len(HOLDER.findall(s.scrape())) for n, s in servers.items()}
        churn.stop.set()
        churn.join(10)
        time.sleep(60)  # a quiet minute: the holders that left are forgotten in time
        for server in servers.values():
            server.scrape()
        after_rss = {n: rss_mib(s.proc.pid) for n, s in servers.items()}
    finally:
        churn.stop.set()
        for server in servers.values():
            server.proc.terminate()
            server.proc.wait(10)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Machine: {describe()}\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"`allsmi serve --simulate mixed --interval 1` x2, scraped every 15 s; churned: "
          f"{churn.per_round} new job holders every {args.period:g} s ({churn.started} in "
          f"{args.minutes:g} min); load average {load}\n")
    print("| exporter | CPU, % of one core (median of windows) | RSS start | RSS peak | RSS end of churn "
          "| RSS after a quiet minute | holder series at the end |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n in servers:
        print(f"| {n} | {statistics.median(cpu[n]):.2f} % | {start_rss[n]:.1f} MiB | {peak[n]:.1f} MiB "
              f"| {churned_rss[n]:.1f} MiB | {after_rss[n]:.1f} MiB | {holders[n]} |")


if __name__ == "__main__":
    main()
