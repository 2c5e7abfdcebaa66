"""The FOCUS exports carry the activity and waiting columns of every other export (issue 31).

``allsmi export --format focus`` and ``--format focus-parquet`` run as a user runs them, over
a ledger of one hour: in group ``training``, an H100 at 100 % utilization and 20 % SM active,
its holders waiting on input half the time (the "busy-looking" GPU of
tests/activity/test_activity_billing.py); in group ``inference``, a GPU that reports no
activity and whose holders were never classified. The FOCUS charges must give the same
active hours, efficiency, activity method and seconds per waiting reason as the CSV export's
row, split each reason's cost over the row's charges so that they add up to the CSV's, and
leave what is unknown empty (null in Parquet), never 0.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from pathlib import Path

import pytest

from allsmi.schema import WAITING_REASONS

from ..activity.test_activity_billing import busy_looking
from .helpers import T0, config, record, snap
from .test_export_cli import SINCE, UNTIL, run

CONFIG = """
[groups.training]
price_per_device_hour = 2.0
price_per_kwh = 0.5
currency = "EUR"

[groups.inference]
price_per_device_hour = 1.0
currency = "EUR"
"""

#: The FOCUS export's extension columns, in order: as before issue 31's, then its.
EXTENSION_COLUMNS = [
    "x_ObservedDeviceHours", "x_UsedDeviceHours", "x_DeviceCount", "x_CoverageRatio",
    "x_PriceConfigured", "x_IdleAllocatedDeviceHours", "x_IdleCost",
    "x_ActiveDeviceHours", "x_EfficiencyRatio", "x_ActivityMethod",
    "x_WaitingComputingSeconds", "x_WaitingInputSeconds", "x_WaitingHostSeconds",
    "x_WaitingCommunicationSeconds", "x_WaitingNothingSeconds", "x_WaitingUnknownSeconds",
    "x_WaitingComputingCost", "x_WaitingInputCost", "x_WaitingHostCost",
    "x_WaitingCommunicationCost", "x_WaitingNothingCost", "x_WaitingUnknownCost",
]
#: The row's values, the same on each of its charges: CSV column -> FOCUS column.
ROW_COLUMNS = {"active_device_hours": "x_ActiveDeviceHours",
               "efficiency_ratio": "x_EfficiencyRatio", "activity_method": "x_ActivityMethod",
               **{f"waiting_{r}_seconds": f"x_Waiting{r.capitalize()}Seconds"
                  for r in WAITING_REASONS}}
COSTS = {f"waiting_{r}_cost": f"x_Waiting{r.capitalize()}Cost" for r in WAITING_REASONS}
ACTIVITY = [*ROW_COLUMNS.values(), *COSTS.values()]


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ledger, and its CSV, FOCUS and FOCUS Parquet exports (``bill.*``) beside it."""
    where = tmp_path_factory.mktemp("focus-activity")
    (where / "config.toml").write_text(CONFIG)
    db = where / "ledger.db"
    snaps = []
    for step in range(361):  # one hour, every 10 s
        unreported = dataclasses.replace(
            busy_looking(step, id="GPU-u", uuid="GPU-u", index=1, resource_group="inference",
                         compute_active_percent=None, compute_active_source=None, waiting=None))
        snaps.append(snap(T0 + 10 * step, busy_looking(step), unreported))
    record(db, snaps, config(CONFIG))
    window = ("--ledger", str(db), "--config", "config.toml", "--since", SINCE, "--until", UNTIL,
              "--group-by", "resource_group")
    for fmt, name in (("csv", "bill.csv"), ("focus", "bill.focus.csv"),
                      ("focus-parquet", "bill.focus.parquet")):
        out = run(*window, "--format", fmt, "-o", name, cwd=where)
        assert out.returncode == 0, out.stderr
    return where


