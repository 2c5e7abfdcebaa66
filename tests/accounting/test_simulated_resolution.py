"""`export/idle --simulate` sample the simulation at the ledger's resolution, inline: the bill's
totals equal those of the former replay (every 20 s, through worker threads) within 0.5 %."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from allsmi.accounting.periods import Window
from allsmi.accounting.settings import GROUP_BY_KEYS
from allsmi.backends.simulated.scenario import load_scenario
from allsmi.cli.billing.reportcmd import usage_report
from allsmi.cli.simulate.bill import simulated_ledger
from allsmi.config import parse_config

START = 1_790_000_000 - 1_790_000_000 % 3600  # whole hours, safely in the past
HOURS = 24  # a day, as `--period yesterday` (shorter windows sample idle time too thinly)
CONFIG = """\
[groups.training]
price_per_device_hour = 3.1
price_per_kwh = 0.14
currency = "USD"
[groups.npu]
price_per_device_hour = 0.9
currency = "USD"
[[rules]]
resource_group = "training"
vendor = "nvidia"
[[rules]]
resource_group = "npu"
vendor = "furiosa"
"""
NUMBERS = ("observed_device_hours", "allocated_device_hours", "idle_allocated_device_hours",
           "billed_device_hours", "used_device_hours", "energy_kwh", "cost", "idle_cost")


WINDOW = Window(dt.datetime.fromtimestamp(START, dt.timezone.utc),
                dt.datetime.fromtimestamp(START + HOURS * 3600, dt.timezone.utc))


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory) -> dict:
    """The day replayed every 20 s (as before) and at the ledger's resolution (as now)."""
    config = parse_config(CONFIG)
    out = {}
    # the former replay: a sample every 20 s into one-minute rows; now: one sample per ledger
    # interval into rows as long as the window allows
    for name, step, rows in (("fine", 20.0, 60), ("coarse", None, None)):
        folder = tmp_path_factory.mktemp(name)
        out[name] = simulated_ledger(load_scenario("mixed"), WINDOW, config, str(folder),
                                     step=step, row_seconds=rows)
    return out


def _rows(ledger: str, keys: tuple[str, ...]) -> dict:
    report = usage_report(WINDOW, keys, parse_config(CONFIG), ledger, None)
    return {tuple(getattr(r, k, None) for k in ("resource_group", "vendor", "model", "namespace",
                                                  "pod", "job", "user")): r for r in report.rows}


@pytest.mark.parametrize("keys", [("resource_group", "vendor", "model", "host"),
                                  ("resource_group", "namespace", "pod", "job")])
def test_totals_at_the_ledger_resolution_match_the_20_second_replay(ledgers, keys) -> None:
    assert set(keys) <= set(GROUP_BY_KEYS)
    fine, coarse = _rows(ledgers["fine"], keys), _rows(ledgers["coarse"], keys)
    assert fine.keys() == coarse.keys() and len(fine) >= 3
    totals = {n: [0.0, 0.0] for n in NUMBERS}
    for key, row in fine.items():
        for name in NUMBERS:
            a, b = getattr(row, name), getattr(coarse[key], name)
            assert (a is None) == (b is None), (key, name)
            if a is not None:
                totals[name][0] += a
                totals[name][1] += b
                # row by row (a job's stall windows start and end between coarse samples; idle
                # time of a device whose load hovers at the idle threshold moves most)
                slack = 0.35 if "idle" in name else 0.05
                assert b == pytest.approx(a, rel=0.04, abs=slack), (key, name)
    for name, (a, b) in totals.items():  # the bill's totals: within 0.5 %
        assert b == pytest.approx(a, rel=0.005, abs=1e-6), (name, a, b)
    assert dataclasses.is_dataclass(next(iter(coarse.values())))


def _totals(ledger: str, window: Window) -> dict:
    report = usage_report(window, ("resource_group", "namespace", "pod", "job"),
                          parse_config(CONFIG), ledger, None)
    return {name: sum(getattr(r, name) or 0.0 for r in report.rows) for name in NUMBERS}


