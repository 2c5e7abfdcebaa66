"""Ledger arithmetic against synthetic streams whose integrals are known exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.accounting.ledger.source import ledger_parts
from allsmi.accounting.report import Report, build_report

from .helpers import T0, config, device, record, rows, snap, window

ALL = ("resource_group", "vendor", "model", "host")


def report(path: Path, start: float, end: float, group_by=ALL, cfg=None) -> Report:
    w = window(start, end)
    parts, users = ledger_parts(path, w, by_holder="user" in group_by)
    return build_report(parts, w, group_by, cfg or config(), holder_parts=users)


def one(rep: Report, **match: str):
    found = [r for r in rep.rows if all(getattr(r, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, rep.rows)
    return found[0]


def test_constant_power_hour(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    record(db, [snap(T0 + t, device(power=100.0, util=50.0, users=["alice"], memory=1000 + t))
                for t in range(0, 3601, 10)])
    per_minute = rows(db, "SELECT observed_ms, allocated_ms, busy_ms, energy_mj FROM intervals "
                          "WHERE start < ?", T0 + 3600)
    assert len(per_minute) == 60
    # The last sample, on the hour, only ended the hour's time: the next minute holds no row
    # of the device (a window from the hour would count it, at 0 hours).
    assert rows(db, "SELECT COUNT(*) FROM intervals WHERE start >= ?", T0 + 3600) == [(0,)]
    assert set(per_minute) == {(60000, 60000, 30000, 6_000_000)}
    assert rows(db, "SELECT COUNT(*) FROM quarters") == [(4,)]
    assert rows(db, "SELECT start - ? FROM pending WHERE tier = 900", int(T0)) == []
    r = one(report(db, T0, T0 + 3600))
    assert r.device_count == 1
    assert r.observed_device_hours == pytest.approx(1.0, abs=1e-9)
    assert r.allocated_device_hours == pytest.approx(1.0, abs=1e-9)
    assert r.used_device_hours == pytest.approx(0.5, abs=1e-9)
    assert r.avg_utilization_ratio == pytest.approx(0.5)
    assert r.energy_kwh == pytest.approx(0.1, abs=1e-9)
    assert r.coverage_ratio == pytest.approx(1.0)
    assert r.peak_memory_used_bytes == 1000 + 3590  # the sample at T0+3600 opens the next minute


def test_linear_power_split_at_minute_boundaries(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    power = lambda t: 100.0 + 0.1 * t  # noqa: E731
    times = list(range(0, 1800, 7))  # 7 s steps: most increments straddle a minute boundary
    record(db, [snap(T0 + t, device(power=power(t))) for t in times])
    end = times[-1]
    exact = 100.0 * end + 0.05 * end**2
    energy = rows(db, "SELECT start, energy_mj, observed_ms FROM intervals ORDER BY start")
    assert sum(e for _, e, _ in energy) / 1000.0 == pytest.approx(exact, rel=1e-9)
    for start, mj, observed_ms in energy[1:-1]:  # whole minutes
        a, b = start - T0, start - T0 + 60
        assert observed_ms == 60000
        assert mj / 1000.0 == pytest.approx(100.0 * (b - a) + 0.05 * (b * b - a * a), rel=1e-4)


def test_increment_split_exactly_at_boundary(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    record(db, [snap(T0 + 50, device(power=120.0, util=100.0)),
                snap(T0 + 70, device(power=120.0, util=100.0))])
    assert rows(db, "SELECT start - ?, observed_ms, busy_ms, energy_mj FROM intervals ORDER BY start",
                int(T0)) == [(0, 10000, 10000, 1_200_000), (60, 10000, 10000, 1_200_000)]


def test_gap_longer_than_max_gap_is_not_bridged(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    times = list(range(0, 301, 10)) + list(range(400, 601, 10))
    record(db, [snap(T0 + t, device(power=100.0, util=100.0)) for t in times])
    r = one(report(db, T0, T0 + 600))
    assert r.observed_device_hours * 3600 == pytest.approx(500.0)
    assert r.energy_kwh * 3.6e6 == pytest.approx(50_000.0)
    assert r.coverage_ratio == pytest.approx(500 / 600)


def test_counter_reset_uses_power_when_known(tmp_path: Path) -> None:
    db = tmp_path / "l.db"

    def counter(t: int) -> float:  # driver reload at t=305: the counter restarts from 0
        return 1e9 + 100.0 * t if t < 305 else 100.0 * (t - 305)

    record(db, [snap(T0 + t, device(power=100.0, energy=counter(t))) for t in range(0, 601, 10)])
    assert one(report(db, T0, T0 + 600)).energy_kwh * 3.6e6 == pytest.approx(60_000.0)


def test_counter_reset_without_power_counts_only_what_is_known(tmp_path: Path) -> None:
    db = tmp_path / "l.db"

    def counter(t: int) -> float:
        return 1e9 + 100.0 * t if t < 305 else 100.0 * (t - 305)

    record(db, [snap(T0 + t, device(energy=counter(t))) for t in range(0, 601, 10)])
    # The 5 s before the reset are unknowable: 60 kJ minus 500 J, never a negative delta.
    assert one(report(db, T0, T0 + 600)).energy_kwh * 3.6e6 == pytest.approx(59_500.0)


def test_device_changing_group_mid_period(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    cfg = config('[groups.a]\nlabels = { team = "vision" }\nprice_per_device_hour = 2.0\n'
                 'currency = "EUR"\n[groups.b]\nlabels = { team = "nlp" }\n')
    snaps = []
    for t in range(0, 3601, 10):
        group, team = ("a", "vision") if t < 1800 else ("b", "nlp")
        snaps.append(snap(T0 + t, device(power=100.0, util=100.0, users=["u"], group=group,
                                          labels={"team": team})))
    record(db, snaps)
    rep = report(db, T0, T0 + 3600, cfg=cfg)
    a, b = one(rep, resource_group="a"), one(rep, resource_group="b")
    assert a.labels == (("team", "vision"),) and b.labels == (("team", "nlp"),)
    assert a.allocated_device_hours == pytest.approx(0.5) and b.allocated_device_hours == pytest.approx(0.5)
    assert a.energy_kwh == pytest.approx(0.05) and b.energy_kwh == pytest.approx(0.05)
    assert a.cost == pytest.approx(1.0) and a.currency == "EUR"
    assert b.cost is None  # no price for b: empty, not 0
    assert rep.coverage_ratio == pytest.approx(1.0)  # one device, watched all the time


def test_mig_partitions_do_not_double_count_energy(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    snaps = []
    for t in range(0, 1801, 10):
        parent = device("GPU-p", power=300.0, energy=1e6 + 300.0 * t, util=None)
        kids = [device(f"MIG-{i}", util=None, parent="GPU-p", users=[f"user{i}"],
                       model=f"H100 MIG {i}g") for i in (1, 2, 3)]
        snaps.append(snap(T0 + t, parent, *kids))
    record(db, snaps)
    rep = report(db, T0, T0 + 1800, group_by=("resource_group",))
    r = one(rep)
    assert r.device_count == 4
    assert r.energy_kwh == pytest.approx(300.0 * 1800 / 3.6e6)
    assert r.allocated_device_hours == pytest.approx(1.5)  # three partitions in use
    assert r.used_device_hours is None  # nobody reports utilization under MIG
    users = report(db, T0, T0 + 1800, group_by=("resource_group", "user"))
    assert one(users, user="user1").allocated_device_hours == pytest.approx(0.5)
    # The board's energy split as its time is billed (issue 32, item 10): a third to each
    # slice's user (equal shares: the backend gave none), none left to the idle parent.
    for user in ("user1", "user2", "user3"):
        assert one(users, user=user).energy_kwh == pytest.approx(r.energy_kwh / 3)
    assert one(users, user=None).energy_kwh == pytest.approx(0.0, abs=1e-12)


def test_multi_die_card_parent_owns_power_and_its_dies_share_its_energy(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    snaps = [snap(T0 + t, device("card", power=200.0, util=None, vendor="tenstorrent", model="n300"),
                  device("card/0", util=80.0, parent="card", vendor="tenstorrent", model="n300 die"),
                  device("card/1", util=40.0, parent="card", vendor="tenstorrent", model="n300 die"))
             for t in range(0, 901, 15)]
    record(db, snaps)
    rep = report(db, T0, T0 + 900, group_by=("resource_group", "model"))
    # the card's energy goes to its dies by their shares (half each), as their time is billed
    assert one(rep, model="n300").energy_kwh == pytest.approx(0.0, abs=1e-12)
    dies = one(rep, model="n300 die")
    assert dies.energy_kwh == pytest.approx(200.0 * 900 / 3.6e6) and dies.device_count == 2
    assert dies.used_device_hours == pytest.approx((0.8 + 0.4) * 900 / 3600)


def test_user_attribution_equal_per_process(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    snaps = []
    for t in range(0, 3601, 10):
        users = ["alice", "alice", "bob"] if t < 1800 else ([None] if t < 2700 else [])
        snaps.append(snap(T0 + t, device(power=90.0, util=60.0, users=users)))
    record(db, snaps)
    rep = report(db, T0, T0 + 3600, group_by=("resource_group", "user"))
    alice, bob, rest = one(rep, user="alice"), one(rep, user="bob"), one(rep, user=None)
    # The increment that ends at t=1800 (first sample without alice/bob) goes to the new owner.
    assert alice.allocated_device_hours * 3600 == pytest.approx(1790 * 2 / 3, abs=0.01)
    assert bob.allocated_device_hours * 3600 == pytest.approx(1790 / 3, abs=0.01)
    assert alice.energy_kwh * 3.6e6 == pytest.approx(90.0 * 1790 * 2 / 3, rel=1e-6)
    total = one(report(db, T0, T0 + 3600, group_by=("resource_group",)))
    for col in ("allocated_device_hours", "used_device_hours", "energy_kwh", "observed_device_hours"):
        assert sum(getattr(r, col) for r in (alice, bob, rest)) == pytest.approx(getattr(total, col),
                                                                                   abs=1e-6)
    assert alice.device_count == 1 and alice.coverage_ratio == pytest.approx(1.0)


def test_restart_inside_an_interval_continues_it_and_never_counts_twice(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    dev = lambda: device(power=100.0, util=100.0)  # noqa: E731
    record(db, [snap(T0 + t, dev()) for t in range(0, 31, 10)])  # clean stop mid-minute
    assert rows(db, "SELECT observed_ms, first_ms, last_ms FROM intervals") == [(30000, 0, 30000)]
    record(db, [snap(T0 + t, dev()) for t in range(40, 121, 10)])  # restart in the same minute
    assert rows(db, "SELECT start - ?, observed_ms FROM intervals ORDER BY start", int(T0)) == \
        [(0, 50000), (60, 60000)]  # (its last sample, at 120 s, ended minute 60's time)
    # The clock went back: a third run replays minutes already stored; nothing is added.
    rec = record(db, [snap(T0 + t, dev()) for t in range(0, 121, 10)])
    assert rec.refused_intervals > 0
    assert rows(db, "SELECT SUM(observed_ms), SUM(energy_mj) FROM intervals") == [(110000, 11_000_000)]


def test_lost_device_is_counted_but_not_observed(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    record(db, [snap(T0 + t, device("ok", power=50.0), device("gone", health="lost"))
                for t in range(0, 601, 10)])
    rep = report(db, T0, T0 + 600, group_by=("resource_group",))
    assert one(rep).device_count == 2
    assert rep.coverage_ratio == pytest.approx(0.5)


def test_retention_keeps_rollups_and_prunes_raw_intervals(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    cfg = config("[ledger]\nretention_days = 0.01\n")  # 864 s of raw intervals
    record(db, [snap(T0 + t, device(power=100.0, users=["alice"])) for t in range(0, 7201, 10)], cfg)
    oldest = rows(db, "SELECT MIN(start) FROM intervals")[0][0]
    assert oldest >= T0 + 7200 - 864 - 60
    assert rows(db, "SELECT COUNT(*) FROM quarters") == [(8,)]
    # The first hour is long gone from the raw table, yet exports whole from the roll-ups.
    r = one(report(db, T0, T0 + 3600, group_by=("resource_group", "user")), user="alice")
    assert r.allocated_device_hours == pytest.approx(1.0)
    assert r.energy_kwh == pytest.approx(0.1)


def test_rollup_retention_and_daily_rollups(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    cfg = config("[ledger]\nretention_days = 0.01\nrollup_retention_days = 0.5\n")
    record(db, [snap(T0 + t, device(power=100.0, users=["al"])) for t in range(0, 36 * 3600 + 1, 30)],
           cfg)
    assert rows(db, "SELECT start - ?, observed_ms, energy_mj FROM days", int(T0)) == \
        [(0, 86_400_000, 8_640_000_000)]
    assert rows(db, "SELECT MIN(start) - ? FROM quarters", int(T0))[0][0] >= 24 * 3600
    # Day one exports whole from the daily roll-up, its quarters and minutes long gone.
    r = one(report(db, T0, T0 + 86400, group_by=("resource_group", "user")), user="al")
    assert r.allocated_device_hours == pytest.approx(24.0) and r.energy_kwh == pytest.approx(2.4)
    # A window that is not day-aligned takes the day roll-up plus quarters.
    r = one(report(db, T0 + 86400 - 6 * 3600, T0 + 86400 + 6 * 3600))
    assert r.observed_device_hours == pytest.approx(6.0)  # only the half still in quarters


def test_window_edges_use_raw_intervals_and_pending_quarters(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    # Stops 10 minutes into the second quarter: that quarter stays pending.
    record(db, [snap(T0 + t, device(power=100.0)) for t in range(0, 1501, 10)])
    assert rows(db, "SELECT start - ? FROM pending WHERE tier = 900", int(T0)) == [(900,)]
    r = one(report(db, T0 + 300, T0 + 1500, group_by=("resource_group",)))
    assert r.observed_device_hours * 3600 == pytest.approx(1200.0)


def test_clock_stepping_back_mid_run_counts_nothing_twice(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    times = list(range(0, 181, 10)) + list(range(100, 301, 10))  # NTP steps back 80 s at t=180
    rec = record(db, [snap(T0 + t, device(power=100.0)) for t in times])
    assert rec.last_error is None
    observed = rows(db, "SELECT start - ?, observed_ms FROM intervals ORDER BY start", int(T0))
    assert all(ms <= 60000 for _, ms in observed)
    assert sum(ms for _, ms in observed) <= 300_000
