"""Partitioned devices are billed at most once per hour of their price (issue 9, item 6).

MIG instances, AMD compute partitions and the dies of a multi-die card are devices of their own;
by default each is billed at its share of the physical device and the parent at the rest, so
parent plus partitions never cost more than one device. ``partition_billing = "whole"`` keeps
explicit per-profile prices possible. The parent's memory is what its partitions do not hold.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from allsmi.accounting.ledger.store import SCHEMA_VERSION, Ledger
from allsmi.accounting.ledger.source import ledger_parts
from allsmi.accounting.recorder import billing_shares
from allsmi.accounting.report import Report, build_report

from .helpers import T0, config, device, record, snap, window

HOUR = 3600
PRICES = """
[[rules]]
resource_group = "gpu7"
vendor = "nvidia"
index = "7"                   # the simulated node's MIG GPU; its slices match through the parent

[groups.gpu7]
price_per_device_hour = 2.0
currency = "USD"
"""


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_simulated_mig_gpu_costs_at_most_one_gpu(tmp_path: Path) -> None:
    """The mixed node's GPU 7 (three MIG slices, busy most of the time), billed over 4 hours."""
    (tmp_path / "prices.toml").write_text(PRICES)
    end = int(time.time() // HOUR * HOUR) - HOUR
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_CONFIG": ""}
    out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--simulate", "mixed",
                          "--since", _iso(end - 4 * HOUR), "--until", _iso(end),
                          "--config", str(tmp_path / "prices.toml"), "--format", "json",
                          "--group-by", "resource_group,model"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout)["rows"] if r["resource_group"] == "gpu7"]
    assert len(rows) == 4 and sum(r["device_count"] for r in rows) == 4  # the GPU and 3 slices
    parent = next(r for r in rows if "MIG" not in r["model"])
    slices = [r for r in rows if "MIG" in r["model"]]
    gpu_hours = parent["observed_device_hours"]
    assert gpu_hours == pytest.approx(4.0, abs=0.01)
    # The slices' jobs overlap: billed as whole GPUs they would cost several GPUs.
    assert sum(r["allocated_device_hours"] for r in slices) > 1.5 * gpu_hours
    billed = sum(r["billed_device_hours"] for r in rows)
    assert 0 < billed <= gpu_hours + 1e-6
    assert sum(r["cost"] for r in rows) <= 2.0 * gpu_hours + 1e-6
    for r in rows:
        assert r["cost"] == pytest.approx(r["billed_device_hours"] * 2.0, abs=1e-5)
        assert r["observed_device_hours"] == pytest.approx(gpu_hours, abs=0.01)  # honest time
    # Memory: the parent reports its slices' memory too; only what no slice holds is its own.
    total = parent["avg_memory_used_bytes"] + sum(r["avg_memory_used_bytes"] for r in slices)
    assert total <= 85520809984
    assert parent["avg_memory_used_bytes"] < min(r["avg_memory_used_bytes"] for r in slices)


def _bill(tmp_path: Path, snapshots, cfg_text: str = "", group_by=("resource_group", "model")) -> Report:  # type: ignore[no-untyped-def]
    db = tmp_path / "ledger.db"
    cfg = config(cfg_text)
    record(db, snapshots, cfg)
    parts, users = ledger_parts(db, window(T0, T0 + HOUR), by_holder="user" in group_by)
    return build_report(parts, window(T0, T0 + HOUR), group_by, cfg, users)


PRICED = """
[groups.default]
price_per_device_hour = 4.0
currency = "EUR"
"""


def _partitioned(t: int, shares: list[float | None], *, parent_busy: bool = False,
                 vendor: str = "amd", part_group: str = "default") -> list:  # type: ignore[type-arg]
    from dataclasses import replace
    parent = device("BOARD", vendor=vendor, model="MI300X", power=500.0, memory=4 << 30,
                    users=["root"] if parent_busy else [])
    parts = [replace(device(f"BOARD/p{i}", vendor=vendor, model="MI300X CPX", parent="BOARD",
                            users=[f"u{i}"], memory=1 << 30, group=part_group), partition_share=share)
             for i, share in enumerate(shares)]
    return [parent, *parts]


@pytest.mark.parametrize("shares, parent_share", [
    ([None] * 4, 0.0),                      # AMD: the backend cannot tell; equal split
    ([0.25] * 4, 0.0),                      # AMD CPX: 1/4 each
    ([3 / 7, 2 / 7, 1 / 7], 1 / 7),         # MIG 3g + 2g + 1g: one slice of seven left over
    ([0.5, 0.5, 0.5], 0.0),                 # inconsistent shares are scaled down to one device
])
def test_partitions_and_parent_never_exceed_one_device(tmp_path: Path, shares: list[float | None],
                                                       parent_share: float) -> None:
    snaps = [snap(T0 + t, *_partitioned(t, shares, parent_busy=True)) for t in range(0, HOUR + 1, 10)]
    rep = _bill(tmp_path, snaps, PRICED, group_by=("resource_group",))
    (row,) = rep.rows
    assert row.device_count == 1 + len(shares)
    assert row.allocated_device_hours == pytest.approx(1.0 + len(shares))  # every one held
    # ... but one board is billed once (to the millisecond per interval and device)
    assert row.billed_device_hours == pytest.approx(1.0, abs=1e-4)
    assert row.cost == pytest.approx(4.0, abs=4e-4)
    assert row.observed_device_hours == pytest.approx(1.0 + len(shares))
    # Memory counted once: the parent's 4 GiB include the partitions' 1 GiB each.
    assert row.avg_memory_used_bytes * row.device_count == pytest.approx(4 << 30)
    per_model = {r.model: r for r in _bill(tmp_path / "m", snaps, PRICED).rows}
    assert per_model["MI300X"].billed_device_hours == pytest.approx(parent_share, abs=1e-4)