def _read(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def _charges(exports: Path) -> dict[str, list[dict[str, str]]]:
    """The FOCUS charges by resource group (SubAccountId)."""
    out: dict[str, list[dict[str, str]]] = {}
    for charge in _read(exports / "bill.focus.csv"):
        out.setdefault(charge["SubAccountId"], []).append(charge)
    return out


def test_the_focus_header_has_the_activity_extension_columns(exports: Path) -> None:
    header = (exports / "bill.focus.csv").read_text().splitlines()[0].split(",")
    assert [c for c in header if c.startswith("x_")] == EXTENSION_COLUMNS
    assert header[-len(EXTENSION_COLUMNS):] == EXTENSION_COLUMNS  # after FOCUS' own columns


def test_focus_charges_bill_the_activity_the_csv_bills(exports: Path) -> None:
    (row,) = [r for r in _read(exports / "bill.csv") if r["resource_group"] == "training"]
    charges = _charges(exports)["training"]
    assert sorted(c["PricingUnit"] for c in charges) == ["Hours", "kWh"]
    # The row's figures, the same on each charge, as the CSV gives them.
    allocated = float(row["allocated_device_hours"])
    assert float(row["active_device_hours"]) == pytest.approx(0.2 * allocated, rel=0.01)
    assert row["activity_method"] == "sm_active"
    assert float(row["waiting_input_seconds"]) == pytest.approx(1800.0, abs=0.01)
    for charge in charges:
        for csv_column, focus_column in ROW_COLUMNS.items():
            if csv_column == "activity_method":
                assert charge[focus_column] == "sm_active"
            else:
                assert float(charge[focus_column]) == pytest.approx(float(row[csv_column]),
                                                                    abs=1e-6), focus_column
    # Each charge carries its part of each reason's cost: half of each charge went on input.
    for charge in charges:
        assert float(charge["x_WaitingInputCost"]) == pytest.approx(
            float(charge["EffectiveCost"]) / 2, abs=1e-5)
        assert float(charge["x_WaitingNothingCost"]) == 0.0  # classified: truly none
        assert sum(float(charge[c]) for c in COSTS.values()) == pytest.approx(
            float(charge["EffectiveCost"]), abs=1e-5)
    # ... and the charges add up to the CSV row's cost of each reason.
    for csv_column, focus_column in COSTS.items():
        assert sum(float(c[focus_column]) for c in charges) == pytest.approx(
            float(row[csv_column]), abs=1e-5), focus_column
    assert float(row["waiting_input_cost"]) > 0


def test_unknown_activity_is_empty_in_focus_never_zero(exports: Path) -> None:
    (row,) = [r for r in _read(exports / "bill.csv") if r["resource_group"] == "inference"]
    assert float(row["allocated_device_hours"]) > 0 and float(row["cost"]) > 0
    assert all(row[c] == "" for c in (*ROW_COLUMNS, *COSTS))
    charges = _charges(exports)["inference"]
    # A priced hours charge (and a free energy charge: the group sets no price per kWh).
    assert sorted((c["PricingUnit"], c["x_PriceConfigured"]) for c in charges) \
        == [("Hours", "true"), ("kWh", "false")]
    for charge in charges:
        assert {c: charge[c] for c in ACTIVITY} == {c: "" for c in ACTIVITY}


def test_focus_parquet_types_the_activity_columns_and_keeps_unknown_null(exports: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is in the test extra")
    table = pq.read_table(exports / "bill.focus.parquet")
    schema = {f.name: str(f.type) for f in table.schema}
    assert [c for c in table.column_names if c.startswith("x_")] == EXTENSION_COLUMNS
    assert schema["x_ActivityMethod"] == "string"
    assert {schema[c] for c in ACTIVITY if c != "x_ActivityMethod"} == {"double"}
    records = table.to_pylist()
    charges = _charges(exports)
    assert len(records) == sum(len(c) for c in charges.values())
    for record_, charge in zip(records, [c for g in charges.values() for c in g]):
        assert record_["SubAccountId"] == charge["SubAccountId"]
    for record_ in records:
        if record_["SubAccountId"] == "inference":
            assert {c: record_[c] for c in ACTIVITY} == {c: None for c in ACTIVITY}
        else:
            assert record_["x_ActivityMethod"] == "sm_active"
            assert record_["x_WaitingInputSeconds"] == pytest.approx(1800.0, abs=0.01)
            assert record_["x_WaitingInputCost"] == pytest.approx(
                record_["EffectiveCost"] / 2, abs=1e-5)


def test_the_documented_focus_columns_are_the_exported_ones(exports: Path) -> None:
    """docs/accounting.md's FOCUS table names every column the export writes, and no other
    (``<Reason>`` stands for each waiting reason)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "accounting.md").read_text()
    section = text.split("\n### FOCUS\n", 1)[1].split("\n#", 1)[0]
    documented = []
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("| ---"):
            for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
                documented += [name.replace("<Reason>", r.capitalize()) for r in WAITING_REASONS] \
                    if "<Reason>" in name else [name]
    header = (exports / "bill.focus.csv").read_text().splitlines()[0].split(",")
    assert sorted(documented) == sorted(header)
    assert len(documented) == len(set(documented))  # each once

