"""Fair shares in the ledger and ``allsmi export``: used time and energy by measured activity,
allocated time by declared share, methods per row, ``bill_by`` and ``carbon_gco2e``."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from allsmi.accounting.ledger.store import SCHEMA_VERSION, Ledger
from allsmi.schema import DeviceSample, ProcessSample, Workload

from .helpers import T0, config, record, snap

SINCE, UNTIL = "2026-03-02T00:00:00Z", "2026-03-02T01:00:00Z"
CONFIG = """
[accounting]
grid_gco2e_per_kwh = 400

[groups.shared]
price_per_device_hour = 4.0
currency = "EUR"

[groups.byuse]
price_per_device_hour = 4.0
currency = "EUR"
bill_by = "used"
grid_gco2e_per_kwh = 20
"""


def shared_gpu(dev_id: str, group: str, procs: tuple[ProcessSample, ...] = (),
               workloads: tuple[Workload, ...] | None = None) -> DeviceSample:
    return DeviceSample(id=dev_id, vendor="nvidia", kind="gpu", backend="nvidia", name="H100",
                        uuid=dev_id, resource_group=group, health="ok", utilization_percent=80.0,
                        power_watts=300.0, processes=procs, workloads=workloads)


def two_users(dev_id: str, group: str) -> DeviceSample:
    return shared_gpu(dev_id, group, (
        ProcessSample(10, user="ann", memory_bytes=1 << 30, utilization_percent=60.0),
        ProcessSample(11, user="bob", memory_bytes=8 << 30, utilization_percent=20.0)))


def export(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp / "config.toml").write_text(CONFIG)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "xdg"), "ALLSMI_LEDGER": ""}
    return subprocess.run([sys.executable, "-m", "allsmi", "export", "--ledger", str(tmp / "l.db"),
                           "--config", str(tmp / "config.toml"), "--since", SINCE, "--until", UNTIL,
                           *args], cwd=tmp, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture()
def ledger(tmp_path: Path) -> Path:
    db = tmp_path / "l.db"
    record(db, [snap(T0 + t, two_users("GPU-s", "shared"), two_users("GPU-u", "byuse"))
                for t in range(0, 3601, 5)], config(CONFIG))
    return db


def test_used_follows_activity_and_allocated_is_equal(ledger: Path, tmp_path: Path) -> None:
    out = export(tmp_path, "--group-by", "resource_group,user", "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = {(r["resource_group"], r["user"]): r for r in json.loads(out.stdout)["rows"]}
    ann, bob = rows[("shared", "ann")], rows[("shared", "bob")]
    assert ann["used_device_hours"] / bob["used_device_hours"] == pytest.approx(3.0, rel=0.05)
    assert ann["allocated_device_hours"] == pytest.approx(bob["allocated_device_hours"])
    assert (ann["allocation_method"], ann["usage_method"]) == ("equal", "activity")
    # each column adds up to the device (0.8 device-hours used, 1 allocated)
    assert ann["used_device_hours"] + bob["used_device_hours"] == pytest.approx(0.8, rel=0.01)
    assert ann["allocated_device_hours"] + bob["allocated_device_hours"] == \
        pytest.approx(1.0, rel=0.01)
    # busy energy follows use: 300 W x 1 h, 3:1
    assert ann["energy_kwh"] + bob["energy_kwh"] == pytest.approx(0.3, rel=0.01)
    assert ann["energy_kwh"] / bob["energy_kwh"] == pytest.approx(3.0, rel=0.05)
    # carbon: the [accounting] intensity, and the group's own where it sets one
    assert ann["carbon_gco2e"] == pytest.approx(ann["energy_kwh"] * 400, rel=1e-3)
    assert rows[("byuse", "ann")]["carbon_gco2e"] == pytest.approx(
        rows[("byuse", "ann")]["energy_kwh"] * 20, rel=1e-3)
    # cost: allocated hours by default, used hours with bill_by = "used"
    assert ann["cost"] == pytest.approx(ann["billed_device_hours"] * 4.0, rel=1e-6)
    by_use = rows[("byuse", "ann")]
    assert by_use["cost"] == pytest.approx(by_use["used_device_hours"] * 4.0, rel=1e-6)
    assert by_use["cost"] == pytest.approx(0.6 * 4.0, rel=0.01)


def test_focus_charges_what_the_csv_bills_with_either_bill_by(ledger: Path, tmp_path: Path) -> None:
    """Each row's FOCUS charges add up to its CSV cost: the hours charge of a ``bill_by =
    "used"`` group is its used hours, not the allocated ones."""
    from decimal import Decimal
    csv_out = export(tmp_path, "--group-by", "resource_group,user")
    focus_out = export(tmp_path, "--group-by", "resource_group,user", "--format", "focus")
    assert csv_out.returncode == 0 and focus_out.returncode == 0, focus_out.stderr
    costs = {(r["resource_group"], r["user"]): Decimal(r["cost"])
             for r in csv.DictReader(io.StringIO(csv_out.stdout)) if r["cost"]}
    charged: dict[tuple[str, str], Decimal] = {}
    hours = {}
    for charge in csv.DictReader(io.StringIO(focus_out.stdout)):
        tags = json.loads(charge["Tags"])
        key = (charge["SubAccountId"], tags.get("allsmi/user", ""))
        charged[key] = charged.get(key, Decimal(0)) + Decimal(charge["EffectiveCost"])
        if charge["ConsumedUnit"] == "Hours":
            hours[key] = (charge["ChargeDescription"], Decimal(charge["PricingQuantity"]))
    assert set(charged) == set(costs), (charged, costs)
    for key, cost in costs.items():
        assert abs(charged[key] - cost) <= Decimal("0.000011"), (key, charged[key], cost)
    description, used = hours[("byuse", "ann")]
    assert "used device-hours" in description and float(used) == pytest.approx(0.6, rel=0.01)
    assert "allocated device-hours" in hours[("shared", "ann")][0]


def test_csv_carries_the_methods(ledger: Path, tmp_path: Path) -> None:
    out = export(tmp_path, "--group-by", "user")
    assert out.returncode == 0, out.stderr
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    assert {"allocation_method", "usage_method", "carbon_gco2e"} <= set(table[0])
    assert {r["usage_method"] for r in table if r["user"]} == {"activity"}
    # without holder grouping the device rows name the methods too
    out = export(tmp_path, "--group-by", "resource_group")
    assert {r["allocation_method"] for r in csv.DictReader(io.StringIO(out.stdout))} == {"equal"}


def test_declared_replicas_bill_a_quarter_each(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    pods = tuple(Workload("kubernetes", namespace="ml", pod=f"infer-{i}", share=0.25)
                 for i in range(4))
    record(db, [snap(T0 + t, shared_gpu("GPU-k", "shared", workloads=pods))
                for t in range(0, 3601, 10)], config(CONFIG))
    out = export(tmp_path, "--group-by", "pod", "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout)["rows"] if r["pod"]]
    assert len(rows) == 4
    for row in rows:
        assert row["allocated_device_hours"] == pytest.approx(0.25, rel=0.01)
        assert row["allocation_method"] == "declared"
    assert sum(r["allocated_device_hours"] for r in rows) == pytest.approx(1.0, rel=0.001)


def test_a_version_3_ledger_is_upgraded_in_place(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    record(db, [snap(T0 + t, two_users("GPU-s", "shared")) for t in range(0, 3601, 20)],
           config(CONFIG))
    conn = sqlite3.connect(db)
    for table in ("intervals", "quarters", "days", "holder_intervals", "holder_quarters",
                  "holder_days"):
        for column in ("used_billed_ms", "allocation_method", "usage_method"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        if not table.startswith("holder"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN attributed_ms")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    out = export(tmp_path, "--group-by", "user", "--format", "json")  # read-only: views
    assert out.returncode == 0, out.stderr
    assert {r["usage_method"] for r in json.loads(out.stdout)["rows"]} == {None}
    Ledger(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == \
        (str(SCHEMA_VERSION),)
    assert "usage_method" in {r[1] for r in conn.execute("PRAGMA table_info(holder_days)")}
    assert "attributed_ms" in {r[1] for r in conn.execute("PRAGMA table_info(days)")}
    conn.close()


def test_a_version_4_ledger_gains_attributed_time_and_keeps_its_methods(tmp_path: Path) -> None:
    """Version 4 (fair shares, no ``attributed_ms``): read as it is, then upgraded in place;
    what it recorded keeps its split methods, its attribution coverage is unknown."""
    db = tmp_path / "l.db"
    record(db, [snap(T0 + t, two_users("GPU-s", "shared")) for t in range(0, 3601, 20)],
           config(CONFIG))
    conn = sqlite3.connect(db)
    for table in ("intervals", "quarters", "days"):
        conn.execute(f"ALTER TABLE {table} DROP COLUMN attributed_ms")
    conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    out = export(tmp_path, "--group-by", "user", "--format", "json")  # read-only: views
    assert out.returncode == 0, out.stderr
    assert db.read_bytes() == before
    rows = json.loads(out.stdout)["rows"]
    assert {r["usage_method"] for r in rows if r["user"]} == {"activity"}
    assert {r["attribution_coverage_ratio"] for r in rows} == {None}
    Ledger(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == \
        (str(SCHEMA_VERSION),)
    total, attributed, methods = conn.execute(
        "SELECT COUNT(*), COUNT(attributed_ms), COUNT(usage_method) FROM intervals").fetchone()
    assert attributed == 0 and methods >= total - 1 > 0  # (the last minute: nobody held it)
    conn.close()
    again = export(tmp_path, "--group-by", "user", "--format", "json")
    assert json.loads(again.stdout)["rows"] == rows


def test_unknown_idle_stays_unknown_under_the_fair_share_split(tmp_path: Path) -> None:
    """Two holders split by activity on a device whose utilization is unknown for part of an
    hour: each holder's idle-allocated time is unknown (never its known part alone), in the
    rows, the roll-ups and the export; the hour after, with utilization known, it is known
    and the holders' idle time adds up to the device's."""
    db = tmp_path / "l.db"

    def dev(t: int) -> DeviceSample:
        d = two_users("GPU-s", "shared")
        return d if t >= 1800 else dataclasses.replace(d, utilization_percent=None)
    record(db, [snap(T0 + t, dev(t)) for t in range(0, 7201, 10)], config(CONFIG))
    conn = sqlite3.connect(db)
    first = conn.execute("SELECT COUNT(*), COUNT(idle_ms), COUNT(idle_billed_ms) "
                         f"FROM holder_intervals WHERE start < {T0 + 1740}").fetchone()
    assert first[0] > 0 and first[1:] == (0, 0)
    methods = set(conn.execute("SELECT allocation_method, usage_method FROM holder_intervals "
                               f"WHERE start < {T0 + 1740}"))
    assert methods == {("equal", "activity")}  # the split still known, only idleness is not
    conn.close()
    out = export(tmp_path, "--group-by", "user", "--format", "json", "--until",
                 "2026-03-02T02:00:00Z")
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout)["rows"] if r["user"]]
    assert len(rows) == 2 and {r["idle_allocated_device_hours"] for r in rows} == {None}
    # The second hour alone: known, and the holders' parts add up to the device's.
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_LEDGER": ""}
    args = [sys.executable, "-m", "allsmi", "export", "--ledger", str(db), "--config",
            str(tmp_path / "config.toml"), "--since", "2026-03-02T01:00:00Z", "--until",
            "2026-03-02T02:00:00Z", "--format", "json"]
    by_user = json.loads(subprocess.run(args + ["--group-by", "user"], env=env, capture_output=True,
                                        text=True, timeout=60, check=True).stdout)["rows"]
    whole = json.loads(subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                                      check=True).stdout)["rows"]
    idle = [r["idle_allocated_device_hours"] for r in by_user]
    assert None not in idle and whole[0]["idle_allocated_device_hours"] is not None
    assert sum(idle) == pytest.approx(whole[0]["idle_allocated_device_hours"], abs=1e-5)


def test_bad_bill_by_and_carbon_are_config_errors(tmp_path: Path) -> None:
    for text in ('[groups.g]\nbill_by = "busy"\n', '[accounting]\ngrid_gco2e_per_kwh = -1\n'):
        (tmp_path / "bad.toml").write_text(text)
        env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ALLSMI_LEDGER": ""}
        (tmp_path / "l.db").touch()
        out = subprocess.run([sys.executable, "-m", "allsmi", "export", "--since", SINCE, "--config",
                              str(tmp_path / "bad.toml"), "--ledger", str(tmp_path / "l.db")],
                             env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (text, out.stderr)
        assert "bad.toml" in out.stderr and out.stdout == ""
