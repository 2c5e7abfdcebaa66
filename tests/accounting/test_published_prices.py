"""``allsmi export --prometheus`` prices groups at the prices the exporters publish
(``allsmi_resource_group_price_per_*``) unless the local configuration prices them, and says
which (issue 22, item 6)."""

from __future__ import annotations

import datetime as dt
import math
import time
from pathlib import Path
from typing import Any

import pytest

from allsmi.accounting.periods import Window
from allsmi.accounting.prometheus.prices import published_prices

from ..prometheus_server import running_prometheus, wait_scraped
from .fleet import export, iso, simulated_exporters, wait_until

NODE_CONFIG = """\
[[rules]]
resource_group = "training"
vendor = "nvidia"

[[rules]]
resource_group = "inference"
vendor = "amd"

[groups.training]
price_per_device_hour = 2.0
currency = "EUR"

[groups.inference]
price_per_device_hour = 3.0
price_per_kwh = 0.5
currency = "USD"
"""
# The billing side prices training itself (an override) and leaves inference to the nodes.
EXPORT_CONFIG = """\
[groups.training]
price_per_device_hour = 5.0
currency = "EUR"
"""


@pytest.mark.integration
@pytest.mark.long(30)
def test_published_prices_unless_the_config_overrides(tmp_path: Path) -> None:
    (tmp_path / "export.toml").write_text(EXPORT_CONFIG)
    with simulated_exporters(tmp_path, NODE_CONFIG, config_name="node.toml") as serve:
        with running_prometheus(tmp_path, serve.targets) as prom:
            wait_scraped(prom)
            start = math.ceil(time.time() + 2)
            wait_until(start + 20)
            wait_scraped(prom, start + 19)
            rc, doc, err = export("--prometheus", prom, "--since", iso(start),
                                  "--until", iso(start + 18), "--group-by", "resource_group",
                                  "--coverage-threshold", "0", cwd=tmp_path,
                                  config="export.toml", timeout=120)
    assert rc == 0, err
    # (the mixed scenario's npu group is priced by the simulated node too)
    assert doc["prices"]["inference"] == "published" and doc["prices"]["training"] == "config"
    assert "prices: the local configuration for training; published by the exporters for " \
           "inference" in err
    rows = {r["resource_group"]: r for r in doc["rows"]}
    inf, train = rows["inference"], rows["training"]
    assert inf["price_per_device_hour"] == pytest.approx(3.0)
    assert inf["price_per_kwh"] == pytest.approx(0.5) and inf["currency"] == "USD"
    assert inf["cost"] == pytest.approx(inf["billed_device_hours"] * 3.0 + inf["energy_kwh"] * 0.5,
                                        rel=1e-4, abs=1e-6)
    assert train["price_per_device_hour"] == 5.0 and train["currency"] == "EUR"
    assert train["price_per_kwh"] is None


class HourlyClient:
    """Answers the price and usage subqueries with fixed hourly points."""

    def __init__(self, series: dict[str, list[dict[str, Any]]]) -> None:
        self.series = series
        self.url = "http://store"  # named in the messages of an impossible answer

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        raise AssertionError(f"a two-hour window reads hour by hour, not {promql!r}")

    def query_range_vector(self, promql: str, at: float) -> list[dict[str, Any]]:
        for needle, answer in self.series.items():
            if needle in promql:
                return answer
        return []


def test_each_hour_is_charged_at_its_price() -> None:
    """2 EUR for the first hour (1 device-hour used), 4 EUR for the second (3 used): 3.5 EUR."""
    h = 1_800_000_000 - 1_800_000_000 % 3600
    client = HourlyClient({
        "allsmi_resource_group_price_per_device_hour": [
            {"metric": {"resource_group": "t", "currency": "EUR"},
             "values": [[h + 3600, "2"], [h + 7200, "4"]]}],
        "allsmi_device_allocated_seconds_total": [
            {"metric": {"resource_group": "t"}, "values": [[h + 3600, "3600"], [h + 7200, "10800"]]}],
    })
    utc = dt.timezone.utc
    window = Window(dt.datetime.fromtimestamp(h, utc), dt.datetime.fromtimestamp(h + 7200, utc))
    prices = published_prices(client, window, rollups=False)  # type: ignore[arg-type]
    assert prices["t"].per_device_hour == pytest.approx(3.5)
    assert prices["t"].per_kwh is None and prices["t"].currency == "EUR"
    # Without usage: the plain mean of the hours' prices.
    client.series["allsmi_device_allocated_seconds_total"] = []
    assert published_prices(client, window, False)["t"].per_device_hour == pytest.approx(3.0)  # type: ignore[arg-type]
