"""Several real backends at once, through the CLI: one vendor's fault never hides another's data.

The vendor tools are executable stand-ins printing fixtures in each tool's
real format (see fixtures/<vendor>/README.md), found through the documented
ALLSMI_* environment overrides, exactly as on a user's machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from .conftest import run_allsmi
from .contract.scenarios_gaudi import write_standin as gaudi_standin
from .contract.scenarios_rebellions import write_standin as rbln_standin


def _env(hl_smi: Path, rbln_smi: Path) -> dict[str, str]:
    return {"ALLSMI_HL_SMI": str(hl_smi), "ALLSMI_RBLN_SMI": str(rbln_smi)}


def test_garbage_from_one_tool_leaves_the_other_backend_intact(tmp_path: Path) -> None:
    hl = gaudi_standin(tmp_path / "gaudi", fixture="gaudi3-8x-1.22", fixture_file="garbage-only.txt")
    rbln = rbln_standin(tmp_path / "rbln", fixture="rbln-smi-kmd3.0-ca22x4-loaded.json")
    config = tmp_path / "c.toml"
    config.write_text('[backends]\nenabled = ["gaudi", "rebellions", "nvidia"]\n'
                      '[backends.gaudi]\nmode = "oneshot"\n')
    result = run_allsmi("snapshot", "--format", "json", "--config", str(config), env=_env(hl, rbln))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    status = {b["name"]: b for b in data["backends"]}
    assert status["gaudi"]["status"] == "error" and status["gaudi"]["message"]
    assert status["rebellions"]["status"] == "ok"
    assert status["nvidia"]["status"] == "unavailable"
    rebellions = [d for d in data["devices"] if d["vendor"] == "rebellions"]
    assert len(rebellions) == 4 and not [d for d in data["devices"] if d["vendor"] == "intel"]
    assert all(d["power_watts"] is None or 0 < d["power_watts"] < 1000 for d in rebellions)

    doctor = run_allsmi("doctor", "--json", "--config", str(config), env=_env(hl, rbln))
    assert doctor.returncode == 0, doctor.stderr
    report = {b["name"]: b for b in json.loads(doctor.stdout)["backends"]}
    assert report["gaudi"]["status"] == "error"
    assert report["gaudi"]["message"] == status["gaudi"]["message"]
    assert report["rebellions"]["devices"] == 4
    # the tool overrides each backend declares are shown where they are set
    env = _env(hl, rbln)
    declared = {var for b in report.values() for var in b["environment"]}
    assert report["rebellions"]["environment"] == {"ALLSMI_RBLN_SMI": env["ALLSMI_RBLN_SMI"]}
    assert declared == {v for v in ("ALLSMI_HL_SMI", "ALLSMI_RBLN_SMI") if v in env}


def test_hung_tool_is_reported_as_timeout_and_killed(tmp_path: Path) -> None:
    hl = gaudi_standin(tmp_path / "gaudi", fixture="gaudi3-8x-1.22")
    rbln = rbln_standin(tmp_path / "rbln", fixture="rbln-smi-kmd3.0-ca22x4-loaded.json", hang=True)
    config = tmp_path / "c.toml"
    config.write_text('[backends]\nenabled = ["gaudi", "rebellions"]\n[backends.gaudi]\nmode = "oneshot"\n')
    # 3 s: the healthy hl-smi is a Python stand-in too, which a loaded machine may take most
    # of a second to start (the hung one is cut at the timeout whatever it is)
    result = run_allsmi("snapshot", "--format", "json", "--config", str(config), "--timeout", "3",
                        env=_env(hl, rbln))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    status = {b["name"]: b["status"] for b in data["backends"]}
    assert status == {"gaudi": "ok", "rebellions": "timeout"}
    assert len([d for d in data["devices"] if d["vendor"] == "intel"]) == 8
    pid_file = tmp_path / "rbln" / "rbln-smi.pid"
    pid = int(pid_file.read_text())
    assert not psutil.pid_exists(pid), "the hung tool was left running"
