"""deploy/systemd: verified by the real systemd-analyze, and each ExecStart run as written.

``systemd-analyze verify`` loads a unit file like the manager would (syntax, known
settings, ExecStart= executable) without systemd running as PID 1. The units name
``/usr/local/bin/allsmi``; the copies verified here point at the installed allsmi.
Then each unit's command line is run for real on the simulated node, with only the
paths moved into a temporary directory: the exporter serves and exits 0 on the
unit's KillSignal; the recorder writes its ledger; the export, on a ledger with no
data for yesterday, writes its file and the textfile and exits with a status the
unit counts as success (SuccessExitStatus=3: gaps alert through the textfile).
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from ..conftest import allsmi_exe, require_tool
from ..prometheus_server import free_port
from .support import DEPLOY, UNITS

SYSTEMD = DEPLOY / "systemd"
INSTALLED = "/usr/local/bin/allsmi"


def settings(unit: str) -> dict[str, list[str]]:
    """KEY -> values (in order) of a unit file, sections merged."""
    out: dict[str, list[str]] = {}
    for line in (SYSTEMD / unit).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def installed_allsmi() -> str:
    exe = allsmi_exe()
    assert len(exe) == 1, f"the allsmi console script is not installed: {exe}"
    return exe[0]


def copies(tmp_path: Path) -> Path:
    for unit in UNITS:
        text = (SYSTEMD / unit).read_text()
        (tmp_path / unit).write_text(text.replace(INSTALLED, installed_allsmi()))
    return tmp_path


def verify(directory: Path, *units: str) -> subprocess.CompletedProcess[str]:
    tool = require_tool("systemd-analyze", "systemd")
    return subprocess.run([tool, "verify", "--man=no", *units], capture_output=True, text=True,
                          timeout=120, cwd=directory, env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"})


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    directory = copies(tmp_path)
    for unit in UNITS:
        result = verify(directory, unit)
        complaints = [line for line in (result.stdout + result.stderr).splitlines() if unit in line]
        assert result.returncode == 0 and not complaints, f"{unit}:\n{result.stdout}{result.stderr}"


def test_verify_catches_a_wrong_allsmi_path_and_a_bad_setting(tmp_path: Path) -> None:
    """The check above can fail: a missing executable and an unknown value are reported."""
    text = (SYSTEMD / "allsmi-exporter.service").read_text()
    (tmp_path / "missing.service").write_text(text.replace(INSTALLED, str(tmp_path / "no-allsmi")))
    result = verify(tmp_path, "missing.service")
    assert result.returncode != 0 and "no-allsmi" in result.stdout + result.stderr
    (tmp_path / "bad.service").write_text(text.replace(INSTALLED, installed_allsmi())
                                          .replace("Restart=on-failure", "Restart=sometimes"))
    result = verify(tmp_path, "bad.service")
    assert "sometimes" in result.stdout + result.stderr


def test_units_run_as_a_dedicated_user_with_state_and_restart_policy() -> None:
    for unit in ("allsmi-exporter.service", "allsmi-record.service", "allsmi-export.service"):
        s = settings(unit)
        assert s["User"] == ["allsmi"] and s["Group"] == ["allsmi"], unit
        assert s["StateDirectory"][0].split()[0] == "allsmi", unit
        assert s["NoNewPrivileges"] == ["yes"] and s["ProtectSystem"] == ["strict"], unit
        assert INSTALLED in s["ExecStart"][0], unit
    for unit in ("allsmi-exporter.service", "allsmi-record.service"):
        s = settings(unit)
        assert set(s["SupplementaryGroups"][0].split()) == {"video", "render"}
        assert s["Restart"] == ["on-failure"] and s["RestartPreventExitStatus"] == ["2"]
        # options that would hide the accelerators' device nodes or process list
        for unsafe in ("PrivateDevices", "DevicePolicy", "DeviceAllow", "ProtectClock",
                       "ProtectProc", "PrivateUsers", "MemoryDenyWriteExecute"):
            assert unsafe not in s, f"{unit}: {unsafe} breaks vendor libraries (deploy/README.md)"
    export = settings("allsmi-export.service")
    assert export["Type"] == ["oneshot"] and export["SuccessExitStatus"] == ["3"]
    timer = settings("allsmi-export.timer")
    assert timer["OnCalendar"] and timer["Persistent"] == ["yes"]


def test_units_start_after_the_clock_is_synchronized() -> None:
    """Issue 19 item 5: ledger minutes are placed by the wall clock (and `export --period
    yesterday` reads it), so every service starts after time-sync.target, which it also pulls in
    (time-sync.target is passive: a unit that only orders itself after it does not wait)."""
    for unit in ("allsmi-exporter.service", "allsmi-record.service", "allsmi-export.service"):
        s = settings(unit)
        after = " ".join(s.get("After", [])).split()
        wants = " ".join(s.get("Wants", [])).split()
        assert "time-sync.target" in after and "time-sync.target" in wants, unit


def command(unit: str, state: Path, config: Path) -> list[str]:
    """The unit's ExecStart= as an argument list, specifiers and paths moved under ``state``."""
    (line,) = settings(unit)["ExecStart"]
    line = (line.replace("%S", str(state)).replace("%%", "%").replace("$$", "$")
            .replace(INSTALLED, installed_allsmi())
            .replace("/etc/allsmi/config.toml", str(config))
            .replace("/var/lib/prometheus/node-exporter", str(state / "node-exporter")))
    return shlex.split(line)


