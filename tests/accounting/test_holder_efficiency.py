"""On every row, ``efficiency_ratio`` is its own ``active_device_hours`` /
``allocated_device_hours``: a holder's active time is its allocated time x the device's compute
activity over it (docs/accounting.md, fair shares), so a row's ratio is never above 1, holder
rows add up to their device's, and an unknown activity stays empty (never 0).

Checked from the outside (``allsmi export`` and ``allsmi waste`` as subprocesses) on a ledger
of the docs' worked example (two users' processes at 60 % and 20 % SM on one GPU 80 % active),
on a pod declared a quarter of a GPU, on the simulated node in every format, and on the
Prometheus path's split of the exporters' per-holder counters.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from allsmi.accounting.prometheus.source import split_holders
from allsmi.accounting.report import Part
from allsmi.schema import DeviceSample, ProcessSample, Workload

from ..conftest import run_allsmi
from .helpers import T0, config, record, snap

SINCE, UNTIL = "2026-03-02T00:00:00Z", "2026-03-02T01:00:00Z"
CONFIG = """
[groups.shared]
price_per_device_hour = 4.0
currency = "EUR"
"""


def gpu(dev_id: str, procs: tuple[ProcessSample, ...], active: float | None = 80.0,
        workloads: tuple[Workload, ...] | None = None) -> DeviceSample:
    return DeviceSample(id=dev_id, vendor="nvidia", kind="gpu", backend="nvidia", name="H100",
                        uuid=dev_id, resource_group="shared", health="ok",
                        utilization_percent=80.0, power_watts=300.0, processes=procs,
                        workloads=workloads, compute_active_percent=active,
                        compute_active_source=None if active is None else "sm_active")


def ann_and_bob(dev_id: str, active: float | None = 80.0) -> DeviceSample:
    """The worked example: ann's process at 60 % SM, bob's at 20 %, equal allocation."""
    return gpu(dev_id, (ProcessSample(10, user="ann", utilization_percent=60.0),
                        ProcessSample(11, user="bob", utilization_percent=20.0)), active)


def export(tmp: Path, *args: str, command: str = "export") -> list[dict[str, Any]]:
    (tmp / "config.toml").write_text(CONFIG)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "xdg"), "ALLSMI_LEDGER": ""}
    out = subprocess.run([sys.executable, "-m", "allsmi", command, "--ledger", str(tmp / "l.db"),
                          "--config", str(tmp / "config.toml"), "--since", SINCE, "--until",
                          UNTIL, "--format", "json", *args], cwd=tmp, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["rows"]


def own_ratio(row: dict[str, Any]) -> float | None:
    """``active_device_hours / allocated_device_hours`` as printed."""
    active, allocated = row["active_device_hours"], row["allocated_device_hours"]
    return None if active is None or not allocated else active / allocated


def assert_own_ratio(row: dict[str, Any], digits: int = 6) -> None:
    """The row's efficiency is its own ratio, to the rounding of the three printed values,
    at most 1; never 0 for an unknown activity."""
    ratio, eff = own_ratio(row), row["efficiency_ratio"]
    if eff is None:
        return
    assert ratio is not None, row
    half = 0.5 * 10.0 ** -digits
    slack = half + half * (1 + ratio) / row["allocated_device_hours"]
    assert eff == pytest.approx(ratio, abs=slack), row
    assert 0.0 <= eff <= 1.0, row


def test_holders_of_a_shared_gpu_each_have_the_devices_efficiency(tmp_path: Path) -> None:
    record(tmp_path / "l.db", [snap(T0 + t, ann_and_bob("GPU-s")) for t in range(0, 3601, 5)],
           config(CONFIG))
    [group] = export(tmp_path, "--group-by", "resource_group")
    rows = {r["user"]: r for r in export(tmp_path, "--group-by", "resource_group,user")}
    ann, bob = rows["ann"], rows["bob"]
    assert group["efficiency_ratio"] == pytest.approx(0.8, abs=1e-3)
    for row in (ann, bob):  # half of the allocated hour each, 80 % of it active
        assert row["allocated_device_hours"] == pytest.approx(0.5, rel=0.01)
        assert row["active_device_hours"] == pytest.approx(0.4, rel=0.01)
        assert row["efficiency_ratio"] == pytest.approx(0.8, abs=1e-3)
        assert_own_ratio(row)
    # used time still follows each one's own activity, 3:1
    assert ann["used_device_hours"] / bob["used_device_hours"] == pytest.approx(3.0, rel=0.05)
    assert sum(r["active_device_hours"] for r in rows.values()) == pytest.approx(
        group["active_device_hours"], abs=3e-6)
    # allsmi waste: the same ratio; the cost that bought activity adds up to the device's
    waste = {r["user"]: r for r in export(tmp_path, "--group-by", "resource_group,user",
                                          command="waste")}
    [whole] = export(tmp_path, "--group-by", "resource_group", command="waste")
    for row in waste.values():
        assert_own_ratio(row)
    assert sum(r["active_cost"] for r in waste.values()) == pytest.approx(whole["active_cost"],
                                                                          abs=3e-6)
    assert whole["active_cost"] == pytest.approx(0.8 * whole["cost"], rel=1e-3)


def test_a_pod_declared_a_quarter_is_active_for_a_quarter(tmp_path: Path) -> None:
    """One pod on a time-slicing replica (1/4 of the GPU) with the GPU 80 % active: the pod's
    active time is its quarter x 80 %, the rest (unallocated, on the empty row) the rest."""
    pod = (Workload("kubernetes", namespace="ml", pod="infer-0", share=0.25),)
    record(tmp_path / "l.db", [snap(T0 + t, gpu("GPU-q", (ProcessSample(10, user="ann"),),
                                                 workloads=pod))
                               for t in range(0, 3601, 5)], config(CONFIG))
    rows = {r["pod"]: r for r in export(tmp_path, "--group-by", "resource_group,pod")}
    mine, rest = rows["infer-0"], rows[None]
    assert mine["allocated_device_hours"] == pytest.approx(0.25, rel=0.01)
    assert mine["active_device_hours"] == pytest.approx(0.2, rel=0.01)
    assert rest["allocated_device_hours"] == pytest.approx(0.75, rel=0.01)
    assert rest["active_device_hours"] == pytest.approx(0.6, rel=0.01)
    for row in rows.values():
        assert_own_ratio(row)
        assert row["efficiency_ratio"] == pytest.approx(0.8, abs=1e-3)


def test_an_unknown_activity_stays_empty_never_zero(tmp_path: Path) -> None:
    """A GPU without compute activity held by ann beside one 80 % active held by bob: ann's
    activity is unknown (empty, not 0); so is the efficiency of the group, which held time of
    unknown activity, while its active hours are those of the GPU that reports them."""
    record(tmp_path / "l.db", [snap(T0 + t, gpu("GPU-k", (ProcessSample(11, user="bob"),)),
                                    gpu("GPU-u", (ProcessSample(10, user="ann"),), None))
                               for t in range(0, 3601, 5)], config(CONFIG))
    rows = {r["user"]: r for r in export(tmp_path, "--group-by", "resource_group,user")}
    assert rows["ann"]["active_device_hours"] is None and rows["ann"]["efficiency_ratio"] is None
    assert rows["bob"]["efficiency_ratio"] == pytest.approx(0.8, abs=1e-3)
    [group] = export(tmp_path, "--group-by", "resource_group")
    assert group["active_device_hours"] == pytest.approx(0.8, rel=0.01)
    assert group["efficiency_ratio"] is None
    waste = {r["user"]: r for r in export(tmp_path, "--group-by", "resource_group,user",
                                          command="waste")}
    assert waste["ann"]["active_cost"] is None and waste["ann"]["lost_cost"] is None
    assert waste["bob"]["active_cost"] == pytest.approx(0.8 * waste["bob"]["cost"], rel=1e-3)


def _holder(pod: str, allocated: float, active: float) -> tuple[tuple[str, ...], dict[str, Any]]:
    return (("ml", pod, "", ""), {"allocated": allocated, "used": active, "active": active,
                                  "allocation_method": "equal", "usage_method": "activity"})


@pytest.mark.parametrize("counted, expected", [
    # one holder at a time: the exporter's counters are the ledger's split
    ({"a": (1800.0, 1500.0), "b": (1200.0, 300.0)}, {"a": 1500.0, "b": 300.0, None: 0.0}),
    # shared at once, the counters split like used time (a's above its allocated time):
    # in proportion to allocated time, 80 % each, as the ledger splits a device shared alike
    ({"a": (1500.0, 2100.0), "b": (1500.0, 300.0)}, {"a": 1200.0, "b": 1200.0, None: 0.0}),
    # a quarter declared to a's pod, the rest unallocated (the empty row): 2/3 active each
    ({"a": (900.0, 2400.0)}, {"a": 600.0, None: 1800.0}),
])
def test_prometheus_holders_are_active_within_their_allocated_time(
        counted: dict[str, tuple[float, float]], expected: dict[str | None, float]) -> None:
    """From the exporters' per-holder counters (split like busy time): no holder is more active
    than allocated, and the holders and the rest add up to the device's active time."""
    held = 3600.0 if len(counted) == 1 else sum(a for a, _ in counted.values())
    device = Part(resource_group="shared", labels=(), vendor="nvidia", model="H100", host="n1",
                  device="n1/GPU-1", observed_s=3600.0, allocated_s=held, busy_s=2400.0,
                  busy_observed_s=3600.0, energy_j=None, active_s=sum(expected.values()),
                  active_allocated_s=held, activity_method="sm_active")
    fair = {("GPU-1", "n1", "shared"): dict(_holder(pod, *v) for pod, v in counted.items())}
    parts = {p.pod: p for p in split_holders([device], {}, {}, fair)}
    assert set(parts) == set(expected)
    for pod, active in expected.items():
        part = parts[pod]
        assert part.active_s == pytest.approx(active), pod
        assert part.active_allocated_s == pytest.approx(part.allocated_s), pod
        assert part.active_s <= part.allocated_s + 1e-9, pod
    assert sum(p.active_s for p in parts.values()) == pytest.approx(device.active_s)


