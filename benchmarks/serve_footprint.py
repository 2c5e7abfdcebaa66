#!/usr/bin/env python3
"""Memory and CPU of `allsmi serve` as the Kubernetes DaemonSet runs it, for its resources.

Starts ``allsmi serve --simulate mixed`` on a loopback port with the DaemonSet's settings
(deploy/kubernetes: the ledger on, the ``kubernetes`` and ``cgroup`` attribution sources
configured, a kubelet socket path that does not exist), waits for ``/ready``, scrapes
``/metrics`` once a second for ``--seconds`` and samples the process's resident memory after
each scrape. Prints the median and maximum resident memory, the average CPU in millicores over
the window, and the time from ``SIGTERM`` to exit (which the DaemonSet's
``terminationGracePeriodSeconds`` must cover). Usage:
``python benchmarks/serve_footprint.py [--seconds 60] [--interval 2]``, with the Python of an
environment where allsmi is installed (psutil comes with it).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args()
    exe = Path(sys.executable).with_name("allsmi")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="allsmi-footprint-") as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('[attribution]\nsources = ["kubernetes", "cgroup"]\n')
        env = {**os.environ, "ALLSMI_CONFIG": str(config), "ALLSMI_SERVE_LEDGER": f"{tmp}/ledger.db",
               "ALLSMI_KUBELET_SOCKET": f"{tmp}/kubelet.sock", "ALLSMI_SERVE_LISTEN": f"127.0.0.1:{port}"}
        proc = subprocess.Popen([str(exe), "serve", "--simulate", "mixed", "--interval", str(args.interval)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while _get(base + "/ready") != 200:
                if proc.poll() is not None or time.monotonic() > deadline:
                    print(f"allsmi serve did not get ready (exit {proc.poll()})", file=sys.stderr)
                    return 1
                time.sleep(0.2)
            process = psutil.Process(proc.pid)
            cpu0, t0 = sum(process.cpu_times()[:2]), time.monotonic()
            rss = []
            for _ in range(args.seconds):
                _get(base + "/metrics")
                rss.append(process.memory_info().rss / 2**20)
                time.sleep(1)
            cpu1, t1 = sum(process.cpu_times()[:2]), time.monotonic()
        finally:
            stop = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
            took = time.monotonic() - stop
    print(f"machine: {describe()}")
    print(f"allsmi serve --simulate mixed, interval {args.interval:g} s, {args.seconds} scrapes")
    print(f"resident memory: median {statistics.median(rss):.1f} MiB, max {max(rss):.1f} MiB")
    print(f"CPU: {(cpu1 - cpu0) / (t1 - t0) * 1000:.0f} millicores on average")
    print(f"SIGTERM to exit: {took:.2f} s (exit status {code})")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
