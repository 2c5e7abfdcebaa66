"""``allsmi waste`` as a user runs it: a ledger of holders that each wasted money differently,
ranked by money lost, with the cost of each waiting reason and the evidence in words."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from allsmi.schema import DeviceSample, HolderWaiting, ProcessSample

from ..accounting.helpers import T0, config, record, snap
from ..conftest import run_allsmi

CONFIG = """
[groups.training]
price_per_device_hour = 3.0
currency = "EUR"
"""

#: user -> (waiting reason, compute active percent)
HOLDERS = {"ann": ("input", 5.0), "bob": ("host", 10.0), "carl": ("nothing", 0.0),
           "dana": ("communication", 15.0), "eve": ("computing", 90.0)}


def devices() -> tuple[DeviceSample, ...]:
    return tuple(DeviceSample(
        id=f"GPU-{i}", vendor="nvidia", kind="gpu", backend="nvidia", index=i, name="H100",
        health="ok", resource_group="training", utilization_percent=100.0,
        compute_active_percent=active, compute_active_source="sm_active",
        processes=(ProcessSample(100 + i, user, "python x.py", 1 << 30),),
        waiting=(HolderWaiting(reason, f"{reason}: test", user=user),))
        for i, (user, (reason, active)) in enumerate(HOLDERS.items()))


def test_waste_ranks_holders_by_money_lost(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(CONFIG)
    ledger = tmp_path / "ledger.db"
    record(ledger, [snap(T0 + 10 * step, *devices()) for step in range(361)], config(CONFIG))
    result = run_allsmi("waste", "--ledger", str(ledger), "--config", str(tmp_path / "config.toml"),
                        "--since", "2026-03-02T00:00:00Z", "--until", "2026-03-02T01:00:00Z",
                        "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [r["user"] for r in rows] == ["carl", "ann", "bob", "dana", "eve"]
    for row in rows:
        reason, active = HOLDERS[row["user"]]
        assert row["allocated_device_hours"] == 1.0
        assert row["cost"] == 3.0
        assert abs(row["efficiency_ratio"] - active / 100) < 0.001
        assert abs(row["lost_cost"] - 3.0 * (1 - active / 100)) < 0.01
        assert row[f"waiting_{reason}_seconds"] == 3600.0
        assert row[f"waiting_{reason}_cost"] == 3.0
        assert row["evidence"].startswith(f"{reason} 100 % (1.0 h)")
    table = run_allsmi("waste", "--ledger", str(ledger), "--config",
                       str(tmp_path / "config.toml"), "--since", "2026-03-02T00:00:00Z",
                       "--until", "2026-03-02T01:00:00Z")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "carl" in lines[2] and "3.00 EUR" in lines[2] and "nothing 100 %" in lines[2]
    csv_out = run_allsmi("waste", "--ledger", str(ledger), "--config",
                         str(tmp_path / "config.toml"), "--since", "2026-03-02T00:00:00Z",
                         "--until", "2026-03-02T01:00:00Z", "--format", "csv")
    head = csv_out.stdout.splitlines()[0].split(",")
    assert head[:5] == ["resource_group", "user", "namespace", "pod", "job"]
    # the cost of each waiting reason, as docs/accounting.md names them
    assert [c for c in head if c.startswith("waiting_") and c.endswith("_cost")] == [
        "waiting_computing_cost", "waiting_input_cost", "waiting_host_cost",
        "waiting_communication_cost", "waiting_nothing_cost", "waiting_unknown_cost"]


def test_waste_on_an_empty_window_says_so(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    record(ledger, [snap(T0 + 10 * step, *devices()) for step in range(3)], config(CONFIG))
    result = run_allsmi("waste", "--ledger", str(ledger), "--since", "2026-04-01T00:00:00Z",
                        "--until", "2026-04-02T00:00:00Z", "--format", "json")
    assert result.returncode == 3
    assert json.loads(result.stdout)["rows"] == []
    assert "no device data" in result.stderr


def test_a_holder_whose_activity_is_unknown_ranks_by_the_time_it_is_known_to_have_lost(
        tmp_path: Path) -> None:
    """A device that reports no compute activity (Tenstorrent): no lost cost, but an hour of
    waiting on nothing is at least that hour's cost lost, above a holder that lost half."""
    (tmp_path / "config.toml").write_text(CONFIG)
    blind = DeviceSample(
        id="NPU-0", vendor="tenstorrent", kind="npu", backend="tenstorrent", index=0,
        name="p150a", health="ok", resource_group="training",
        processes=(ProcessSample(200, "finn", "python x.py", 1 << 30),),
        waiting=(HolderWaiting("nothing", "nothing: test", user="finn"),))
    half = DeviceSample(
        id="GPU-9", vendor="nvidia", kind="gpu", backend="nvidia", index=9, name="H100",
        health="ok", resource_group="training", utilization_percent=100.0,
        compute_active_percent=50.0, compute_active_source="sm_active",
        processes=(ProcessSample(201, "gail", "python x.py", 1 << 30),),
        waiting=(HolderWaiting("computing", "computing: test", user="gail"),))
    ledger = tmp_path / "ledger.db"
    record(ledger, [snap(T0 + 10 * step, half, blind) for step in range(361)], config(CONFIG))
    result = run_allsmi("waste", "--ledger", str(ledger), "--config", str(tmp_path / "config.toml"),
                        "--since", "2026-03-02T00:00:00Z", "--until", "2026-03-02T01:00:00Z",
                        "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [r["user"] for r in rows] == ["finn", "gail"], rows
    finn, gail = rows
    assert finn["lost_cost"] is None and finn["efficiency_ratio"] is None
    assert finn["active_device_hours"] is None
    assert finn["waiting_nothing_cost"] == 3.0
    assert "compute activity not measured" in finn["evidence"]
    assert abs(gail["lost_cost"] - 1.5) < 0.01


def test_evidence_shares_are_of_the_allocated_time_not_of_the_classified_part(
        tmp_path: Path) -> None:
    """A ledger whose first half hour was recorded without the waiting classification (before
    an upgrade, or with ``[activity] enabled = false``): the holder's evidence said
    ``nothing 100 % (30 min)`` of an hour held; its shares are of the allocated hour, and the
    time no reason was booked for is said."""
    (tmp_path / "config.toml").write_text(CONFIG)
    held = DeviceSample(
        id="GPU-0", vendor="nvidia", kind="gpu", backend="nvidia", index=0, name="H100",
        health="ok", resource_group="training", utilization_percent=100.0,
        compute_active_percent=2.0, compute_active_source="sm_active",
        processes=(ProcessSample(100, "ann", "python x.py", 1 << 30),))
    classified = replace(held, waiting=(HolderWaiting("nothing", "nothing: test", user="ann"),))
    ledger = tmp_path / "ledger.db"
    record(ledger, [snap(T0 + 10 * step, held if step <= 180 else classified)
                    for step in range(361)], config(CONFIG))
    result = run_allsmi("waste", "--ledger", str(ledger), "--config", str(tmp_path / "config.toml"),
                        "--since", "2026-03-02T00:00:00Z", "--until", "2026-03-02T01:00:00Z",
                        "--format", "json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)["rows"]
    assert row["allocated_device_hours"] == 1.0 and row["waiting_nothing_seconds"] == 1800.0
    assert row["evidence"].startswith(
        "nothing 50 % (30 min); not classified 50 % (30 min); compute active 2 %"), row["evidence"]


def _decimals(csv_text: str) -> dict[str, set[int]]:
    """Per column, the numbers of decimal places its non-empty numeric cells have."""
    import csv
    import io
    import re
    out: dict[str, set[int]] = {}
    for row in csv.DictReader(io.StringIO(csv_text)):
        for column, cell in row.items():
            if re.fullmatch(r"-?\d+(\.\d+)?", cell or ""):
                out.setdefault(column, set()).add(len(cell.partition(".")[2]))
    return out


def test_a_column_has_the_same_precision_in_export_idle_and_waste() -> None:
    """``waiting_<reason>_seconds`` (3 decimals), hours, ratios and costs print alike in
    ``allsmi export``, ``idle`` and ``waste`` CSVs; never ``-0.000000``."""
    window = ("--simulate", "mixed", "--since", "2026-11-02T09:00:00Z", "--until",
              "2026-11-02T13:00:00Z", "--format", "csv")  # (four hours: rows of every kind)
    export = run_allsmi("export", *window, timeout=120)
    assert export.returncode == 0, export.stderr
    reference = _decimals(export.stdout)
    assert reference["waiting_nothing_seconds"] == {3}
    for command in ("waste", "idle"):
        result = run_allsmi(command, *window, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "-0.0" not in result.stdout
        found = _decimals(result.stdout)
        shared = set(found) & set(reference)
        assert len(shared) > 4, (command, shared)
        for column in shared:
            assert found[column] == reference[column], (command, column)
