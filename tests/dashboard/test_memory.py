"""What the dashboard keeps in memory: views built on first use, render caches that do not
pile up (benchmarks/dashboard.py measures the resident memory itself)."""

from __future__ import annotations

import gc
import sys
import typing
import weakref
from typing import Any

from textual.geometry import Region

from allsmi.support import heap
from allsmi.dashboard.screen.footer import KeyFooter
from allsmi.dashboard.views.panels import DetailPanel
from allsmi.dashboard.tables.difftable import DiffTable

from .conftest import make_app, play_all
from .fixtures import simulated_snapshots


async def test_hidden_views_and_the_filter_box_are_built_on_first_use() -> None:
    app, source = make_app(simulated_snapshots(3, step=1.0))
    async with app.run_test(size=(160, 50)) as pilot:
        await play_all(app, source, pilot)
        switcher = app.query_one("#views")
        assert [c.id for c in switcher.children] == ["devices"]
        assert not app.query("#filter") and not app.query("#group-table")
        assert len(app.query(KeyFooter)) == 1 and not app.query("FooterKey")
        app.action_view("groups")
        await pilot.pause()
        assert app.view == "groups" and app.query_one("#group-table", DiffTable).row_count > 0
        app.action_view("devices")
        await pilot.pause()
        app.action_view("groups")  # built once: shown again, not built again
        await pilot.pause()
        assert [c.id for c in switcher.children] == ["devices", "groups"]
        await pilot.press("slash")
        assert app.query_one("#filter").has_class("-visible")


async def test_process_panel_keeps_only_the_rows_shown_and_draws_only_lines_on_screen() -> None:
    """The processes panel is line-based (no DataTable caches keyed by an update counter):
    it holds one row per process shown, renders only cells whose value changed and only on
    lines on screen, and forgets the processes that went."""
    snaps = simulated_snapshots(30, step=1.0)
    app, source = make_app(snaps)
    app.process_scope = "all"
    async with app.run_test(size=(200, 60)) as pilot:
        table = app.process_table
        for _ in range(len(snaps) - 1):
            source.advance()
            app.poll()
            await pilot.pause()
            assert set(table._rows) == set(table.row_keys) == set(table._values)
            assert set(table._stale) <= set(table.row_keys)
        height = table.scrollable_content_region.height
        assert table.row_count > height  # more processes than lines: some never drawn
        drawn = [key for key in table.row_keys if key not in table._stale]
        assert len(drawn) <= height
        before = table.lines_rendered
        app.poll()  # the same snapshot again: nothing changed, nothing drawn
        await pilot.pause()
        assert table.lines_rendered == before


async def test_the_node_view_runs_without_datatable() -> None:
    """The node view (device table, processes panel) is line-based: Textual's DataTable
    module is imported only with the views that use it (a fresh interpreter)."""
    import subprocess
    import sys
    code = """
import asyncio, sys
sys.path.insert(0, "tests")
from dashboard.conftest import make_app, play_all
from dashboard.fixtures import simulated_snapshots
async def main():
    app, source = make_app(simulated_snapshots(3, step=1.0))
    app.process_scope = "all"
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        assert app.process_table.row_count > 0
        print("node", "textual.widgets._data_table" in sys.modules)
        app.action_view("groups")
        await pilot.pause()
        print("groups", "textual.widgets._data_table" in sys.modules)
asyncio.run(main())
"""
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["node", "False", "groups", "True"], out.stdout


def _cached_lines(widget: Any) -> int:
    """Lines held in the widget's Textual line cache (each a styled strip with its own caches)."""
    return len(widget._styles_cache._cache)


async def test_covered_containers_and_blank_lines_keep_no_line_copies() -> None:
    """The screen and the views' containers are drawn blank and cache no lines; the panels'
    container caches its border line only; below a table's rows and a panel's text, one blank
    line is drawn and repeated (the same strip), not a styled copy per line."""
    app, source = make_app(simulated_snapshots(3, step=1.0))
    async with app.run_test(size=(200, 120)) as pilot:
        await play_all(app, source, pilot)
        await pilot.pause()
        for selector in ("#views", "#devices"):
            assert _cached_lines(app.query_one(selector)) == 0, selector
        assert _cached_lines(app.screen) == 0
        bottom = app.query_one("#bottom")
        assert bottom.size.height > 2 and _cached_lines(bottom) == 1
        table = app.device_table
        rows = table.row_count
        height = table.size.height
        assert rows + 10 < height  # a tall terminal: many blank lines below the rows
        assert _cached_lines(table) <= rows + 2  # the header, the rows, one blank line
        lines = table.render_lines(Region(0, 0, table.size.width, height))
        assert len(lines) == height
        assert len({id(line) for line in lines[rows + 1:]}) == 1
        assert all(line.text.strip() == "" for line in lines[rows + 1:])
        details = app.query_one("#details", DetailPanel)
        shown = len(details.lines)
        assert shown < details.size.height
        assert _cached_lines(details) <= shown + 1
        panel = details.render_lines(Region(0, 0, details.size.width, details.size.height))
        assert len({id(line) for line in panel[shown:]}) == 1
        assert [line.text.strip()[:20] for line in panel[:shown]] == [t.plain.strip()[:20] for t in details.lines]
        assert all(line.text.strip() == "" for line in panel[shown:])