@pytest.mark.parametrize("offset, minutes", [(0, 180), (7 * 60, 95), (7, 95)])
def test_long_scratch_rows_bill_what_one_minute_rows_bill(tmp_path, offset, minutes) -> None:
    """The scratch ledger's rows are quarter hours, cut where the window starts and ends (from
    hh:07, or hh:00:07): the same samples bill the same totals as one-minute rows (cut there
    too), to the millisecond rounding of the rows."""
    window = Window(dt.datetime.fromtimestamp(START + offset, dt.timezone.utc),
                    dt.datetime.fromtimestamp(START + offset + minutes * 60, dt.timezone.utc))
    config = parse_config(CONFIG)
    bills = {}
    for name, rows in (("minute", 60), ("chosen", None)):
        folder = tmp_path / name
        folder.mkdir()
        bills[name] = _totals(simulated_ledger(load_scenario("mixed"), window, config, str(folder),
                                               row_seconds=rows), window)
    assert bills["minute"]["observed_device_hours"] > 0
    for name in NUMBERS:
        assert bills["chosen"][name] == pytest.approx(bills["minute"][name], rel=1e-4, abs=1e-6), name


def _bill(ledger: str, window: Window) -> dict:
    out = {}
    for keys in (("resource_group", "vendor", "model", "host"),
                 ("resource_group", "namespace", "pod", "job", "user")):
        report = usage_report(window, keys, parse_config(CONFIG), ledger, None)
        for r in report.rows:
            out[(keys, tuple(getattr(r, k, None) for k in keys))] = dataclasses.asdict(r)
    return out


@pytest.mark.parametrize("offset, hours, chunk, extra",
                         [pytest.param(0, 36, 3600, 0, marks=pytest.mark.long(15)),
                          (7 * 60, 20, 5 * 3600, 0), (30, 3, 3600, 45),
                          (7, 3, 3600, 53)])
def test_chunks_replayed_side_by_side_bill_what_one_long_replay_bills(tmp_path, offset, hours,
                                                                        chunk, extra) -> None:
    """The window cut into chunks replayed by two worker processes (whole hours: the last two
    chunks cut again in four; from hh:07, hh:00:30 or hh:00:07: chunks cut on quarter hours,
    between two samples, the first row from the window's start; for 3 h 45 s or 53 s: the
    last sample at the window's end, 45 or 53 s after the one before, the last row cut there)
    books every row of one replay in one process, to the millisecond: each chunk starts with
    the sample before its first row, whose increment across the cut it books as one replay
    does. Either covers the whole window."""
    window = Window(dt.datetime.fromtimestamp(START + offset, dt.timezone.utc),
                    dt.datetime.fromtimestamp(START + offset + hours * 3600 + extra,
                                              dt.timezone.utc))
    config = parse_config(CONFIG)
    bills = {}
    for name, options in (("one", dict(workers=1, chunk_seconds=10**9)),
                          ("chunked", dict(workers=2, chunk_seconds=chunk))):
        folder = tmp_path / name
        folder.mkdir()
        bills[name] = _bill(simulated_ledger(load_scenario("mixed"), window, config, str(folder),
                                             **options), window)
    assert len(bills["one"]) >= 10
    assert bills["chunked"] == bills["one"]
    assert {row["coverage_ratio"] for row in bills["one"].values()} == {1.0}


