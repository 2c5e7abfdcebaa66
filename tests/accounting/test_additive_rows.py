"""A bill's figures add up whatever the grouping: the holder rows of a group (per user,
namespace or job, or per device and user) sum to the group's row in every additive column,
the cost of each waiting reason included, in the JSON, the FOCUS charges and ``allsmi waste``.

The cost of a waiting reason (and, in ``allsmi waste``, the cost that bought compute activity)
is a ratio of seconds: taken of a group's sums it differs from the sum of its holders' figures,
since their cost per allocated hour differs (energy follows use; a group with ``bill_by =
"used"`` prices busy time). Each is taken of the finest parts and summed
(:mod:`allsmi.accounting.sums`). Checked on four simulated hours, from the outside.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from ..conftest import run_allsmi

WINDOW = ("--since", "2026-03-01T00:00:00Z", "--until", "2026-03-01T04:00:00Z")
#: The simulated node's own groups and prices, but ``training`` billed by use (its holders'
#: costs per allocated hour differ the most).
CONFIG = """\
[groups.training]
price_per_device_hour = 3.1
price_per_kwh = 0.14
currency = "USD"
bill_by = "used"
"""
#: Columns whose rows add up to a coarser grouping's (the rest are ratios, counts, prices or
#: device figures left empty on holder rows).
ADDITIVE_SUFFIXES = ("_hours", "_kwh", "_cost", "_seconds", "_gco2e")
GROUPINGS = ("resource_group,user", "resource_group,namespace", "resource_group,job")
DEVICE_KEYS = ("resource_group", "vendor", "model", "host")


def _run(tmp_path: Path, command: str, group_by: str, output_format: str) -> str:
    config = tmp_path / "prices.toml"
    config.write_text(CONFIG)
    result = run_allsmi(command, "--simulate", "mixed", *WINDOW, "--config", str(config),
                        "--group-by", group_by, "--format", output_format, timeout=180)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _additive(row: dict[str, Any]) -> list[str]:
    return [c for c, v in row.items() if (c == "cost" or c.endswith(ADDITIVE_SUFFIXES))
            and not c.startswith("price_") and isinstance(v, (int, float))
            and not isinstance(v, bool)]


def _digits(column: str) -> int:
    return 3 if column.endswith(("_seconds", "_gco2e")) else 6


def _assert_adds_up(whole: list[dict[str, Any]], parts: list[dict[str, Any]],
                    keys: tuple[str, ...], what: str) -> None:
    """Each row of ``whole`` equals the sum of the ``parts`` rows with its ``keys``, in every
    additive column, to the printed precision (each printed value within half a unit of its
    last digit) and the ledger's resolution (its holder shares are whole milliseconds, each
    rounded apart from its device's total: a day's sum may differ from it by some ms, a
    millionth at most)."""
    grouped: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in parts:
        grouped[tuple(row[k] for k in keys)].append(row)
    assert set(grouped) == {tuple(row[k] for k in keys) for row in whole}, what
    checked = 0
    for row in whole:
        mine = grouped[tuple(row[k] for k in keys)]
        for column in _additive(row):
            values = [r[column] for r in mine]
            total = sum(v or 0.0 for v in values)
            slack = (len(values) + 1) * 10.0 ** -_digits(column) + 1e-6 * abs(row[column])
            assert total == pytest.approx(row[column], abs=slack), \
                (what, tuple(row[k] for k in keys), column, row[column], total)
            checked += 1
    assert checked, what


@pytest.mark.long(25)
def test_holder_rows_add_up_to_their_group_in_every_additive_column(tmp_path: Path) -> None:
    groups = json.loads(_run(tmp_path, "export", "resource_group", "json"))["rows"]
    costs = {c for row in groups for c in _additive(row)}
    # every kind of figure is there to be added: hours, energy, costs, seconds and per reason
    assert {"cost", "idle_cost", "energy_kwh", "active_device_hours", "waiting_input_cost",
            "waiting_nothing_cost", "waiting_computing_seconds"} <= costs, costs
    for group_by in GROUPINGS:
        holders = json.loads(_run(tmp_path, "export", group_by, "json"))["rows"]
        assert len(holders) > len(groups)
        _assert_adds_up(groups, holders, ("resource_group",), group_by)
    # per device, and per device and user
    devices = json.loads(_run(tmp_path, "export", ",".join(DEVICE_KEYS), "json"))["rows"]
    users = json.loads(_run(tmp_path, "export", ",".join(DEVICE_KEYS) + ",user", "json"))["rows"]
    _assert_adds_up(devices, users, DEVICE_KEYS, "devices by user")
    _assert_adds_up(groups, devices, ("resource_group",), "devices")


def _charges(text: str) -> dict[str, dict[str, float]]:
    """Per resource group, the sums of the FOCUS charges' costs (the per-reason ones too)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for charge in csv.DictReader(io.StringIO(text)):
        for column, value in charge.items():
            if column.endswith("Cost") and value != "":
                out[charge["SubAccountId"]][column] += float(value)
    return out


@pytest.mark.long(15)
def test_focus_charges_and_waste_rows_add_up_whatever_the_grouping(tmp_path: Path) -> None:
    whole = _charges(_run(tmp_path, "export", "resource_group", "focus"))
    by_user = _charges(_run(tmp_path, "export", "resource_group,user", "focus"))
    assert set(whole) == set(by_user)
    for group, sums in whole.items():
        assert sums["x_WaitingNothingCost"] > 0, group
        for column, total in sums.items():
            assert by_user[group][column] == pytest.approx(total, abs=1e-4, rel=1e-7), \
                (group, column)
    # allsmi waste: the cost that bought activity, the rest and each reason's, per holder
    groups = json.loads(_run(tmp_path, "waste", "resource_group", "json"))["rows"]
    holders = json.loads(_run(tmp_path, "waste", "resource_group,user", "json"))["rows"]
    assert all(r["allocated_device_hours"] for r in holders)  # waste lists held time only
    assert any(r["active_cost"] for r in groups)
    _assert_adds_up(groups, holders, ("resource_group",), "waste")
    for row in groups + holders:
        if row["active_cost"] is not None:
            assert row["active_cost"] + row["lost_cost"] == pytest.approx(row["cost"], abs=2e-6)
