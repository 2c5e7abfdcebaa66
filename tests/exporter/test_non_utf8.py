"""A real process whose command line is not valid UTF-8, on a GPU of the fake NVML library.

psutil returns such a command line with surrogate escapes ("\\udcff"); before
the schema-boundary sanitizer it made the exposition fail to render (/metrics
frozen while /ready said 200) and the JSON carry "\\udcff" escapes that strict
parsers reject. Everything is checked from the outside: ``allsmi serve`` and
``allsmi snapshot`` as subprocesses, over HTTP and stdout.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from allsmi.output import snapshot_from_dict

from ..prometheus_server import free_port
from .server import Serve
from .support import series, values

REPO = Path(__file__).resolve().parents[2]
RUNNER = [sys.executable, "-m", "tests.exporter.fake_nvml_allsmi"]


def strict_json(text: str) -> Any:
    """Parse JSON as a strict parser would: every string must be valid Unicode (no lone
    surrogate escapes such as "\\udcff", which Python's json module would accept)."""
    def check(value: Any) -> None:
        if isinstance(value, str):
            value.encode("utf-8")  # UnicodeEncodeError on a lone surrogate
        elif isinstance(value, dict):
            for key, item in value.items():
                check(key)
                check(item)
        elif isinstance(value, list):
            for item in value:
                check(item)
    data = json.loads(text)
    check(data)
    return data


ODD_COMMAND = "\ufffd-caf\ufffd -c import time; time.sleep(120)"
"""The odd process's command line as allsmi shows it: each undecodable byte replaced."""


@pytest.fixture(scope="module")
def odd_process() -> Iterator[subprocess.Popen[bytes]]:
    # bytes arguments: argv[0] holds the bytes 0xFF and 0xE9, not valid UTF-8. argv[0] (not a
    # later argument) so that the odd bytes come first in the command line whatever the length
    # of the interpreter's path on this machine (the metric label is cut to 64 characters).
    proc = subprocess.Popen([b"\xff-caf\xe9", b"-c", b"import time; time.sleep(120)"],
                            executable=os.fsencode(sys.executable))
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def _env() -> dict[str, str]:
    return {**os.environ, "ALLSMI_CONFIG": os.devnull, "PYTHONPATH": str(REPO)}


def _serve(pid: int, tmp: Path, *args: str) -> Serve:
    port = free_port()
    log = tmp / f"serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*RUNNER, str(pid), "--", "serve", "--interval", "0.3",
                                 "--listen", f"127.0.0.1:{port}", *args],
                                stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=REPO)
    return Serve(proc, port, log=log)


def _check_process(doc: dict[str, Any], pid: int) -> dict[str, Any]:
    procs = [p for d in doc["devices"] for p in d["processes"] or [] if p["pid"] == pid]
    assert len(procs) == 1, doc["devices"][0]["processes"]
    return procs[0]


def test_serve_metrics_and_snapshot_api_survive_a_non_utf8_command_line(
        odd_process: subprocess.Popen[bytes], tmp_path: Path) -> None:
    server = _serve(odd_process.pid, tmp_path, "--processes", "--ledger", str(tmp_path / "l.db"))
    try:
        server.wait_ready()
        for _ in range(3):  # several cycles, not only the first
            metrics = server.get("/metrics")
            assert metrics.status == 200
            text = metrics.body.decode("utf-8")  # strict: raises on invalid UTF-8
            memory = {dict(labels)["pid"]: dict(labels)["command"]
                      for (name, labels) in series(text) if name == "allsmi_process_memory_bytes"}
            assert memory[str(odd_process.pid)] == ODD_COMMAND
            assert values(text, "allsmi_exporter_render_errors_total") == {"[]": 0.0}
            assert values(text, "allsmi_ledger_write_errors_total") == {"[]": 0.0}
            api = server.get("/api/v1/snapshot")
            assert api.status == 200
            doc = strict_json(api.body.decode("utf-8"))
            assert "\\udc" not in api.body.decode("ascii")
            assert doc["process_details"] is True
            assert _check_process(doc, odd_process.pid)["command"] == ODD_COMMAND
            assert snapshot_from_dict(doc).devices
            assert server.get("/ready").status == 200
        openmetrics = server.get("/metrics", {"Accept": "application/openmetrics-text"})
        assert series(openmetrics.body.decode("utf-8"), openmetrics=True)
    finally:
        assert server.stop() == 0, server.output()
    assert "Traceback" not in server.output(), server.output()


def test_snapshot_api_withholds_commands_and_users_without_processes(
        odd_process: subprocess.Popen[bytes], tmp_path: Path) -> None:
    server = _serve(odd_process.pid, tmp_path)
    try:
        server.wait_ready()
        doc = strict_json(server.get("/api/v1/snapshot").text)
        assert doc["process_details"] is False
        proc = _check_process(doc, odd_process.pid)
        assert (proc["pid"], proc["user"], proc["command"], proc["memory_bytes"]) == \
            (odd_process.pid, None, None, 1 << 30)
        assert snapshot_from_dict(doc).process_details is False
        assert "sleep(120)" not in server.get("/api/v1/snapshot").text
        assert "allsmi_process_memory_bytes" not in server.get("/metrics").text
    finally:
        assert server.stop() == 0, server.output()


@pytest.mark.parametrize("fmt", ["json", "csv", "prometheus", "table"])
def test_snapshot_formats_survive_a_non_utf8_command_line(
        odd_process: subprocess.Popen[bytes], fmt: str) -> None:
    result = subprocess.run([*RUNNER, str(odd_process.pid), "--", "snapshot", "--format", fmt],
                            capture_output=True, env=_env(), cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    out = result.stdout.decode("utf-8")  # strict
    if fmt == "json":
        proc = _check_process(strict_json(out), odd_process.pid)
        assert proc["command"] == ODD_COMMAND
        assert "\\udc" not in out
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        assert len(rows) == 2
    elif fmt == "prometheus":
        assert values(out, "allsmi_device_info")
