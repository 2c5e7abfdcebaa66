"""``allsmi export`` failing: the textfile says so, Prometheus credentials stay secret, signals clean up.

All from the outside: the CLI as a subprocess, a local HTTP server standing in
for Prometheus that demands credentials, and real signals.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import ssl
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from ..conftest import require_tool
from .test_export_cli import SINCE, UNTIL, ledger, run  # noqa: F401 - ledger is a fixture

SECRET = "s3cr3t-P@ss:word/%"
TOKEN = "tok-9f8e7d6c5b4a"
EMPTY_VECTOR = json.dumps({"status": "success",
                           "data": {"resultType": "vector", "result": []}}).encode()


def status_of(path: Path) -> str:
    text = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # node_exporter runs as another user
    return text


# -- textfile on every failure path ---------------------------------------------------------

def _previous_success(path: Path) -> None:
    path.write_text("allsmi_export_success 1\n")


@pytest.mark.parametrize("case", ["missing ledger", "unreachable prometheus", "missing output dir",
                                  "bad config", "bad period", "low coverage"])
def test_every_failure_rewrites_the_textfile_with_success_0(
        ledger: Path, tmp_path: Path, case: str) -> None:  # noqa: F811
    status = tmp_path / "status.prom"
    _previous_success(status)
    window = ("--since", SINCE, "--until", UNTIL)
    args, code, reason = {
        "missing ledger": (["--ledger", str(tmp_path / "nope.db"), *window], 1, "source"),
        "unreachable prometheus": (["--prometheus", "http://127.0.0.1:1", "--timeout", "2",
                                    *window], 1, "source"),
        "missing output dir": (["--ledger", str(ledger), *window, "-o",
                                str(tmp_path / "no" / "such" / "bill.csv")], 1, "output"),
        "bad config": (["--ledger", str(ledger), *window, "--config", "bad.toml"], 2, "config"),
        "bad period": (["--ledger", str(ledger), "--period", "someday"], 2, "config"),
        "low coverage": (["--ledger", str(ledger), "--since", SINCE, "--until",
                          "2026-03-02T02:00:00Z"], 3, "coverage"),
    }[case]
    (tmp_path / "bad.toml").write_text("[export.focus]\nprovider = 'x'\n")
    out = run(*args, "--textfile", str(status), cwd=tmp_path)
    assert out.returncode == code, out.stderr
    text = status_of(status)
    assert "allsmi_export_success 0\n" in text
    assert f'allsmi_export_failure_info{{reason="{reason}"}} 1\n' in text
    first_error = out.stderr.strip().splitlines()[0].removeprefix("allsmi: ")
    assert f"# allsmi export failed ({reason}): " in text
    if case != "bad config":
        assert first_error[:60] in text  # the reason, as a comment
    if case == "low coverage":
        assert "allsmi_export_coverage_ratio 0.500000\n" in text
    assert "allsmi_export_last_run_timestamp_seconds " in text
    # The file is a valid exposition (promtool checks it where installed).
    promtool = require_tool("promtool", "prometheus")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_textfile_from_config_is_written_on_failure_too(tmp_path: Path) -> None:
    status = tmp_path / "status.prom"
    (tmp_path / "c.toml").write_text(f"[export]\ntextfile = '{status}'\n")
    out = run("--config", "c.toml", "--ledger", str(tmp_path / "none.db"), "--period", "yesterday",
              cwd=tmp_path)
    assert out.returncode == 1
    assert "allsmi_export_success 0\n" in status_of(status)


def test_success_has_no_failure_series(ledger: Path, tmp_path: Path) -> None:  # noqa: F811
    status = tmp_path / "status.prom"
    out = run("--ledger", str(ledger), "--since", SINCE, "--until", UNTIL, "--textfile",
              str(status), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = status_of(status)
    assert "allsmi_export_success 1\n" in text and "failure" not in text and "\n# allsmi" not in text


def test_config_focus_table_is_validated(ledger: Path, tmp_path: Path) -> None:  # noqa: F811
    for body, key in (("[export.focus]\nprovider = 'x'\n", "export.focus.provider"),
                      ("[export.focus]\nprovider_name = ''\n", "export.focus.provider_name"),
                      ("[export.focus]\ncurrency = 'euro'\n", "export.focus.currency"),
                      ("[export.focus]\ncurrency = 'RMB'\n", "export.focus.currency"),
                      ("[export]\nfocus = 3\n", "export.focus")):
        (tmp_path / "f.toml").write_text("# allsmi\n" + body)
        out = run("--ledger", str(ledger), "--since", SINCE, "--until", UNTIL, "--config", "f.toml",
                  "--format", "focus", cwd=tmp_path)
        assert out.returncode == 2, (body, out.stderr)
        assert "f.toml" in out.stderr and "line " in out.stderr and key in out.stderr, out.stderr
    (tmp_path / "f.toml").write_text("[export.focus]\nProviderName = 'Lab'\nbilling_account_id = 'acct-1'\n")
    out = run("--ledger", str(ledger), "--since", SINCE, "--until", UNTIL, "--config", "f.toml",
              "--format", "focus", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[1]
    assert first.startswith("acct-1,acct-1,") and ",Lab,Lab,Lab," in first


# -- Prometheus behind authentication -----------------------------------------------------

class _Prometheus(http.server.BaseHTTPRequestHandler):
    """Answers queries with an empty vector, but only with the right credentials."""

    expected: str = ""
    seen: list[str] = []
    big = False

    def do_GET(self) -> None:  # noqa: N802
        type(self).seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization", "") != self.expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="prometheus"')
            self.end_headers()
            self.wfile.write(b"Unauthorized: " + self.headers.get("Authorization", "").encode())
            return
        body = EMPTY_VECTOR if not self.big else b'{"status":"success","data":' + b" " * (70 << 20)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if not self.big:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def prometheus() -> Iterator[tuple[type[_Prometheus], int]]:
    handler = type("Handler", (_Prometheus,), {"seen": [], "expected": "", "big": False})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_from_url_and_options(prometheus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, port = prometheus
    handler.expected = _basic("billing", SECRET)
    window = ("--since", SINCE, "--until", UNTIL, "--format", "json")
    quoted = "s3cr3t-P%40ss%3Aword%2F%25"
    out = run("--prometheus", f"http://billing:{quoted}@127.0.0.1:{port}", *window, cwd=tmp_path)
    assert out.returncode == 3, out.stderr  # authenticated; nothing recorded: no data, exit 3
    assert SECRET not in out.stdout + out.stderr and quoted not in out.stdout + out.stderr
    assert json.loads(out.stdout)["source"] == f"prometheus http://127.0.0.1:{port}"
    (tmp_path / "pw").write_text(SECRET + "\n")
    out = run("--prometheus", f"http://127.0.0.1:{port}", "--prometheus-user", "billing",
              "--prometheus-password-file", "pw", *window, cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    # Also from [export] (paths relative to the config file).
    (tmp_path / "c.toml").write_text(f"[export]\nprometheus = 'http://127.0.0.1:{port}'\n"
                                     "prometheus_user = 'billing'\nprometheus_password_file = 'pw'\n")
    out = run("--config", "c.toml", *window, cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert set(handler.seen) == {handler.expected}


def test_wrong_password_is_never_printed(prometheus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, port = prometheus
    handler.expected = _basic("billing", "the-right-one")
    status = tmp_path / "status.prom"
    out = run("--prometheus", f"http://billing:{SECRET}@127.0.0.1:{port}", "--period", "yesterday",
              "--textfile", str(status), cwd=tmp_path)
    assert out.returncode == 1
    assert "401" in out.stderr and "access denied" in out.stderr
    for text in (out.stdout, out.stderr, status.read_text()):
        assert SECRET not in text and base64.b64encode(SECRET.encode()).decode() not in text
    # Unreachable, with credentials in the URL: the message names the host, not the password.
    out = run("--prometheus", f"http://billing:{SECRET}@127.0.0.1:1", "--period", "yesterday",
              "--timeout", "2", cwd=tmp_path)
    assert out.returncode == 1 and "cannot reach Prometheus at http://127.0.0.1:1" in out.stderr
    assert SECRET not in out.stderr
    # A bad URL with a password: exit 2, redacted.
    out = run("--prometheus", f"ftp://billing:{SECRET}@host", "--period", "yesterday", cwd=tmp_path)
    assert out.returncode == 2 and SECRET not in out.stderr and "***" in out.stderr


def test_bearer_token_file(prometheus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, port = prometheus
    handler.expected = f"Bearer {TOKEN}"
    (tmp_path / "token").write_text(TOKEN + "\n")
    out = run("--prometheus", f"http://127.0.0.1:{port}", "--prometheus-bearer-token-file", "token",
              "--period", "yesterday", cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert TOKEN not in out.stderr
    (tmp_path / "token").write_text("wrong\n")
    out = run("--prometheus", f"http://127.0.0.1:{port}", "--prometheus-bearer-token-file", "token",
              "--period", "yesterday", cwd=tmp_path)
    assert out.returncode == 1 and "access denied with the configured credentials" in out.stderr


@pytest.mark.parametrize("args,needle", [
    (["--prometheus-user", "u"], "--prometheus-password-file"),
    (["--prometheus-password-file", "pw"], "needs a user"),
    (["--prometheus-user", "u", "--prometheus-password-file", "pw",
      "--prometheus-bearer-token-file", "pw"], "not both"),
    (["--prometheus-bearer-token-file", "missing"], "cannot read the bearer token file missing"),
    (["--prometheus-ca-file", "missing.pem"], "cannot load the CA file missing.pem"),
])
def test_bad_credential_options_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    (tmp_path / "pw").write_text(SECRET + "\n")
    out = run("--prometheus", "http://127.0.0.1:1", *args, "--period", "yesterday", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and SECRET not in out.stderr


def test_options_need_prometheus(ledger: Path, tmp_path: Path) -> None:  # noqa: F811
    out = run("--ledger", str(ledger), "--prometheus-user", "u", "--period", "yesterday", cwd=tmp_path)
    assert out.returncode == 2 and "need --prometheus" in out.stderr


def test_response_size_is_capped(prometheus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, port = prometheus
    handler.big = True
    out = run("--prometheus", f"http://127.0.0.1:{port}", "--period", "yesterday", "--timeout", "30",
              cwd=tmp_path)
    assert out.returncode == 1 and "larger than the limit" in out.stderr, out.stderr


def test_tls_with_a_ca_file(tmp_path: Path) -> None:
    """HTTPS Prometheus signed by a private CA: verified with --prometheus-ca-file."""
    openssl = require_tool("openssl", "openssl")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
                   check=True, capture_output=True)
    handler = type("Handler", (_Prometheus,), {"seen": [], "expected": f"Bearer {TOKEN}",
                                               "big": False})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        (tmp_path / "token").write_text(TOKEN)
        base = ("--prometheus", url, "--prometheus-bearer-token-file", "token", "--period", "yesterday")
        out = run(*base, cwd=tmp_path)
        assert out.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in out.stderr, out.stderr
        out = run(*base, "--prometheus-ca-file", "cert.pem", cwd=tmp_path)
        assert out.returncode == 3, out.stderr
        out = run(*base, "--ca-file", "cert.pem", cwd=tmp_path)  # the short name, as on `view`
        assert out.returncode == 3, out.stderr
    finally:
        server.shutdown()
        server.server_close()


# -- signals during export --simulate -----------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_simulate_leaves_no_temporary_directory(tmp_path: Path, sig: int) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    status = tmp_path / "status.prom"
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", "export", "--simulate", "mixed",
                             "--since", "2025-01-01", "--until", "2025-03-01", "-o", "bill.csv",
                             "--textfile", str(status)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(scratch),
                                 "XDG_CONFIG_HOME": str(tmp_path)})
    try:
        deadline = time.monotonic() + 60
        while not list(scratch.glob("allsmi-export-*/ledger.db")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the replay never started"
            time.sleep(0.05)
        time.sleep(0.5)  # well inside the replay (two months take a minute)
        workers = _children(proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, err
    assert f"interrupted by {signal.Signals(sig).name}" in err.decode()
    assert list(scratch.iterdir()) == []
    assert not (tmp_path / "bill.csv").exists()
    assert 'allsmi_export_failure_info{reason="interrupted"} 1' in status.read_text()
    # the replay's worker processes (one per CPU) went with it
    assert [pid for pid in workers if Path(f"/proc/{pid}").exists()] == []


def _children(pid: int) -> list[int]:
    """The processes ``pid`` has forked (Linux's /proc), waiting until it has some."""
    deadline = time.monotonic() + 10
    while True:
        found = [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
                 for child in (task / "children").read_text().split()]
        if found or len(os.sched_getaffinity(0)) < 2:
            return found
        assert time.monotonic() < deadline, "the replay started no worker process"
        time.sleep(0.05)



@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: the replay forks no worker")
def test_a_worker_killed_fails_the_simulated_bill_loudly(tmp_path: Path) -> None:
    """A worker process of the replay that dies (SIGKILL, the OOM killer) fails the export with
    a message and exit status 1, nothing written, instead of waiting forever for its chunk."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", "export", "--simulate", "mixed",
                             "--since", "2025-01-01", "--until", "2025-03-01", "-o", "bill.csv"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(scratch),
                                 "XDG_CONFIG_HOME": str(tmp_path)})
    try:
        deadline = time.monotonic() + 60
        while not list(scratch.glob("allsmi-export-*/ledger.db")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the replay never started"
            time.sleep(0.05)
        workers = _children(proc.pid)
        os.kill(workers[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert b"worker process of the simulated bill ended unexpectedly" in err
    assert out == b"" and not (tmp_path / "bill.csv").exists()
    assert list(scratch.iterdir()) == []
    assert [pid for pid in workers if Path(f"/proc/{pid}").exists()] == []
