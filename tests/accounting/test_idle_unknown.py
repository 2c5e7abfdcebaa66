"""Issue 19 item 7: held time whose idleness is unknown is never summed as a known 0 idle time,
in the recorder's buckets (device and holder shares), the roll-ups, the reads and the export."""

from __future__ import annotations

from pathlib import Path

import pytest

from allsmi.accounting.ledger.source import ledger_parts
from allsmi.accounting.report import build_report

from .helpers import T0, config, device, record, rows, snap, window


def test_a_minute_half_unheld_half_held_without_utilization_has_unknown_idle(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    snaps = [snap(T0 + t, device("TT-0", util=None, power=50.0, vendor="tenstorrent",
                                 users=["ann"] if t >= 30 else []))
             for t in range(0, 61, 10)]
    # the next minute: never held, no utilization either: a known 0
    snaps += [snap(T0 + t, device("TT-0", util=None, power=50.0, vendor="tenstorrent"))
              for t in range(70, 181, 10)]
    record(db, snaps)
    got = rows(db, "SELECT start, allocated_ms, idle_ms, idle_billed_ms, idle_energy_mj "
                   "FROM intervals ORDER BY start")
    assert got[0][1] == 35_000  # held from between 20 s and 30 s (the trapezoid) to 60 s
    assert got[0][2:] == (None, None, None), "held time of unknown idleness booked as 0"
    assert got[1][1:] == (5000, None, None, None)  # the trapezoid's tail, held until 60 s
    assert got[2][1:] == (0, 0, 0, 0)
    assert set(rows(db, "SELECT idle_ms, idle_billed_ms FROM holder_intervals")) == {(None, None)}
    # Read over both minutes, and over the quarter and the day rolled up: still unknown.
    for end in (T0 + 180, T0 + 900):
        parts, holders = ledger_parts(db, window(T0, end), by_holder=True)
        assert parts[0].allocated_s == 40.0 and parts[0].idle_s is None
        rep = build_report(parts, window(T0, end), ("resource_group",), config())
        assert rep.rows[0].idle_allocated_device_hours is None and rep.rows[0].idle_cost is None
    parts, _ = ledger_parts(db, window(T0 + 120, T0 + 180), by_holder=False)
    assert parts[0].idle_s == 0.0  # the unheld minutes alone: a known 0


def test_a_report_row_is_unknown_when_one_of_its_devices_is(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + t, device("GPU-a", util=1.0, users=["ann"]),
                     device("TT-0", util=None, vendor="tenstorrent", users=["bob"]))
                for t in range(0, 121, 10)])
    parts, _ = ledger_parts(db, window(T0, T0 + 120), by_holder=False)
    rep = build_report(parts, window(T0, T0 + 120), ("resource_group",), config())
    assert rep.rows[0].allocated_device_hours == 240 / 3600
    assert rep.rows[0].idle_allocated_device_hours is None
    rep = build_report(parts, window(T0, T0 + 120), ("resource_group", "vendor"), config())
    by_vendor = {r.vendor: r.idle_allocated_device_hours for r in rep.rows}
    assert by_vendor == {"nvidia": 120 / 3600, "tenstorrent": None}


def test_a_holder_idle_for_less_than_the_output_shows_is_not_listed_idle() -> None:
    """``allsmi idle`` lists the holders whose idle time shows in its output (rounded to the
    microhour): float noise in a source's rates (1e-12 h) lists nobody as idle for 0.0 h."""
    from types import SimpleNamespace

    from allsmi.accounting.report import Row
    from allsmi.cli.billing.idle import idle_rows

    def row(user: str, idle: float) -> Row:
        return Row(window(T0, T0 + 3600), "g", {}, "nvidia", "H100", "h", user, 1, 1.0, 1.0, 1.0,
                   0.5, 0.5, 0.1, None, None, None, None, None, None, 1.0,
                   idle_allocated_device_hours=idle, idle_devices=("h/GPU-0",))
    report = SimpleNamespace(rows=[row("noise", 1e-12), row("shown", 2e-6), row("none", 0.0)])
    listed = idle_rows(report)
    assert [r["user"] for r in listed] == ["shown"]
    assert listed[0]["idle_allocated_device_hours"] == 2e-6


def test_a_price_per_kwh_on_devices_without_energy_is_an_unknown_cost_not_0(tmp_path: Path) -> None:
    """Devices that report no energy (no counter, no power) priced per kWh alone: the cost,
    and with it the idle cost, the waiting costs and the budget's use, are unknown (they were
    0). Beside a price per device-hour, the hours are billed and the unreported energy charges
    nothing, as a group's devices without energy add nothing to its energy. A device with
    power keeps its cost."""
    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + t, device("NPU-0", util=None if t < 60 else 40.0, vendor="neuron",
                                    users=["ann"]),
                     device("GPU-a", util=40.0, power=300.0, users=["bob"], group="gpus"))
                for t in range(0, 121, 10)])
    parts, _ = ledger_parts(db, window(T0, T0 + 120), by_holder=False)
    for prices in ("price_per_kwh = 0.3", "price_per_kwh = 0.3\nprice_per_device_hour = 2.0"):
        cfg = config(f"[groups.default]\n{prices}\ncurrency = \"EUR\"\nbudget_per_month = 100\n"
                     f"[groups.gpus]\n{prices}\ncurrency = \"EUR\"\n")
        rep = build_report(parts, window(T0, T0 + 120), ("resource_group",), cfg)
        by_group = {r.resource_group: r for r in rep.rows}
        npu, gpu = by_group["default"], by_group["gpus"]
        assert npu.energy_kwh is None and npu.allocated_device_hours, prices
        if "price_per_device_hour" in prices:
            assert npu.cost == pytest.approx(npu.billed_device_hours * 2.0), prices
            assert npu.budget_used_ratio == pytest.approx(npu.cost / 100), prices
        else:
            assert npu.cost is None and npu.idle_cost is None, prices
            assert npu.budget_used_ratio is None and npu.waiting_cost is None, prices
        assert gpu.energy_kwh and gpu.cost is not None and gpu.cost > 0, prices


