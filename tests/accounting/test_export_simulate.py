"""`allsmi export --simulate`: bill a simulated node over a past window, checked independently."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from allsmi.backends.simulated import simulated_backends
from allsmi.schema import WAITING_REASONS

from ..conftest import run_allsmi

START = 1_790_000_000 - 1_790_000_000 % 3600  # a whole hour, safely in the past
END = START + 3600
PRICES = """\
[groups.training]
price_per_device_hour = 2.0
price_per_kwh = 0.10
currency = "USD"

[[rules]]
resource_group = "training"
vendor = "nvidia"
"""


def _iso(t: int) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _counter_kwh(vendor_backend: str) -> float:
    """Energy from the simulation's own lifetime counters: the independent reference."""
    totals = []
    for at in (START, END):
        [backend] = [b for b in simulated_backends("mixed", clock=lambda at=at: float(at))
                     if b.display_name == vendor_backend]
        backend.open()
        totals.append(sum(d.energy_joules or 0.0 for d in backend.sample()))
    return (totals[1] - totals[0]) / 3.6e6


def test_simulated_export_matches_the_simulation(tmp_path: Path) -> None:
    config = tmp_path / "prices.toml"
    config.write_text(PRICES)
    args = ("export", "--simulate", "mixed", "--since", _iso(START), "--until", _iso(END),
            "--group-by", "resource_group,vendor", "--config", str(config))
    result = run_allsmi(*args, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = {(r["resource_group"], r["vendor"]): r for r in csv.DictReader(io.StringIO(result.stdout))}
    # AMD: no rule of the config matches; the mixed scenario's default rules put it in inference
    nvidia, amd = rows[("training", "nvidia")], rows[("inference", "amd")]
    assert float(nvidia["energy_kwh"]) == pytest.approx(_counter_kwh("nvidia"), rel=0.01)
    assert float(amd["energy_kwh"]) == pytest.approx(_counter_kwh("amd"), rel=0.01)
    assert int(nvidia["device_count"]) == 11 and float(nvidia["observed_device_hours"]) == pytest.approx(11.0)
    assert all(float(r["coverage_ratio"]) == pytest.approx(1.0) for r in rows.values())
    expected_cost = float(nvidia["billed_device_hours"]) * 2.0 + float(nvidia["energy_kwh"]) * 0.10
    assert float(nvidia["cost"]) == pytest.approx(expected_cost, rel=1e-5)
    assert run_allsmi(*args, timeout=120).stdout == result.stdout  # reruns are byte-identical


def _iso_fraction(t: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize("since, until", [
    (START + 0.5, START + 600),  # a fraction of a second: the export bills whole seconds
    (START + 30, START + 600),  # off the replay's one-minute sampling grid
    (START + 7.25, START + 600.75),  # both, at both edges
    (None, None),  # off the grid, --until defaulting to now (the current minute)
])
def test_window_edges_off_whole_seconds_or_the_grid_are_covered_whole(since, until) -> None:
    """A simulated node runs the whole window: coverage is 100 % (exit 0) whatever its edges,
    and the period columns are the window billed (the asked edges' whole seconds). The replay
    used to start at the fraction and stop at the last sample on its grid before the end."""
    import time
    if since is None:
        since = time.time() // 60 * 60 - 570  # 9.5 minutes before the current minute
    args = ["export", "--simulate", "mixed", "--since", _iso_fraction(since),
            "--group-by", "resource_group,vendor"]
    if until is not None:
        args += ["--until", _iso_fraction(until)]
    result = run_allsmi(*args, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows and all(r["coverage_ratio"] == "1.000000" for r in rows), rows
    assert {r["period_start"] for r in rows} == {_iso(int(since))}
    if until is not None:
        assert {r["period_end"] for r in rows} == {_iso(int(until))}
        hours = (int(until) - int(since)) / 3600
        assert all(float(r["observed_device_hours"]) == pytest.approx(
            int(r["device_count"]) * hours, abs=1e-6) for r in rows)
        assert run_allsmi(*args, timeout=120).stdout == result.stdout  # reruns: the same bytes


def test_simulate_excludes_other_sources(tmp_path: Path) -> None:
    result = run_allsmi("export", "--simulate", "mixed", "--ledger", str(tmp_path / "l.db"),
                        "--period", "yesterday")
    assert result.returncode == 2 and "--simulate" in result.stderr
    result = run_allsmi("export", "--simulate", "nope", "--period", "yesterday")
    assert result.returncode == 2 and "unknown scenario" in result.stderr


def test_unknown_idle_time_is_never_a_known_zero(tmp_path: Path) -> None:
    """Issue 19 item 7: Tenstorrent (no utilization reported) has no idle time known, so no
    idle hours and no idle cost; the devices that report utilization still do, a MIG instance
    (no per-instance utilization) idles by its own compute activity (issue 31), and an unheld
    device idles a known 0."""
    args = ("export", "--simulate", "mixed", "--since", _iso(START), "--until", _iso(END),
            "--group-by", "resource_group,vendor,model", "--format", "json")
    result = run_allsmi(*args, timeout=120)
    assert result.returncode == 0, result.stderr
    import json
    rows = {(r["resource_group"], r["vendor"], r["model"]): r
            for r in json.loads(result.stdout)["rows"]}
    unknown = [r for (_, vendor, model), r in rows.items() if vendor == "tenstorrent"]
    assert len(unknown) == 1
    for row in unknown:
        assert row["allocated_device_hours"] > 0, row
        assert row["idle_allocated_device_hours"] is None and row["idle_cost"] is None, row
        assert row["active_device_hours"] is None and row["efficiency_ratio"] is None, row
    slices = [r for (_, _, model), r in rows.items() if "MIG" in model]
    assert slices and all(r["idle_allocated_device_hours"] is not None for r in slices), slices
    assert all(r["activity_method"] == "sm_active" for r in slices if r["allocated_device_hours"])
    # Every group's bill has its active hours and what its allocated time went to, all of it.
    for group in {g for g, _, _ in rows}:
        mine = [r for (g, _, _), r in rows.items() if g == group]
        assert any(r["active_device_hours"] for r in mine), group
        for row in mine:
            waits = [row[f"waiting_{x}_seconds"] for x in WAITING_REASONS]
            if row["allocated_device_hours"]:
                assert None not in waits, row
                assert sum(waits) == pytest.approx(row["allocated_device_hours"] * 3600, abs=0.01)
    for (_, vendor, model), row in rows.items():
        if vendor in ("amd", "furiosa", "rebellions"):
            assert row["idle_allocated_device_hours"] is not None, (vendor, model)
    # the MIG instances' parent: never held, so idle a known 0
    parent = rows[("inference", "nvidia", "NVIDIA H100 80GB HBM3")]
    assert parent["allocated_device_hours"] == 0 and parent["idle_allocated_device_hours"] == 0
