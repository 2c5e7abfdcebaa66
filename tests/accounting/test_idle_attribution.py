"""Issue 11, phase 2b: idle-allocated time and per-workload shares in the ledger, the export
columns and group-by keys, and ``allsmi idle``, from a real SQLite ledger through the CLI.

The node: two NVIDIA GPUs and one AMD GPU in group ``training`` (priced per device-hour and
per kWh), one Gaudi in ``inference`` (unpriced). Over one hour:

* GPU-a: pod ``ml/trainer`` (one process of alice's, busy) the first half hour, then the pod
  stays with no process and 0 % utilization (allocated but idle);
* GPU-b: shared by two pods of namespace ``serve`` the whole hour at 2 % (idle), so each gets
  half: nothing counted twice;
* AMD: Slurm job 77 of bob's (from the job directory) at 50 % utilization;
* Gaudi: Slurm job 78 of carol's at 1 % (idle).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest

from allsmi.accounting.shares import holder_weights
from allsmi.accounting.ledger.store import Holder
from allsmi.schema import ProcessSample, Workload

from ..conftest import run_allsmi
from .helpers import T0, config, device, record, rows, snap

HOUR = 3600
PRICES = """
[[rules]]
resource_group = "training"
vendor = "nvidia"

[[rules]]
resource_group = "training"
vendor = "amd"

[[rules]]
resource_group = "inference"
vendor = "gaudi"

