"""Allocated-but-idle devices in the dashboard: the meter, the idle view (key i), the marker in
the device table, workloads in the detail panel, hostile workload text."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.config import parse_config
from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.state.idle import IdleMeter, allocated_idle, order_rows
from allsmi.dashboard.screen.options import DashboardOptions
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import BackendStatus, ProcessSample, Snapshot, Workload
from allsmi.usage import UsageIntegrator, bridged_gap_seconds

from .conftest import frozen, play_all, screen_text
from .fixtures import GROUPS_TOML, simulated_snapshots
from .hostile import CORPUS, LITERALS

pytestmark = pytest.mark.timeout(180)

PRICED = GROUPS_TOML.replace(
    'labels = { team = "ml", project = "llm" }',
    'labels = { team = "ml", project = "llm" }\nprice_per_device_hour = 4.0\ncurrency = "USD"')


@pytest.fixture(scope="module")
def held_snapshots() -> list[Snapshot]:
    """Twelve snapshots of the simulated node with its simulated pods and jobs, 1 s apart."""
    return simulated_snapshots(12, step=1.0, attribution=True)


def _app(snaps: list[Snapshot], config_text: str = PRICED, **kwargs: object) -> tuple[DashboardApp, StaticSource]:
    source = StaticSource.of(snaps, clock=frozen, interval=1.0)
    config = parse_config(config_text)
    app = DashboardApp(source, config=config, options=DashboardOptions.from_config(config),
                       clock=frozen, **kwargs)  # type: ignore[arg-type]
    return app, source


def _idle_ids(snap: Snapshot, threshold: float = 5.0) -> list[str]:
    return [d.id for d in snap.devices if allocated_idle(d, threshold)]


def test_the_meter_counts_what_the_shared_integrator_counts(held_snapshots: list[Snapshot]) -> None:
    """Idle-allocated seconds over the window equal the exporter's and the ledger's (the same
    UsageIntegrator), split among holders without counting anything twice."""
    config = parse_config(PRICED)
    meter = IdleMeter(5.0, 100, 1.0, config)
    integrator = UsageIntegrator(bridged_gap_seconds(1.0), 5.0)
    expected = 0.0
    for snap in held_snapshots:
        meter.add("node-a", snap)
        meter.add("node-a", snap)  # a repeat is ignored
        expected += sum(i.idle_allocated_seconds or 0.0 for i in integrator.update(snap))
    rows = meter.rows()
    assert expected > 0 and sum(r.idle_seconds for r in rows) == pytest.approx(expected)
    for row in rows:
        assert 0 < row.idle_seconds <= row.allocated_seconds + 1e-9
        if row.group == "training":  # priced per device-hour: idle billed hours x price
            assert row.idle_cost == pytest.approx(row.idle_billed_seconds / 3600 * 4.0)
            assert row.currency == "USD"
        else:
            assert row.idle_cost is None  # no price: no invented 0
    assert rows == order_rows(rows, "cost")
    assert rows[0].group == "training"  # the only priced group comes first
    # A threshold of 0 counts nothing as idle.
    none = IdleMeter(0.0, 100, 1.0, config)
    for snap in held_snapshots:
        none.add("node-a", snap)
    assert none.rows() == []


def test_the_window_keeps_the_last_points_snapshots(held_snapshots: list[Snapshot]) -> None:
    meter = IdleMeter(5.0, 3, 1.0)
    for snap in held_snapshots:
        meter.add("node-a", snap)
    start, end = meter.span()  # type: ignore[misc]
    assert end == held_snapshots[-1].unix_time and end - start == pytest.approx(3.0)
    for row in meter.rows():
        assert row.idle_seconds <= 3.0 * len(row.devices) + 1e-9


async def test_idle_view_lists_sorts_and_filters_the_simulated_holders(held_snapshots: list[Snapshot]) -> None:
    app, source = _app(held_snapshots)
    async with app.run_test(size=(120, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        assert app.view == "idle"
        rows = app.idle_rows
        last = held_snapshots[-1]
        jobs = {w.job_id for d in last.devices if allocated_idle(d, 5.0) for w in d.workloads or ()
                if w.job_id}
        pods = {w.pod for d in last.devices if allocated_idle(d, 5.0) for w in d.workloads or () if w.pod}
        assert jobs and pods
        assert jobs <= {r.holder.job for r in rows} and pods <= {r.holder.pod for r in rows}
        text = screen_text(app)
        assert "Allocated but idle" in text and "idle cost" in text and "USD" in text
        assert "idle cost ▼" in text.splitlines()[1]
        for job in jobs:
            assert job in text
        # By idle cost: the priced group first.
        costs = [r.idle_cost or 0.0 for r in rows]
        assert costs == sorted(costs, reverse=True) and costs[0] > 0
        # s: by idle time; r: reversed.
        await pilot.press("s")
        times = [r.idle_seconds for r in app.idle_rows]
        assert app.idle_sort == "time" and times == sorted(times, reverse=True)
        await pilot.press("r")
        times = [r.idle_seconds for r in app.idle_rows]
        assert times == sorted(times) and "▲" in screen_text(app).splitlines()[1]
        # /: filter by a job id.
        job = sorted(jobs)[0]
        await pilot.press("slash", *job, "enter")
        assert [r.holder.job for r in app.idle_rows] == [job]
        # Enter on the row: the devices view with that job's devices.
        await pilot.press("enter")
        await pilot.pause()
        # (by the holder's identity, not as text: the state line names it)
        assert app.view == "devices" and f"job {job}" in app.filter.describe()
        shown = {r.device.id for r in app.shown if r.device.parent is None}
        holding = {d.id for d in last.devices if any(w.job_id == job for w in d.workloads or ())}
        assert shown == holding
        # Esc goes back to the idle view, i again to the devices; n sorts by index (i no
        # longer does).
        await pilot.press("escape")
        await pilot.pause()
        assert app.view == "idle" and not app.filter.active
        await pilot.press("i")
        assert app.view == "devices"
        await pilot.press("u", "n")
        assert app.sort_key == "index"


@pytest.mark.parametrize("width", [80, 100, 130, 200])
async def test_the_idle_view_fits_the_terminal_without_scrolling_sideways(
        held_snapshots: list[Snapshot], width: int) -> None:
    """At 80 columns (a terminal's default) the idle table is no wider than the screen: the
    namespace/pod column narrows and the devices give way (Enter still drills down to them);
    from about 105 columns every column is there. Before, it scrolled sideways below 143."""
    app, source = _app(held_snapshots)
    async with app.run_test(size=(width, 30)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        table = app.query_one("#idle-table")
        assert app.idle_rows and table.row_count == len(app.idle_rows)
        assert table.virtual_size.width <= table.scrollable_content_region.width, width
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[:5] == ["group", "idle h", "idle cost", "user", "job"]
        assert ("devices" in labels) == (width >= 110), labels
        assert "namespace/pod" in labels
        text = screen_text(app)
        assert "idle cost" in text and "namespace/pod" in text
        await pilot.press("enter")  # a holder's devices, whatever was shown
        await pilot.pause()
        assert app.view == "devices" and app.shown


async def test_idle_devices_are_marked_in_the_table_and_the_detail_panel(
        held_snapshots: list[Snapshot], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")  # the marker is a word, not only a colour
    app, source = _app(held_snapshots)
    last = held_snapshots[-1]
    idle = set(_idle_ids(last))
    assert idle
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        lines = screen_text(app).splitlines()
        rows = [line for line in lines[3:] if line.strip()]
        by_index = {}
        for ref in app.shown:
            if ref.device.parent is None and ref.device.vendor == "nvidia":
                by_index[ref.device.index] = ref.device
        nvidia_rows = [line for line in rows if line.split()[:2][1:] == ["nvidia"]
                       and line.split()[0].isdigit()]
        assert nvidia_rows
        for line in nvidia_rows:
            index = int(line.split()[0])
            assert ("idle" in line) == (by_index[index].id in idle), line
        # The first device (nvidia 0) is held by a job and idle: the panel says who and that.
        target = next(r for r in app.shown if r.device.id in idle and r.device.workloads)
        app.selected = target.key
        app._show_selected()
        await pilot.pause()
        text = screen_text(app)
        assert "idle (held)" in text and "held by" in text
        work = target.device.workloads[0]
        assert (work.job_id or work.pod) in text


async def test_workload_text_is_shown_literally_and_attribution_faults_show(
        held_snapshots: list[Snapshot]) -> None:
    def hostile(snap: Snapshot) -> Snapshot:
        devices = []
        for i, dev in enumerate(snap.devices):
            bad = CORPUS[i % len(CORPUS)]
            works = (Workload(source="kubernetes", namespace=f"ns{bad}", pod=f"[bold red]x[/]{i}",
                              container=f"c{bad}", job_id=f"[/]{i}", user=f"u{bad}"),)
            procs = tuple(replace(p, job_id=f"[i]j[/i]{bad}")
                          for p in dev.processes or ())
            devices.append(replace(dev, workloads=works, processes=procs or (ProcessSample(pid=1),)))
        bad_source = BackendStatus(name="kubernetes[/]", status="error", message=f"boom {CORPUS[4]}")
        return replace(snap, devices=tuple(devices), attribution=(bad_source,))

    snaps = [hostile(s) for s in held_snapshots]
    app, source = _app(snaps)
    async with app.run_test(size=(200, 50)) as pilot:
        await play_all(app, source, pilot)
        seen = screen_text(app)
        for keys in (("i",), ("s",), ("slash", *"[/]", "enter"), ("escape", "d"), ("down",)):
            await pilot.press(*keys)
            await pilot.pause()
            seen += "\n" + screen_text(app)
        assert app.is_running
        bad = [ch for ch in seen if ch == "\x1b" or ord(ch) < 0x20 and ch != "\n" or 0x7f <= ord(ch) <= 0x9f]
        assert not bad, bad
        for literal in (*LITERALS[:2], "[bold red]x[/]0", "attribution: kubernetes[/] error"):
            assert literal in seen, literal
        assert "[i]j[/i]" in seen  # a process's job id, in the processes panel


async def test_cluster_idle_view_covers_every_host_and_names_those_without_holders(
        held_snapshots: list[Snapshot]) -> None:
    blind = [replace(s, devices=tuple(replace(d, processes=None, workloads=None) for d in s.devices))
             for s in held_snapshots]
    frames = [{"10.0.0.1:9477": a, "10.0.0.2:9477": b} for a, b in zip(held_snapshots, blind)]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    config = parse_config(PRICED)
    app = DashboardApp(source, config=config, clock=frozen)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        assert app.idle_rows and all(k.startswith("10.0.0.1:9477") for r in app.idle_rows for k in r.devices)
        text = screen_text(app)
        # the blind host, by its hostname (both report node-a: with its address)
        assert "Holders unknown on node-a (10.0.0.2:9477)" in text
        assert "node-a (10.0.0.1:9477):nvidia" in text  # devices named with their host in a cluster


def test_a_partitions_idle_time_is_priced_with_its_share_of_the_board_energy(
        held_snapshots: list[Snapshot]) -> None:
    """With a price per kWh, a MIG slice's idle holders are priced like the others: the slice is
    given its share of its board's energy (as the ledger and ``allsmi idle`` do), so its cost
    is known, never left out for want of energy of its own."""
    config = parse_config(PRICED.replace('currency = "USD"',
                                         'currency = "USD"\nprice_per_kwh = 0.5'))
    meter = IdleMeter(5.0, 100, 1.0, config)
    for snap in held_snapshots:
        meter.add("node-a", snap)
    partitions = {d.id for d in held_snapshots[-1].devices if d.parent}
    training = [r for r in meter.rows() if r.group == "training"]
    on_slices = [r for r in training if any(k.split("\x1f")[-1] in partitions or
                                            any(p in k for p in partitions) for k in r.devices)]
    assert on_slices, [r.devices for r in training]
    for row in training:
        assert row.idle_energy_joules is not None and row.idle_cost is not None, row.devices
        assert row.idle_cost > row.idle_billed_seconds / 3600 * 4.0  # the energy adds to it


def test_the_idle_view_ranks_costs_within_their_currency_and_unknown_costs_last() -> None:
    """EUR and USD idle costs are never compared, and a holder without a price does not rank
    as a cost of 0 (below a priced holder whose idle cost is a known 0); `r` reverses all."""
    from allsmi.dashboard.state.idle import IdleRow

    def row(name: str, seconds: float, cost: float | None, currency: str | None) -> IdleRow:
        return IdleRow("g", (name, None, None, None), idle_seconds=seconds, idle_cost=cost,
                       currency=currency)

    rows = [row("usd", 10.0, 10.0, "USD"), row("eur-big", 50.0, 2.0, "EUR"),
            row("unpriced-long", 900.0, None, None), row("eur-zero", 5.0, 0.0, "EUR"),
            row("unpriced", 60.0, None, None), row("eur-small", 20.0, 1.0, "EUR")]
    want = ["eur-big", "eur-small", "eur-zero", "usd", "unpriced-long", "unpriced"]
    assert [r.holder[0] for r in order_rows(rows, "cost")] == want
    assert [r.holder[0] for r in order_rows(rows, "cost", descending=False)] == want[::-1]


def test_a_holder_idle_for_seconds_shows_idle_time_above_0() -> None:
    """A holder idle for under about 2 s is listed (its idle time is above 0) but its idle
    device-hours printed ``0.000``: it shows ``<0.001``, as ``allsmi idle`` shows ``<0.01``."""
    from allsmi.dashboard.state.idle import IdleRow
    from allsmi.usage import Holder
    from allsmi.dashboard.views.idleview import idle_cells
    from allsmi.dashboard.views.render import Palette

    cells = [idle_cells(IdleRow("g", Holder(user="ann"), idle_seconds=seconds,
                                idle_cost=None, currency=None), {}, Palette())[1].plain
             for seconds in (0.5, 1.7, 3.6, 360.0)]
    assert cells == ["<0.001", "<0.001", "0.001", "0.10"]
