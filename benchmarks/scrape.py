#!/usr/bin/env python3
"""Scrape latency and cost of ``allsmi serve`` against prometheus-node-exporter, in one run.

For 8, 64 and 512 simulated devices (with processes), and for node_exporter
on the same machine, ``wrk`` scrapes ``/metrics`` the way Prometheus does
(OpenMetrics ``Accept``, ``Accept-Encoding: gzip``), first over one
connection (sequential), then over 50 concurrent connections. It reports
p50/p99 latency from wrk, and the exporter's CPU time per scrape (process CPU
during the run minus its idle collection CPU, divided by requests). Then it
measures the idle CPU and resident memory of ``allsmi serve`` at a 1 s
collection interval with 8 devices.

Usage::

    python benchmarks/scrape.py [--duration 10] [--sizes 8,64,512] [--idle 30]

Needs the Debian packages ``wrk`` and ``prometheus-node-exporter``; run as
root it installs them with apt-get, otherwise it says what to install.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

PACKAGES = {"wrk": "wrk", "prometheus-node-exporter": "prometheus-node-exporter"}
HEADERS = ["Accept: application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3",
           "Accept-Encoding: gzip"]

SCENARIO = """\
name = "bench-{count}"
seed = 7
users = ["alice", "bob", "carol", "dmitri"]
commands = ["python train.py --model llama-3-70b --fsdp", "vllm serve meta-llama/Llama-3.1-8B"]

