"""A ledger export whose window edges fall inside the ledger's intervals (a minute): the cut
interval counts at the share of it inside the window, so a node that ran all along is covered
whole and billed for the window's seconds, never an interval more or less."""

from __future__ import annotations

import csv
import datetime as dt
import io
from pathlib import Path

import pytest

from ..conftest import run_allsmi
from .helpers import T0, device, record, snap

PRICED = """
[groups.default]
price_per_device_hour = 3.6
price_per_kwh = 0.5
currency = "EUR"
"""


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One GPU held at 100 W, sampled every 10 s for 2 h 10 min from T0 (a quarter hour)."""
    path = tmp_path_factory.mktemp("edges") / "ledger.db"
    record(path, [snap(T0 + 10 * i, device("GPU-a", power=100.0, util=50.0, users=["ann"]))
                  for i in range(0, 13 * 60 + 1)])
    return path


@pytest.mark.parametrize(("since", "until"), [
    (30, 600),           # the first edge inside a minute
    (30, 630),           # both edges inside a minute
    (7, 3600 + 53),      # across a quarter hour and an hour, odd seconds
    (610, 640),          # inside one minute
    (0, 7200),           # on the grid: as ever
])
def test_edges_inside_an_interval_bill_the_share_inside(ledger: Path, tmp_path: Path,
                                                        since: int, until: int) -> None:
    config = tmp_path / "prices.toml"
    config.write_text(PRICED)
    result = run_allsmi("export", "--ledger", str(ledger), "--config", str(config),
                        "--since", _iso(T0 + since), "--until", _iso(T0 + until))
    assert result.returncode == 0, result.stderr  # no false coverage gap (exit 3)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 1
    row = rows[0]
    hours = (until - since) / 3600
    assert float(row["coverage_ratio"]) == pytest.approx(1.0, abs=1e-6)
    assert float(row["observed_device_hours"]) == pytest.approx(hours, abs=1e-6)
    assert float(row["allocated_device_hours"]) == pytest.approx(hours, abs=1e-6)
    assert float(row["energy_kwh"]) == pytest.approx(hours * 0.1, abs=1e-6)
    assert float(row["cost"]) == pytest.approx(hours * 3.6 + hours * 0.1 * 0.5, abs=1e-5)
    assert float(row["avg_utilization_ratio"]) == pytest.approx(0.5)


def test_a_holder_is_billed_the_share_inside_too(ledger: Path, tmp_path: Path) -> None:
    config = tmp_path / "prices.toml"
    config.write_text(PRICED)
    since, until = 45, 3600 + 15
    result = run_allsmi("export", "--ledger", str(ledger), "--config", str(config), "--since",
                        _iso(T0 + since), "--until", _iso(T0 + until), "--group-by", "user",
                        "--format", "json")
    assert result.returncode == 0, result.stderr
    import json
    rows = {r["user"]: r for r in json.loads(result.stdout)["rows"]}
    hours = (until - since) / 3600
    assert rows["ann"]["allocated_device_hours"] == pytest.approx(hours, abs=1e-6)
    assert rows["ann"]["cost"] == pytest.approx(hours * 3.6 + hours * 0.1 * 0.5, abs=1e-5)