def test_allsmi_idle_lists_a_holder_whose_idle_time_is_unknown(tmp_path: Path) -> None:
    """``allsmi idle`` left out every row whose idle time was unknown, as if it had none: a
    group (or a holder) that held a Tenstorrent card beside a GPU it left idle was missing from
    the list. It is listed after the rows whose idle cost is known, its idle time null, with
    the devices known to have sat idle."""
    import json

    from ..conftest import run_allsmi
    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + t, device("GPU-a", util=1.0, users=["ann"], group="gpus"),
                     device("GPU-b", util=1.0, users=["bob"]),
                     # (a device sorted before GPU-b: its unknown idleness comes first)
                     device("BH-0", util=None, vendor="tenstorrent", users=["bob"]))
                for t in range(0, 121, 10)])
    cfg = tmp_path / "config.toml"
    cfg.write_text("[groups.gpus]\nprice_per_device_hour = 2.0\ncurrency = \"EUR\"\n"
                   "[groups.default]\nprice_per_device_hour = 1.0\ncurrency = \"EUR\"\n")
    common = ("--ledger", str(db), "--since", "2026-03-02T00:00:00Z", "--until",
              "2026-03-02T00:02:00Z", "--config", str(cfg))
    for group_by in ("resource_group", "resource_group,user"):
        out = run_allsmi("idle", *common, "--group-by", group_by, "--format", "json")
        assert out.returncode == 0, out.stderr
        listed = [(r["resource_group"], r["user"], r["idle_allocated_device_hours"],
                   r["idle_cost"], r["devices"]) for r in json.loads(out.stdout)["rows"]]
        user = "bob" if "user" in group_by else None
        ann = "ann" if "user" in group_by else None
        assert listed == [("gpus", ann, 0.033333, 0.066667, ["node1/GPU-a"]),
                          ("default", user, None, None, ["node1/GPU-b"])], group_by
    table = run_allsmi("idle", *common, "--group-by", "resource_group")
    assert table.returncode == 0, table.stderr
    assert [line.split()[:3] for line in table.stdout.splitlines()[2:]] == \
        [["gpus", "0.03", "0.03"], ["default", "unknown", "0.07"]]
    csv_out = run_allsmi("idle", *common, "--group-by", "resource_group", "--format", "csv")
    assert csv_out.returncode == 0, csv_out.stderr
    assert csv_out.stdout.splitlines()[2].startswith("default,,,,,,,,,0.066667,,")


def test_waste_and_idle_list_a_holder_whose_allocated_time_is_unknown(tmp_path: Path) -> None:
    """A device that cannot list its processes or workloads (``processes`` and ``workloads``
    None) has unknown allocated time: ``allsmi waste`` and ``allsmi idle`` left its group out
    silently, as if nobody had held it. Both list it, after the known rows, marked unknown."""
    import dataclasses
    import json

    from ..conftest import run_allsmi
    db = tmp_path / "ledger.db"
    blind = dataclasses.replace(device("GPU-b", util=1.0, group="blind"), processes=None,
                                workloads=None)
    record(db, [snap(T0 + t, device("GPU-a", util=1.0, users=["ann"], group="gpus"), blind)
                for t in range(0, 121, 10)])
    cfg = tmp_path / "config.toml"
    cfg.write_text("[groups.gpus]\nprice_per_device_hour = 2.0\ncurrency = \"EUR\"\n"
                   "[groups.blind]\nprice_per_device_hour = 1.0\ncurrency = \"EUR\"\n")
    common = ("--ledger", str(db), "--since", "2026-03-02T00:00:00Z", "--until",
              "2026-03-02T00:02:00Z", "--config", str(cfg))
    for command, hours in (("waste", "allocated_device_hours"),
                           ("idle", "idle_allocated_device_hours")):
        for group_by in ("resource_group", "resource_group,user"):
            out = run_allsmi(command, *common, "--group-by", group_by, "--format", "json")
            assert out.returncode == 0, out.stderr
            got = [(r["resource_group"], r[hours], r["allocated_device_hours"])
                   for r in json.loads(out.stdout)["rows"]]
            assert got == [("gpus", 0.033333, 0.033333), ("blind", None, None)], (command, got)
        table = run_allsmi(command, *common, "--group-by", "resource_group").stdout
        assert [line.split()[:2] for line in table.splitlines()[2:]][-1] == ["blind", "unknown"]
        if command == "waste":
            row = json.loads(run_allsmi(command, *common, "--format", "json").stdout)["rows"][-1]
            assert row["cost"] is None and row["lost_cost"] is None
            assert row["evidence"].startswith("allocated time unknown"), row


def test_allsmi_idle_shows_a_holder_idle_for_seconds_as_above_0(tmp_path: Path) -> None:
    """A holder idle for a second (0.000139 h, listed: it shows at the microhour) read ``0.00``
    idle hours in the table, as if it had none: it reads ``<0.01``."""
    from ..conftest import run_allsmi
    db = tmp_path / "ledger.db"
    record(db, [snap(T0 + t, device("GPU-a", util=1.0 if t == 0 else 50.0, users=["ann"]))
                for t in range(0, 121)])
    out = run_allsmi("idle", "--ledger", str(db), "--since", "2026-03-02T00:00:00Z", "--until",
                     "2026-03-02T00:02:00Z", "--group-by", "user")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2].split()[1:4] == ["ann", "<0.01", "0.03"], out.stdout
