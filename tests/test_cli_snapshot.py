"""`allsmi snapshot`, `doctor`, `backends`, `--version` run as a user runs them."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
from dataclasses import fields as dc_fields
from pathlib import Path

from allsmi.collection import registry
from allsmi.schema.fields import DEVICE_COLUMNS

from .conftest import run_allsmi

CONFIG = """\
[node]
resource_group = "shared"

[groups.training]
labels = { team = "ml-platform", project = "llm", cost_center = "CC-4711" }
price_per_device_hour = 2.50
price_per_kwh = 0.12
currency = "USD"

[groups.inference]
labels = { team = "serving" }

[[rules]]
resource_group = "training"
vendor = "nvidia"
model = "*H100*"

[[rules]]
resource_group = "inference"
vendor = "amd"
"""

DEVICE_KEYS = {"id", "vendor", "kind", "backend", "index", "uuid", "name", "bus_id", "driver_version",
               "firmware_version", "parent", "resource_group", "labels", "health",
               "utilization_percent", "memory_used_bytes", "memory_total_bytes", "temperature_celsius",
               "power_watts", "power_limit_watts", "energy_joules", "clock_mhz", "fan_percent",
               "processes", "workloads"}
WORKLOAD_KEYS = {"source", "namespace", "pod", "container", "job_id", "user", "share"}


def test_simulated_json_has_the_public_shape(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json", "--config", str(config))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert data["timestamp"].endswith("Z") and "T" in data["timestamp"]
    assert set(data["host"]) == {"hostname", "cpu_utilization_percent", "memory_used_bytes",
                                 "memory_total_bytes"}
    devices = data["devices"]
    for dev in devices:
        assert DEVICE_KEYS <= set(dev), DEVICE_KEYS - set(dev)
        for proc in dev["processes"]:
            assert set(proc) == {"pid", "user", "command", "memory_bytes", "job_id", "pod_uid",
                                 "container_id", "utilization_percent",
                                 "memory_utilization_percent", "encoder_utilization_percent",
                                 "decoder_utilization_percent"}
        for work in dev["workloads"]:  # the simulated pods and jobs
            assert set(work) == WORKLOAD_KEYS and work["source"] == "simulated"
    assert any(d["workloads"] for d in devices) and any(d["workloads"] == [] for d in devices)
    assert data["attribution"] == [{"name": "simulated", "status": "ok", "message": "",
                                    "duration_seconds": data["attribution"][0]["duration_seconds"]}]
    vendors = {d["vendor"] for d in devices}
    assert {"nvidia", "amd", "intel", "furiosa", "rebellions", "tenstorrent"} <= vendors
    assert {d["kind"] for d in devices} == {"gpu", "npu"}
    by_id = {d["id"]: d for d in devices}
    children = [d for d in devices if d["parent"]]
    assert len(children) == 3 and all(c["id"].startswith("MIG-") for c in children)
    assert all(by_id[c["parent"]]["vendor"] == "nvidia" for c in children)
    assert any(d["processes"] for d in devices)
    groups = {d["vendor"]: d["resource_group"] for d in devices if not d["parent"]}
    assert groups["nvidia"] == "training" and groups["amd"] == "inference"
    assert groups["intel"] == "shared"
    assert all(c["resource_group"] == "training" for c in children)  # partitions follow the parent
    h100 = next(d for d in devices if d["vendor"] == "nvidia")
    assert h100["labels"] == {"team": "ml-platform", "project": "llm", "cost_center": "CC-4711"}
    assert h100["fan_percent"] is None  # SXM boards have no fan: honest null, not 0
    assert {b["name"]: b["status"] for b in data["backends"]} == {
        "nvidia": "ok", "amd": "ok", "gaudi": "ok", "furiosa": "ok", "rebellions": "ok", "tenstorrent": "ok",
        "intel": "ok", "neuron": "ok", "ascend": "ok", "tpu": "ok"}


def test_without_accelerators_every_backend_says_why() -> None:
    result = run_allsmi("snapshot", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # stdout is pure JSON even if a vendor library prints
    assert data["devices"] == []
    assert data["host"]["memory_total_bytes"] > 0
    statuses = {b["name"]: b for b in data["backends"]}
    # Every registered hardware backend answers (a newly installed vendor included).
    assert set(statuses) == set(registry.hardware_names())
    for name, status in statuses.items():
        assert status["status"] == "unavailable", (name, status)
        assert len(status["message"]) > 10, (name, status)


def test_csv_has_schema_columns_and_no_processes() -> None:
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert tuple(rows[0].keys()) == DEVICE_COLUMNS
    assert "processes" not in rows[0] and "workloads" not in rows[0]
    assert len(rows) == 41
    mig = [r for r in rows if r["parent"]]
    assert len(mig) == 3 and all(r["power_watts"] == "" for r in mig)  # unknown is empty, not 0


def test_output_file_is_atomic_and_owner_only(tmp_path: Path) -> None:
    out = tmp_path / "snap.json"
    result = run_allsmi("snapshot", "--simulate", "mixed", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert json.loads(out.read_text())["schema_version"] == 1  # JSON is the default off a terminal
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]  # no temporary left behind


def test_table_format_shows_na_and_partitions() -> None:
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "table")
    assert result.returncode == 0, result.stderr
    assert "NVIDIA H100 80GB HBM3" in result.stdout
    assert "└" in result.stdout and "MIG 3g.40gb" in result.stdout
    assert "N/A" in result.stdout
    assert "backend tenstorrent" in result.stdout


#: One device of each kind the activity column tells apart, both always running a job: an H100
#: that looks busy (100 % utilization, 20 % of its SMs active) and a Tenstorrent board, whose
#: tool reports no activity at all.
def scenario(name: str, devices: tuple[tuple[str, str, str, str, str], ...]) -> str:
    """A scenario file of one device per ``(backend, kind, model, id_style, extra lines)``,
    always busy (each holds one job all hour)."""
    return f"""\
