"""A recorder started with its wall clock far in the future (before NTP sets it at boot).

The first life records ten true minutes; the second starts on a clock three days ahead
(``retention_days`` is 2: a recorder trusting that clock prunes every true raw minute), which
NTP then steps back, or never does. Read back from the real SQLite file."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from allsmi.accounting.recorder import LedgerRecorder
from allsmi.accounting.recorderhold import AHEAD_SECONDS, HOLD_SECONDS
from allsmi.collection.collector import Collector
from allsmi.config import parse_config

from .helpers import T0, Clocks, SteadyBackend, device, record, rows, snap
from .test_clock_steps import GPUS

DAYS = 3 * 86400.0


@pytest.fixture(autouse=True)
def _clock_not_synchronized(monkeypatch: pytest.MonkeyPatch) -> None:
    """As at boot before NTP (whatever this machine's clock says: some run NTP, some do not)."""
    monkeypatch.setattr("allsmi.accounting.recorderhold.clock_synchronized", lambda: False)


def _first_life(db: Path, clocks: Clocks) -> float:
    """Ten minutes on the true clock, sampled every 2 s; the file's modification time then
    is the true time (as a recorder stopping on a right clock leaves it). The end's wall time."""
    rec = _life(db, clocks, 600)
    rec.close()
    end = clocks.wall() - 2.0
    os.utime(db, (end, end))
    return end


def _life(db: Path, clocks: Clocks, seconds: int, steps: dict[int, float] | None = None,
          seen: list[tuple[int, str | None]] | None = None) -> LedgerRecorder:
    """A recorder sampling every 2 s for ``seconds`` (not closed); ``steps``: second -> wall
    step; ``seen``: (unwritten_overdue, last_error) after each sample (what ``/ready`` reads)."""
    config = parse_config("")
    collector = Collector([SteadyBackend(GPUS)], config, interval_seconds=2.0, clock=clocks.wall,
                          monotonic=clocks.monotonic)
    rec = LedgerRecorder(db, config)
    collector.subscribe(rec.on_snapshot)
    try:
        for t in range(0, seconds + 1, 2):
            clocks.offset += (steps or {}).get(t, 0.0)
            collector.collect_once()
            if seen is not None:
                seen.append((rec.unwritten_overdue, rec.last_error))
            clocks.steady += 2.0
    finally:
        collector.close()
    return rec


def _observed(db: Path) -> dict[str, int]:
    return dict(rows(db, "SELECT d.device_id, SUM(i.observed_ms) FROM intervals i "
                         "JOIN devices d ON d.dev = i.dev GROUP BY d.device_id"))


def _first_minutes(db: Path, end: float) -> list[int]:
    return [s for (s,) in rows(db, "SELECT DISTINCT start FROM intervals WHERE start < ? "
                                   "ORDER BY start", end)]


def test_a_clock_set_back_while_held_writes_nothing_in_the_future(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "ledger.db"
    clocks = Clocks()
    end = _first_life(db, clocks)
    clocks.steady += 60.0  # a reboot
    clocks.offset += DAYS  # on an RTC three days ahead
    seen: list[tuple[int, str | None]] = []
    with caplog.at_level(logging.WARNING, logger="allsmi.accounting"):
        rec = _life(db, clocks, 180, {60: -DAYS}, seen)  # NTP sets it a minute later
        rec.close()
    true_end = clocks.wall() - 2.0
    # While held: /ready says 503, naming the clock; nothing was written.
    assert all(count > 0 and "ahead of the newest time the ledger holds" in (error or "")
               for count, error in seen[:30]), seen[:3]
    assert seen[-1] == (0, None)
    assert rec.unwritten == 0 and rec.last_error is None and rec.refused_intervals == 0
    (latest,) = rows(db, "SELECT MAX(start) FROM intervals")[0]
    assert latest <= true_end, "minutes were written in the future"
    assert rows(db, "SELECT COUNT(*) FROM quarters WHERE start >= ?", true_end) == [(0,)]
    assert _first_minutes(db, end) == [T0 + 60 * m for m in range(11)], "true minutes pruned"
    # Every second of both lives, at its true time (the reboot's 62 s are not bridged).
    assert _observed(db) == {"GPU-0": 780_000, "GPU-1": 780_000}
    (second_start,) = rows(db, "SELECT MIN(start) FROM intervals WHERE start > ?", end)[0]
    assert second_start == (end + 62) // 60 * 60
    said = caplog.text
    assert "3 days ahead of the newest time the ledger holds" in said
    assert "stepped back 3 days" in said


@pytest.mark.parametrize("seconds", [HOLD_SECONDS + 100, 100], ids=["held-out", "stopped"])
def test_a_clock_that_stays_ahead_is_followed_but_prunes_no_true_row(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, seconds: float) -> None:
    """Never set back while held (a restart after a long downtime looks the same): recorded as
    the clock says, nothing lost; roll-ups and pruning stay on the ledger's time plus the time
    since, so the true minutes stay."""
    db = tmp_path / "ledger.db"
    clocks = Clocks()
    end = _first_life(db, clocks)
    clocks.steady += 60.0
    clocks.offset += DAYS
    with caplog.at_level(logging.WARNING, logger="allsmi.accounting"):
        rec = _life(db, clocks, int(seconds))
        rec.close()
    assert rec.unwritten == 0 and rec.last_error is None
    assert _first_minutes(db, end) == [T0 + 60 * m for m in range(11)], "true minutes pruned"
    assert _observed(db) == {"GPU-0": (600 + seconds) * 1000, "GPU-1": (600 + seconds) * 1000}
    (latest,) = rows(db, "SELECT MAX(start) FROM intervals")[0]
    assert latest >= end + DAYS, "the clock was not followed"
    assert "the wall clock is followed, 3 days ahead" in caplog.text


def test_a_restart_days_later_on_a_synchronized_clock_is_not_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node back after a long downtime, its clock set by NTP (the kernel says so): nothing
    held, ``/ready`` never 503, the clock followed at once."""
    monkeypatch.setattr("allsmi.accounting.recorderhold.clock_synchronized", lambda: True)
    db = tmp_path / "ledger.db"
    clocks = Clocks()
    end = _first_life(db, clocks)
    clocks.steady += DAYS  # three days down
    seen: list[tuple[int, str | None]] = []
    rec = _life(db, clocks, 60, seen=seen)
    rec.close()
    assert all(error is None for _, error in seen), seen[:3]
    (latest,) = rows(db, "SELECT MAX(start) FROM intervals")[0]
    assert latest >= end + DAYS - 60


def test_the_kernel_clock_state_is_read() -> None:
    """``adjtimex`` answers on Linux (synchronized or not, as this machine's NTP has it)."""
    import sys

    from allsmi.accounting.recorderhold import clock_synchronized
    assert clock_synchronized() in ((True, False) if sys.platform.startswith("linux") else (None,))


def test_a_restart_within_the_tolerance_is_not_held(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    clocks = Clocks()
    _first_life(db, clocks)
    clocks.steady += AHEAD_SECONDS - 60  # a restart minutes later
    seen: list[tuple[int, str | None]] = []
    rec = _life(db, clocks, 30, seen=seen)
    rec.close()
    assert all(error is None for _, error in seen)
    assert _observed(db) == {"GPU-0": 630_000, "GPU-1": 630_000}


def test_a_checkpointed_interval_refused_counts_once(tmp_path: Path) -> None:
    """A second life 150 s behind the first: three minutes refused, each written in parts
    (checkpoints every 5 s) and counted once, in the metric too."""
    from allsmi.exporter.builder import exporter_families
    from allsmi.exporter.exposition import Exposition

    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + t, device("GPU-a", power=100.0)) for t in range(0, 181, 10)])
    second = record(db, [snap(T0 + t, device("GPU-a", power=100.0)) for t in range(30, 151, 5)])
    assert second.refused_intervals == 3
    assert second.intervals_written == 0
    (family,) = [f for f in exporter_families(Exposition(ledger=second).health())
                 if f.name == "allsmi_ledger_refused_intervals"]
    assert family.samples[0].value == 3.0
