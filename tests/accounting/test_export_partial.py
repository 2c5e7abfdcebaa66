"""``allsmi export --prometheus`` against servers that cannot be trusted blindly (issue 19, item 11).

* A Prometheus-compatible server answering ``status: success`` with ``warnings`` (Thanos, Mimir)
  or ``isPartial`` (VictoriaMetrics cluster): the export fails, unless ``--allow-partial``
  writes it with its coverage lowered to 0 and the warnings named (exit 3).
* ``--timeout`` is a deadline on each whole request: a server trickling its answer a byte
  at a time does not hold the export past it.
* A URL with a space is a clear error, exit 2, never a traceback.

All from the outside: the CLI as a subprocess against a local HTTP server.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from .test_export_cli import SINCE, UNTIL, run

WARNING = "partial response: store 10.0.0.7:10901 unavailable"
NODE_A = {"uuid": "GPU-a", "instance": "node-a:9494", "resource_group": "default",
          "vendor": "nvidia", "model": "H100"}


class _Server(http.server.BaseHTTPRequestHandler):
    """Answers every query with one device of node-a; extra answer fields set by the test."""

    protocol_version = "HTTP/1.1"
    extra: dict[str, Any] = {}
    trickle: str = ""  # "", "body" or "head"

    def do_GET(self) -> None:  # noqa: N802
        # 3600 s of every counter in the hour; a whole device's share (1)
        value = "1" if "share_ratio" in self.path else "3600"
        doc = {"status": "success", **self.extra,
               "data": {"resultType": "vector",
                        "result": [{"metric": NODE_A, "value": [0, value]}]}}
        body = json.dumps(doc).encode()
        if self.trickle == "head":
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                if not self._slow(bytes([byte])):
                    return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.trickle == "body":
            for byte in body:
                if not self._slow(bytes([byte])):
                    return
            return
        self.wfile.write(body)

    def _slow(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            return False
        time.sleep(0.3)  # each byte well within any per-read timeout
        return True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[tuple[type[_Server], str]]:
    handler = type("Handler", (_Server,), {"extra": {}, "trickle": ""})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


WINDOW = ("--since", SINCE, "--until", UNTIL, "--format", "json")


def test_a_whole_answer_bills_node_a(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, url = server
    out = run("--prometheus", url, *WINDOW, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["coverage_ratio"] == 1.0
    # (this server answers every query alike: its copies of series are warned about, no part)
    assert WARNING not in doc.get("warnings", []) and "isPartial" not in out.stderr
    assert all(f"allsmi: warning: {w}\n" in out.stderr for w in doc.get("warnings", []))
    assert [r["host"] for r in doc["rows"]] == ["node-a:9494"]


@pytest.mark.parametrize("extra,needle", [
    ({"warnings": [WARNING]}, WARNING),
    ({"isPartial": True}, "isPartial"),
    ({"warnings": "a single string warning"}, "a single string warning"),
])
def test_partial_answers_fail_the_export(server, tmp_path: Path, extra: dict[str, Any],  # type: ignore[no-untyped-def]
                                         needle: str) -> None:
    handler, url = server
    handler.extra = extra
    status = tmp_path / "status.prom"
    out = run("--prometheus", url, *WINDOW, "--textfile", str(status), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert out.stdout == ""  # nothing, not a bill of the nodes that answered
    assert "partial" in out.stderr and needle in out.stderr and "--allow-partial" in out.stderr
    assert "Traceback" not in out.stderr
    assert "allsmi_export_success 0" in status.read_text()


def test_allow_partial_writes_with_coverage_lowered(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = server
    handler.extra = {"warnings": [WARNING]}
    status = tmp_path / "status.prom"
    out = run("--prometheus", url, *WINDOW, "--allow-partial", "--textfile", str(status),
              cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    doc = json.loads(out.stdout)
    assert doc["coverage_ratio"] == 0.0 and doc["warnings"][0] == WARNING
    assert doc["warnings"].count(WARNING) == 1
    assert [r["host"] for r in doc["rows"]] == ["node-a:9494"]  # what the server gave
    assert "partial answer" in out.stderr and WARNING in out.stderr
    text = status.read_text()
    assert "allsmi_export_success 0" in text
    # The flag changes nothing on a whole answer.
    handler.extra = {}
    out = run("--prometheus", url, *WINDOW, "--allow-partial", cwd=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["coverage_ratio"] == 1.0


def test_allow_partial_needs_prometheus(tmp_path: Path) -> None:
    out = run("--simulate", "mixed", "--period", "today", "--allow-partial", cwd=tmp_path)
    assert out.returncode == 2 and "--allow-partial needs --prometheus" in out.stderr


@pytest.mark.parametrize("where", ["body", "head"])
def test_timeout_is_a_deadline_on_the_whole_request(server, tmp_path: Path, where: str) -> None:  # type: ignore[no-untyped-def]
    handler, url = server
    handler.trickle = where  # a byte every 0.3 s: no single read ever times out
    started = time.monotonic()
    out = run("--prometheus", url, *WINDOW, "--timeout", "2", cwd=tmp_path)
    took = time.monotonic() - started
    assert out.returncode == 1, out.stderr
    assert "within 2 s" in out.stderr and "--timeout" in out.stderr, out.stderr
    assert took < 2 + 8, took  # the deadline plus the interpreter's start, never the trickle
    assert out.stdout == "" and "Traceback" not in out.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:9090/a b", "http://prom host:9090",
                                 "http://127.0.0.1:9090/\tx", "http://u:p w@127.0.0.1:9090"])
def test_url_with_a_space_is_a_clear_error(tmp_path: Path, url: str) -> None:
    out = run("--prometheus", url, "--period", "today", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "InvalidURL" not in out.stderr
    assert "invalid Prometheus URL" in out.stderr and "space" in out.stderr
    assert "p w" not in out.stderr  # a password stays hidden even here
