"""A price read from the long-term store is checked as a price in the configuration is (issue 32,
item 2): ``allsmi export --prometheus`` fails (exit 1, nothing on stdout) naming the series and
the value when a published price (``allsmi_resource_group_price_per_device_hour`` or
``_per_kwh``) is not a number, not finite, negative or above the configuration's maximum
(``allsmi.config.MAX_PRICE``); it never bills it nor drops it silently. A good price is billed
as before.

From the outside: the CLI as a subprocess against the fake store of
``test_impossible_answers``, which here also answers the price queries, for a one-hour window
(one instant query per price) and a two-hour one (hour by hour, subqueries).
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

import pytest

from allsmi.accounting.periods import Window
from allsmi.accounting.prometheus.client import PrometheusError
from allsmi.accounting.prometheus.prices import published_prices

from ..conftest import loopback_server
from .test_export_cli import SINCE, run
from .test_impossible_answers import HONEST, FakeStore
from .test_published_prices import HourlyClient

HOUR = 3600
PRICE_LABELS = {"resource_group": "default", "currency": "EUR"}
START = int(dt.datetime.fromisoformat(SINCE.replace("Z", "+00:00")).timestamp())


class PricedStore(FakeStore):
    """The honest store of one device, publishing ``hour_price`` per device-hour and
    ``kwh_price`` per kWh for its group (``None``: no series) in every hour."""

    hour_price: str | None = "2"
    kwh_price: str | None = None

    def do_GET(self) -> None:  # noqa: N802
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
        price = None
        if "allsmi_resource_group_price_per_device_hour" in query:
            price = self.hour_price
        elif "allsmi_resource_group_price_per_kwh" in query:
            price = self.kwh_price
        elif "allsmi_resource_group_price_per" not in query:
            return super().do_GET()
        at = float(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["time"][0])
        result: list[dict[str, Any]] = []
        if query.endswith("s]"):  # hour by hour: one point per hour of the window
            kind = "matrix"
            if price is not None:
                hours = range(START + HOUR, int(at) + 1, HOUR)
                result = [{"metric": dict(PRICE_LABELS), "values": [[t, price] for t in hours]}]
        else:
            kind = "vector"
            if price is not None:
                result = [{"metric": dict(PRICE_LABELS), "value": [at, price]}]
        self.answer(kind, result)


@pytest.fixture()
def store() -> Iterator[tuple[type[PricedStore], str]]:
    handler = type("Priced", (PricedStore,), {"values": dict(HONEST), "copies": 1,
                                          "duplicated": False, "hour_price": "2",
                                          "kwh_price": None})
    with loopback_server(handler) as url:
        yield handler, url


def _iso(t: int) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def export(url: str, tmp_path: Path, hours: int, *args: str) -> tuple[int, str, str]:
    out = run("--prometheus", url, "--since", _iso(START), "--until", _iso(START + hours * HOUR),
              "--format", "json", "--group-by", "resource_group", "--coverage-threshold", "0",
              *args, cwd=tmp_path)
    return out.returncode, out.stdout, out.stderr


@pytest.mark.parametrize("hours", [1, 2])
def test_a_good_published_price_is_billed(store, tmp_path: Path, hours: int) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    handler.kwh_price = "0.25"
    rc, out, err = export(url, tmp_path, hours)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["prices"] == {"default": "published"}
    (row,) = doc["rows"]
    assert row["price_per_device_hour"] == 2.0 and row["price_per_kwh"] == 0.25
    assert row["currency"] == "EUR"
    assert row["billed_device_hours"] == 0.5 and row["energy_kwh"] == 0.5
    assert row["cost"] == 0.5 * 2.0 + 0.5 * 0.25
    assert "published by the exporters for default" in err, err


SAID = {"NaN": "'NaN'", "+Inf": "'+Inf'", "abc": "a non-numeric value 'abc'", "-5": "'-5'",
        "1e308": "'1e308'", "1000000001": "'1000000001'"}
#: (window hours, which price, its value): every value for the per-device-hour price in one
#: hour (instant queries), the issue's four hour by hour (subqueries), and the kWh price in each.
CASES = ([(1, "hour_price", v) for v in SAID]
         + [(2, "hour_price", v) for v in ("NaN", "abc", "-5", "1e308")]
         + [(1, "kwh_price", "NaN"), (1, "kwh_price", "-5"), (2, "kwh_price", "abc"),
            (2, "kwh_price", "1e308")])


@pytest.mark.parametrize("hours,kind,value", CASES)
def test_an_impossible_published_price_fails_naming_the_series(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, hours: int, kind: str, value: str) -> None:
    handler, url = store
    setattr(handler, kind, value)
    if kind == "kwh_price":
        handler.hour_price = "2"  # a good price beside the bad one does not hide it
    rc, out, err = export(url, tmp_path, hours)
    assert rc == 1 and out == "", (rc, out, err)
    metric = ("allsmi_resource_group_price_per_device_hour" if kind == "hour_price"
              else "allsmi_resource_group_price_per_kwh")
    assert f'{metric}{{currency="EUR",resource_group="default"}}' in err, err
    assert f"holds {SAID[value]}" in err, err
    if value in ("-5", "1e308", "1000000001"):
        assert "a price must be >= 0 and at most 1e+09" in err, err
    assert "Traceback" not in err, err


H = 1_800_000_000 - 1_800_000_000 % HOUR
WINDOW = Window(dt.datetime.fromtimestamp(H, dt.timezone.utc),
                dt.datetime.fromtimestamp(H + 2 * HOUR, dt.timezone.utc))


def _prices(first: str, second: str, usage: tuple[str, str]) -> HourlyClient:
    return HourlyClient({
        "allsmi_resource_group_price_per_device_hour": [
            {"metric": {"resource_group": "t", "currency": "EUR"},
             "values": [[H + HOUR, first], [H + 2 * HOUR, second]]}],
        "allsmi_device_allocated_seconds_total": [
            {"metric": {"resource_group": "t"},
             "values": [[H + HOUR, usage[0]], [H + 2 * HOUR, usage[1]]]}]})


@pytest.mark.parametrize("bad", ["NaN", "abc", "-5", "1e308"])
def test_one_bad_hour_among_good_ones_fails(bad: str) -> None:
    """One hour's impossible price is not averaged away (or dropped) by the window's others."""
    with pytest.raises(PrometheusError, match="allsmi_resource_group_price_per_device_hour"):
        published_prices(_prices("2", bad, ("3600", "3600")), WINDOW, False)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["NaN", "abc"])
def test_an_impossible_usage_weight_fails(bad: str) -> None:
    """The hours' usage, which weights the prices, is read from the store too."""
    with pytest.raises(PrometheusError, match="allsmi_device_allocated_seconds_total"):
        published_prices(_prices("2", "4", ("3600", bad)), WINDOW, False)  # type: ignore[arg-type]


def test_huge_usage_weights_do_not_overflow_the_mean() -> None:
    """Weights near the float maximum still give the weighted mean (3.5), not NaN."""
    client = _prices("2", "4", ("4e307", "1.2e308"))
    assert published_prices(client, WINDOW, False)["t"].per_device_hour == pytest.approx(3.5)  # type: ignore[arg-type]
