"""deploy/victoriametrics: the long-term store's files, run as written with the Debian binaries.

VictoriaMetrics starts with the ``ARGS`` of ``victoria-metrics.default`` and scrapes the shipped
``scrape.yml``; vmalert starts with ``vmalert.service``'s ``ExecStart=``, evaluating
deploy/prometheus/allsmi-rules.yml and writing the results back. Only addresses and paths are
moved to loopback ports and a temporary directory (and the scrape interval shortened).
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from ..conftest import require_tool
from ..prometheus_server import free_port, running_server
from .support import DEPLOY, RULES
from .test_systemd import verify

VM_DIR = DEPLOY / "victoriametrics"

pytestmark = [pytest.mark.integration]


def default_args() -> list[str]:
    for line in (VM_DIR / "victoria-metrics.default").read_text().splitlines():
        if line.startswith("ARGS="):
            return shlex.split(shlex.split(line.partition("=")[2])[0])
    raise AssertionError("no ARGS= in victoria-metrics.default")


def exec_start() -> list[str]:
    for line in (VM_DIR / "vmalert.service").read_text().splitlines():
        if line.startswith("ExecStart="):
            return shlex.split(line.partition("=")[2])
    raise AssertionError("no ExecStart= in vmalert.service")


def drop_in_exec_start() -> str:
    """The shell script of the drop-in's ``ExecStart=`` (systemd's ``$$`` unescaped)."""
    lines = [line.partition("=")[2] for line in (VM_DIR / "victoria-metrics.service.d" / "allsmi-auth.conf")
             .read_text().splitlines() if line.startswith("ExecStart=")]
    assert lines[0] == "", "the drop-in must reset the package's ExecStart="
    (command,) = lines[1:]
    argv = shlex.split(command)
    assert argv[:2] == ["/bin/sh", "-ec"], argv
    return argv[2].replace("$$", "$")


PASSWORD_FILE = "/etc/victoria-metrics/store.password"
AUTHKEY_FILE = "/etc/victoria-metrics/store.authkey"


def flags(argv: list[str]) -> dict[str, str]:
    return dict(a.lstrip("-").split("=", 1) for a in argv if a.startswith("-") and "=" in a)


def test_the_documented_settings() -> None:
    vm = flags(default_args())
    assert vm["retentionPeriod"] == "13"  # months
    assert vm["promscrape.config"] == "/etc/victoria-metrics/scrape.yml"
    assert "dedup.minScrapeInterval" in vm
    alert = flags(exec_start()[1:])
    assert alert["rule"] == "/etc/victoria-metrics/rules/allsmi-rules.yml"
    assert alert["datasource.url"] == alert["remoteWrite.url"]  # results written back
    # evaluated as of VictoriaMetrics' default -search.latencyOffset (30 s) ago, so that an
    # evaluation just after an hour is not moved back by the store (the hour shifted)
    assert "search.latencyOffset" not in vm and alert["datasource.lookback"] == "30s"
    assert alert["datasource.url"].endswith(":" + vm["httpListenAddr"].rsplit(":", 1)[1])
    readme = (DEPLOY / "README.md").read_text()
    for name in ("victoria-metrics.default", "scrape.yml", "vmalert.service",
                 "prometheus-remote-write.yml"):
        assert f"deploy/victoriametrics/{name}" in readme, name
    assert "-replay.timeFrom" in readme and "-datasource.queryStep=1h" in readme


def test_vmalert_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    require_tool("vmalert", "victoria-metrics")
    (tmp_path / "vmalert.service").write_text((VM_DIR / "vmalert.service").read_text())
    result = verify(tmp_path, "vmalert.service")
    complaints = [line for line in (result.stdout + result.stderr).splitlines()
                  if "vmalert.service" in line]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr


def test_vmalert_unit_is_hardened(tmp_path: Path) -> None:
    """vmalert reads files and talks HTTP: ``systemd-analyze security`` rates its unit as it rates
    allsmi's own export unit, not "EXPOSED" (8.5 with only NoNewPrivileges, ProtectSystem,
    ProtectHome and PrivateTmp)."""
    tool = require_tool("systemd-analyze", "systemd")
    (tmp_path / "vmalert.service").write_text((VM_DIR / "vmalert.service").read_text())
    result = subprocess.run([tool, "security", "--offline=yes", "--no-pager", "vmalert.service"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_LOG_LEVEL": "notice"})
    lines = result.stdout.splitlines()
    exposure = float(lines[-1].split("exposure level for vmalert.service:")[1].split()[0])
    assert exposure <= 2.0, result.stdout
    for name in ("CapabilityBoundingSet=~CAP_SYS_ADMIN", "PrivateDevices=", "PrivateUsers=",
                 "MemoryDenyWriteExecute=", "SystemCallFilter=~@privileged"):
        line = next((ln for ln in lines if ln.split()[1:2] == [name]), None)
        assert line is not None and line.startswith("✓"), f"{name}: {line}\n{result.stdout}"


def _request(url: str, password: str | None, data: bytes | None = None) -> tuple[int, bytes]:
    """One request as user allsmi (no credentials with ``password=None``); HTTP errors returned."""
    request = urllib.request.Request(url, data=data)
    if password is not None:
        token = base64.b64encode(f"allsmi:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 - loopback only
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _query(base: str, promql: str, password: str) -> list[dict]:  # type: ignore[type-arg]
    status, body = _request(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql}), password)
    assert status == 200, body
    return json.loads(body)["data"]["result"]  # type: ignore[no-any-return]


def _store_argv(tmp_path: Path, vm_port: int, password_file: Path) -> list[str]:
    """The drop-in's ExecStart= (the store's password file moved here) with the ARGS of
    victoria-metrics.default, addresses and paths moved to loopback and ``tmp_path``."""
    vm_bin = require_tool("victoria-metrics", "victoria-metrics")
    moved = {"storageDataPath": str(tmp_path / "vmdata"),
             "httpListenAddr": f"127.0.0.1:{vm_port}",
             "promscrape.config": str(tmp_path / "scrape.yml")}
    args = []
    for arg in default_args():
        key, eq, value = arg.lstrip("-").partition("=")
        args.append(f"-{key}={moved.get(key, value)}" if eq else arg)
    args.append("-search.latencyOffset=0s")  # queryable at once, for the test
    script = drop_in_exec_start()
    assert PASSWORD_FILE in script and AUTHKEY_FILE in script and "/usr/bin/victoria-metrics" in script
    script = script.replace(PASSWORD_FILE, str(password_file)).replace("/usr/bin/victoria-metrics", vm_bin)
    # the key file beside the password file: store.authkey
    script = script.replace(AUTHKEY_FILE, str(password_file.with_name("store.authkey")))
    # env(1) sets ARGS as systemd's EnvironmentFile= would, and execs the shell, which execs the store.
    return ["env", f"ARGS={shlex.join(args)}", "/bin/sh", "-ec", script]


def test_the_store_refuses_to_start_without_its_password(tmp_path: Path) -> None:
    password_file, key_file = tmp_path / "store.password", tmp_path / "store.authkey"
    for missing in (password_file, key_file):  # the password, or the key of /metrics and the like
        for content in (None, ""):
            password_file.write_text("pw\n")
            key_file.write_text("key\n")
            if content is None:
                missing.unlink()
            else:
                missing.write_text(content)
            argv = _store_argv(tmp_path, free_port(), password_file)
            result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            assert result.returncode != 0, result.stderr
    assert "-httpAuth.username=allsmi" in default_args() and "-envflag.enable" in default_args()


@pytest.mark.long(85)
def test_the_shipped_layout_scrapes_stores_and_writes_back(tmp_path: Path) -> None:
    vmalert_bin = require_tool("vmalert", "victoria-metrics")
    serve_port, vm_port, alert_port = free_port(), free_port(), free_port()
    scrape = yaml.safe_load((VM_DIR / "scrape.yml").read_text())
    scrape["global"]["scrape_interval"] = "1s"
    jobs = [j for j in scrape["scrape_configs"] if j["job_name"] == "allsmi"]
    jobs[0].update(scrape_interval="1s", scrape_timeout="1s",
                   static_configs=[{"targets": [f"127.0.0.1:{serve_port}"]}])
    scrape["scrape_configs"] = jobs
    (tmp_path / "scrape.yml").write_text(yaml.safe_dump(scrape))
    password = "s3cret-" + os.urandom(8).hex()
    password_file = tmp_path / "store.password"
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    key = "k3y-" + os.urandom(8).hex()
    (tmp_path / "store.authkey").write_text(key + "\n")
    vm_argv = _store_argv(tmp_path, vm_port, password_file)
    store = f"http://127.0.0.1:{vm_port}"
    alert_argv = [vmalert_bin]
    for arg in exec_start()[1:]:
        arg = arg.replace("/etc/victoria-metrics/rules/allsmi-rules.yml", str(RULES))
        arg = arg.replace("http://127.0.0.1:8428", store)
        arg = arg.replace("127.0.0.1:8880", f"127.0.0.1:{alert_port}")
        arg = arg.replace("http://127.0.0.1:9093", f"http://127.0.0.1:{free_port()}")
        arg = arg.replace(PASSWORD_FILE, str(password_file))
        alert_argv.append(arg)
    assert str(RULES) in " ".join(alert_argv) and store in " ".join(alert_argv)
    assert " ".join(alert_argv).count(str(password_file)) == 3  # reads, writes, restores with it
    # An alert pending for an hour, to see its state survive vmalert's restart (-remoteRead.url).
    (tmp_path / "pending.yml").write_text(yaml.safe_dump({"groups": [{
        "name": "restart", "interval": "1s",
        "rules": [{"alert": "AllsmiTestPending", "expr": "vector(1)", "for": "1h"}]}]}))
    alert_argv.append(f"-rule={tmp_path / 'pending.yml'}")
    log = open(tmp_path / "serve.log", "wb")
    serve = subprocess.Popen([sys.executable, "-m", "allsmi", "serve", "--simulate", "mixed",
                              "--listen", f"127.0.0.1:{serve_port}"],
                             cwd=tmp_path, env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)},
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        with running_server(vm_argv, tmp_path / "vm.log", f"{store}/health", "victoria-metrics"):
            deadline = time.monotonic() + 30
            while not _query(store, "allsmi_device_info", password):
                assert time.monotonic() < deadline, (tmp_path / "vm.log").read_text()
                time.sleep(0.5)
            _refuses_the_unauthenticated(store, password, key)
            _export_authenticates(tmp_path, store, password_file)
            with running_server(alert_argv, tmp_path / "vmalert.log",
                          f"http://127.0.0.1:{alert_port}/metrics", "vmalert"):
                deadline = time.monotonic() + 120
                # the fleet view's rule, evaluated every 15 s as of 30 s ago, written back and
                # queryable (its newest sample 30 to 45 s old)
                while not _query(store, "last_over_time(instance:allsmi_devices:totals[5m])", password):
                    assert time.monotonic() < deadline, (tmp_path / "vmalert.log").read_text()
                    time.sleep(1)
                # (the hourly roll-ups start at an offset within the hour: see
                # tests/accounting/test_longterm_store.py for them)
                while not _query(store, 'ALERTS_FOR_STATE{alertname="AllsmiTestPending"}', password):
                    assert time.monotonic() < deadline, (tmp_path / "vmalert.log").read_text()
                    time.sleep(0.5)
                since = _pending_since(alert_port)
            # Restarted, the pending alert keeps the time it became active: its `for:` goes on.
            with running_server(alert_argv, tmp_path / "vmalert-again.log",
                                f"http://127.0.0.1:{alert_port}/metrics", "vmalert"):
                deadline = time.monotonic() + 30
                while (again := _pending_since(alert_port)) is None:
                    assert time.monotonic() < deadline, (tmp_path / "vmalert-again.log").read_text()
                    time.sleep(0.5)
                assert since is not None and again == since, (since, again)
    finally:
        serve.terminate()
        serve.wait(15)
        log.close()


def _pending_since(port: int) -> str | None:
    """When vmalert's AllsmiTestPending became active, to the second (``None``: not yet)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=10) as resp:
        alerts = json.load(resp)["data"]["alerts"] or []
    return next((a["activeAt"][:19] for a in alerts if a["name"] == "AllsmiTestPending"), None)


