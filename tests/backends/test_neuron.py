"""The Neuron backend end to end: ``allsmi doctor --json`` shows both tools (each found on its
own), and ``allsmi snapshot`` over the stand-ins reports the monitor's values; without
``neuron-monitor`` the devices stay, the values are unknown and the status says why."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from allsmi.backends.neuron import MONITOR
from tests.conftest import run_allsmi
from tests.contract import scenarios_neuron
from tests.contract.scenario import ScenarioEnv


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, monitor: str | None, *args: str):  # type: ignore[no-untyped-def]
    scenarios_neuron.backend_for(ScenarioEnv(tmp_path, monkeypatch), "neuron-ls-trn2-4dev-two-apps.json", monitor)
    config = tmp_path / "allsmi.toml"
    config.write_text('[backends]\nenabled = ["neuron"]\n')
    env = {k: v for k, v in os.environ.items() if k.startswith("ALLSMI_") or k == "PATH"}
    return run_allsmi(*args, "--config", str(config), env=env, timeout=120)


def test_doctor_shows_each_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(tmp_path, monkeypatch, "neuron-monitor-trn2-two-apps.jsonl", "doctor", "--json")
    assert result.returncode == 0, result.stderr
    (neuron,) = [b for b in json.loads(result.stdout)["backends"] if b["name"] == "neuron"]
    text = json.dumps(neuron)
    assert "neuron-ls" in text and f"tool:{MONITOR.executable}" in text, text
    assert neuron["status"] == "ok" and neuron["devices"] == 4, neuron


def test_snapshot_reads_the_monitor_and_goes_on_without_it(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(tmp_path / "with", monkeypatch, "neuron-monitor-trn2-two-apps.jsonl",
                  "snapshot", "--format", "json")
    assert result.returncode == 0, result.stderr
    devices = {d["index"]: d for d in json.loads(result.stdout)["devices"]}
    assert devices[0]["utilization_percent"] == 50.0 and devices[0]["compute_active_source"] == "core_busy"
    without = _run(tmp_path / "without", monkeypatch, None, "snapshot", "--format", "json")
    assert without.returncode == 0, without.stderr
    document = json.loads(without.stdout)
    status = next(b for b in document["backends"] if b["name"] == "neuron")
    assert status["status"] == "ok" and "utilization and memory in use not reported" in status["message"]
    assert [d["utilization_percent"] for d in document["devices"]] == [None] * 4
