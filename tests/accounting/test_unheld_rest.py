"""The row of what no holder was given (empty holder keys), from the ledger: each of its
columns is a device's total less its holders' shares, each rounded to the millisecond apart.

Its active time and waiting seconds are never more than its allocated time, as on any row (a
difference of rounded sums once left active milliseconds on a row with 0 allocated hours); and
a row with no allocated time whose time was classified spent a known 0 on each waiting reason,
not an unknown (docs/accounting.md: the reason's cost is empty only where ``cost`` or the
reason's seconds are). Checked from the outside, on a simulated day.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import run_allsmi

CONFIG = """\
[groups.training]
price_per_device_hour = 3.1
price_per_kwh = 0.14
currency = "USD"
"""
REASONS = ("computing", "input", "host", "communication", "nothing", "unknown")


@pytest.mark.long(10)
def test_rows_nobody_held_stay_within_their_allocated_time_and_cost_known_zeros(
        tmp_path: Path) -> None:
    config = tmp_path / "prices.toml"
    config.write_text(CONFIG)
    result = run_allsmi("export", "--simulate", "mixed", "--since", "2026-03-01T00:00:00Z",
                        "--until", "2026-03-02T00:00:00Z", "--config", str(config),
                        "--group-by", "resource_group,vendor,model,host,user", "--format",
                        "json", timeout=180)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    rests = [r for r in rows if r["user"] is None]
    assert rests
    unheld = 0
    for row in rows:
        what = (row["resource_group"], row["model"], row["user"])
        held = row["allocated_device_hours"]
        if held is None:
            continue
        for column in ("active_device_hours", "idle_allocated_device_hours"):
            assert row[column] is None or row[column] <= held, (what, column, row[column], held)
        waited = [row[f"waiting_{r}_seconds"] for r in REASONS]
        if None not in waited:
            assert sum(waited) <= held * 3600 + 0.01, (what, waited, held)  # (hours: 6 places)
        for reason in REASONS:
            seconds, cost = row[f"waiting_{reason}_seconds"], row[f"waiting_{reason}_cost"]
            if seconds is not None and row["cost"] is not None:
                assert cost is not None, (what, reason, row["cost"])
        if held == 0 and row["waiting_nothing_seconds"] == 0 and row["cost"]:
            unheld += 1
            assert all(row[f"waiting_{r}_cost"] == 0 for r in REASONS), what
    # the day has rows of devices nobody held outside their holders' time (MIG slices, a
    # Tenstorrent card): priced, classified, with no allocated time
    assert unheld, rests
