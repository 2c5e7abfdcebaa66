"""Running ``allsmi serve`` as a subprocess on a free loopback port, and talking to it."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..prometheus_server import free_port


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def fetch(url: str, headers: dict[str, str] | None = None, *, context: ssl.SSLContext | None = None,
          method: str = "GET", timeout: float = 10.0) -> Response:
    """One HTTP request; HTTP errors are returned, not raised."""
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as err:
        return Response(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


@dataclass
class Serve:
    """A running ``allsmi serve``; stopped (and reaped) by :meth:`stop`."""

    proc: subprocess.Popen[bytes]
    port: int
    scheme: str = "http"
    log: Path = field(default_factory=Path)

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def get(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> Response:
        return fetch(self.base + path, headers, **kw)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_listening(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"allsmi serve exited {self.proc.returncode}: {self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"allsmi serve did not listen within {timeout} s: {self.output()}")

    def wait_ready(self, timeout: float = 30.0, **kw: Any) -> None:
        self.wait_listening()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get("/ready", **kw).status == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"not ready within {timeout} s: {self.output()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


@functools.cache
def _logs() -> str:
    """One directory for this process's servers' logs where a test gives none, removed when
    the process ends (readable until then, after a server has stopped)."""
    path = tempfile.mkdtemp(prefix="allsmi-serve-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def run_serve(args: Sequence[str], *, port: int | None = None, env: dict[str, str] | None = None,
              listen: bool = True, tmp: Path | None = None,
              preexec_fn: Callable[[], None] | None = None) -> Serve:
    """Start ``allsmi serve ARGS --listen 127.0.0.1:PORT`` in the background."""
    port = port or free_port()
    log_dir = Path(tmp or tempfile.mkdtemp(prefix=f"serve-{port}-", dir=_logs()))
    log = log_dir / f"serve-{port}.log"
    command = [sys.executable, "-m", "allsmi", "serve", *args]
    if listen:
        command += ["--listen", f"127.0.0.1:{port}"]
    full_env = {**os.environ, "ALLSMI_CONFIG": os.devnull, **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                preexec_fn=preexec_fn)
    return Serve(proc, port, log=log)


def run_to_exit(args: Sequence[str], *, env: dict[str, str] | None = None,
                timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run ``allsmi ARGS`` expecting it to exit on its own."""
    full_env = {**os.environ, "ALLSMI_CONFIG": os.devnull, **(env or {})}
    return subprocess.run([sys.executable, "-m", "allsmi", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def serving(args: Sequence[str], **kw: Any) -> Iterator[Serve]:
    """Generator body for fixtures: start, yield, always stop."""
    server = run_serve(args, **kw)
    try:
        yield server
    finally:
        server.stop()
