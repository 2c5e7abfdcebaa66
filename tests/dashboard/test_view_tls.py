"""``allsmi view --ca-file``: https nodes and an https Prometheus signed by a private CA, and what
a refused password says. Real TLS servers on loopback: ``allsmi serve --web-config`` and a
minimal Prometheus query endpoint."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterator

import bcrypt
import pytest

from ..conftest import require_tool, run_allsmi
from ..exporter.server import Serve, run_serve

PASSWORD = "s3cret pass"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private CA and a server certificate for 127.0.0.1 signed by it."""
    openssl = require_tool("openssl", "openssl")
    where = tmp_path_factory.mktemp("ca")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60, cwd=where)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=allsmi test CA",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
        "-out", "server.csr")
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "server.crt")
    return where


@pytest.fixture(scope="module")
def node(certs: Path) -> Iterator[Serve]:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = certs / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                   f"basic_auth_users:\n  prometheus: {hashed}\n")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--web-config", str(web)])
    server.scheme = "https"
    try:
        token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
        server.wait_ready(context=ssl.create_default_context(cafile=str(certs / "ca.pem")),
                          headers={"Authorization": f"Basic {token}"})
        yield server
    finally:
        server.stop()


def _view(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_allsmi("view", "--timeout", "10", *args, env={"ALLSMI_CONFIG": "/dev/null", **(env or {})},
                      timeout=90)


def test_https_node_needs_the_private_ca_and_is_read_with_ca_file(node: Serve, certs: Path) -> None:
    url = f"https://prometheus:{PASSWORD.replace(' ', '%20')}@127.0.0.1:{node.port}"
    without = _view("--hosts", url)
    assert without.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in without.stdout, without
    trusted = _view("--hosts", url, "--ca-file", str(certs / "ca.pem"))
    assert trusted.returncode == 0, trusted
    assert "ok" in trusted.stdout.splitlines()[1] and "38+3p" in trusted.stdout
    assert PASSWORD not in trusted.stdout + trusted.stderr
    # The documented alternative: OpenSSL's SSL_CERT_FILE.
    by_env = _view("--hosts", url, env={"SSL_CERT_FILE": str(certs / "ca.pem")})
    assert by_env.returncode == 0, by_env


def test_refused_credentials_are_told_apart_from_missing_ones(node: Serve, certs: Path) -> None:
    ca = str(certs / "ca.pem")
    wrong = _view("--hosts", f"https://prometheus:nope@127.0.0.1:{node.port}", "--ca-file", ca)
    assert wrong.returncode == 1 and "user and password in the URL were refused" in wrong.stdout, wrong
    missing = _view("--hosts", f"https://127.0.0.1:{node.port}", "--ca-file", ca)
    assert missing.returncode == 1 and "needs user:password@ in the URL" in missing.stdout, missing


def test_bad_ca_file_or_no_remote_source_exits_2(tmp_path: Path) -> None:
    out = _view("--hosts", "https://127.0.0.1:1", "--ca-file", str(tmp_path / "missing.pem"))
    assert out.returncode == 2 and "cannot load the CA file" in out.stderr, out
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    out = _view("--prometheus", "https://127.0.0.1:1", "--ca-file", str(tmp_path / "junk.pem"))
    assert out.returncode == 2 and "cannot load the CA file" in out.stderr, out
    out = _view("--simulate", "mixed", "--ca-file", str(tmp_path / "junk.pem"))
    assert out.returncode == 2 and "--ca-file applies to" in out.stderr, out


class _EmptyPrometheus(http.server.BaseHTTPRequestHandler):
    """Answers every instant query with an empty vector (a Prometheus with no allsmi series)."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append(self.path)
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_https_prometheus_with_ca_file(certs: Path) -> None:
    handler = type("Handler", (_EmptyPrometheus,), {"seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "server.crt", certs / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        without = _view("--prometheus", url)
        assert "CERTIFICATE_VERIFY_FAILED" in without.stdout + without.stderr, without
        assert not handler.seen
        trusted = _view("--prometheus", url, "--ca-file", str(certs / "ca.pem"))
        assert "CERTIFICATE_VERIFY_FAILED" not in trusted.stdout + trusted.stderr, trusted
        assert any(p.startswith("/api/v1/query?") for p in handler.seen)
    finally:
        server.shutdown()
        server.server_close()