def test_partition_shares_follow_the_snapshot() -> None:
    from dataclasses import replace
    devs = _partitioned(0, [None, None])
    assert billing_shares(devs) == {"BOARD": 0.0, "BOARD/p0": 0.5, "BOARD/p1": 0.5}
    devs = _partitioned(0, [0.25, None])
    assert billing_shares(devs) == {"BOARD": 0.25, "BOARD/p0": 0.25, "BOARD/p1": 0.5}
    # A die of a multi-die NPU whose board is not listed (lost): shares still add up to one.
    dies = [replace(device(f"NPU/d{i}", parent="NPU", vendor="rebellions"), partition_share=None)
            for i in range(2)]
    assert billing_shares(dies) == {"NPU": 0.0, "NPU/d0": 0.5, "NPU/d1": 0.5}
    assert billing_shares([device("GPU-whole")]) == {}


def test_users_share_the_billed_hours(tmp_path: Path) -> None:
    snaps = [snap(T0 + t, *_partitioned(t, [0.5, 0.5])) for t in range(0, HOUR + 1, 10)]
    rep = _bill(tmp_path, snaps, PRICED, group_by=("resource_group", "user"))
    by_user = {r.user: r for r in rep.rows}
    assert by_user["u0"].billed_device_hours == pytest.approx(0.5)
    assert by_user["u1"].billed_device_hours == pytest.approx(0.5)
    assert by_user["u0"].cost == pytest.approx(2.0)
    assert sum(r.cost or 0 for r in rep.rows) == pytest.approx(4.0)


def test_explicit_per_profile_prices_bill_partitions_whole(tmp_path: Path) -> None:
    cfg = """
[groups.cpx]
price_per_device_hour = 1.5
currency = "EUR"
partition_billing = "whole"
"""
    # (The collector puts the partitions in "cpx" with a rule such as model = "*CPX".)
    snaps = [snap(T0 + t, *_partitioned(t, [0.25] * 4, part_group="cpx"))
             for t in range(0, HOUR + 1, 10)]
    rows = {r.resource_group: r for r in _bill(tmp_path, snaps, cfg, ("resource_group",)).rows}
    assert rows["cpx"].billed_device_hours == pytest.approx(4.0)
    assert rows["cpx"].cost == pytest.approx(6.0)


def test_bad_partition_billing_is_a_located_config_error() -> None:
    from allsmi.config import ConfigError, parse_config
    with pytest.raises(ConfigError) as err:
        parse_config('[groups.g]\npartition_billing = "half"\n')
    assert err.value.line == 2 and err.value.key == "groups.g.partition_billing"


