"""What a tour of every view found wrong, each checked on screen (Pilot): a partition counted
as a device of its group, the idle view's total cut at 80 columns, a table that lost its
highlighted row when its rows were sorted again, unknown processes counted as none, unknown
memory drawn as ``N/A/N/A``."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable

import pytest

from allsmi.config import parse_config
from allsmi.dashboard.tables.difftable import DiffTable
from allsmi.schema import DeviceSample, Snapshot

from .conftest import make_app, play_all, screen_text
from .fixtures import GROUPS_TOML, simulated_snapshots

pytestmark = pytest.mark.timeout(120)


def tweak(snapshots: list[Snapshot], change: Callable[[DeviceSample], DeviceSample]) -> list[Snapshot]:
    return [replace(s, devices=tuple(change(d) for d in s.devices)) for s in snapshots]


def row_of(text: str, name: str) -> list[str]:
    """The cells (split on runs of blanks) of the screen line that starts with ``name``."""
    line = next(line for line in text.splitlines() if line.split()[:1] == [name])
    return line.split()


async def test_a_mig_slice_of_another_group_is_a_partition_there_not_a_device() -> None:
    """A rule gives GPU 7's 1g.10gb slice to ``slices``: that group has one partition and no
    device (it read ``1+1p``, two things where there is one), ``training`` keeps GPU 7 and its
    other two slices (``8+2p``), and the summary still counts 38 devices and 3 partitions."""
    config = parse_config('[[rules]]\nresource_group = "slices"\nmodel = "*MIG 1g.10gb"\n' + GROUPS_TOML)
    snaps = simulated_snapshots(3, config=config)
    app, source = make_app(snaps, config=config)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        text = screen_text(app)
        assert row_of(text, "slices")[1] == "0+1p"
        assert row_of(text, "training")[1] == "8+2p"
        assert row_of(text, "nvidia")[1] == "8+3p"
        assert "38 devices + 3 partitions" in text.splitlines()[0]


async def test_the_idle_title_keeps_its_totals_whole_at_80_columns() -> None:
    """At 80 columns the line above the idle table ended at ``0.099 device-h,``: the idle cost
    it adds up was cut off. The words about the threshold give way instead."""
    snaps = simulated_snapshots(12, step=1.0, attribution=True)
    priced = GROUPS_TOML.replace('labels = { team = "ml", project = "llm" }',
                                 'labels = { team = "ml", project = "llm" }\n'
                                 'price_per_device_hour = 4.0\ncurrency = "USD"')
    app, source = make_app(snaps, config=parse_config(priced))
    async with app.run_test(size=(80, 24)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        title = screen_text(app).splitlines()[2].rstrip()
        cost = sum(r.idle_cost or 0.0 for r in app.idle_rows)
        # (holders without a price are left out of it: a lower bound, the note says why)
        assert cost > 0 and title.endswith(f"device-h, ≥{cost:.2f} USD"), title
        assert title.startswith(" Allocated but idle") and len(title) <= 80
        await pilot.resize_terminal(160, 30)  # room again: the threshold is said in full
        await pilot.pause()
        assert "(held, util < 5%)" in screen_text(app).splitlines()[2]


async def test_the_idle_total_cost_says_it_leaves_out_the_holders_without_a_price() -> None:
    """Only ``training`` is priced: the title's total cost added up its holders' idle cost and
    read as the whole (``8 holders, 0.027 device-h, 0.03 USD``) while five holders of unpriced
    groups were not in it. It says so, at every width (under the table in full), as the
    reports mark a sum that leaves out unknown costs; with every holder priced, nothing."""
    snaps = simulated_snapshots(12, step=1.0, attribution=True)
    priced = GROUPS_TOML.replace('labels = { team = "ml", project = "llm" }',
                                 'labels = { team = "ml", project = "llm" }\n'
                                 'price_per_device_hour = 4.0\ncurrency = "USD"')
    app, source = make_app(snaps, config=parse_config(priced))
    async with app.run_test(size=(170, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        rows = app.idle_rows
        unknown = sum(1 for r in rows if r.idle_cost is None)
        cost = sum(r.idle_cost or 0.0 for r in rows)
        assert unknown and cost > 0
        lines = screen_text(app).splitlines()
        assert lines[2].rstrip().endswith(
            f", {cost:.2f} USD ({unknown} holders without a known cost not included)"), lines[2]
        text = screen_text(app)
        assert f"Idle cost unknown for {unknown} holders" in text
        for width in (80, 100, 120):  # narrower: said shorter, or marked as a lower bound
            await pilot.resize_terminal(width, 40)
            await pilot.pause()
            title = screen_text(app).splitlines()[2].rstrip()
            assert len(title) <= width and (f"{cost:.2f} USD ({unknown} " in title
                                             or title.endswith(f"≥{cost:.2f} USD")), title
            assert f"Idle cost unknown for {unknown} holders" in screen_text(app)
    # Every group priced: the total is the whole, and nothing is said about it.
    every = priced.replace('labels = { team = "serving" }',
                           'labels = { team = "serving" }\nprice_per_device_hour = 2.0\ncurrency = "USD"') \
        + '\n[groups.default]\nprice_per_device_hour = 1.0\ncurrency = "USD"\n'
    app, source = make_app(snaps, config=parse_config(every))
    async with app.run_test(size=(170, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("i")
        await pilot.pause()
        assert all(r.idle_cost is not None for r in app.idle_rows)
        text = screen_text(app)
        assert "not included" not in text and "≥" not in text and "Idle cost unknown" not in text


async def test_the_groups_table_keeps_its_highlighted_group_when_the_order_changes() -> None:
    """Sorted by utilization, the highlighted row stayed at its place while the groups moved
    under it: Enter then drilled into another group than the one the user had picked."""
    snaps = simulated_snapshots(3, step=1.0)

    def load(group: str, value: float) -> Callable[[DeviceSample], DeviceSample]:
        return lambda d: replace(d, utilization_percent=value) if d.resource_group == group \
            and d.utilization_percent is not None else d
    # training busiest first, then idle while inference is busy: the order flips
    frames = tweak(snaps[:2], load("training", 99.0)) + tweak(snaps[2:], load("training", 1.0))
    app, source = make_app(frames)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        await pilot.press("g", "u")
        await pilot.pause()
        table = app.query_one("#group-table", DiffTable)
        assert table.row_keys[0] == "group:training"
        table.focus()
        table.move_cursor(row=0)  # the busiest group
        await pilot.pause()
        assert table.row_keys[table.cursor_row] == "group:training"
        await play_all(app, source, pilot)
        assert table.row_keys[-1] == "group:training"  # it moved to the bottom
        await pilot.press("enter")
        await pilot.pause()
        assert app.view == "devices" and "group=training" in screen_text(app).splitlines()[1]


async def test_a_group_whose_processes_nobody_lists_reads_na_not_0() -> None:
    """A backend that cannot list processes (``processes`` is ``None``): the device table said
    N/A, the groups view counted none (``0``); where some devices list them, it says of how
    many (``(4 of 8)``)."""
    snaps = simulated_snapshots(3, step=1.0)
    furiosa = [d.id for d in snaps[0].devices if d.vendor == "furiosa"]
    amd = [d.id for d in snaps[0].devices if d.vendor == "amd"][:4]
    frames = tweak(snaps, lambda d: replace(d, processes=None) if d.id in furiosa + amd else d)
    app, source = make_app(frames)
    async with app.run_test(size=(160, 40)) as pilot:
        await play_all(app, source, pilot)
        await pilot.press("g")
        await pilot.pause()
        text = screen_text(app)
        header = re.split(r"\s{2,}", next(line for line in text.splitlines()
                                           if "power / limit" in line).strip())
        at = header.index("procs")
        procs = {name: re.split(r"\s{2,}", next(line for line in text.splitlines()
                                                if line.split()[:1] == [name]).strip())[at]
                 for name in ("furiosa", "amd", "nvidia")}
        assert procs["furiosa"] == "N/A"
        listed = sum(len(d.processes or ()) for d in frames[-1].devices if d.vendor == "amd")
        assert procs["amd"] == f"{listed} (4 of 8)" and listed > 0
        nvidia = sum(len(d.processes or ()) for d in frames[-1].devices if d.vendor == "nvidia")
        assert procs["nvidia"] == str(nvidia)


async def test_a_device_whose_memory_is_unknown_reads_na_once() -> None:
    """A lost device reports no memory: its row and the details read ``N/A/N/A``."""
    snaps = simulated_snapshots(3, step=1.0)
    lost = snaps[0].devices[0].id
    frames = tweak(snaps, lambda d: replace(d, health="lost", memory_used_bytes=None,
                                            memory_total_bytes=None) if d.id == lost else d)
    app, source = make_app(frames)
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        text = screen_text(app)
        assert "N/A/N/A" not in text, text
        row = next(line for line in text.splitlines() if line.split()[:2] == ["0", "nvidia"])
        assert " N/A " in row and "lost" in row
        mem = next(line for line in text.splitlines() if line.lstrip().startswith("mem "))
        assert mem.split()[:2] == ["mem", "N/A"]