[groups.training]
labels = { team = "ml" }
price_per_device_hour = 2.0
price_per_kwh = 0.5
currency = "USD"
"""
SINCE, UNTIL = "2026-03-02T00:00:00Z", "2026-03-02T01:00:00Z"


def _with(dev, *works: Workload, procs: tuple[ProcessSample, ...] | None = None):  # type: ignore[no-untyped-def]
    return dataclasses.replace(dev, workloads=works,
                               processes=dev.processes if procs is None else procs)


def _node(t: float):  # type: ignore[no-untyped-def]
    first_half = t < 1800
    trainer = Workload("kubernetes", namespace="ml", pod="trainer", container="main")
    return snap(
        T0 + t,
        _with(device("GPU-a", power=300.0 if first_half else 100.0, util=90.0 if first_half else 0.0,
                     users=["alice"] if first_half else [], group="training",
                     labels={"team": "ml"}), trainer),
        _with(device("GPU-b", power=100.0, util=2.0, group="training", labels={"team": "ml"}),
              Workload("kubernetes", namespace="serve", pod="api-1", container="c"),
              Workload("kubernetes", namespace="serve", pod="api-2", container="c")),
        _with(device("amd-0", power=400.0, util=50.0, group="training", labels={"team": "ml"},
                     vendor="amd", model="MI300X"),
              Workload("hpc-job", job_id="77", user="bob")),
        _with(device("hl-0", power=200.0, util=1.0, group="inference", vendor="gaudi",
                     model="HL-325L"),
              Workload("cgroup", job_id="78", user="carol")))


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("idle") / "ledger.db"
    (path.parent / "prices.toml").write_text(PRICES)
    record(path, [_node(t) for t in range(0, HOUR + 1, 10)], config(PRICES))
    return path


def _export(ledger: Path, group_by: str, *extra: str) -> dict:  # type: ignore[type-arg]
    out = run_allsmi("export", "--ledger", str(ledger), "--since", SINCE, "--until", UNTIL,
                     "--config", str(ledger.parent / "prices.toml"), "--group-by", group_by,
                     "--format", "json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_holder_weights_split_each_device_among_its_holders() -> None:
    alone = device(users=["ann", "ann", "bob"])
    assert holder_weights(alone) == ((Holder("ann"), pytest.approx(2 / 3)),
                                     (Holder("bob"), pytest.approx(1 / 3)))
    pod = _with(device(users=["ann", "bob"]), Workload("kubernetes", namespace="n", pod="p"))
    assert dict(holder_weights(pod)) == {Holder("ann", "n", "p"): 0.5, Holder("bob", "n", "p"): 0.5}
    jobs = _with(device(), Workload("hpc-job", job_id="1"), Workload("hpc-job", job_id="2"),
                 procs=(ProcessSample(pid=1, user="ann", job_id="1"),
                        ProcessSample(pid=2, user="bob", job_id="2"),
                        ProcessSample(pid=3, user="cy", job_id="2")))
    assert dict(holder_weights(jobs)) == {Holder("ann", job="1"): 0.5,
                                          Holder("bob", job="2"): 0.25,
                                          Holder("cy", job="2"): 0.25}
    owned = _with(device(users=["root"]), Workload("hpc-job", job_id="9", user="dee"))
    assert holder_weights(owned) == ((Holder("dee", job="9"), 1.0),)
    assert holder_weights(device()) == ()
    assert holder_weights(device(users=[None])) == ()  # nobody known: not attributed


def test_idle_time_and_holders_are_stored_per_interval(ledger: Path) -> None:
    (idle_ms, alloc_ms), = rows(ledger, "SELECT SUM(i.idle_ms), SUM(i.allocated_ms) FROM intervals i "
                                       "JOIN devices d ON d.dev = i.dev WHERE d.device_id = 'GPU-a'")
    assert alloc_ms == 3_600_000 and idle_ms == pytest.approx(1_800_000, abs=10_000)
    holders = rows(ledger, "SELECT user, namespace, pod, job FROM holders ORDER BY hid")
    assert set(holders) == {("alice", "ml", "trainer", ""), ("", "ml", "trainer", ""),
                            ("", "serve", "api-1", ""), ("", "serve", "api-2", ""),
                            ("bob", "", "", "77"), ("carol", "", "", "78")}


def test_namespace_and_job_rows_add_up_to_the_group_totals(ledger: Path) -> None:
    whole = {r["resource_group"]: r for r in _export(ledger, "resource_group")["rows"]}
    columns = ("observed_device_hours", "allocated_device_hours", "idle_allocated_device_hours",
               "billed_device_hours", "used_device_hours", "energy_kwh", "cost", "idle_cost")
    for keys in ("resource_group,namespace", "resource_group,job", "resource_group,pod",
                 "resource_group,user", "resource_group,user,namespace,pod,job"):
        doc = _export(ledger, keys)
        assert doc["group_by"] == keys.split(",")
        for group, total in whole.items():
            mine = [r for r in doc["rows"] if r["resource_group"] == group]
            for col in columns:
                if total[col] is None:
                    assert all(r[col] is None for r in mine), (keys, group, col)
                    continue
                assert sum(r[col] or 0 for r in mine) == pytest.approx(total[col], abs=1e-5), \
                    (keys, group, col)
            for row in mine:
                if row["idle_allocated_device_hours"] is not None:
                    assert row["idle_allocated_device_hours"] <= row["allocated_device_hours"]
    pods = {r["pod"]: r for r in _export(ledger, "resource_group,namespace,pod")["rows"]}
    # The shared GPU: half of its hour to each pod; device_count is the row's devices as a
    # whole (the group's three), as for user rows.
    assert pods["api-1"]["allocated_device_hours"] == pytest.approx(0.5, abs=1e-3)
    assert pods["api-2"]["idle_allocated_device_hours"] == pytest.approx(0.5, abs=1e-3)
    assert pods["api-1"]["namespace"] == "serve" and pods["api-1"]["device_count"] == 3
    jobs = {r["job"]: r for r in _export(ledger, "resource_group,job")["rows"]}
    assert jobs["77"]["allocated_device_hours"] == pytest.approx(1.0, abs=1e-3)
    assert jobs["77"]["idle_allocated_device_hours"] == 0.0
    assert jobs["78"]["idle_allocated_device_hours"] == pytest.approx(1.0, abs=1e-3)
    assert jobs["78"]["idle_cost"] is None  # inference has no prices: no cost, no idle cost


def test_idle_cost_is_the_share_of_cost_spent_idle(ledger: Path) -> None:
    rows_ = {r["vendor"] + "/" + (r["model"] or ""): r
             for r in _export(ledger, "resource_group,vendor,model")["rows"]}
    nvidia = rows_["nvidia/H100"]
    # Idle: GPU-a's second half hour at 100 W, GPU-b's whole hour at 100 W (2 % < 5 %).
    idle_kwh = (1800 * 100 + 3600 * 100) / 3.6e6
    assert nvidia["idle_allocated_device_hours"] == pytest.approx(1.5, abs=1e-2)
    assert nvidia["idle_cost"] == pytest.approx(1.5 * 2.0 + idle_kwh * 0.5, abs=0.02)
    assert nvidia["cost"] == pytest.approx(2 * 2.0 + (1800 * 300 + 1800 * 100 + 3600 * 100)
                                           / 3.6e6 * 0.5, abs=0.02)
    assert rows_["amd/MI300X"]["idle_cost"] == 0.0 and rows_["amd/MI300X"]["cost"] > 2.0


def test_threshold_comes_from_the_accounting_table(tmp_path: Path) -> None:
    """[accounting] idle_threshold_percent = 60: AMD's job at 50 % counts as idle too."""
    path = tmp_path / "ledger.db"
    record(path, [_node(t) for t in range(0, 601, 10)],
           config(PRICES + "\n[accounting]\nidle_threshold_percent = 60\n"))
    (idle_ms,), = rows(path, "SELECT SUM(i.idle_ms) FROM intervals i JOIN devices d "
                             "ON d.dev = i.dev WHERE d.device_id = 'amd-0'")
    assert idle_ms == 600_000


