"""``allsmi idle`` and ``allsmi waste`` rank money within each currency and never rank an
unknown cost as 0: EUR and USD amounts are not compared (no exchange rate is known), and a
holder in a group without a price comes after every priced holder, however long it held."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ..accounting.helpers import T0, config, device, record, snap
from ..conftest import run_allsmi

CONFIG = """
[groups.eu]
labels = {zone = "eu"}
price_per_device_hour = 1.0
currency = "EUR"
[groups.cheap]
labels = {zone = "cheap"}
price_per_device_hour = 0.0
currency = "EUR"
[groups.us]
labels = {zone = "us"}
price_per_device_hour = 10.0
currency = "USD"
[groups.free]
labels = {zone = "free"}
"""

#: user -> (group, devices held): every device idle (utilization 0, compute active 0)
HOLDERS = {"ann": ("eu", 2), "bob": ("eu", 1), "cleo": ("cheap", 1), "carl": ("us", 1),
           "dana": ("free", 1), "eve": ("free", 3)}
#: the order both commands give: EUR by money (ann 2, bob 1, cleo 0), then USD (carl 10),
#: then the unpriced by hours (eve 3 h, dana 1 h)
RANKED = ["ann", "bob", "cleo", "carl", "eve", "dana"]


def _devices() -> list:
    out = []
    for user, (group, count) in HOLDERS.items():
        for i in range(count):
            dev = device(f"GPU-{user}-{i}", util=0.0, users=[user], group=group)
            out.append(dataclasses.replace(dev, compute_active_percent=0.0,
                                           compute_active_source="sm_active"))
    return out


@pytest.mark.parametrize("command", ["idle", "waste"])
def test_costs_rank_within_their_currency_and_unknown_costs_last(tmp_path: Path,
                                                                  command: str) -> None:
    (tmp_path / "config.toml").write_text(CONFIG)
    ledger = tmp_path / "ledger.db"
    devices = _devices()
    record(ledger, [snap(T0 + 10 * step, *devices) for step in range(361)], config(CONFIG))
    args = ("--ledger", str(ledger), "--config", str(tmp_path / "config.toml"),
            "--since", "2026-03-02T00:00:00Z", "--until", "2026-03-02T01:00:00Z",
            "--group-by", "resource_group,user")
    result = run_allsmi(command, *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [r["user"] for r in rows] == RANKED, rows
    money = "idle_cost" if command == "idle" else "lost_cost"
    assert [(r[money], r["currency"]) for r in rows] == [
        (2.0, "EUR"), (1.0, "EUR"), (0.0, "EUR"), (10.0, "USD"), (None, None), (None, None)]
    table = run_allsmi(command, *args)
    assert table.returncode == 0, table.stderr
    title = table.stdout.splitlines()[0]
    assert title.endswith("costs ranked within each currency (EUR, USD)"), title
    order = [line.split()[1] for line in table.stdout.splitlines()[2:]]
    assert order == RANKED, table.stdout
