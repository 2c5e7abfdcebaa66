"""The fleet tests' set-up: ``allsmi serve --simulate mixed`` exporters on loopback with an
``allsmi.toml`` of the test's, scraped by a real Prometheus or VictoriaMetrics, and the
``allsmi export``/``allsmi idle`` runs that bill from them (tests/accounting/
test_prometheus_agreement.py, test_published_prices.py, test_longterm_store.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from ..prometheus_server import free_port

GROUP_BY = "resource_group,vendor,model"


def wait_http(url: str, timeout: float = 30.0) -> None:
    """Until ``url`` answers 200 (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback only
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer in {timeout} s")


def wait_until(t: float) -> None:
    """Until the wall clock reaches ``t`` (Unix time)."""
    while time.time() < t:
        time.sleep(min(0.5, max(0.0, t - time.time())))


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _run(argv: Sequence[str], cwd: Path,
         timeout: float) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    out = subprocess.run([sys.executable, "-m", "allsmi", *argv], cwd=cwd,
                         env={**os.environ, "XDG_CONFIG_HOME": str(cwd)}, capture_output=True,
                         text=True, timeout=timeout)
    return out.returncode, json.loads(out.stdout or "{}"), out.stderr


def export(*args: str, cwd: Path, config: str = "allsmi.toml",
           timeout: float = 60) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    """``allsmi export --config CONFIG --group-by GROUP_BY --format json ARGS`` in ``cwd``:
    (exit code, the document, stderr)."""
    return _run(["export", "--config", config, "--group-by", GROUP_BY, "--format", "json", *args],
                cwd, timeout)


def allsmi(*args: str, cwd: Path) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    """``allsmi ARGS --config allsmi.toml`` in ``cwd``: (exit code, the JSON document, stderr)."""
    return _run([*args, "--config", "allsmi.toml"], cwd, 60)


@dataclass
class Exporters:
    """Running ``allsmi serve`` processes, each on its own port, logging to ``serveN.log``."""

    procs: list[subprocess.Popen[bytes]]
    ports: list[int]
    logs: list[Path]

    @property
    def targets(self) -> list[str]:
        """``host:port`` of each, for a scrape configuration."""
        return [f"127.0.0.1:{port}" for port in self.ports]

    def assert_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs):
            assert proc.poll() is None, log.read_text()


@contextlib.contextmanager
def simulated_exporters(workdir: Path, config: str, *args: str, count: int = 1,
                        interval: float = 0.5, config_name: str = "allsmi.toml",
                        env: dict[str, str] | None = None) -> Iterator[Exporters]:
    """``count`` exporters ``allsmi serve --simulate mixed --interval INTERVAL --config
    CONFIG_NAME ARGS`` in ``workdir`` (``config`` written there as ``config_name``, and
    ``XDG_CONFIG_HOME`` pointing there), each answering ``/metrics``; stopped on exit."""
    (workdir / config_name).write_text(config)
    full_env = {**os.environ, "XDG_CONFIG_HOME": str(workdir), **(env or {})}
    running = Exporters([], [free_port() for _ in range(count)],
                        [workdir / f"serve{i}.log" for i in range(count)])
    try:
        for port, log_path in zip(running.ports, running.logs):
            with open(log_path, "wb") as log:
                running.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "allsmi", "serve", "--simulate", "mixed",
                     "--interval", str(interval), "--listen", f"127.0.0.1:{port}",
                     "--config", config_name, *args],
                    cwd=workdir, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL))
        for port in running.ports:
            wait_http(f"http://127.0.0.1:{port}/metrics")
        yield running
    finally:
        for proc in running.procs:
            stop(proc)