def _refuses_the_unauthenticated(store: str, password: str, key: str) -> None:
    """Writes, imports, deletes and queries without the password answer 401 and change nothing;
    /metrics, /flags and /debug/pprof/ (which ignore -httpAuth.*) answer only the key."""
    for path in ("/metrics", "/flags", "/debug/pprof/"):
        for who in (None, "wrong", password):
            assert _request(f"{store}{path}", who)[0] == 401, (path, who)
        assert _request(f"{store}{path}?authKey=wrong", None)[0] == 401, path
        assert _request(f"{store}{path}?" + urllib.parse.urlencode({"authKey": key}), None)[0] == 200, path
    line = b'allsmi_test_forged{uuid="x"} 1\n'
    delete = f"{store}/api/v1/admin/tsdb/delete_series?" + urllib.parse.urlencode({"match[]": "allsmi_device_info"})
    for who in (None, "wrong"):
        assert _request(f"{store}/api/v1/import/prometheus", who, line)[0] == 401
        assert _request(f"{store}/api/v1/write", who, b"")[0] == 401
        assert _request(delete, who, b"")[0] == 401
        assert _request(delete.replace("/api/v1/admin/tsdb/delete_series", "/tags/delSeries"), who, b"")[0] == 401
        assert _request(f"{store}/api/v1/query?query=1", who)[0] == 401
    assert _request(f"{store}/health", None)[0] == 200  # liveness checks need no password
    # Nothing was written or deleted; with the password a write goes through.
    assert _query(store, "allsmi_device_info", password)
    assert not _query(store, "allsmi_test_forged", password)
    assert _request(f"{store}/api/v1/import/prometheus", password, line)[0] == 204
    deadline = time.monotonic() + 30
    while not _query(store, "allsmi_test_forged", password):
        assert time.monotonic() < deadline
        time.sleep(0.2)


def _export_authenticates(tmp_path: Path, store: str, password_file: Path) -> None:
    """allsmi export reads the locked store with the documented options, and fails without them."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    base = [sys.executable, "-m", "allsmi", "export", "--prometheus", store, "--since", since,
            "--format", "json", "--config", os.devnull]
    ok = subprocess.run([*base, "--prometheus-user", "allsmi", "--prometheus-password-file", str(password_file)],
                        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert ok.returncode in (0, 3), ok.stderr  # 3: the window is mostly before the store started
    assert json.loads(ok.stdout)
    refused = subprocess.run(base, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert refused.returncode not in (0, 3) and not refused.stdout and "401" in refused.stderr, refused.stderr
