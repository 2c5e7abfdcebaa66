"""TLS and basic auth from an exporter-toolkit web configuration file."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Iterator

import bcrypt
import pytest

from ..conftest import require_tool
from allsmi.exporter.webconfig import BasicAuth, WebConfigError, load_web_config

from .server import Serve, free_port, run_serve, run_to_exit

HASH = bcrypt.hashpw(b"s3cret pass", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_tool("openssl", "openssl")
    where = tmp_path_factory.mktemp("certs")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(where / "server.key"), "-out", str(where / "server.crt"),
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return where


@pytest.fixture(scope="module")
def secured(certs: Path) -> Iterator[Serve]:
    web = certs / "web.yml"
    web.write_text(f"""\
# as node_exporter would read it
tls_server_config:
  cert_file: server.crt      # relative to this file
  key_file: server.key
  min_version: TLS12
basic_auth_users:
  prometheus: {HASH}
http_server_config:
  headers:
    X-Frame-Options: deny
""")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--web-config", str(web)])
    server.scheme = "https"
    try:
        yield server
    finally:
        server.stop()


def client_context(certs: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs / "server.crt"))


def test_tls_and_right_password(secured: Serve, certs: Path) -> None:
    ctx = client_context(certs)
    secured.wait_ready(context=ctx, headers=basic("prometheus", "s3cret pass"))
    resp = secured.get("/metrics", basic("prometheus", "s3cret pass"), context=ctx)
    assert resp.status == 200 and b"allsmi_device_info" in resp.body
    assert resp.headers["x-frame-options"] == "deny"


def test_wrong_or_missing_password_is_401(secured: Serve, certs: Path) -> None:
    ctx = client_context(certs)
    secured.wait_listening()
    for headers in (basic("prometheus", "wrong"), basic("nobody", "s3cret pass"), {}):
        resp = secured.get("/metrics", headers, context=ctx)
        assert resp.status == 401
        assert resp.headers["www-authenticate"].startswith("Basic realm=")
        assert b"allsmi_device" not in resp.body


def test_plain_http_to_the_tls_port_gets_nothing(secured: Serve) -> None:
    secured.wait_listening()
    with pytest.raises(OSError):
        from .server import fetch
        fetch(f"http://127.0.0.1:{secured.port}/metrics", basic("prometheus", "s3cret pass"),
              timeout=5)


def test_cached_credentials_skip_bcrypt() -> None:
    calls = []

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return bcrypt.checkpw(password, hashed)

    auth = BasicAuth({"prometheus": HASH.encode()}, checkpw=counting)
    header = basic("prometheus", "s3cret pass")["Authorization"]
    assert all(auth.check(header) for _ in range(5))
    assert len(calls) == 1
    assert not auth.check(basic("prometheus", "nope")["Authorization"])
    assert not auth.check(basic("prometheus", "nope")["Authorization"])
    assert len(calls) == 3, "failures must never be cached"
    assert not auth.check("Bearer abc") and not auth.check("Basic !!!") and not auth.check(None)


@pytest.mark.parametrize("content, message", [
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n", "does not exist"),
    ("tls_server_config:\n  key_file: server.key\n", "needs cert_file"),
    ("basic_auth_users:\n  alice: plaintext\n", "not a bcrypt hash"),
    ("tls_config:\n  cert_file: x\n", "unknown key 'tls_config'"),
    ("tls_server_config: [\n", "line 2, column 1: malformed YAML"),
    ("tls_server_config:\n  cert_file: a\n  cert_file: b\n", "line 3, key 'tls_server_config.cert_file': duplicate key"),
    ("basic_auth_users:\n  alice: !!python/object:os.system x\n", "line 2, column 10: malformed YAML"),
    ("http_server_config:\n  headers:\n    X-Powered-By: me\n",
     "line 3, key 'http_server_config.headers.X-Powered-By': only"),
    ("basic_auth_users:\n  alice: $2y$99$" + "a" * 53 + "\n", "line 2, key 'basic_auth_users.alice'"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
     "  min_version: TLS9\n", "min_version"),
])
def test_bad_web_config_is_refused(tmp_path: Path, certs: Path, content: str, message: str) -> None:
    for name in ("server.crt", "server.key"):
        shutil.copy(certs / name, tmp_path / name)
    web = tmp_path / "web.yml"
    web.write_text(content)
    with pytest.raises(WebConfigError, match=message):
        load_web_config(web)


def test_bad_web_config_stops_start_up_with_exit_2(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: /nonexistent/server.crt\n"
                   "  key_file: /nonexistent/server.key\n")
    port = free_port()
    result = run_to_exit(["serve", "--simulate", "mixed", "--listen", f"127.0.0.1:{port}",
                          "--web-config", str(web)])
    assert result.returncode == 2
    assert "/nonexistent/server.crt does not exist" in result.stderr
    missing = run_to_exit(["serve", "--simulate", "mixed", "--listen", f"127.0.0.1:{port}",
                           "--web-config", str(tmp_path / "absent.yml")])
    assert missing.returncode == 2 and "not found" in missing.stderr


def test_unreadable_key_stops_start_up(tmp_path: Path, certs: Path) -> None:
    shutil.copy(certs / "server.crt", tmp_path / "server.crt")
    (tmp_path / "server.key").write_text("-----BEGIN PRIVATE KEY-----\ngarbage\n")
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    with pytest.raises(WebConfigError, match="cannot load"):
        load_web_config(web)


def test_mutual_tls(tmp_path: Path, certs: Path) -> None:
    # the server's self-signed certificate doubles as the client CA and client certificate
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {certs / 'server.crt'}\n"
                   f"  key_file: {certs / 'server.key'}\n"
                   f"  client_auth_type: RequireAndVerifyClientCert\n"
                   f"  client_ca_file: {certs / 'server.crt'}\n")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--web-config", str(web)])
    server.scheme = "https"
    try:
        with_cert = client_context(certs)
        with_cert.load_cert_chain(str(certs / "server.crt"), str(certs / "server.key"))
        server.wait_ready(context=with_cert)
        assert server.get("/metrics", context=with_cert).status == 200
        with pytest.raises(OSError):
            server.get("/metrics", context=client_context(certs))
    finally:
        assert server.stop() == 0


def test_empty_web_config_serves_plain_http(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("# nothing configured\n")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--web-config", str(web)])
    try:
        server.wait_ready()
        assert server.get("/metrics").status == 200
    finally:
        server.stop()


def test_valid_exporter_toolkit_files_load(tmp_path: Path, certs: Path) -> None:
    # Flow mappings and sequences, quoting styles, document markers, anchors: any YAML
    # exporter-toolkit reads (the hand-written subset reader refused the flow mapping).
    web = tmp_path / "web.yml"
    web.write_text(f"""\
