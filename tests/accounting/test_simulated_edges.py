"""A simulated bill over a window whose edges fall anywhere (an odd second, an odd minute, less
than a minute, across midnight) keeps the scratch ledger's quarter-hour rows, cut where the
window starts and ends (allsmi.cli.simulate.grid): as many rows as an aligned window's, at most one
more per device, where it used to replay into one-second rows (21,600 a device for six hours,
38 s instead of under 1). The rows hold exactly what one-second rows hold, their millisecond
rounding aside."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sqlite3

import pytest

from allsmi.accounting.ledger.store import Ledger, Totals
from allsmi.accounting.ledger.schema import DEVICE_SUMS
from allsmi.accounting.periods import Window
from allsmi.backends.simulated.scenario import load_scenario
from allsmi.cli.billing.reportcmd import usage_report
from allsmi.cli.simulate.bill import ROW_SECONDS, simulated_ledger
from allsmi.config import parse_config

MIDNIGHT = 1_790_000_000 - 1_790_000_000 % 86400  # safely in the past
HOUR = 3600
CONFIG = """\
[groups.training]
price_per_device_hour = 3.1
price_per_kwh = 0.14
currency = "USD"
[[rules]]
resource_group = "training"
vendor = "nvidia"
"""
NUMBERS = ("observed_device_hours", "allocated_device_hours", "idle_allocated_device_hours",
           "billed_device_hours", "used_device_hours", "active_device_hours", "energy_kwh",
           "cost", "idle_cost")


def _window(start: int, end: int) -> Window:
    return Window(dt.datetime.fromtimestamp(start, dt.timezone.utc),
                  dt.datetime.fromtimestamp(end, dt.timezone.utc))


def _rows(path: str) -> list[tuple[int, int]]:
    """(start, device) of every row of the ledger at ``path``."""
    with sqlite3.connect(path) as db:
        return db.execute("SELECT start, dev FROM intervals").fetchall()


def test_the_rows_grid_is_the_ledger_s_roll_up_quarter() -> None:
    from allsmi.accounting.settings import ROLLUP_SECONDS
    assert ROW_SECONDS == ROLLUP_SECONDS


@pytest.mark.parametrize("start, end", [
    (MIDNIGHT + 10 * HOUR + 7, MIDNIGHT + 16 * HOUR + 7),  # six hours, odd seconds
    (MIDNIGHT + 10 * HOUR + 420, MIDNIGHT + 16 * HOUR + 1380),  # odd minutes
    (MIDNIGHT + 10 * HOUR + 7, MIDNIGHT + 10 * HOUR + 50),  # less than a minute
    (MIDNIGHT - 2 * HOUR + 13 * 60 + 7, MIDNIGHT + 3 * HOUR + 41 * 60 + 53),  # across midnight
])
def test_a_window_with_any_edges_has_the_rows_of_an_aligned_one(tmp_path, start, end) -> None:
    """Its rows start at the window's start and at each quarter hour after it, up to its end
    (an aligned window's: one per quarter, and the one its end opens): at most one row per
    device more than the aligned window of the same quarters, whatever the edges. One-second
    rows (the window's edges allowed no longer ones) made 21,600 a device for six hours."""
    config = parse_config(CONFIG)
    odd = tmp_path / "odd"
    aligned = tmp_path / "aligned"
    odd.mkdir()
    aligned.mkdir()
    rows = _rows(simulated_ledger(load_scenario("mixed"), _window(start, end), config, str(odd)))
    first, last = start - start % ROW_SECONDS, -(-end // ROW_SECONDS) * ROW_SECONDS
    reference = _rows(simulated_ledger(load_scenario("mixed"), _window(first, last), config,
                                       str(aligned)))
    devices = {dev for _, dev in reference}
    assert {dev for _, dev in rows} == devices and len(devices) >= 10
    assert len(rows) <= len(reference) + len(devices)
    quarters = range(first + ROW_SECONDS, end + 1, ROW_SECONDS)
    assert {at for at, _ in rows} == {start, *quarters}
    with Ledger(str(odd / "ledger.db"), readonly=True) as ledger:
        totals = ledger.totals(start, end)
    assert {t.observed_ms for t in totals.values()} == {(end - start) * 1000}  # each device whole


def test_an_odd_window_bills_the_sum_of_its_edge_pieces_and_its_aligned_middle(tmp_path) -> None:
    """Six hours from 10:00:07: the first row holds 10:00:07 to 10:15 exactly, the last 16:00
    to 16:00:07, the quarters between come from the roll-ups, and the three pieces of the bill
    add up to the window's, to the millisecond and byte of every column."""
    start, end = MIDNIGHT + 10 * HOUR + 7, MIDNIGHT + 16 * HOUR + 7
    head, tail = start - start % ROW_SECONDS + ROW_SECONDS, end - end % ROW_SECONDS
    path = simulated_ledger(load_scenario("mixed"), _window(start, end), parse_config(CONFIG),
                            str(tmp_path))
    with Ledger(path, readonly=True) as ledger:
        whole = ledger.totals(start, end)
        pieces = [ledger.totals(a, b) for a, b in ((start, head), (head, tail), (tail, end))]
    for (a, b), piece in zip(((start, head), (head, tail), (tail, end)), pieces):
        assert piece.keys() == whole.keys()
        assert {t.observed_ms for t in piece.values()} == {(b - a) * 1000}
    for dim, total in whole.items():  # (added up as the ledger adds up its rows)
        added = Totals()
        for piece in pieces:
            added.add(tuple(getattr(piece[dim], name) for name, _ in DEVICE_SUMS), DEVICE_SUMS)
        assert added == total, dim


def _bill(path: str, window: Window) -> dict:
    keys = ("resource_group", "namespace", "pod", "job", "user")
    return {tuple(getattr(r, k) for k in keys): dataclasses.asdict(r)
            for r in usage_report(window, keys, parse_config(CONFIG), path, None).rows}


def test_an_odd_window_bills_what_one_second_rows_bill(tmp_path, monkeypatch) -> None:
    """The same samples, increments and holders as the one-second rows the window's edges used
    to impose (``row_seconds=1``): with each row's rounding to milliseconds left out, every
    figure of the bill is theirs; with it, within the rounding of one-second rows."""
    from allsmi.accounting import buckets
    window = _window(MIDNIGHT + 10 * HOUR + 11 * 60 + 7, MIDNIGHT + 10 * HOUR + 19 * 60 + 53)
    bills = {}
    for rounded in (False, True):
        with monkeypatch.context() as patch:
            if not rounded:  # (the ledger takes the floats as they are)
                patch.setattr(buckets, "round", lambda value: value, raising=False)
            for name, rows in (("quarters", None), ("seconds", 1)):
                folder = tmp_path / f"{name}-{rounded}"
                folder.mkdir()
                bills[name, rounded] = _bill(simulated_ledger(
                    load_scenario("mixed"), window, parse_config(CONFIG), str(folder),
                    row_seconds=rows), window)
    seconds, quarters = bills["seconds", False], bills["quarters", False]
    assert seconds.keys() == quarters.keys() and len(seconds) >= 5
    for key, row in seconds.items():
        for name, value in row.items():
            other = quarters[key][name]
            pairs = zip(value, other, strict=True) if isinstance(value, tuple) else [(value, other)]
            for a, b in pairs:
                if isinstance(a, float):
                    assert b == pytest.approx(a, rel=1e-9, abs=1e-12), (key, name)
                else:
                    assert b == a, (key, name)
    # rounded: each one-second row of a device or holder is off by half a millisecond at most
    slack = window.seconds * 0.0005 / 3600 * 16  # (device-hours; 16 devices at most a row)
    for key, row in bills["seconds", True].items():
        for name in NUMBERS:
            value, other = row[name], bills["quarters", True][key][name]
            assert (value is None) == (other is None), (key, name)
            if value is not None:
                assert other == pytest.approx(value, abs=slack * (3.1 if "cost" in name else 1))
