"""A changed web configuration, or a rotated certificate, is in force without a restart.

The file and the certificates were read at start-up only: a certificate renewed on disk
(cert-manager, a renewal cron) was not served until the exporter restarted, so once the old
one expired every scrape failed verification; a changed password stayed the old one.
exporter-toolkit reads them for every handshake and request. Now ``allsmi serve`` looks at the
files every second and reloads on a change; a change that does not load (a key that does not
match its certificate yet, halfway through a rotation) keeps the configuration in use, is
logged, and turns ``allsmi_exporter_web_config_last_reload_successful`` to 0 until one loads.

From the outside: ``allsmi serve`` as a subprocess, files replaced as a rotation replaces them
(written beside, then renamed over), waiting on what a new connection is served.
"""

from __future__ import annotations

import base64
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Callable

import bcrypt
import pytest

from ..conftest import require_tool
from .server import Response, Serve, run_serve
from .support import series

RELOADED = "allsmi_exporter_web_config_last_reload_successful"


def replace(target: Path, content: bytes) -> None:
    """Put ``content`` at ``target`` as a rotation does: written beside it, renamed over it."""
    beside = target.with_name(target.name + ".new")
    beside.write_bytes(content)
    os.replace(beside, target)


def wait_for(what: str, condition: Callable[[], bool], serve: Serve, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}\n{serve.output()}")


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def reload_flag(resp: Response) -> float | None:
    if resp.status != 200:
        return None
    return series(resp.text).get((RELOADED, frozenset()))


@pytest.fixture()
def certs(tmp_path: Path) -> Path:
    openssl = require_tool("openssl", "openssl")
    for name in ("a", "b"):
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-keyout", str(tmp_path / f"{name}.key"), "-out", str(tmp_path / f"{name}.crt"),
                        "-subj", f"/CN=allsmi-test-{name}", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True, timeout=60)
    return tmp_path


def served_certificate(port: int) -> bytes:
    """The DER certificate a new TLS connection is served."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # which certificate, not whether it verifies
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der(pem_file: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_file.read_text())


def test_a_rotated_certificate_is_served_without_a_restart(certs: Path) -> None:
    for name in ("crt", "key"):
        replace(certs / f"server.{name}", (certs / f"a.{name}").read_bytes())
    web = certs / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    serve = run_serve(["--simulate", "mixed", "--interval", "0.3", "--web-config", str(web)])
    serve.scheme = "https"
    both = ssl.create_default_context(cadata=(certs / "a.crt").read_text() + (certs / "b.crt").read_text())
    try:
        serve.wait_ready(context=both)
        assert served_certificate(serve.port) == der(certs / "a.crt")
        assert reload_flag(serve.get("/metrics", context=both)) == 1.0

        # halfway through the rotation: the new certificate, the old key; kept, and said
        replace(certs / "server.crt", (certs / "b.crt").read_bytes())
        wait_for("the failed reload published as 0",
                 lambda: reload_flag(serve.get("/metrics", context=both)) == 0.0, serve)
        assert served_certificate(serve.port) == der(certs / "a.crt")
        assert "not reloaded" in serve.output() and "key_file" in serve.output()

        replace(certs / "server.key", (certs / "b.key").read_bytes())
        wait_for("the new certificate served", lambda: served_certificate(serve.port) == der(certs / "b.crt"),
                 serve)
        wait_for("the reload published as 1",
                 lambda: reload_flag(serve.get("/metrics", context=both)) == 1.0, serve)
        strict_b = ssl.create_default_context(cadata=(certs / "b.crt").read_text())
        assert serve.get("/healthz", context=strict_b).status == 200
        assert serve.proc.poll() is None
    finally:
        assert serve.stop() == 0


def test_a_changed_password_is_in_force_at_the_next_request(tmp_path: Path) -> None:
    def users(password: bytes) -> str:
        hashed = bcrypt.hashpw(password, bcrypt.gensalt(rounds=4)).decode()
        return f"basic_auth_users:\n  prometheus: {hashed}\n"

    web = tmp_path / "web.yml"
    web.write_text(users(b"old secret"))
    serve = run_serve(["--simulate", "mixed", "--interval", "0.3", "--web-config", str(web)])
    try:
        serve.wait_ready(headers=basic("prometheus", "old secret"))
        assert serve.get("/metrics", basic("prometheus", "new secret")).status == 401

        replace(web, users(b"new secret").encode())
        wait_for("the new password accepted",
                 lambda: serve.get("/healthz", basic("prometheus", "new secret")).status == 200, serve)
        assert serve.get("/healthz", basic("prometheus", "old secret")).status == 401  # revoked
        assert reload_flag(serve.get("/metrics", basic("prometheus", "new secret"))) == 1.0

        # a change that does not load keeps the one in use
        replace(web, b"basic_auth_users:\n  prometheus: not-a-hash\n")
        wait_for("the failed reload published as 0",
                 lambda: reload_flag(serve.get("/metrics", basic("prometheus", "new secret"))) == 0.0,
                 serve)
        assert serve.get("/healthz", basic("prometheus", "old secret")).status == 401
    finally:
        assert serve.stop() == 0


def test_a_change_naming_a_file_not_there_yet_is_tried_again(certs: Path) -> None:
    """The web configuration changed first, to name certificate files written afterwards: the
    files it named before do not change again, so the watcher also tries again, every
    RETRY_SECONDS while the last change did not load (and says each error once)."""
    from allsmi.exporter.webconfig import load_web_config
    from allsmi.exporter.webreload import RETRY_SECONDS, WebConfigWatcher

    web = certs / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n")
    applied: list[Path] = []
    watcher = WebConfigWatcher(load_web_config(web), lambda new: applied.append(new.files[1]))
    assert not watcher.check(now=0.0)  # nothing changed
    replace(web, b"tls_server_config:\n  cert_file: c.crt\n  key_file: c.key\n")
    assert not watcher.check(now=1.0) and not watcher.last_reload_ok and watcher.reload_errors == 1
    for name in ("crt", "key"):
        replace(certs / f"c.{name}", (certs / f"b.{name}").read_bytes())
    assert not watcher.check(now=2.0)  # not yet: web.yml, a.crt and a.key are as they were
    assert watcher.check(now=1.0 + RETRY_SECONDS) and watcher.last_reload_ok
    assert applied == [certs / "c.crt"] and watcher.reload_errors == 1