def test_the_last_chunk_of_each_worker_is_cut_finer_on_the_grid() -> None:
    """A month for two workers: a chunk a day, the last two cut in four (the workers run out of
    work together); every edge on the grid of samples and rows, the chunks end to end; a cut
    never makes a chunk shorter than the shortest asked for (a day's four chunks stay whole)."""
    from allsmi.cli.simulate.bill import replay_chunks
    start = START - START % 86400
    month = replay_chunks(start, start + 31 * 86400, 60.0, 900, 86400, tail=2, shortest=6 * 3600)
    assert [b - a for a, b in month] == [86400.0] * 29 + [21600.0] * 8
    odd = replay_chunks(start, start + 30.5 * 86400 + 420, 60.0, 60, 86400, tail=2,
                        shortest=6 * 3600)
    assert odd[0][0] == start and odd[-1][1] == start + 30.5 * 86400 + 420
    assert all(b == c for (_, b), (c, _) in zip(odd, odd[1:]))
    assert all((a - start) % 60 == 0 for a, _ in odd)
    assert [b - a for a, b in odd] == [86400.0] * 29 + [21600.0] * 6 + [420.0]
    day = replay_chunks(start, start + 86400, 60.0, 900, 21600, tail=2, shortest=6 * 3600)
    assert [b - a for a, b in day] == [21600.0] * 4
    # from an odd second: the chunks are cut on quarter hours (the rows' grid), not on samples
    late = start + 7
    odd = replay_chunks(late, late + 86400, 60.0, 900, 21600, tail=2, shortest=6 * 3600)
    assert odd[0][0] == late and odd[-1][1] == late + 86400
    assert all(b == c for (_, b), (c, _) in zip(odd, odd[1:]))
    assert all(b % 900 == 0 for _, b in odd[:-1])
    assert [b - a for a, b in odd] == [21593.0] + [21600.0] * 3 + [7.0]


def test_a_worker_s_intervals_travel_as_tuples_and_arrive_with_every_attribute(
        tmp_path, monkeypatch) -> None:
    """A chunk's intervals cross from the worker to the command as plain tuples (no record or
    share object is pickled: unpickling their dictionaries was most of the command's time),
    and arrive as records with every attribute of the interval records, holders in order."""
    import pickle
    from dataclasses import fields

    from allsmi.accounting.ledger.store import Ledger
    from allsmi.accounting.ledger.schema import IntervalRecord, Share
    from allsmi.cli.simulate.rows import packed, unpacked
    gathered: list = []
    write = Ledger.write

    def keeping(self, records, *args):  # type: ignore[no-untyped-def]
        gathered.extend(records)  # (replayed here: the records themselves)
        return write(self, records, *args)
    monkeypatch.setattr(Ledger, "write", keeping)
    window = Window(dt.datetime.fromtimestamp(START, dt.timezone.utc),
                    dt.datetime.fromtimestamp(START + 3600, dt.timezone.utc))
    simulated_ledger(load_scenario("mixed"), window, parse_config(CONFIG), str(tmp_path),
                     workers=1)
    assert len(gathered) > 30 and any(len(rec.holders) > 1 for rec in gathered)
    data = pickle.dumps(packed(gathered), protocol=pickle.HIGHEST_PROTOCOL)
    assert b"IntervalRecord" not in data and b"Share" not in data
    for rec, row in zip(gathered, unpacked(pickle.loads(data)), strict=True):
        for name in (f.name for f in fields(IntervalRecord)):
            if name != "holders":
                assert getattr(row, name) == getattr(rec, name), name
        assert list(row.holders) == list(rec.holders)
        for holder, share in rec.holders.items():
            assert [getattr(row.holders[holder], f.name) for f in fields(Share)] == \
                [getattr(share, f.name) for f in fields(Share)]


def test_a_chunk_sends_each_holder_once() -> None:
    """Equal holders of a chunk's records (each bucket has its own copies) are sent as one
    object: pickled once, made once by the command (the same values, in the same order)."""
    import pickle

    from allsmi.accounting.ledger.schema import Dim, IntervalRecord, Share
    from allsmi.cli.simulate.rows import packed, unpacked
    from allsmi.fairshare import Holder

    def record(start: int, *users: str) -> IntervalRecord:
        share = Share(60_000, 60_000, 0, None, 60_000, 0, 0, None, 0, "exclusive", "activity")
        return IntervalRecord(start, Dim("gpu0", "h", "nvidia", "H100", "", "", "{}"), 0,
                              60_000, 60_000, 60_000, 0, 60_000, None, None, 0, None,
                              holders={Holder(u, None, None, None): share for u in users})
    records = [record(t * 60, "ann", "bob") for t in range(50)]
    rows = unpacked(pickle.loads(pickle.dumps(packed(records), protocol=pickle.HIGHEST_PROTOCOL)))
    holders = [holder for row in rows for holder in row.holders]
    assert holders == [Holder(u, None, None, None) for _ in range(50) for u in ("ann", "bob")]
    assert len({id(holder) for holder in holders}) == 2
