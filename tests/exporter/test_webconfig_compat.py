"""A web configuration that works with exporter-toolkit (node_exporter) works here too.

* A password longer than bcrypt's 72 bytes (``openssl rand -base64 64`` gives 88 characters):
  bcrypt hashes only its first 72 bytes, and exporter-toolkit (Go's bcrypt) and ``htpasswd``
  compare it so. With bcrypt 5, which raises on a longer password, every scrape was answered
  401, however right the password.
* A TLS key encrypted with a passphrase, which exporter-toolkit does not read either: OpenSSL
  prompted "Enter PEM pass phrase:" on the terminal, so start-up hung on a console and under
  systemd stopped with "[Errno 22] Invalid argument". It stops with exit code 2 and says why.

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