---
tls_server_config:
  cert_file: "{certs / 'server.crt'}"
  key_file: '{certs / 'server.key'}'
  min_version: &min TLS12
  max_version: TLS13
basic_auth_users: {{prometheus: '{HASH}', "grafana": {HASH}}}
http_server_config:
  http2: false
  headers: {{X-Frame-Options: deny, X-Content-Type-Options: nosniff}}
...
""")
    config = load_web_config(web)
    assert config.headers == {"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff"}
    assert set(config.users) == {"prometheus", "grafana"}
    assert config.ssl_context is not None
    assert config.ssl_context.maximum_version == ssl.TLSVersion.TLSv1_3


def test_flow_mapping_headers_are_served(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("http_server_config:\n  headers: {X-Frame-Options: deny}\n")
    server = run_serve(["--simulate", "mixed", "--interval", "0.5", "--web-config", str(web)])
    try:
        server.wait_ready()
        assert server.get("/metrics").headers["x-frame-options"] == "deny"
    finally:
        assert server.stop() == 0, server.output()


def test_unknown_user_costs_the_same_bcrypt_rounds_as_known_ones() -> None:
    costly = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=6))
    cheap = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4))
    checked: list[bytes] = []

    def spy(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return bcrypt.checkpw(password, hashed)

    auth = BasicAuth({"alice": costly, "bob": cheap}, checkpw=spy)
    for header in (basic("mallory", "pw"), basic("alice", "wrong"), {"Authorization": "Basic !!!"}):
        assert not auth.check(header["Authorization"])
    assert [h[:7] for h in checked] == [b"$2b$06$", costly[:7], b"$2b$06$"]
    assert checked[0] != costly, "the dummy is not a real user's hash"


def test_the_yaml_subset_reader_is_gone() -> None:
    import importlib.util
    assert importlib.util.find_spec("allsmi.exporter.yamlsubset") is None


@pytest.mark.parametrize("content, message", [
    ("tls_server_config: &x {cert_file: *x}\n", "tls_server_config"),  # recursive anchor
    ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
     "g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n", "unknown key 'a'"),  # alias bomb
])
def test_hostile_yaml_is_refused_quickly(tmp_path: Path, content: str, message: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text(content)
    with pytest.raises(WebConfigError, match=message):
        load_web_config(web)