name = "{name}"
seed = 7
epoch = "2026-01-01T00:00:00Z"
users = ["alice"]
commands = ["python train.py"]
""" + "".join(f"""
[[devices]]
backend = "{backend}"
vendor = "{backend}"
kind = "{kind}"
model = "{model}"
count = 1
memory_total_bytes = 34359738368
power_idle_watts = 40.0
power_limit_watts = 300.0
clock_idle_mhz = 800.0
clock_max_mhz = 1350.0
temperature_idle_celsius = 30.0
temperature_max_celsius = 80.0
id_style = "{style}"
duty_cycle = 1.0
job_seconds = [3600, 3600]
{extra}""" for backend, kind, model, style, extra in devices)


BUSY_AND_BLIND = scenario("busy-and-blind", (
    ("nvidia", "gpu", "NVIDIA H100 80GB HBM3", "nvidia", "busy_looking = [0]\n"),
    ("tenstorrent", "npu", "Blackhole p150a", "board", "")))


def test_table_shows_compute_activity_and_what_holders_wait_on(tmp_path: Path) -> None:
    """The table's ``active`` column is the share of compute units busy with its source, beside
    the headline ``util`` (they differ on a busy-looking GPU); N/A where the hardware does not
    report it, never 0. ``waiting`` is what the device's holders waited on."""
    scenario = tmp_path / "busy.toml"
    scenario.write_text(BUSY_AND_BLIND)
    result = run_allsmi("snapshot", "--simulate", str(scenario), "--format", "table")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.search(r"\butil +active +memory\b.*\bheld by +waiting\b", lines[1]), lines[1]
    [gpu] = [line for line in lines if "NVIDIA H100" in line]
    [board] = [line for line in lines if "Tenstorrent" in line]
    assert re.search(r" ok +100% +20% sm +\S", gpu), gpu
    assert gpu.split()[-1] == "computing", gpu  # 20 % active: above the idle threshold
    assert re.search(r" ok +N/A +N/A +N/A / N/A ", board), board
    assert board.split()[-1] == "unknown", board  # no activity reported: no evidence either way
    document = json.loads(run_allsmi("snapshot", "--simulate", str(scenario), "--format",
                                     "json").stdout)
    [blind] = [d for d in document["devices"] if d["vendor"] == "tenstorrent"]
    assert blind["compute_active_percent"] is None and blind["waiting"][0]["reason"] == "unknown"


