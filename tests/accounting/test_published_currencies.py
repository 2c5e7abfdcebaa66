"""A group whose prices the exporters publish in more than one currency (a device-hour price in
EUR and a kWh price in USD, or two nodes configured apart) is not priced from them: one
currency's amount is never billed as another's. Its rows have no price and no cost (unknown,
not 0), and the export says why and what to do. The CLI as a subprocess, against the fake store
of ``test_published_price_values``."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

import pytest

from ..conftest import loopback_server
from .test_impossible_answers import HONEST
from .test_published_price_values import HOUR, START, PricedStore, export


class _Currencies(PricedStore):
    """Prices for group ``default``: per device-hour in each of ``hour_currencies`` (one series
    each, as nodes configured apart publish them), per kWh in ``kwh_currency``."""

    hour_currencies: tuple[str, ...] = ("EUR",)
    kwh_currency: str = "EUR"

    def do_GET(self) -> None:  # noqa: N802
        args = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        query = args["query"][0]
        if "allsmi_resource_group_price_per" not in query:
            return super().do_GET()
        at = float(args["time"][0])
        if "per_device_hour" in query:
            priced = [(c, "2") for c in self.hour_currencies]
        else:
            priced = [(self.kwh_currency, "0.25")]
        result: list[dict[str, Any]] = []
        for currency, price in priced:
            metric = {"resource_group": "default", "currency": currency}
            if query.endswith("s]"):
                result.append({"metric": metric,
                               "values": [[t, price] for t in range(START + HOUR, int(at) + 1, HOUR)]})
            else:
                result.append({"metric": metric, "value": [at, price]})
        self.answer("matrix" if query.endswith("s]") else "vector", result)


@pytest.fixture()
def store() -> Iterator[tuple[type[_Currencies], str]]:
    handler = type("Currencies", (_Currencies,), {"values": dict(HONEST), "copies": 1,
                                                  "duplicated": False})
    with loopback_server(handler) as url:
        yield handler, url


@pytest.mark.parametrize("hours", [1, 2])
@pytest.mark.parametrize("hour_currencies,kwh_currency", [
    (("EUR",), "USD"),          # a device-hour price in one currency, a kWh price in another
    (("EUR", "USD"), "EUR"),    # two nodes publishing the device-hour price apart
])
def test_prices_in_two_currencies_are_not_billed_as_one(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, hours: int, hour_currencies: tuple[str, ...], kwh_currency: str) -> None:
    handler, url = store
    handler.hour_currencies, handler.kwh_currency = hour_currencies, kwh_currency
    rc, out, err = export(url, tmp_path, hours)
    assert rc == 0, err
    (row,) = json.loads(out)["rows"]
    assert row["price_per_device_hour"] is None and row["price_per_kwh"] is None, row
    assert row["cost"] is None and row["currency"] is None, row
    assert row["billed_device_hours"] == 0.5  # the usage is billed as ever
    assert "group default: the exporters publish its prices in more than one currency " \
           "(EUR, USD): not priced from them" in err, err


def test_one_currency_is_billed(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    handler, url = store
    rc, out, err = export(url, tmp_path, 2)
    assert rc == 0, err
    (row,) = json.loads(out)["rows"]
    assert (row["price_per_device_hour"], row["price_per_kwh"], row["currency"]) == (2.0, 0.25, "EUR")
    assert row["cost"] == 0.5 * 2.0 + 0.5 * 0.25 and "more than one currency" not in err


@pytest.mark.parametrize("currency,compared", [("USD", True), ("EUR", False)])
def test_a_budget_is_compared_only_with_costs_in_its_currency(  # type: ignore[no-untyped-def]
        store, tmp_path: Path, currency: str, compared: bool) -> None:
    """The local configuration budgets group ``default`` in ``currency`` and leaves its prices
    to the exporters, which publish them in USD. In USD, the cost is compared with the budget,
    and said to be over it. In EUR, 1.125 USD is never read as 1.125 EUR against a 0.5 EUR budget
    (no exchange rate): the budget columns are empty, nothing is said to be over budget, and a
    warning says why and what to do."""
    handler, url = store
    handler.hour_currencies, handler.kwh_currency = ("USD",), "USD"
    (tmp_path / "c.toml").write_text(
        f'[groups.default]\ncurrency = "{currency}"\nbudget_per_month = 0.5\n')
    rc, out, err = export(url, tmp_path, 2, "--config", "c.toml")
    assert rc == 0, err
    document = json.loads(out)
    (row,) = document["rows"]
    assert row["currency"] == "USD" and row["cost"] == 0.5 * 2.0 + 0.5 * 0.25, row
    over = "group default cost 1.12 USD this month to date, above its monthly budget of 0.5 USD"
    if compared:
        assert row["budget"] == 0.5 and row["budget_used_ratio"] is not None, row
        assert over in document["warnings"] and "no exchange rate" not in err, err
        return
    assert row["budget"] is None and row["budget_used_ratio"] is None, row
    assert "budget of" not in err and "budget of" not in "".join(document["warnings"]), err
    said = ("group default: its budget_per_month is in EUR, the prices the exporters publish "
            "for it in USD: its cost is not compared with its budget (no exchange rate")
    assert said in err and any(w.startswith(said) for w in document["warnings"]), err