@pytest.mark.long(15)
def test_every_simulated_row_has_its_own_ratio_in_every_format(tmp_path: Path) -> None:
    window = ("--since", "2026-03-01T00:00:00Z", "--until", "2026-03-01T03:00:00Z")
    unknown = 0
    for group_by in ("resource_group", "resource_group,user", "resource_group,namespace,pod",
                     "resource_group,vendor,model,host,job"):
        args = ("--simulate", "mixed", *window, "--group-by", group_by)
        out = run_allsmi("export", *args, "--format", "json", timeout=180)
        assert out.returncode == 0, out.stderr
        rows = json.loads(out.stdout)["rows"]
        out = run_allsmi("export", *args, "--format", "csv", timeout=180)
        assert out.returncode == 0, out.stderr
        cells = list(csv.DictReader(io.StringIO(out.stdout)))
        out = run_allsmi("waste", *args, "--format", "json", timeout=180)
        assert out.returncode == 0, out.stderr
        waste = json.loads(out.stdout)["rows"]
        number = lambda v: None if v == "" else float(v)  # noqa: E731
        as_csv = [{k: number(c[k]) for k in ("active_device_hours", "allocated_device_hours",
                                             "efficiency_ratio")} for c in cells]
        for row in rows + as_csv + waste:
            assert_own_ratio(row)
            if row["efficiency_ratio"] is None and row["allocated_device_hours"] \
                    and row["active_device_hours"] is not None:
                unknown += 1  # held time of unknown activity (the Tenstorrent card)
        # the holders' active hours add up to their group's
        totals: dict[str, float] = defaultdict(float)
        for row in rows:
            totals[row["resource_group"]] += row["active_device_hours"] or 0.0
        if group_by == "resource_group":
            groups = {r["resource_group"]: r["active_device_hours"] for r in rows}
        for name, active in totals.items():
            assert active == pytest.approx(groups[name] or 0.0, abs=1e-6 * (len(rows) + 1)), \
                (group_by, name)
    assert unknown  # some rows held a device that reports no activity: left empty, never 0
