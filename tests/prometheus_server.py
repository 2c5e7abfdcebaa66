"""A real Prometheus server on loopback for the integration tests, and free ports.

The exporter, accounting and dashboard tests all scrape ``allsmi serve`` with the
Debian ``prometheus`` binary; this is the one place that configures, starts,
waits for and stops it.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

from .conftest import require_tool


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback only
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_prometheus(workdir: Path, targets: Sequence[str],
                       ready_timeout: float = 30.0,
                       rule_files: Sequence[Path] = ()) -> Iterator[str]:
    """Prometheus scraping ``targets`` (``host:port``) every second; yields its base URL.

    ``rule_files`` are loaded (and evaluated every second).

    Skips where the binary is absent (fails under CI). Its log is
    ``workdir/prometheus.log`` and is shown if it dies or never gets ready.
    """
    binary = require_tool("prometheus", "prometheus")
    port = free_port()
    config = workdir / "prometheus.yml"
    listed = ", ".join(f'"{t}"' for t in targets)
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                      "scrape_configs:\n  - job_name: allsmi\n    static_configs:\n"
                      f"      - targets: [{listed}]\n"
                      + ("rule_files:\n" if rule_files else "")
                      + "".join(f'  - "{path}"\n' for path in rule_files))
    log_path = workdir / "prometheus.log"
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + ready_timeout
            while not _ready(f"{base}/-/ready"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"prometheus did not start:\n{log_path.read_text()}")
                time.sleep(0.2)
            yield base
            assert proc.poll() is None, f"prometheus died:\n{log_path.read_text()}"
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
