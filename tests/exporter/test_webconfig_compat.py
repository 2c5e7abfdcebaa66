"""A web configuration that works with exporter-toolkit (node_exporter) works here too.

* A password longer than bcrypt's 72 bytes (``openssl rand -base64 64`` gives 88 characters):
  bcrypt hashes only its first 72 bytes, and exporter-toolkit (Go's bcrypt) and ``htpasswd``
  compare it so. With bcrypt 5, which raises on a longer password, every scrape was answered
  401, however right the password.
* A TLS key encrypted with a passphrase, which exporter-toolkit does not read either: OpenSSL
  prompted "Enter PEM pass phrase:" on the terminal, so start-up hung on a console and under
  systemd stopped with "[Errno 22] Invalid argument". It stops with exit code 2 and says why.
* User names and header values read as written, as Go's yaml.v2 reads them into strings (a user
  ``00123`` was the number 83 here), and header values sent in UTF-8 as Go sends them (one
  beyond Latin-1 answered every request 500).

Both from the outside: ``allsmi serve`` as a subprocess, over HTTP.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import bcrypt
import pytest

from ..conftest import require_tool
from .server import Serve, free_port, run_serve

# 88 characters, as `openssl rand -base64 64` prints a generated secret
LONG_PASSWORD = base64.b64encode(bytes(range(7, 71))).decode()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.fixture(scope="module")
def long_password(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    # the hash htpasswd, Python's bcrypt 4 and Go's bcrypt make of it: of its first 72 bytes
    hashed = bcrypt.hashpw(LONG_PASSWORD.encode()[:72], bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path_factory.mktemp("web") / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--web-config", str(web)])
    try:
        yield server
    finally:
        server.stop()


def test_a_password_longer_than_72_bytes_is_compared_as_exporter_toolkit_does(
        long_password: Serve) -> None:
    assert len(LONG_PASSWORD.encode()) == 88
    long_password.wait_ready(headers=basic("prometheus", LONG_PASSWORD))
    resp = long_password.get("/metrics", basic("prometheus", LONG_PASSWORD))
    assert resp.status == 200 and b"allsmi_device_info" in resp.body
    # a wrong byte within the 72 that count is still refused, long or short
    wrong = "x" + LONG_PASSWORD[1:]
    for password in (wrong, LONG_PASSWORD[:71], ""):
        assert long_password.get("/metrics", basic("prometheus", password)).status == 401


def test_a_passphrase_protected_key_stops_start_up_with_a_reason(tmp_path: Path) -> None:
    openssl = require_tool("openssl", "openssl")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-days", "1",
                    "-passout", "pass:not-for-the-exporter", "-keyout", str(tmp_path / "server.key"),
                    "-out", str(tmp_path / "server.crt"), "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    env = {**os.environ, "ALLSMI_CONFIG": os.devnull}
    # stdin open and silent, as a console where nobody types: OpenSSL's prompt waited on it
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", "serve", "--simulate", "mixed",
                             "--listen", f"127.0.0.1:{free_port()}", "--web-config", str(web)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"allsmi serve did not stop within 30 s (waiting for a passphrase?): {err}")
    assert proc.returncode == 2, out + err
    assert "key_file" in err and "encrypted with a passphrase" in err, err
    assert "pass phrase" not in out + err and "Errno" not in err, err


def test_user_names_and_header_values_are_read_as_written_as_exporter_toolkit_reads_them(
        tmp_path: Path) -> None:
    # Go's yaml.v2 decodes a plain scalar into a string as its text; PyYAML resolved it first:
    # user 00123 became "83", yes and true became "True", so the right password got 401.
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    users = ("00123", "yes", "true", "1_000", "0x1f")
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n" + "".join(f"  {u}: {hashed}\n" for u in users)
                   + "http_server_config:\n  headers:\n    X-Content-Type-Options: off\n"
                   "    X-XSS-Protection: 00\n")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--web-config", str(web)])
    try:
        server.wait_ready(headers=basic("00123", "pw"))
        for user in users:
            resp = server.get("/healthz", basic(user, "pw"))
            assert resp.status == 200, user
        assert resp.headers["x-content-type-options"] == "off"
        assert resp.headers["x-xss-protection"] == "00"
        assert server.get("/healthz", basic("83", "pw")).status == 401
    finally:
        assert server.stop() == 0, server.output()


def test_a_header_value_beyond_latin_1_is_sent_in_utf_8_as_exporter_toolkit_sends_it(
        tmp_path: Path) -> None:
    # The head was encoded in Latin-1: a value with a character beyond it (quotes pasted from a
    # document) loaded, and then every request, /healthz included, was answered 500.
    policy = "default-src \u2018self\u2019; report-uri https://r\u00e9seau.example/csp"
    web = tmp_path / "web.yml"
    web.write_text(f'http_server_config:\n  headers:\n    Content-Security-Policy: "{policy}"\n',
                   encoding="utf-8")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--web-config", str(web)])
    try:
        server.wait_ready()
        for path in ("/healthz", "/metrics", "/nowhere"):
            resp = server.get(path)
            assert resp.status == (404 if path == "/nowhere" else 200), (path, resp.body)
            # (http.client reads header bytes as Latin-1)
            assert resp.headers["content-security-policy"].encode("latin-1").decode() == policy
    finally:
        assert server.stop() == 0, server.output()