def test_csv_focus_and_parquet_carry_the_new_columns(ledger: Path, tmp_path: Path) -> None:
    out = run_allsmi("export", "--ledger", str(ledger), "--since", SINCE, "--until", UNTIL,
                     "--config", str(ledger.parent / "prices.toml"), "--group-by",
                     "resource_group,namespace,pod,job")
    assert out.returncode == 0, out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    assert {"namespace", "pod", "job", "idle_allocated_device_hours", "idle_cost"} <= set(table[0])
    assert {r["job"] for r in table} >= {"77", "78"}
    out = run_allsmi("export", "--ledger", str(ledger), "--since", SINCE, "--until", UNTIL,
                     "--config", str(ledger.parent / "prices.toml"), "--group-by",
                     "resource_group,namespace,pod,job", "--format", "focus")
    assert out.returncode == 0, out.stderr
    charges = list(csv.DictReader(io.StringIO(out.stdout)))
    tags = [json.loads(c["Tags"]) for c in charges]
    assert any(t.get("allsmi/namespace") == "serve" and t.get("allsmi/pod") == "api-1"
               for t in tags)
    assert any(t.get("allsmi/job") == "77" for t in tags)
    hours = [c for c in charges if c["PricingUnit"] == "Hours" and c["x_PriceConfigured"] == "true"]
    assert hours and all(float(c["x_IdleCost"]) <= float(c["BilledCost"]) + 1e-9 for c in hours)
    pa = pytest.importorskip("pyarrow.parquet")
    target = tmp_path / "bill.parquet"
    out = run_allsmi("export", "--ledger", str(ledger), "--since", SINCE, "--until", UNTIL,
                     "--config", str(ledger.parent / "prices.toml"), "--group-by",
                     "resource_group,job", "--format", "parquet", "-o", str(target))
    assert out.returncode == 0, out.stderr
    got = pa.read_table(target).to_pylist()
    assert {r["job"] for r in got} >= {"77", "78"}
    assert all(isinstance(r["idle_allocated_device_hours"], float) for r in got)


