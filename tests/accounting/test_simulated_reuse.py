"""The budgets' month to date extends the window's replay back instead of replaying it again
(allsmi.cli.simulate.reuse): the extended ledger bills the longer window exactly as its own replay
does, row for row; where the two do not share their sampling grid and rows (the window starts
off a quarter hour, or off the month to date's sampling grid) it is replayed whole."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from allsmi.accounting.periods import Window
from allsmi.backends.simulated.scenario import load_scenario
from allsmi.cli.billing.reportcmd import usage_report
from allsmi.cli.simulate.bill import simulated_ledger
from allsmi.cli.simulate.reuse import Replays, extends
from allsmi.config import parse_config

START = 1_790_000_000 - 1_790_000_000 % 86400  # a midnight, safely in the past
CONFIG = parse_config("""\
[groups.training]
price_per_device_hour = 3.1
price_per_kwh = 0.14
currency = "USD"
budget_per_month = 100
[[rules]]
resource_group = "training"
vendor = "nvidia"
""")
KEYS = (("resource_group", "vendor", "model", "host"),
        ("resource_group", "namespace", "pod", "job", "user"))


def _window(start: float, end: float) -> Window:
    return Window(dt.datetime.fromtimestamp(START + start, dt.timezone.utc),
                  dt.datetime.fromtimestamp(START + end, dt.timezone.utc))


def _bill(ledger: str, window: Window) -> dict:
    return {(keys, tuple(getattr(r, k) for k in keys)): dataclasses.asdict(r)
            for keys in KEYS for r in usage_report(window, keys, CONFIG, ledger, None).rows}


@pytest.mark.parametrize("earlier, later, extended", [
    ((0, 4 * 3600), (90 * 60, 4 * 3600), True),  # quarter-hour rows both
    # the window from a quarter hour to an odd second (its last row cut there, both replays)
    ((0, 3 * 3600 + 427), (90 * 60, 3 * 3600 + 427), True),
    # from hh:07: the window's first row starts there, the month's runs on: replayed whole
    ((0, 3 * 3600 + 420), (3600 + 420, 3 * 3600 + 420), False),
    ((0, 3 * 3600), (3600 + 420, 3 * 3600), False),
    ((0, 3 * 3600), (3600 + 30, 3 * 3600), False),  # off the month's sampling grid: whole
])
def test_an_extended_replay_bills_what_its_own_replay_bills(tmp_path: Path, earlier, later,
                                                            extended) -> None:
    earlier, later = _window(*earlier), _window(*later)
    assert extends(earlier, later, CONFIG) is extended
    alone = tmp_path / "alone"
    alone.mkdir()
    reference = _bill(simulated_ledger(load_scenario("mixed"), earlier, CONFIG, str(alone)),
                      earlier)
    with Replays() as replays:
        window_bill = _bill(replays.ledger(load_scenario("mixed"), later, CONFIG), later)
        path = replays.ledger(load_scenario("mixed"), earlier, CONFIG)
        assert replays.extended == int(extended)
        assert _bill(path, earlier) == reference
        if extended:  # the window's rows are untouched
            assert _bill(path, later) == window_bill
    assert not Path(path).exists()  # removed with the replays
    assert len(reference) >= 10