def _old_ledger(path: Path, version: int) -> None:
    """A ledger as allsmi wrote it at schema ``version`` (1 or 2): half an hour of ann's
    process on GPU-a, in raw one-minute intervals not rolled up yet."""
    conn = sqlite3.connect(path)
    conn.executescript((Path(__file__).parent / "ledger_v2_schema.sql").read_text())
    conn.executemany("INSERT INTO meta VALUES (?, ?)", [("schema_version", "2"),
                                                         ("interval_seconds", "60")])
    conn.execute("INSERT INTO devices VALUES (1, 'GPU-a')")
    conn.execute("INSERT INTO dims VALUES (1, 1, 'node1', 'nvidia', 'H100', '', 'default', '{}')")
    conn.execute("INSERT INTO users VALUES (1, 'ann')")
    for k in range(30):
        start = int(T0) + 60 * k
        conn.execute("INSERT INTO intervals VALUES (?, 1, 1, 0, 60000, 60000, 60000, NULL, 0, "
                     "NULL, NULL, 0, NULL, 60000)", (start,))
        conn.execute("INSERT INTO user_intervals VALUES (?, 1, 1, 60000, 60000, NULL, NULL, 60000)",
                     (start,))
    conn.executemany("INSERT INTO pending VALUES (?, ?)",
                     [(900, int(T0)), (900, int(T0) + 900), (86400, int(T0))])
    if version == 1:
        for table in ("intervals", "user_intervals", "quarters", "user_quarters", "days",
                      "user_days"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN billed_ms")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("version", [1, 2])
def test_old_ledger_is_read_and_upgraded(tmp_path: Path, version: int) -> None:
    """A ledger written before holders and idle time (and, version 1, billed hours) existed:
    read as it is (billed whole, idle unknown, users as holders), upgraded in place on write."""
    db = tmp_path / "ledger.db"
    _old_ledger(db, version)
    w = window(T0, T0 + HOUR)

    def check() -> None:
        parts, holders = ledger_parts(db, w, by_holder=True)
        assert parts[0].billed_s == pytest.approx(1800.0)
        assert parts[0].allocated_s == pytest.approx(1800.0) and parts[0].idle_s is None
        assert holders is not None
        ann = next(p for p in holders if p.user == "ann")
        assert ann.allocated_s == pytest.approx(1800.0) and ann.billed_s == pytest.approx(1800.0)
        assert (ann.namespace, ann.pod, ann.job, ann.idle_s) == (None, None, None, None)
        rep = build_report(parts, w, ("resource_group", "user"), config(), holder_parts=holders)
        assert [(r.user, r.allocated_device_hours, r.idle_allocated_device_hours)
                for r in rep.rows] == [(None, 0.0, None), ("ann", 0.5, None)]

    before = db.read_bytes()
    check()  # read-only: the file is not changed
    assert db.read_bytes() == before
    Ledger(db).close()  # opened for writing: upgraded in place
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert conn.execute("SELECT SUM(billed_ms), SUM(idle_ms) FROM intervals").fetchone() == \
        (1_800_000, None)
    assert conn.execute("SELECT user, namespace FROM holders").fetchall() == [("ann", "")]
    assert conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'user%'").fetchall() == []
    conn.close()
    check()
    # New intervals are recorded with idle time and holders next to the upgraded ones.
    record(db, [snap(T0 + 1800 + t, device("GPU-a", util=0.0, users=["ann"]))
                for t in range(0, 1801, 10)])
    parts, holders = ledger_parts(db, w, by_holder=True)
    assert parts[0].allocated_s == pytest.approx(3600.0)
    # Half the allocated hour was recorded before idle time was: the hour's idle time is
    # unknown, never the known half booked as the whole (issue 19 item 7) ...
    assert parts[0].idle_s is None
    # ... and the new half alone is known.
    parts, _ = ledger_parts(db, window(T0 + 1800, T0 + HOUR), by_holder=False)
    assert parts[0].idle_s == pytest.approx(1800.0)


def test_a_mig_boards_energy_is_split_by_the_slices_shares(tmp_path: Path) -> None:
    """A board of 700 W with MIG slices of 3/7, 2/7 and 1/7 (one seventh left to the parent),
    each held by its own user and the parent by root: each is given its share of the board's
    energy, as of its hours, and together the board's (issue 32, item 10)."""
    snaps = [snap(T0 + t, *_partitioned(t, [3 / 7, 2 / 7, 1 / 7], parent_busy=True,
                                        vendor="nvidia"))
             for t in range(0, HOUR + 1, 10)]
    snaps = [replace_power(s, 700.0) for s in snaps]
    rows = {r.user: r for r in _bill(tmp_path, snaps, PRICED, group_by=("user",)).rows}
    assert set(rows) >= {"root", "u0", "u1", "u2"}
    board_kwh = 0.7
    for user, share in (("root", 1 / 7), ("u0", 3 / 7), ("u1", 2 / 7), ("u2", 1 / 7)):
        assert rows[user].energy_kwh == pytest.approx(board_kwh * share, rel=1e-6), user
        assert rows[user].billed_device_hours == pytest.approx(share, rel=1e-4), user
    assert sum(r.energy_kwh or 0.0 for r in rows.values()) == pytest.approx(board_kwh, rel=1e-6)


def replace_power(s, watts: float):  # type: ignore[no-untyped-def]
    """``s`` with the board (the device without a parent) drawing ``watts``."""
    from dataclasses import replace
    return replace(s, devices=tuple(replace(d, power_watts=watts) if not d.parent else d
                                    for d in s.devices))


def test_the_exporters_counters_split_a_boards_energy_alike() -> None:
    """``allsmi serve``'s device and holder energy counters (what ``export --prometheus``
    bills) give each slice and the parent their share of the board's energy, as the ledger."""
    from allsmi.exporter.counters import UsageCounters
    counters = UsageCounters(holder_users=True)
    for t in range(0, HOUR + 1, 10):
        counters.update(replace_power(snap(T0 + t, *_partitioned(
            t, [3 / 7, 2 / 7, 1 / 7], parent_busy=True, vendor="nvidia")), 700.0))
    board_j = 700.0 * HOUR
    devices = counters.devices()
    by_holder: dict[str, float] = {}
    for key, values in counters.holders().items():
        user = next(v for v in key if v in ("root", "u0", "u1", "u2"))
        by_holder[user] = by_holder.get(user, 0.0) + (values.energy_joules or 0.0)
    for dev_id, user, share in (("BOARD", "root", 1 / 7), ("BOARD/p0", "u0", 3 / 7),
                                ("BOARD/p1", "u1", 2 / 7), ("BOARD/p2", "u2", 1 / 7)):
        assert devices[dev_id].energy_joules == pytest.approx(board_j * share, rel=1e-6), dev_id
        assert by_holder[user] == pytest.approx(board_j * share, rel=1e-6), user