def test_idle_command_on_the_ledger(ledger: Path) -> None:
    base = ("idle", "--ledger", str(ledger), "--since", SINCE, "--until", UNTIL, "--config",
            str(ledger.parent / "prices.toml"))
    out = run_allsmi(*base, "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["group_by"] == ["resource_group", "user", "namespace", "pod", "job"]
    got = [(r["resource_group"], r["user"], r["namespace"], r["pod"], r["job"]) for r in doc["rows"]]
    # By idle cost: GPU-a's pod (half an hour at 2 USD + energy), the two shared pods (half an
    # hour each); then the unpriced job 78 (no cost, an hour idle). Job 77 never idled.
    assert got[0] == ("training", None, "ml", "trainer", None)
    assert set(got[1:3]) == {("training", None, "serve", "api-1", None),
                             ("training", None, "serve", "api-2", None)}
    assert got[3] == ("inference", "carol", None, None, "78") and len(got) == 4
    first = doc["rows"][0]
    assert first["devices"] == ["node1/GPU-a"] and first["currency"] == "USD"
    assert first["idle_allocated_device_hours"] == pytest.approx(0.5, abs=1e-2)
    assert first["idle_cost"] == pytest.approx(0.5 * 2.0 + 1800 * 100 / 3.6e6 * 0.5, abs=0.01)
    assert {"labels", "allocated_device_hours", "cost", "idle_cost", "device_count"} <= set(first)

    out = run_allsmi(*base, "--format", "csv", "--group-by", "resource_group,namespace")
    assert out.returncode == 0, out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["namespace"] for r in table] == ["serve", "ml", ""]
    assert table[0]["devices"] == "node1/GPU-b"

    out = run_allsmi(*base)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].split()[:5] == ["resource_group", "user", "namespace", "pod", "job"]
    assert "trainer" in lines[2] and "node1/GPU-a" in lines[2]

    out = run_allsmi("idle", "--ledger", str(ledger), "--since", "2020-01-01", "--until",
                     "2020-01-02")
    assert out.returncode == 3 and "no device data" in out.stderr
    assert "no allocated-but-idle time" in out.stdout
    for bad in (("--group-by", "team"), ("--format", "focus"), ("--period", "someday")):
        out = run_allsmi("idle", "--ledger", str(ledger), "--period", "today", *bad)
        assert out.returncode == 2, (bad, out.stderr)
    out = run_allsmi("idle", "--ledger", str(ledger.parent / "missing.db"), "--period", "today")
    assert out.returncode == 1 and "no ledger at" in out.stderr


def test_simulation_bills_its_pods_and_jobs() -> None:
    """export --simulate and idle --simulate: the scenario's pods and Slurm jobs are billed."""
    since, until = "2026-03-02T06:00:00Z", "2026-03-02T07:00:00Z"
    out = run_allsmi("export", "--simulate", "mixed", "--since", since, "--until", until,
                     "--group-by", "resource_group,namespace,job", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    namespaces = {r["namespace"] for r in doc["rows"]}
    assert {"training", "inference", "npu-serving"} <= namespaces
    jobs = {r["job"] for r in doc["rows"] if r["job"]}
    assert len(jobs) >= 4  # jobs on NVIDIA, AMD, Gaudi, Rebellions and Tenstorrent devices
    for row in doc["rows"]:
        if row["idle_allocated_device_hours"] is not None and row["allocated_device_hours"]:
            assert row["idle_allocated_device_hours"] <= row["allocated_device_hours"]
    out = run_allsmi("idle", "--simulate", "mixed", "--since", since, "--until", until,
                     "--format", "json")
    assert out.returncode == 0, out.stderr
    idle = json.loads(out.stdout)["rows"]
    assert idle and any(r["pod"] for r in idle) and any(r["job"] for r in idle)
    costs = [r["idle_cost"] or 0 for r in idle]
    assert costs == sorted(costs, reverse=True) and costs[0] > 0
