"""Hosts that report the same hostname (``--hosts`` nodes cloned from one image: both say
``vm``): their rows could not be told apart in the devices view, and two addresses cut to the
same cells (``127.0.0.1:1…``) not in the cluster view. Each host is now named by its hostname
and, where another reports the same, its address; a name cut to fit keeps the part where it
differs, at every width."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.sources import StaticSource
from allsmi.dashboard.state.naming import fit_apart, host_labels
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.schema import BackendStatus

from .conftest import frozen, play_all, screen_text
from .fixtures import simulated_snapshots

HOSTS = ("127.0.0.1:19471", "127.0.0.1:19472")


def _app(fail: bool = False) -> tuple[DashboardApp, StaticSource]:
    snaps = simulated_snapshots(2, step=1.0, hostname="vm")
    if fail:  # both hosts' amd backend times out: the summary names both, apart
        snaps = [replace(s, backends=(BackendStatus("amd", "timeout", "no answer"),)) for s in snaps]
    frames = [{host: s for host in HOSTS} for s in snaps]
    source = StaticSource(frames, cluster=True, clock=frozen, interval=1.0)
    return DashboardApp(source, clock=frozen), source


def test_cut_names_stay_apart() -> None:
    labels = host_labels([(HOSTS[0], "vm"), (HOSTS[1], "vm"), ("127.0.0.1:9", "solo"),
                          ("127.0.0.1:8", "127.0.0.1:8")])
    assert labels == {HOSTS[0]: f"vm ({HOSTS[0]})", HOSTS[1]: f"vm ({HOSTS[1]})",
                      "127.0.0.1:9": "solo", "127.0.0.1:8": "127.0.0.1:8"}
    names = {**labels, "a": "gpu-node-0001.example.org", "b": "gpu-node-0002.example.org",
             "c": "gpu-node-0001-b.example.org", "d": "vm (127.0.0.1:9477)", "e": "vm (127.0.0.2:9477)"}
    for width in range(4, 40):
        cut = fit_apart(names, width)
        assert all(len(text) <= width for text in cut.values()), (width, cut)
        assert len(set(cut.values())) == len(names), (width, cut)
        assert all(cut[k] == v for k, v in names.items() if len(v) <= width)


@pytest.mark.parametrize("width", [60, 80, 100, 160, 250])
async def test_two_hosts_named_alike_have_rows_told_apart(width: int) -> None:
    app, source = _app()
    async with app.run_test(size=(width, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("d", "t")  # by temperature: the two hosts' like devices side by side
        await pilot.pause()
        table = app.device_table
        assert any(c.id == "host" for c in table.spec), [c.id for c in table.spec]
        shown = {ref.host: str(table.get_cell(ref.key, "host")) for ref in app.shown}
        assert len(shown) == 2 and len(set(shown.values())) == 2, shown
        text = screen_text(app)
        for cell in shown.values():
            assert cell in text, (cell, text)
        if width >= 250:  # whole: its name and, since it is shared, its address
            assert set(shown.values()) == {f"vm ({h})" for h in HOSTS}
        # The processes panel names each process's device after its host's, apart too.
        await pilot.press("p")
        await pilot.pause()
        devices = {str(cells[4]).rsplit(":", 1)[0] for cells in app.process_table._values.values()}
        assert len(devices) == 2, devices
        # The cluster view: the host column shows addresses, cut apart.
        await pilot.press("c")
        await pilot.pause()
        hosts = app.query_one("#host-table", DiffTable)
        cells = {str(hosts.get_row(f"host:{h}")[0]) for h in HOSTS}
        assert len(cells) == 2, cells


async def test_a_failing_backend_names_each_host_apart() -> None:
    app, source = _app(fail=True)
    async with app.run_test(size=(250, 30)) as pilot:
        await play_all(app, source, pilot)
        line = screen_text(app).splitlines()[0]
        assert f"amd timeout on vm ({HOSTS[0]}), vm ({HOSTS[1]})" in line, line