def test_the_node_view_does_not_import_the_other_views() -> None:
    """A local dashboard on its node view imports neither the idle, groups or cluster views'
    modules (the groups view's totals layout included) nor the help screen or the filter box;
    each comes with its first use (a fresh interpreter)."""
    import subprocess
    import sys
    code = """
import asyncio, sys
sys.path.insert(0, "tests")
from dashboard.conftest import make_app, play_all
from dashboard.fixtures import simulated_snapshots
LAZY = ("allsmi.dashboard.views.idleview", "allsmi.dashboard.views.hosts",
        "allsmi.dashboard.tables.difftable", "allsmi.dashboard.screen.help",
        "allsmi.dashboard.screen.filterbox", "allsmi.dashboard.views.groups")
def loaded():
    return ",".join(m.rsplit(".", 1)[1] for m in LAZY if m in sys.modules) or "-"
async def main():
    app, source = make_app(simulated_snapshots(3, step=1.0))
    async with app.run_test(size=(200, 60)) as pilot:
        await play_all(app, source, pilot)
        print("node", loaded())
        await pilot.press("i")
        await pilot.pause()
        assert app.view == "idle"
        print("idle", loaded())
        await pilot.press("slash")
        await pilot.press("escape")
        await pilot.press("question_mark")
        await pilot.pause()
        print("help", loaded())
        await pilot.press("escape")
        await pilot.press("g")
        await pilot.pause()
        assert app.view == "groups" and app.query_one("#group-table").row_count > 0
        print("groups", loaded())
asyncio.run(main())
"""
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["node", "-", "idle", "idleview,difftable",
                                  "help", "idleview,difftable,help,filterbox",
                                  "groups", "idleview,difftable,help,filterbox,groups"], out.stdout


class _Cycle:
    """A node of a garbage cycle (weakly referenceable, to see when it is freed)."""

    def __init__(self) -> None:
        self.me = self


def _garbage_cycle() -> "weakref.ref[_Cycle]":
    return weakref.ref(_Cycle())  # unreachable at once; only the cycle collector frees it


def test_release_collects_garbage_cycles_before_trimming() -> None:
    """allsmi.support.heap.release frees the garbage cycles (the automatic collector off here)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        ref = _garbage_cycle()
        assert ref() is not None
        heap.release()
        assert ref() is None
    finally:
        if enabled:
            gc.enable()


async def test_the_running_dashboard_collects_its_garbage_cycles(monkeypatch: Any) -> None:
    """A refresh frees about as many container objects as it makes, so Python's collector,
    counting the difference, seldom runs: the dashboard collects its garbage cycles itself,
    every ``heap.TRIM_SECONDS`` (about 0.6 MiB less resident; benchmarks/dashboard.py)."""
    monkeypatch.setattr(heap, "TRIM_SECONDS", 0.05)
    app, source = make_app(simulated_snapshots(3, step=1.0))
    enabled = gc.isenabled()
    gc.disable()  # only the dashboard's own passes collect
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await play_all(app, source, pilot)
            ref = _garbage_cycle()
            for _ in range(100):
                if ref() is None:
                    break
                await pilot.pause(0.05)
            assert ref() is None
    finally:
        if enabled:
            gc.enable()


def test_settle_empties_the_import_and_typing_caches() -> None:
    """allsmi.support.heap.settle drops what only start-up needed: the importer cache's finders and
    typing's cached subscriptions (built again on use)."""
    sys.path_importer_cache["/allsmi-test-planted"] = None
    union = typing.Union[int, str]
    assert typing.Union[int, str] is union  # cached
    heap.settle()
    assert "/allsmi-test-planted" not in sys.path_importer_cache
    assert typing.Union[int, str] is not union
    assert typing.Union[int, str] == union


async def test_the_dashboard_settles_once_the_first_data_is_on_screen() -> None:
    """Start-up's caches go once the first data is shown (benchmarks/dashboard_memory.py)."""
    app, source = make_app(simulated_snapshots(3, step=1.0))
    sys.path_importer_cache["/allsmi-test-planted"] = None
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await play_all(app, source, pilot)
            for _ in range(100):
                if "/allsmi-test-planted" not in sys.path_importer_cache:
                    break
                await pilot.pause(0.05)
            assert "/allsmi-test-planted" not in sys.path_importer_cache
    finally:
        sys.path_importer_cache.pop("/allsmi-test-planted", None)


def test_dataclasses_nothing_compares_or_prints_compile_no_eq_or_repr() -> None:
    """Each generated ``__eq__``/``__repr__`` is code kept for the process's life."""
    from allsmi.dashboard.state.idle import IdleRow
    from allsmi.dashboard.tables.columns import RowContext
    from allsmi.dashboard.views.render import Palette
    for cls in (IdleRow, RowContext, Palette):
        assert "__eq__" not in vars(cls) and "__repr__" not in vars(cls), cls