[[devices]]
backend = "nvidia"
vendor = "nvidia"
kind = "gpu"
model = "NVIDIA H100 80GB HBM3"
count = {count}
memory_total_bytes = 85520809984
power_idle_watts = 72.0
power_limit_watts = 700.0
clock_idle_mhz = 345.0
clock_max_mhz = 1980.0
temperature_idle_celsius = 31.0
temperature_max_celsius = 74.0
has_energy_counter = true
driver_version = "560.35.03"
id_style = "nvidia"
duty_cycle = 0.9
job_seconds = [900, 3600]
"""


def ensure_tools() -> None:
    missing = [pkg for tool, pkg in PACKAGES.items() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"missing tools: install the Debian packages {' '.join(missing)} "
                 f"(sudo apt-get install -y {' '.join(missing)}), or run this script as root")
    print(f"installing Debian packages: {' '.join(missing)} (apt-get)", file=sys.stderr)
    subprocess.run(["apt-get", "update"], check=True, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *missing], check=True,
                   timeout=1200, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, timeout: float = 60.0) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return resp.read()
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout} s")


def series_count(exposition: bytes) -> int:
    return sum(1 for line in exposition.decode().splitlines() if line and not line.startswith("#"))


@dataclass
class Target:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    series: int = 0

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.proc.pid).cpu_times()
        return times.user + times.system

    def rss_mib(self) -> float:
        return psutil.Process(self.proc.pid).memory_info().rss / 2**20

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_allsmi(count: int, workdir: Path, interval: float = 1.0) -> Target:
    scenario = workdir / f"bench-{count}.toml"
    scenario.write_text(SCENARIO.format(count=count))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "allsmi", "serve", "--simulate", str(scenario), "--interval",
         str(interval), "--processes", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "ALLSMI_CONFIG": os.devnull})
    target = Target(f"allsmi serve, {count} devices", proc, f"http://127.0.0.1:{port}/metrics")
    wait_http(f"http://127.0.0.1:{port}/ready")
    target.series = series_count(wait_http(target.url))
    return target


def start_node_exporter() -> Target:
    port = free_port()
    binary = shutil.which("prometheus-node-exporter") or "prometheus-node-exporter"
    proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = Target("node_exporter (defaults)", proc, f"http://127.0.0.1:{port}/metrics")
    target.series = series_count(wait_http(target.url))
    return target


_LATENCY = re.compile(r"^\s*(50|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s)\s*$", re.M)
_REQUESTS = re.compile(r"(\d+) requests in")
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


@dataclass
class Run:
    connections: int
    requests: int
    p50_ms: float
    p99_ms: float
    cpu_ms_per_scrape: float


def wrk(target: Target, connections: int, duration: float, idle_cpu_rate: float) -> Run:
    threads = 1 if connections == 1 else 2
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--latency",
               "--timeout", "10s"]
    for header in HEADERS:
        command += ["-H", header]
    cpu_before, started = target.cpu_seconds(), time.monotonic()
    out = subprocess.run(command + [target.url], capture_output=True, text=True, check=True,
                         timeout=duration + 60).stdout
    cpu = target.cpu_seconds() - cpu_before - idle_cpu_rate * (time.monotonic() - started)
    latencies = {q: float(v) * _UNITS[u] for q, v, u in _LATENCY.findall(out)}
    requests = int(_REQUESTS.search(out).group(1))  # type: ignore[union-attr]
    return Run(connections, requests, latencies["50"], latencies["99"],
               max(cpu, 0.0) * 1000.0 / max(requests, 1))


def paced(target: Target, rate: float, duration: float) -> tuple[float, float]:
    """p50 and p99 latency (ms) of keep-alive scrapes sent at ``rate`` per second, unsaturated."""
    import http.client
    import urllib.parse
    url = urllib.parse.urlsplit(target.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    headers = dict(h.split(": ", 1) for h in HEADERS)
    latencies = []
    next_at = time.monotonic()
    end = next_at + duration
    while next_at < end:
        time.sleep(max(0.0, next_at - time.monotonic()))
        started = time.perf_counter()
        conn.request("GET", url.path, headers=headers)
        conn.getresponse().read()
        latencies.append((time.perf_counter() - started) * 1000.0)
        next_at += 1.0 / rate
    conn.close()
    latencies.sort()
    return latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]


def idle_rate(target: Target, seconds: float) -> float:
    """CPU seconds per wall second while nobody scrapes."""
    before, started = target.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return (target.cpu_seconds() - before) / (time.monotonic() - started)


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--sizes", default="8,64,512", help="simulated device counts")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU measurement")
    args = parser.parse_args()
    ensure_tools()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"machine: {machine()}")
    print(f"wrk {args.duration:g} s per run, headers as Prometheus sends them (OpenMetrics, gzip)\n")
    rows: list[tuple[Target, Run, float]] = []
    paced_rows: list[tuple[Target, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="allsmi-bench-") as tmp:
        targets_factories = [("node", None)] + [("allsmi", n) for n in sizes]
        for kind, count in targets_factories:
            target = start_node_exporter() if kind == "node" else start_allsmi(count, Path(tmp))
            try:
                time.sleep(2.0)
                rate = idle_rate(target, 5.0)
                for connections in (1, 50):
                    rows.append((target, wrk(target, connections, args.duration, rate), rate))
                paced_rows.append((target, *paced(target, 20.0, max(args.duration, 10.0))))
            finally:
                target.stop()

        print("| exporter | series | connections | scrapes/s | p50 ms | p99 ms | CPU ms/scrape |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for target, run, _ in rows:
            print(f"| {target.name} | {target.series} | {run.connections} | "
                  f"{run.requests / args.duration:.0f} | {run.p50_ms:.2f} | {run.p99_ms:.2f} | "
                  f"{run.cpu_ms_per_scrape:.3f} |")
        print("\nPaced: 20 scrapes/s over one keep-alive connection (machine not saturated):\n")
        print("| exporter | series | p50 ms | p99 ms |")
        print("| --- | ---: | ---: | ---: |")
        for target, p50, p99 in paced_rows:
            print(f"| {target.name} | {target.series} | {p50:.2f} | {p99:.2f} |")
        node = {r.connections: r for t, r, _ in rows if t.name.startswith("node")}
        print("\nRatios, p99 allsmi / p99 node_exporter (below 1: allsmi is faster):")
        for target, run, _ in rows:
            if not target.name.startswith("node"):
                print(f"  {target.name}, {run.connections} connection(s): "
                      f"{run.p99_ms / node[run.connections].p99_ms:.2f}")
        p99_seq = [r.p99_ms for t, r, _ in rows if not t.name.startswith("node") and r.connections == 1]
        print(f"  p99 (1 connection) at {sizes[-1]} vs {sizes[0]} devices: "
              f"{p99_seq[-1] / p99_seq[0]:.2f}x")

        idle = start_allsmi(8, Path(tmp), interval=1.0)
        try:
            time.sleep(3.0)
            rss = []
            samples = []
            for _ in range(max(1, int(args.idle // 5))):
                samples.append(idle_rate(idle, 5.0))
                rss.append(idle.rss_mib())
            print(f"\nIdle allsmi serve, 8 devices, 1 s interval, {args.idle:g} s: "
                  f"CPU {100 * statistics.mean(samples):.2f}% of one core "
                  f"(median of 5 s windows {100 * statistics.median(samples):.2f}%), "
                  f"RSS {max(rss):.1f} MiB")
        finally:
            idle.stop()
        rates = {t.name: r for t, _, r in rows}
        for name, rate in rates.items():
            what = "idle CPU" if name.startswith("node") else "collection+render CPU at 1 s interval"
            print(f"  {name}: {what} {100 * rate:.1f}% of one core")


if __name__ == "__main__":
    main()
