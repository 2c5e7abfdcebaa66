"""Honest activity and waiting reasons, billed: /metrics counters and the ledger's export.

A GPU pinned at 100 % utilization with 20 % SM active (the "busy-looking" GPU) must bill active
time at 20 % of the allocated time, next to used time at 100 %; each holder's allocated time is
booked under the reason the collector gave it, and the cost of each reason is its share of the
holder's cost."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from allsmi.accounting.formats import to_csv
from allsmi.accounting.ledger.source import ledger_parts
from allsmi.accounting.report import build_report
from allsmi.exporter.exposition import Exposition
from allsmi.schema import DeviceSample, HolderWaiting, ProcessSample

from ..accounting.helpers import T0, config, record, snap, window
from ..exporter.support import series

PRICED = """
[groups.training]
price_per_device_hour = 2.0
currency = "EUR"
"""


def busy_looking(step: int, **kw: object) -> DeviceSample:
    """An H100 at 100 % utilization with 20 % SM active, held by two users' processes (ann
    waiting on input, bob computing... on every other step, bob on the host)."""
    base: dict[str, object] = dict(
        id="GPU-a", vendor="nvidia", kind="gpu", backend="nvidia", index=0, uuid="GPU-a",
        name="H100", health="ok", resource_group="training", utilization_percent=100.0,
        compute_active_percent=20.0, compute_active_source="sm_active", power_watts=400.0,
        interconnect_rx_bytes_per_second=1e9, pcie_tx_bytes_per_second=5e8,
        processes=(ProcessSample(10, "ann", "a", 1 << 30, utilization_percent=50.0),
                   ProcessSample(11, "bob", "b", 1 << 30, utilization_percent=50.0)),
        waiting=(HolderWaiting("input", "input: 1 of 1 processes in I/O wait", user="ann"),
                 HolderWaiting("computing" if step % 2 else "host", "", user="bob")))
    base.update(kw)
    return DeviceSample(**base)  # type: ignore[arg-type]


def test_metrics_count_active_time_waiting_reasons_and_traffic() -> None:
    exposition = Exposition(processes=True)
    for step in range(11):  # 10 intervals of 1 s
        exposition.on_snapshot(snap(T0 + step, busy_looking(step)))
    assert exposition.current is not None
    text = exposition.current.body(openmetrics=False, gzipped=False).decode()
    values = series(text)

    def one(name: str, **match: str) -> float:
        found = [v for (n, labels), v in values.items()
                 if n == name and all(dict(labels).get(k) == m for k, m in match.items())]
        assert len(found) == 1, (name, match, found)
        return found[0]

    assert one("allsmi_device_compute_active_ratio", uuid="GPU-a", source="sm_active") == 0.2
    assert one("allsmi_device_utilization_ratio", uuid="GPU-a") == 1.0
    assert one("allsmi_device_allocated_seconds_total") == pytest.approx(10.0)
    assert one("allsmi_device_busy_seconds_total") == pytest.approx(10.0)
    assert one("allsmi_device_active_seconds_total") == pytest.approx(2.0)
    assert one("allsmi_device_interconnect_rx_bytes_total") == pytest.approx(10e9)
    assert one("allsmi_device_pcie_tx_bytes_total") == pytest.approx(5e9)
    # No pcie_rx rate was reported: no counter, never a made-up 0.
    assert not [n for n, _ in values if n == "allsmi_device_pcie_rx_bytes_total"]
    # Each holder's half of the allocated time, under its reason (the later sample's).
    assert one("allsmi_holder_waiting_seconds_total", user="ann", reason="input") \
        == pytest.approx(5.0)
    assert one("allsmi_holder_waiting_seconds_total", user="bob", reason="computing") \
        == pytest.approx(2.5)
    assert one("allsmi_holder_waiting_seconds_total", user="bob", reason="host") \
        == pytest.approx(2.5)
    # a reason never spent on has no series (cardinality: one per reason used, not six)
    assert not [labels for (n, labels), _ in values.items()
                if n == "allsmi_holder_waiting_seconds_total" and ("reason", "nothing") in labels]
    assert one("allsmi_holder_active_seconds_total", user="ann") == pytest.approx(1.0)


def test_unknown_activity_is_left_out_not_zero() -> None:
    exposition = Exposition()
    for step in range(3):
        exposition.on_snapshot(snap(T0 + step, busy_looking(
            step, compute_active_percent=None, compute_active_source=None, waiting=None)))
    assert exposition.current is not None
    text = exposition.current.body(openmetrics=False, gzipped=False).decode()
    names = {n for n, _ in series(text)}
    assert "allsmi_device_busy_seconds_total" in names
    assert "allsmi_device_active_seconds_total" not in names
    assert "allsmi_device_compute_active_ratio" not in names
    assert "allsmi_holder_waiting_seconds_total" not in names


def test_time_of_unknown_activity_is_in_neither_side_of_the_efficiency() -> None:
    """Held for 10 s, its activity unknown in 4 samples (GPM failing a while): the 5 intervals
    with an unknown end are in neither the active seconds nor the allocated seconds they
    cover, so active over active-allocated is the efficiency of the known time (0.2), never
    diluted to 0.1 by counting unknown time as inactive."""
    exposition = Exposition()
    for step in range(11):
        unknown = 3 <= step <= 6
        exposition.on_snapshot(snap(T0 + step, busy_looking(
            step, **({"compute_active_percent": None, "compute_active_source": None}
                     if unknown else {}))))
    assert exposition.current is not None
    values = {n: v for (n, _), v in series(exposition.current.body(
        openmetrics=False, gzipped=False).decode()).items() if n.startswith("allsmi_device_")}
    assert values["allsmi_device_allocated_seconds_total"] == pytest.approx(10.0)
    known = values["allsmi_device_active_allocated_seconds_total"]
    assert known == pytest.approx(5.0)  # 0-1, 1-2, 7-8, 8-9 and 9-10
    assert values["allsmi_device_active_seconds_total"] / known == pytest.approx(0.2)


def export(path: Path, group_by: tuple[str, ...] = ()) -> list[dict[str, str]]:
    cfg = config(PRICED)
    win = window(T0, T0 + 3600)
    devices, holders = ledger_parts(path, win, by_holder=bool(group_by))
    report = build_report(devices, win, group_by, cfg, holder_parts=holders)
    return list(csv.DictReader(io.StringIO(to_csv(report))))


def test_ledger_export_bills_active_hours_and_each_waiting_reason(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + 10 * step, busy_looking(step)) for step in range(121)],
           config(PRICED))
    (row,) = export(db)
    allocated = float(row["allocated_device_hours"])
    assert allocated == pytest.approx(1200 / 3600, rel=1e-6)
    assert float(row["used_device_hours"]) == pytest.approx(allocated, rel=1e-6)
    assert float(row["active_device_hours"]) == pytest.approx(0.2 * allocated, rel=0.01)
    assert float(row["efficiency_ratio"]) == pytest.approx(0.2, rel=0.01)
    assert row["activity_method"] == "sm_active"
    assert float(row["waiting_input_seconds"]) == pytest.approx(600.0, abs=0.01)
    assert float(row["waiting_computing_seconds"]) + float(row["waiting_host_seconds"]) \
        == pytest.approx(600.0, abs=0.01)
    cost = float(row["cost"])
    assert cost == pytest.approx(allocated * 2.0, rel=1e-5)
    assert float(row["waiting_input_cost"]) == pytest.approx(cost / 2, rel=1e-4)
    assert row["waiting_nothing_cost"] == "0.000000"

    by_user = {r["user"]: r for r in export(db, ("user",))}
    assert float(by_user["ann"]["waiting_input_seconds"]) == pytest.approx(600.0, abs=0.01)
    assert float(by_user["ann"]["waiting_computing_seconds"]) == 0.0
    assert float(by_user["bob"]["waiting_input_seconds"]) == 0.0
    assert float(by_user["ann"]["efficiency_ratio"]) == pytest.approx(0.2, rel=0.01)


def test_export_leaves_activity_empty_where_nothing_reported_it(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + 10 * step, busy_looking(step, compute_active_percent=None,
                                                  compute_active_source=None, waiting=None))
                for step in range(31)], config(PRICED))
    (row,) = export(db)
    assert float(row["allocated_device_hours"]) > 0
    for column in ("active_device_hours", "efficiency_ratio", "activity_method",
                   "waiting_input_seconds", "waiting_input_cost"):
        assert row[column] == "", column
