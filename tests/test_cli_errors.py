"""Errors that point the right way: each failure a user commonly meets says what it is and
what to do, run as the user runs it (the CLI as a subprocess against real servers on loopback).

* ``--prometheus`` at a web server that is not a Prometheus query API: its status and the
  page's first line, not the page;
* ``http://`` at an exporter that speaks TLS: "use https://", not "connection reset";
* a missing ledger: how one is made;
* ``--group-by user`` before a store holds two samples of any holder: not enough data yet,
  not a missing ``--processes``;
* ``allsmi serve`` finding no device: one warning with the doctor hint.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from .conftest import require_tool, run_allsmi
from .exporter.server import Serve, run_serve

ENV = {"ALLSMI_CONFIG": "/dev/null"}
PAGE = ("<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body>\n"
        + "<p>nginx says no</p>\n" * 400 + "</body></html>\n")


class _Html404(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = PAGE.encode()
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _EmptyStore(http.server.BaseHTTPRequestHandler):
    """A Prometheus query API whose store has no two samples of anything yet: every query is
    answered with an empty vector, as a real one answers ``increase()`` over seconds of data."""

    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps({"status": "success",
                           "data": {"resultType": "vector", "result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def html_404() -> Iterator[str]:
    yield from _serving(_Html404)


@pytest.fixture
def empty_store() -> Iterator[str]:
    yield from _serving(_EmptyStore)


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    openssl = require_tool("openssl", "openssl")
    where = tmp_path_factory.mktemp("tls")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.crt"],
                   check=True, capture_output=True, timeout=60, cwd=where)
    web = where / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    server = run_serve(["--simulate", "mixed", "--interval", "1", "--web-config", str(web)])
    try:
        server.wait_listening()
        yield server
    finally:
        server.stop()


def test_prometheus_url_at_an_html_404_page(html_404: str, tmp_path: Path) -> None:
    out = run_allsmi("export", "--prometheus", html_404, "--period", "yesterday",
                     "--timeout", "5", env=ENV, cwd=tmp_path)
    assert out.returncode != 0 and out.stdout == "", out
    assert f"not a Prometheus query API at {html_404} (HTTP 404)" in out.stderr, out.stderr
    assert "<!DOCTYPE" not in out.stderr and "nginx says no" not in out.stderr, out.stderr
    assert len(out.stderr) < 600, out.stderr


def test_view_at_an_html_404_page(html_404: str) -> None:
    out = run_allsmi("view", "--prometheus", html_404, "--timeout", "5", env=ENV, timeout=60)
    assert out.returncode != 0, out
    text = out.stdout + out.stderr
    assert "not a Prometheus query API (HTTP 404)" in text, text
    assert "nginx says no" not in text, text


def test_http_at_a_tls_exporter_says_use_https(tls_node: Serve, tmp_path: Path) -> None:
    plain = f"http://127.0.0.1:{tls_node.port}"
    hint = f"speaks TLS: use https://127.0.0.1:{tls_node.port}"
    view = run_allsmi("view", "--hosts", plain, "--timeout", "5", env=ENV, timeout=60)
    assert view.returncode != 0, view
    assert hint in view.stdout + view.stderr, view
    assert "reset by peer" not in (view.stdout + view.stderr).lower(), view
    export = run_allsmi("export", "--prometheus", plain, "--period", "yesterday", "--timeout", "5",
                        env=ENV, cwd=tmp_path)
    assert export.returncode != 0 and export.stdout == "", export
    assert hint in export.stderr, export.stderr


def test_a_refused_connection_is_not_called_tls(tmp_path: Path) -> None:
    out = run_allsmi("export", "--prometheus", "http://127.0.0.1:1", "--period", "yesterday",
                     "--timeout", "2", env=ENV, cwd=tmp_path)
    assert out.returncode != 0 and "TLS" not in out.stderr, out.stderr


@pytest.mark.parametrize("command", ["export", "idle"])
def test_missing_ledger_says_how_one_is_made(command: str, tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "ledger.db"
    out = run_allsmi(command, "--ledger", str(path), "--period", "yesterday", env=ENV, cwd=tmp_path)
    assert out.returncode != 0 and out.stdout == "", out
    assert f"no ledger at {path}" in out.stderr, out.stderr
    assert f"allsmi record --ledger {path}" in out.stderr and "allsmi serve --ledger" in out.stderr
    assert "--ledger PATH" in out.stderr, out.stderr


def test_group_by_user_without_data_yet_says_so(empty_store: str, tmp_path: Path) -> None:
    now = int(time.time())
    window = ("--since", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 30)),
              "--until", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    out = run_allsmi("export", "--prometheus", empty_store, *window, "--group-by",
                     "resource_group,user", env=ENV, cwd=tmp_path)
    assert out.returncode != 0 and out.stdout == "", out
    assert "not enough data in the window yet" in out.stderr, out.stderr
    assert "--processes" not in out.stderr, out.stderr


def test_serve_without_devices_warns_once(tmp_path: Path) -> None:
    scenario = tmp_path / "empty.toml"
    scenario.write_text('name = "empty"\n[[devices]]\nbackend = "nvidia"\nvendor = "nvidia"\n'
                        'kind = "gpu"\nmodel = "NVIDIA H100 80GB HBM3"\ncount = 0\n'
                        "memory_total_bytes = 85520809984\npower_idle_watts = 72.0\n"
                        "power_limit_watts = 700.0\nclock_idle_mhz = 345.0\nclock_max_mhz = 1980.0\n"
                        "temperature_idle_celsius = 31.0\ntemperature_max_celsius = 74.0\n")
    server = run_serve(["--simulate", str(scenario), "--interval", "0.2"], tmp=tmp_path)
    try:
        server.wait_ready()
        deadline = time.monotonic() + 20
        while "no device found" not in server.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        # several cycles later, still one warning
        cycles = server.get("/metrics").text.count("\n")
        assert cycles
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            time.sleep(0.1)
    finally:
        server.stop()
    log = server.output()
    assert log.count("no device found") == 1, log
    assert "allsmi doctor" in log, log


def test_serve_with_devices_does_not_warn(tmp_path: Path) -> None:
    server = run_serve(["--simulate", "mixed", "--interval", "0.2"], tmp=tmp_path)
    try:
        server.wait_ready()
    finally:
        server.stop()
    assert "no device found" not in server.output()


def test_snapshot_prometheus_publishes_group_prices_and_budgets(tmp_path: Path) -> None:
    """docs/exporter.md lists the price and budget gauges for the textfile output: they have
    values there, from the configuration, as allsmi serve publishes them."""
    config = tmp_path / "c.toml"
    config.write_text('[groups.training]\nprice_per_device_hour = 2.5\nprice_per_kwh = 0.12\n'
                      'currency = "EUR"\nbudget_per_month = 5000\n')
    out = run_allsmi("snapshot", "--simulate", "mixed", "--config", str(config), "--format",
                     "prometheus", env={}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert 'allsmi_resource_group_price_per_device_hour{resource_group="training",currency="EUR"} 2.5' in lines
    assert 'allsmi_resource_group_price_per_kwh{resource_group="training",currency="EUR"} 0.12' in lines
    assert 'allsmi_resource_group_budget_per_month{resource_group="training",currency="EUR"} 5000.0' in lines
    for family in ("price_per_device_hour", "price_per_kwh", "budget_per_month"):
        assert any(line.startswith(f"allsmi_resource_group_{family}{{") for line in lines)


#: Two hours replayed (a bill over a pipe larger than its buffer, in a second, not a day's).
_HOURS = ("--since", "2026-11-02T09:00:00Z", "--until", "2026-11-02T11:00:00Z")


@pytest.mark.parametrize("args", [
    ["snapshot", "--simulate", "mixed", "--format", "json"],
    ["--simulate", "mixed", "snapshot", "--format", "csv"],
    ["export", "--simulate", "mixed", *_HOURS],
    ["doctor", "--simulate", "mixed", "--json"],
    ["backends"],
    ["--help"],
    ["--version"],
])
def test_a_full_standard_output_is_one_line_and_exit_1(args: list[str]) -> None:
    """stdout on a full disk (/dev/full): exit 1 and one line saying so, never a traceback."""
    from .conftest import allsmi_exe
    with open("/dev/full", "w") as full:
        out = subprocess.run(allsmi_exe() + args, stdout=full, stderr=subprocess.PIPE, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if "standard output" in line]
    assert lines == ["allsmi: cannot write the output to standard output: No space left on device"], \
        out.stderr


def test_serve_without_devices_names_every_vendor_with_whole_words(capsys: pytest.CaptureFixture[str]) -> None:
    """Long reasons are each cut at a word with an ellipsis; no vendor falls off the line."""
    from allsmi.cli.serve import warn_once_without_devices
    from allsmi.schema import BackendStatus, HostSample, Snapshot
    reason = "the vendor library was not found anywhere on this machine: install its package " * 3
    backends = tuple(BackendStatus(name=f"vendor{i}", status="unavailable", message=reason)
                     for i in range(12))
    import datetime as dt
    snap = Snapshot(timestamp=dt.datetime.now(dt.timezone.utc), host=HostSample(hostname="h"),
                    devices=(), backends=backends)
    warn_once_without_devices()(snap)
    err = capsys.readouterr().err
    assert all(f"vendor{i}: unavailable (the vendor library" in err for i in range(12)), err
    assert err.count("…)") == 12 and "allsmi doctor" in err


def test_a_reader_that_leaves_early_is_exit_1_never_0() -> None:
    """``allsmi report ... | head -c 100``: the document (over a pipe's buffer) is not all
    written, so the exit is 1, never 0 with a cut document."""
    import os
    from .conftest import allsmi_exe
    read, write = os.pipe()
    proc = subprocess.Popen(allsmi_exe() + ["report", "--simulate", "mixed", *_HOURS],
                            stdout=write, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    os.close(write)
    with os.fdopen(read, "rb") as reader:
        assert reader.read(100)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize("args", [
    ["snapshot", "--simulate", "mixed", "--format", "json"],
    ["export", "--simulate", "mixed", *_HOURS],
    ["export", "--simulate", "mixed", *_HOURS, "--format", "parquet"],
    ["idle", "--simulate", "mixed", *_HOURS, "--format", "csv"],
    ["waste", "--simulate", "mixed", *_HOURS, "--format", "json"],
    ["report", "--simulate", "mixed", *_HOURS, "-o", "-"],
    ["doctor", "--simulate", "mixed", "--json"],
    ["backends", "--json"],
])
def test_a_reader_that_left_is_exit_1_and_nothing_said(args: list[str]) -> None:
    """``allsmi export | head -c 100``: a closed pipe (here closed before the command writes)
    is exit 1 and no message, as ``allsmi snapshot``'s: ``report``, ``export``, ``idle`` and
    ``waste`` said "cannot write the output to standard output: Broken pipe"."""
    import os
    from .conftest import allsmi_exe
    read, write = os.pipe()
    os.close(read)
    try:
        out = subprocess.run(allsmi_exe() + args, stdout=write, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True, timeout=120)
    finally:
        os.close(write)
    assert (out.returncode, out.stderr) == (1, ""), out.stderr


@pytest.mark.parametrize("value", ['"x\\u001b[31mred\\u0007"', '"a\\u202eb"', '"' + "x" * 300 + '"'])
def test_a_group_label_value_that_could_not_be_shown_as_given_is_refused(
        value: str, tmp_path: Path) -> None:
    config = tmp_path / "labels.toml"
    config.write_text(f'[groups.a]\nlabels = {{ team = {value} }}\n')
    out = run_allsmi("snapshot", "--simulate", "mixed", "--format", "prometheus", "--config",
                     str(config), env=ENV)
    assert out.returncode == 2 and out.stdout == "", out
    assert f"{config}, line 2, key 'groups.a.labels.team': label values must be printable" \
        in out.stderr, out.stderr


def test_serve_options_blame_where_the_value_was_given(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('[serve]\nprocesses = "yes"\n')
    out = run_allsmi("serve", "--simulate", "mixed", "--config", str(config), "--listen",
                     "127.0.0.1:1", env=ENV)
    assert out.returncode == 2 and f"{config}, line 2, key 'serve.processes': expected true " \
        "or false, got 'yes'" in out.stderr, out.stderr
    config.write_text("[serve]\nenergy_max_gap_seconds = 100\n")
    out = run_allsmi("serve", "--simulate", "mixed", "--config", str(config), "--interval", "60",
                     "--energy-max-gap", "30", "--listen", "127.0.0.1:1", env=ENV)
    assert out.returncode == 2 and "allsmi: --energy-max-gap: must be at least the sampling " \
        "interval (60 s), got 30.0" in out.stderr, out.stderr
    out = run_allsmi("serve", "--simulate", "mixed", "--listen", "127.0.0.1:1",
                     env={**ENV, "ALLSMI_SERVE_ENERGY_MAX_GAP": "0.001"})
    assert out.returncode == 2 and "$ALLSMI_SERVE_ENERGY_MAX_GAP: must be at least" in out.stderr


def test_paths_and_variables_a_user_gave_are_shown_escaped_never_obeyed(tmp_path: Path) -> None:
    config = tmp_path / "c\x1b]0;T\x07.toml"
    config.write_text("[collector]\nbogus = 1\n")
    out = run_allsmi("snapshot", "--simulate", "mixed", "--config", str(config), env=ENV)
    assert out.returncode == 2 and "\x1b" not in out.stderr and "\x07" not in out.stderr
    assert "c\\x1b]0;T\\x07.toml, line 2, key 'collector.bogus'" in out.stderr, out.stderr
    out = run_allsmi("doctor", env={**ENV, "ALLSMI_HL_SMI": "/tmp/e\x1b[31mvil"})
    assert "\x1b" not in out.stdout + out.stderr
    assert "ALLSMI_HL_SMI=/tmp/e\\x1b[31mvil" in out.stdout, out.stdout


@pytest.mark.parametrize("hosts", ["", " , "])
def test_view_with_hosts_that_name_nobody_is_refused_not_the_local_node(hosts: str) -> None:
    out = run_allsmi("view", "--hosts", hosts, env=ENV)
    assert out.returncode == 2 and out.stdout == "" and "--hosts names no host" in out.stderr