def test_bad_config_exits_2_naming_file_line_and_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[collector]\ninterval_seconds = 2\n\n[[rules]]\nresource_group = "a"\nvendorr = "x"\n')
    result = run_allsmi("snapshot", "--simulate", "mixed", "--config", str(config))
    assert result.returncode == 2
    assert str(config) in result.stderr and "line 6" in result.stderr and "vendorr" in result.stderr
    assert result.stdout == ""  # nothing started half-configured


def test_config_from_environment_and_group_override(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    result = run_allsmi("snapshot", "--simulate", "mixed", "--format", "json",
                        env={"ALLSMI_CONFIG": str(config), "ALLSMI_RESOURCE_GROUP": "pool-b"})
    assert result.returncode == 0, result.stderr
    groups = {d["vendor"]: d["resource_group"] for d in json.loads(result.stdout)["devices"]}
    assert groups["nvidia"] == "training" and groups["furiosa"] == "pool-b"


def test_missing_explicit_config_and_unknown_scenario_exit_2(tmp_path: Path) -> None:
    result = run_allsmi("snapshot", "--config", str(tmp_path / "nope.toml"))
    assert result.returncode == 2 and "file not found" in result.stderr
    result = run_allsmi("snapshot", "--simulate", "no-such-scenario")
    assert result.returncode == 2 and "mixed" in result.stderr


def test_scenario_file_path(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.toml"
    scenario.write_text("""
name = "tiny"
seed = 7
[[devices]]
backend = "nvidia"
vendor = "nvidia"
kind = "gpu"
model = "NVIDIA A100-SXM4-40GB"
count = 2
memory_total_bytes = 42949672960
power_idle_watts = 50.0
power_limit_watts = 400.0
clock_idle_mhz = 210.0
clock_max_mhz = 1410.0
temperature_idle_celsius = 30.0
temperature_max_celsius = 70.0
has_energy_counter = true
id_style = "nvidia"
""")
    result = run_allsmi("snapshot", "--simulate", str(scenario), "--format", "json")
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)["devices"]
    assert [d["name"] for d in devices] == ["NVIDIA A100-SXM4-40GB"] * 2
    scenario.write_text(scenario.read_text().replace("count = 2", "count = 2\ncolour = 1"))
    bad = run_allsmi("snapshot", "--simulate", str(scenario))
    assert bad.returncode == 2 and "colour" in bad.stderr and str(scenario) in bad.stderr


def test_doctor_reports_every_backend() -> None:
    result = run_allsmi("doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    names = {b["name"] for b in report["backends"]}
    assert names == set(registry.hardware_names())
    for b in report["backends"]:
        assert b["status"] == "unavailable" and b["message"]
        assert b["probe"]["available"] is False and b["probe"]["reason"]
    text = run_allsmi("doctor", "--simulate", "mixed-faults", "--timeout", "0.5")
    assert text.returncode == 0
    assert "tenstorrent" in text.stdout and "timeout" in text.stdout
    assert "rebellions" in text.stdout


def test_backends_version_and_help() -> None:
    result = run_allsmi("backends", "--json")
    assert result.returncode == 0
    names = {b["name"] for b in json.loads(result.stdout)}
    assert names == set(registry.names())
    version = run_allsmi("--version")
    assert version.returncode == 0 and "allsmi" in version.stdout
    helptext = run_allsmi("--help")
    assert "Examples" in helptext.stdout and "snapshot" in helptext.stdout


#: Eight H100s whose jobs run the whole of each day-long cycle.
STEADY_SCENARIO = """name = "steady"
seed = 7
epoch = "2026-01-01T00:00:00Z"
users = ["alice", "bob", "carol"]
commands = ["python train.py"]

[[devices]]
backend = "nvidia"
vendor = "nvidia"
kind = "gpu"
model = "NVIDIA H100 80GB HBM3"
count = 8
memory_total_bytes = 85520809984
power_idle_watts = 72.0
power_limit_watts = 700.0
clock_idle_mhz = 345.0
clock_max_mhz = 1980.0
temperature_idle_celsius = 31.0
temperature_max_celsius = 74.0
duty_cycle = 1.0
job_seconds = [86400, 86400]
"""


def test_processes_csv_has_one_row_per_process_with_activity(tmp_path: Path) -> None:
    """``--format processes-csv``: one row per process, its device's id/index/uuid first, the
    process columns (per-process activity included) derived from the schema."""
    from allsmi.schema.fields import PROCESS_COLUMNS, PROCESS_DEVICE_COLUMNS
    from allsmi.schema import PROCESS_ACTIVITY, ProcessSample
    # Jobs that run all day long: the two runs below see the same processes (with the built-in
    # scenarios' jobs of minutes, a job could end between them).
    scenario = tmp_path / "steady.toml"
    scenario.write_text(STEADY_SCENARIO)
    result = run_allsmi("snapshot", "--simulate", str(scenario), "--format", "processes-csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert tuple(rows[0].keys()) == PROCESS_COLUMNS
    assert PROCESS_COLUMNS == PROCESS_DEVICE_COLUMNS + tuple(f.name for f in dc_fields(ProcessSample))
    assert set(PROCESS_ACTIVITY) <= set(PROCESS_COLUMNS)
    # The same processes the JSON lists.
    data = json.loads(run_allsmi("snapshot", "--simulate", str(scenario), "--format", "json").stdout)
    want = {(d["id"], p["pid"]) for d in data["devices"] for p in d["processes"] or ()}
    got = {(r["device_id"], int(r["pid"])) for r in rows}
    assert got == want and len(rows) == len(want) and len(want) >= 5
    by_id = {d["id"]: d for d in data["devices"]}
    for row in rows:
        dev = by_id[row["device_id"]]
        assert row["device_uuid"] == (dev["uuid"] or "")
        assert row["device_index"] == ("" if dev["index"] is None else str(dev["index"]))
        assert int(row["memory_bytes"]) > 0
    active = [float(r["utilization_percent"]) for r in rows if r["utilization_percent"]]
    assert active and all(0.0 <= v <= 100.0 for v in active)
    assert len(set(active)) > 1  # processes sharing the node at different activity
    # A figure the vendor does not give is an empty cell, never 0.
    assert all(r["encoder_utilization_percent"] == "" for r in rows)


def test_processes_csv_neutralizes_formula_cells(tmp_path: Path) -> None:
    scenario = tmp_path / "evil.toml"
    scenario.write_text('include = "mixed"\nusers = ["@admin"]\n'
                        'commands = ["=HYPERLINK(\\"http://127.0.0.1/\\",\\"x\\")", "+1+2 run"]\n')
    target = tmp_path / "procs.csv"
    result = run_allsmi("snapshot", "--simulate", str(scenario), "--format", "processes-csv",
                        "-o", str(target))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600  # users and command lines: owner-only
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert rows and all(r["user"] == "'@admin" for r in rows)
    commands = {r["command"] for r in rows}
    assert {"'=HYPERLINK(\"http://127.0.0.1/\",\"x\")", "'+1+2 run"} <= commands
    assert not any(c[:1] in ("=", "+", "-", "@") for c in commands)


def test_a_snapshot_never_replaces_a_database(tmp_path) -> None:
    """``--output`` naming an SQLite database (a ledger, mistyped) is refused before any backend
    runs (exit 2), the file left whole; before, the snapshot replaced it."""
    import sqlite3
    db = tmp_path / "ledger.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE intervals (start INTEGER)")
    before = db.read_bytes()
    result = run_allsmi("snapshot", "--simulate", "mixed", "--output", str(db))
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert "is an SQLite database" in result.stderr
    assert db.read_bytes() == before
    written = run_allsmi("snapshot", "--simulate", "mixed", "--output", str(tmp_path / "s.json"))
    assert written.returncode == 0 and (tmp_path / "s.json").read_text().startswith("{")