@pytest.fixture()
def state(tmp_path: Path) -> Path:
    for sub in ("allsmi", "allsmi/billing", "node-exporter"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    return tmp_path


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as resp:  # noqa: S310
            return resp.status == 200
    except OSError:
        return False


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes], unit: str) -> int:
    sig = getattr(signal, settings(unit)["KillSignal"][0])
    proc.send_signal(sig)
    return proc.wait(30)


def test_exporter_and_recorder_command_lines_run_and_stop_cleanly(state: Path) -> None:
    port = free_port()
    config = state / "config.toml"
    # [export] tz far from UTC: the nightly unit still bills the UTC day its file is named after
    config.write_text(f'[serve]\nlisten = "127.0.0.1:{port}"\n\n[ledger]\ninterval_seconds = 1\n\n'
                      '[export]\ntz = "Pacific/Kiritimati"\n')
    exporter = _start(command("allsmi-exporter.service", state, config) + ["--simulate", "mixed"],
                      state / "exporter.log")
    recorder = _start(command("allsmi-record.service", state, config)
                      + ["--simulate", "mixed", "--interval", "0.5"], state / "record.log")
    try:
        deadline = time.monotonic() + 60
        while not _ready(port):
            assert exporter.poll() is None, (state / "exporter.log").read_text()
            assert time.monotonic() < deadline, (state / "exporter.log").read_text()
            time.sleep(0.2)
        ledger = state / "allsmi" / "ledger.db"
        while not ledger.exists() or ledger.stat().st_size == 0:
            assert recorder.poll() is None, (state / "record.log").read_text()
            assert time.monotonic() < deadline, (state / "record.log").read_text()
            time.sleep(0.2)
    finally:
        exporter_rc = _stop(exporter, "allsmi-exporter.service")
        recorder_rc = _stop(recorder, "allsmi-record.service")
    assert exporter_rc == 0, (state / "exporter.log").read_text()
    assert recorder_rc == 0, (state / "record.log").read_text()

    # the nightly export of that ledger: no data for yesterday -> written, exit 3, not a failure
    export = subprocess.run(command("allsmi-export.service", state, config), capture_output=True,
                            text=True, timeout=120, stdin=subprocess.DEVNULL)
    success = {0} | {int(code) for code in settings("allsmi-export.service")["SuccessExitStatus"]}
    assert export.returncode in success, export.stderr
    assert export.returncode == 3, "a day without data must be reported as gaps"
    yesterday = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    assert (state / "allsmi" / "billing" / f"gpu-{yesterday}.csv").exists()
    status = (state / "node-exporter" / "allsmi_export.prom").read_text()
    assert "allsmi_export_success 0" in status
    midnight = dt.datetime.now(dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    assert f"allsmi_export_period_end_timestamp_seconds {midnight.timestamp():.0f}\n" in status, status


def test_export_unit_has_the_hardening_the_exporter_cannot_have(tmp_path: Path) -> None:
    """The export reads the ledger or Prometheus and writes files: every setting the exporter and
    recorder must leave out (they need device nodes and other users' processes) is set here, and
    ``systemd-analyze security`` reads it so."""
    s = settings("allsmi-export.service")
    assert s["PrivateDevices"] == ["yes"] and s["DevicePolicy"] == ["closed"] and s["DeviceAllow"] == [""]
    assert s["PrivateUsers"] == ["yes"] and s["MemoryDenyWriteExecute"] == ["yes"]
    assert s["ProtectClock"] == ["yes"] and s["ProtectProc"] == ["invisible"]
    assert "@system-service" in s["SystemCallFilter"]
    tool = require_tool("systemd-analyze", "systemd")
    directory = copies(tmp_path)
    result = subprocess.run([tool, "security", "--offline=yes", "--no-pager", "allsmi-export.service"],
                            capture_output=True, text=True, timeout=120, cwd=directory,
                            env={**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_LOG_LEVEL": "notice"})
    lines = result.stdout.splitlines()
    for name in ("PrivateDevices=", "PrivateUsers=", "MemoryDenyWriteExecute=",
                 "SystemCallFilter=~@privileged", "SystemCallFilter=~@resources"):
        line = next((ln for ln in lines if ln.split()[1:2] == [name]), None)
        assert line is not None and line.startswith("✓"), f"{name}: {line}\n{result.stdout}"
    # DevicePolicy=closed with an empty DeviceAllow=: only ProtectClock's read-only rtc remains.
    devices = next(ln for ln in lines if ln.split()[1:2] == ["DeviceAllow="])
    assert "char-rtc:r" in devices and "," not in devices, devices
    exposure = float(lines[-1].split("exposure level for allsmi-export.service:")[1].split()[0])
    assert exposure <= 2.0, result.stdout


@pytest.mark.parametrize("unit", ["allsmi-exporter.service", "allsmi-record.service"])
def test_long_running_units_raise_the_descriptor_limit(unit: str) -> None:
    # Without LimitNOFILE systemd gives a soft limit of 1024: EMFILE before the connection bound.
    from allsmi.exporter.bounds import max_open_for_fd_limit

    limit = int(settings(unit)["LimitNOFILE"][-1])
    assert limit >= 65536
    assert max_open_for_fd_limit(limit) >= 16384
