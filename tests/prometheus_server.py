"""A real Prometheus server on loopback for the integration tests, and free ports.

The exporter, accounting and dashboard tests all scrape ``allsmi serve`` with the
Debian ``prometheus`` binary; this is the one place that configures, starts,
waits for and stops it. :func:`running_server` starts, waits for and stops the other
servers the tests drive (VictoriaMetrics, vmalert) the same way.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

from .conftest import require_tool


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, drawn below the kernel's
    ephemeral range: a port that ``bind(("127.0.0.1", 0))`` hands out (what this returned
    before) can be handed out again, between this check and the server's own bind, to another
    worker's server or client binding port 0; a plain HTTP server once answered a test's TLS
    handshake so. Two draws meet once in thousands of ports."""
    low = _ephemeral_low()
    for _ in range(100):
        port = 20000 + secrets.randbelow(low - 20000) if low > 21000 else 0
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use: draw again
            return int(sock.getsockname()[1])
    raise OSError("no free TCP port below the ephemeral range on 127.0.0.1")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it cannot be
    read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def answers(url: str) -> bool:
    """``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback only
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_server(argv: Sequence[str], log_path: Path, ready_url: str, what: str,
                   ready_timeout: float = 30.0) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` started with its output in ``log_path``, once ``ready_url`` answers 200 (polled
    every 0.1 s); stopped on exit. The log is shown if it dies or never gets ready."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + ready_timeout
            while not answers(ready_url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{what} did not start:\n{log_path.read_text()}")
                time.sleep(0.1)
            yield proc
            assert proc.poll() is None, f"{what} died:\n{log_path.read_text()}"
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@contextlib.contextmanager
def running_prometheus(workdir: Path, targets: Sequence[str],
                       ready_timeout: float = 30.0,
                       rule_files: Sequence[Path] = (), jobs: int = 1) -> Iterator[str]:
    """Prometheus scraping ``targets`` (``host:port``) every second; yields its base URL.

    ``rule_files`` are loaded (and evaluated every second). ``jobs`` > 1: each target is
    scraped by that many jobs, every series stored once per job (a target listed twice).

    Skips where the binary is absent (fails under CI). Its log is
    ``workdir/prometheus.log`` and is shown if it dies or never gets ready.
    """
    binary = require_tool("prometheus", "prometheus")
    port = free_port()
    config = workdir / "prometheus.yml"
    listed = ", ".join(f'"{t}"' for t in targets)
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                      "scrape_configs:\n"
                      + "".join(f"  - job_name: allsmi{n or ''}\n    static_configs:\n"
                                f"      - targets: [{listed}]\n" for n in range(jobs))
                      + ("rule_files:\n" if rule_files else "")
                      + "".join(f'  - "{path}"\n' for path in rule_files))
    base = f"http://127.0.0.1:{port}"
    argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"]
    with running_server(argv, workdir / "prometheus.log", f"{base}/-/ready", "prometheus",
                        ready_timeout):
        yield base


def wait_scraped(base: str, after: float = 0.0, timeout: float = 30.0) -> None:
    """Until every target of the Prometheus at ``base`` has been scraped, successfully, at
    ``after`` (Unix time) or later: the samples of a window ending before ``after`` are all in.
    ``after=0``: until each target was scraped once."""
    query = urllib.parse.urlencode({"query": "min(timestamp(up)) and min(up) == 1"})
    deadline = time.monotonic() + timeout
    result: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/api/v1/query?{query}",  # noqa: S310 - loopback
                                        timeout=5) as resp:
                result = json.load(resp)["data"]["result"]
        except OSError as exc:
            result = exc
        else:
            if result and float(result[0]["value"][1]) >= after:  # type: ignore[index]
                return
        time.sleep(0.2)
    raise AssertionError(f"{base}: no scrape of every target at {after} or later in {timeout} s: "
                         f"{result}")
