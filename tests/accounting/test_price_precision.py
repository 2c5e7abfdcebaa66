"""A price (and a budget) says the same in every export format: the JSON printed the float noise
of a price averaged over the window from the prices the exporters published
(``0.14000000000000004``, ``3.0999999999999996``) where the CSV and FOCUS printed ``0.14`` and
``3.1`` (10 significant digits); a column has the same precision wherever it is printed."""

from __future__ import annotations

import csv
import io
import json

from allsmi.accounting.formats import to_csv, to_focus, to_json
from allsmi.accounting.report import Report, Row

from .helpers import T0, window

NOISY = {"price_per_device_hour": 3.0999999999999996, "price_per_kwh": 0.14000000000000004,
         "budget": 100.00000000000001}
SHOWN = {"price_per_device_hour": 3.1, "price_per_kwh": 0.14, "budget": 100.0}


def _report() -> Report:
    win = window(T0, T0 + 3600)
    row = Row(win, "g", {}, "nvidia", "H100", "h", None, 1, 1.0, 1.0, 1.0, 0.5, 0.5, 0.25,
              None, None, NOISY["price_per_device_hour"], NOISY["price_per_kwh"],
              3.1 + 0.035, "EUR", 1.0, budget=NOISY["budget"])
    return Report(win, ("resource_group",), (row,), (), 1.0, "test")


def test_the_json_prints_prices_and_budgets_as_the_csv_does() -> None:
    report = _report()
    cells = next(csv.DictReader(io.StringIO(to_csv(report))))
    row = json.loads(to_json(report))["rows"][0]
    for col, shown in SHOWN.items():
        assert float(cells[col]) == shown, col
        assert row[col] == shown, (col, row[col])


def test_the_focus_unit_prices_are_the_same_prices() -> None:
    charges = list(csv.DictReader(io.StringIO(to_focus(_report()))))
    assert [c["PricingUnit"] for c in charges] == ["Hours", "kWh"]
    assert [float(c["ListUnitPrice"]) for c in charges] == [3.1, 0.14]
