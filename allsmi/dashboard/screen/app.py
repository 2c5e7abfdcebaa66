"""The dashboard application: node view, resource-group view, cluster view.

The app is built from explicit inputs (a :class:`~allsmi.dashboard.sources.Source`,
the configuration, options and a monotonic clock), so tests drive it with
fixed snapshots and a frozen clock. It never calls hardware: the local
collector samples in its own thread and tells the app of each new snapshot;
network sources fetch in a daemon thread, one round at a time (data in:
:mod:`allsmi.dashboard.screen.feed`; drawing: :mod:`allsmi.dashboard.screen.drawing`; keys:
:mod:`allsmi.dashboard.screen.actions`).
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from textual import events
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import ContentSwitcher, Input, Static

from allsmi.config import Config
from allsmi.schema.formatting import NA
from allsmi.usage import bridged_gap_seconds

from allsmi.dashboard.screen.actions import BINDINGS, KeyActions
from allsmi.dashboard.tables.columns import Column, content_widths, hidden_columns
from allsmi.dashboard.tables.device_table import DeviceTable, columns_for
from allsmi.dashboard.screen.drawing import ViewDrawing
from allsmi.dashboard.screen.feed import DataFeed
from allsmi.dashboard.state.idle import IdleMeter, IdleRow
from allsmi.dashboard.screen.keynames import install as install_key_names
from allsmi.dashboard.state.filtering import NO_GROUP, Filter
from allsmi.dashboard.state.model import DESCENDING_BY_DEFAULT, DeviceRef, EnergyMeter, History, Retention
from allsmi.dashboard.state.naming import DeviceNames
from allsmi.dashboard.screen.options import DashboardOptions
from allsmi.dashboard.screen.footer import KeyFooter
from allsmi.dashboard.views.panels import DetailPanel, ProcessTable, SummaryBar
from allsmi.dashboard.views.render import Palette
from allsmi.dashboard.sources import HostState, Source
from allsmi.dashboard.state.totals import Totals

if TYPE_CHECKING:
    from textual.widgets import DataTable

VIEWS = ("devices", "groups", "idle", "cluster")
#: Below this many lines the details/processes panel is hidden unless asked for (`z`), so the
#: device table keeps rows to show.
PANEL_MIN_HEIGHT = 20
#: Below this many lines the footer and the summary's second line are dropped too (class
#: ``-tiny``), so that a 5-line terminal still shows device rows.
TINY_HEIGHT = 10
#: The sort a click on a header of the groups or vendors table selects.
TOTALS_SORTS = {"name": "index", "host": "index", "util": "utilization", "memory": "memory", "power": "power"}


# The screen and the containers under the views are drawn blank (Textual's ``BLANK``): each line
# is one shared blank strip instead of a styled line kept in the widget's line cache with its
# own caches (the compositor draws every widget, even one its children cover whole).
class BlankScreen(Screen[None]):
    BLANK = True


class Views(ContentSwitcher):
    BLANK = True


class View(Vertical):
    BLANK = True


class Bottom(Horizontal):
    """The details and processes panels: of its own lines only the top border is seen."""

    def render_lines(self, crop: Region) -> list[Strip]:
        x, y, width, height = crop
        border = super().render_lines(Region(x, 0, width, 1)) if y == 0 else []
        return (border + [Strip.blank(width, self.visual_style.rich_style)] * height)[:height]


class DashboardApp(KeyActions, DataFeed, ViewDrawing, App[None]):
    """``allsmi``'s live terminal UI."""

    CSS_PATH = "allsmi.tcss"
    TITLE = "allsmi"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = BINDINGS

    idle_sort: str = "cost"
    """The idle view's sort (``s`` there)."""
    idle_descending: bool = True

    def __init__(self, source: Source, *, config: Config | None = None,
                 options: DashboardOptions | None = None, clock: Callable[[], float] = time.monotonic,
                 history_points: int | None = None, poll_seconds: float | None = None,
                 speed: float = 1.0) -> None:
        super().__init__()
        install_key_names()  # keeps the Unicode name tables out of memory (0.8 MiB)
        self.quit_signal: int | None = None
        """The signal that ended the app, if one did."""
        self.source = source
        """Where snapshots come from (the local collector, remote hosts, Prometheus, fixtures)."""
        self.config = config or Config()
        self.options = options or DashboardOptions()
        self.clock = clock
        """Monotonic clock for data ages (frozen in tests)."""
        interval = max(0.05, float(source.interval))
        self.poll_seconds = poll_seconds or min(1.0, max(0.1, interval / 2))
        # About ten minutes of history per device, at least 60 points.
        self.history = History(history_points or max(60, min(1200, int(600 / interval))))
        # ``speed``: snapshot time runs faster than the sampling (ALLSMI_SIMULATE_SPEED), and
        # so does the longest gap between two samples that still counts (the idle meter's too)
        self.energy = EnergyMeter(bridged_gap_seconds(interval, speed=speed))
        self.idle = IdleMeter(self.options.idle_threshold_percent, self.history.points, interval,
                              self.config, speed)
        """Allocated-but-idle time per holder over the history window (the idle view, `i`)."""
        self.names = DeviceNames()
        """Every device's one name (``nvidia 7/1/0``), for every view."""
        self.idle_rows: list[IdleRow] = []
        """The idle view's rows as last shown."""
        self.view = "cluster" if source.cluster else "devices"
        self.sort_key = self.options.sort
        self.descending = self.sort_key in DESCENDING_BY_DEFAULT
        self.filter = Filter()
        self.drilled_from: str | None = None
        """The view Enter drilled from into the devices (groups, idle): Esc goes back to it."""
        self.process_scope = self.options.processes
        self.paused = False
        self.selected: str | None = None
        """Row key of the highlighted device."""
        self.hosts: list[HostState] = []
        self.shown: list[DeviceRef] = []
        self.refresh_error: str | None = None
        self.renders = 0
        """How many times the data views were redrawn (tests and the benchmark read it)."""
        self._signature: tuple[Any, ...] | None = None
        self._summary_text = ""
        self._palette = Palette()
        self._compact = True
        self._spark_width = 0
        self._wants_key: tuple[Any, ...] | None = None
        self._wants: dict[str, int] = {}
        self._columns_key: tuple[Any, ...] | None = None
        self._columns: list[Column] = []
        self._layout_width = 0
        self._refresh_started = 0.0
        self._refresh_cancel = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._app_context: contextvars.Context | None = None
        self._panel_choice: bool | None = None
        """The user's `z` choice for the bottom panel; ``None`` follows the terminal height."""
        self._total = Totals("all")
        self._device_retention = Retention()
        """Devices no longer reported: their history and energy are dropped after a grace."""
        self._host_retention = Retention()
        """Hosts no longer listed: their integrators and idle windows are dropped after a grace."""

    # -- layout ------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield SummaryBar(id="summary")
        # Only the device view (which resizes and the details panel always reach) and the view
        # shown first are built; each other one on its first use (_switch): most sessions never
        # open them, and each widget holds its own styles, caches and message queue.
        first = dict.fromkeys(("devices", self.view))
        yield Views(*(self._view_container(v) for v in first), initial=self.view, id="views")
        # The filter box (an Input) is built on the first `/` (filter_box).
        yield KeyFooter()

    def get_default_screen(self) -> Screen[None]:
        return BlankScreen(id="_default")

    @staticmethod
    def _view_container(view: str) -> Vertical:
        """The widgets of ``view`` (one of :data:`VIEWS`), in a container with the view's id."""
        if view == "devices":
            return View(DeviceTable(id="device-table"),
                        Bottom(DetailPanel(id="details"), ProcessTable(id="processes"), id="bottom"),
                        id="devices")
        from allsmi.dashboard.tables.difftable import DiffTable  # the DataTable views: imported on their first use
        if view == "groups":
            return View(Static("Resource groups", classes="section-title"),
                        DiffTable((), id="group-table", classes="totals"),
                        Static("Vendors", classes="section-title"),
                        DiffTable((), id="vendor-table", classes="totals"), id="groups")
        if view == "idle":
            from allsmi.dashboard.views.idleview import IDLE_COLUMNS
            return View(Static(id="idle-title", classes="section-title"),
                        DiffTable(IDLE_COLUMNS, id="idle-table"), Static(id="idle-note"), id="idle")
        from allsmi.dashboard.views.hosts import HOST_COLUMNS
        return View(Static("Hosts", classes="section-title", id="hosts-title"), DiffTable(HOST_COLUMNS, id="host-table"),
                    Static(id="host-detail"), Static("Resource groups", classes="section-title"),
                    DiffTable((), id="cluster-group-table", classes="totals"),
                    Static("Vendors", classes="section-title"),
                    DiffTable((), id="cluster-vendor-table", classes="totals"), id="cluster")

    def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._app_context = contextvars.copy_context()  # the app's context, for calls from threads
        self.theme = self.options.theme
        self._palette = Palette.from_theme(self.current_theme, self.no_color)
        for host, snap in self.source.history():
            self.history.add(host, snap)
            self.idle.add(host, snap)
        self._configure_columns()
        self._fit_panel(self.size.height)
        self._focus_view()
        self._start_feed()
        # Everything built so far (modules, widgets, styles) lives as long as the app: keep it
        # out of the collector's full passes, which otherwise stall keys for tens of ms. The
        # start-up's garbage cycles go first: frozen, they would never be freed (about 1400
        # objects, 0.2 MiB, on 8 GPUs).
        gc.collect()
        gc.freeze()

    def on_unmount(self) -> None:
        self._refresh_cancel.set()
        self._arm_watchdog(0.0)  # cancels it (nothing is armed once cancelled)

    def on_resize(self, event: events.Resize) -> None:
        # The event carries the new size; ``self.size`` may still be the old one here.
        self.set_class(event.size.height >= 40, "-tall")
        self.set_class(event.size.height < TINY_HEIGHT, "-tiny")
        self._fit_panel(event.size.height)
        if self._configure_columns(event.size.width) or self.view != "devices":
            self.refresh_view()  # the totals' columns, the idle title, the problem column

    def _fit_panel(self, height: int) -> None:
        shown = self._panel_choice if self._panel_choice is not None else height >= PANEL_MIN_HEIGHT
        bottom = self.query_one("#bottom")
        came_back = shown and bottom.has_class("-hidden")
        bottom.set_class(not shown, "-hidden")
        focused = self.focused
        if not shown and focused is not None and bottom in focused.ancestors:
            self._focus_view()  # the keys would go to a panel no longer on screen
        if came_back and self.view == "devices":
            self._show_selected()  # not drawn while hidden

    def _configure_columns(self, width: int | None = None) -> bool:
        # The width of the last resize: ``self.size`` may still be the old one during it.
        width = self._layout_width = width or self._layout_width or self.size.width
        wants = self._content_widths()
        key = (width, self.source.cluster, tuple(sorted(wants.items())))
        if key != self._columns_key:  # the same width and names: the same columns (each refresh)
            self._columns_key = key
            columns, compact, spark = columns_for(width - 2, self.source.cluster, wants)
            self._compact, self._spark_width = compact, spark
            self.hidden_columns = hidden_columns(columns, self.source.cluster)
            self._columns = columns
        return self.device_table.configure(self._columns)

    def _content_widths(self) -> dict[str, int]:
        """How wide the longest model, vendor and host names are (measured once per new data)."""
        key = tuple((h.key, id(h.snapshot), h.name) for h in self.hosts)
        if key != self._wants_key:
            names = self.host_names()  # (a shared hostname with its address: the column's text)
            self.names.update((h.key, h.snapshot) for h in self.hosts)
            self._wants_key, self._wants = key, content_widths(self.all_refs(), names, self.names.places)
        return self._wants

    # -- typed accessors -------------------------------------------------------------------
    @property
    def device_table(self) -> DeviceTable:
        """The node view's table."""
        return self.query_one("#device-table", DeviceTable)

    @property
    def process_table(self) -> ProcessTable:
        """The processes panel."""
        return self.query_one("#processes", ProcessTable)

    # -- events ------------------------------------------------------------------------------
    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "host-table":
            self._show_host_detail()

    def on_device_table_row_highlighted(self, event: DeviceTable.RowHighlighted) -> None:
        if event.row_key != self.selected:
            self.selected = event.row_key
            self._show_selected()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value or ""
        kind, _, name = key.partition(":")
        if kind == "group":  # "N/A": the devices without a group, not every device
            self._drill(Filter(group=NO_GROUP if name == NA else name))
        elif kind == "vendor":
            self._drill(Filter(vendor=name))
        elif kind == "idle":
            row = next((r for r in self.idle_rows if r.key == name), None)
            if row is not None:  # the devices it held idle: these, not whatever its name finds
                from allsmi.dashboard.views.idleview import drill_filter
                self._drill(drill_filter(row, self.all_refs()))
        elif kind == "host":
            focus = getattr(self.source, "focus", None)
            if focus is not None:  # a large fleet: fetch this host's devices from now on
                focus([name])
            self._drill(Filter(host=name))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a header of the groups, vendors, hosts or idle table sorts by that column,
        as the device table's headers do (the same key again reverses)."""
        column = event.column_key.value
        if event.data_table.id == "idle-table" and column in ("idle", "cost"):
            wanted = "time" if column == "idle" else "cost"
            if wanted == self.idle_sort:
                self.action_reverse_sort()
            else:
                self.idle_sort, self.idle_descending = wanted, True
                self.refresh_view()
        elif column in TOTALS_SORTS and event.data_table.id != "idle-table":  # (totals, hosts)
            self.action_sort(TOTALS_SORTS[column])

    def on_device_table_header_selected(self, event: DeviceTable.HeaderSelected) -> None:
        for column in self.device_table.spec:
            if column.id == event.column_id and column.sort:
                self.action_sort(column.sort)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self._set_filter(replace(self.filter, text=event.value.strip()))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self._close_filter()

    def _drill(self, flt: Filter) -> None:
        # Esc goes back to the view the row was in (a group row of the cluster view too)
        self.drilled_from = self.view if self.view in ("groups", "idle", "cluster") else None
        self.filter = flt
        self._switch("devices")

    def _set_filter(self, flt: Filter) -> None:
        self.filter = flt
        self.refresh_view()

    def filter_box(self, build: bool = False) -> Input | None:
        """The filter box; ``None`` before the first `/` unless ``build`` (then it is mounted,
        hidden, above the footer)."""
        found = self.query("#filter")
        if found:
            return found.first(Input)
        if not build:
            return None
        from allsmi.dashboard.screen.filterbox import FilterInput
        box = FilterInput(placeholder="filter: model, vendor, id, group, host, user, command "
                                      "(Enter keeps it, Esc clears)", id="filter")
        box.cursor_blink = False
        self.mount(box, after="#views")
        return box

    def close_filter(self) -> None:
        """Hide the filter box (keeping its filter) and give the focus back to the view."""
        self._close_filter()

    def _close_filter(self) -> None:
        box = self.filter_box()
        if box is not None:
            box.remove_class("-visible")
        self._focus_view()

    def _switch(self, view: str) -> None:
        switcher = self.query_one("#views", ContentSwitcher)
        if not any(child.id == view for child in switcher.children):
            # First use: build it, and show it once its widgets are in (self.view, which every
            # drawing follows, changes only then).
            self.call_next(self._build_and_show, view)
            return
        self._show_view(view)

    async def _build_and_show(self, view: str) -> None:
        switcher = self.query_one("#views", ContentSwitcher)
        if not any(child.id == view for child in switcher.children):
            await switcher.mount(self._view_container(view))
        self._show_view(view)

    def _show_view(self, view: str) -> None:
        self.view = view
        self.query_one("#views", ContentSwitcher).current = view
        self._focus_view()
        self.refresh_view()

    def _focus_view(self) -> None:
        target = {"devices": "#device-table", "groups": "#group-table", "idle": "#idle-table",
                  "cluster": "#host-table"}[self.view]
        self.query_one(target).focus()

    async def action_quit(self) -> None:
        """Leave at once; refresh and fetch threads are daemons, told to stop."""
        self._refresh_cancel.set()
        self.workers.cancel_all()
        self.exit()
