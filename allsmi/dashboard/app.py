"""The dashboard application: node view, resource-group view, cluster view.

The app is built from explicit inputs (a :class:`~allsmi.dashboard.sources.Source`,
the configuration, options and a monotonic clock), so tests drive it with
fixed snapshots and a frozen clock. It never calls hardware: the local
collector samples in its own thread and the app reads its latest snapshot
on a timer; network sources fetch in a thread worker, one round at a time,
the next round armed only when the previous one finished.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import time
from typing import Any, Callable, Sequence

from rich.console import Group as RichGroup
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.css.query import NoMatches
from textual.containers import Horizontal, Vertical
from textual.widgets import ContentSwitcher, DataTable, Input, Static

from allsmi.config import Config
from allsmi.formatting import NA

from .columns import content_widths
from .device_table import DeviceTable, RowContext, columns_for, parent_names
from .actions import BINDINGS, KeyActions
from .hosts import HOST_COLUMNS, host_detail, host_rows, problem_width
from .idle import IdleMeter, IdleRow
from .idleview import IDLE_COLUMNS, IdleView
from .model import (DESCENDING_BY_DEFAULT, DeviceRef, EnergyMeter, Filter, History, Retention,
                    apply_filter, order_devices, refs_of)
from .options import DashboardOptions
from .panels import (MAX_PROCESS_ROWS, TOTALS_COLUMNS, DetailPanel, DiffTable, LeanFooter, ProcessTable, SummaryBar,
                     totals_cells)
from .render import Palette, safe, safe_text
from .sources import HostState, Source
from .summary import summary_lines
from .totals import Totals, order_totals, sum_totals, totals_by

VIEWS = ("devices", "groups", "idle", "cluster")
#: Below this many lines the details/processes panel is hidden unless asked for (`z`), so the
#: device table keeps rows to show.
PANEL_MIN_HEIGHT = 20
#: Below this many lines the footer and the summary's second line are dropped too (class
#: ``-tiny``), so that a 5-line terminal still shows device rows.
TINY_HEIGHT = 10
VENDOR_COLUMNS = tuple(c for c in TOTALS_COLUMNS if c[0] != "labels")


class DashboardApp(KeyActions, IdleView, App[None]):
    """``allsmi``'s live terminal UI."""

    CSS_PATH = "allsmi.tcss"
    TITLE = "allsmi"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = BINDINGS

    def __init__(self, source: Source, *, config: Config | None = None,
                 options: DashboardOptions | None = None, clock: Callable[[], float] = time.monotonic,
                 history_points: int | None = None, poll_seconds: float | None = None) -> None:
        super().__init__()
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
        self.energy = EnergyMeter()
        self.idle = IdleMeter(self.options.idle_threshold_percent, self.history.points, interval,
                              self.config)
        """Allocated-but-idle time per holder over the history window (the idle view, `i`)."""
        self.idle_rows: list[IdleRow] = []
        """The idle view's rows as last shown."""
        self.view = "cluster" if source.cluster else "devices"
        self.sort_key = self.options.sort
        self.descending = self.sort_key in DESCENDING_BY_DEFAULT
        self.filter = Filter()
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
        with ContentSwitcher(initial=self.view, id="views"):
            with Vertical(id="devices"):
                yield DeviceTable(id="device-table")
                with Horizontal(id="bottom"):
                    yield DetailPanel(id="details")
                    yield ProcessTable(id="processes")
            with Vertical(id="groups"):
                yield Static("Resource groups", classes="section-title")
                yield DiffTable(TOTALS_COLUMNS, id="group-table", classes="totals")
                yield Static("Vendors", classes="section-title")
                yield DiffTable(VENDOR_COLUMNS, id="vendor-table", classes="totals")
            with Vertical(id="idle"):
                yield Static(id="idle-title", classes="section-title")
                yield DiffTable(IDLE_COLUMNS, id="idle-table")
                yield Static(id="idle-note")
            with Vertical(id="cluster"):
                yield Static("Hosts", classes="section-title")
                yield DiffTable(HOST_COLUMNS, id="host-table")
                yield Static(id="host-detail")
                yield Static("Resource groups", classes="section-title")
                yield DiffTable(TOTALS_COLUMNS, id="cluster-group-table", classes="totals")
                yield Static("Vendors", classes="section-title")
                yield DiffTable(VENDOR_COLUMNS, id="cluster-vendor-table", classes="totals")
        yield Input(placeholder="filter: model, vendor, id, group, host, user, command "
                                "(Enter keeps it, Esc clears)", id="filter")
        yield LeanFooter()

    def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._app_context = contextvars.copy_context()  # the app's context, for calls from threads
        self.theme = self.options.theme
        self._palette = Palette.from_theme(self.current_theme, self.no_color)
        self.query_one("#filter", Input).cursor_blink = False
        for host, snap in self.source.history():
            self.history.add(host, snap)
            self.idle.add(host, snap)
        self._configure_columns()
        self._fit_panel(self.size.height)
        self._focus_view()
        self.poll()
        self.set_interval(self.poll_seconds, self.poll)
        if getattr(self.source, "fetches", True):
            self._start_refresh()
        # Everything built so far (modules, widgets, styles) lives as long as the app: keep it
        # out of the collector's full passes, which otherwise stall keys for tens of ms.
        gc.freeze()

    def on_unmount(self) -> None:
        self._refresh_cancel.set()

    def quit_soon(self, signum: int) -> None:
        """End the app like `q`; safe from a signal handler and from any thread (the CLI's
        :class:`~allsmi.dashboard.terminal.TerminalGuard` calls it on SIGHUP and SIGTERM)."""
        self._refresh_cancel.set()
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._quit_on_signal, signum, context=self._app_context)
        except RuntimeError:  # the loop closed meanwhile: the app has ended
            pass

    def _quit_on_signal(self, signum: int) -> None:
        self.quit_signal = signum
        self._refresh_cancel.set()
        self.exit()

    def on_resize(self, event: events.Resize) -> None:
        # The event carries the new size; ``self.size`` may still be the old one here.
        self.set_class(event.size.height >= 40, "-tall")
        self.set_class(event.size.height < TINY_HEIGHT, "-tiny")
        self._fit_panel(event.size.height)
        if self._configure_columns(event.size.width):
            self.refresh_view()
        elif self.view == "cluster":
            self._show_hosts()  # the problem column follows the width

    def _fit_panel(self, height: int) -> None:
        shown = self._panel_choice if self._panel_choice is not None else height >= PANEL_MIN_HEIGHT
        bottom = self.query_one("#bottom")
        came_back = shown and bottom.has_class("-hidden")
        bottom.set_class(not shown, "-hidden")
        if came_back and self.view == "devices":
            self._show_selected()  # not drawn while hidden

    def _configure_columns(self, width: int | None = None) -> bool:
        # The width of the last resize: ``self.size`` may still be the old one during it.
        width = self._layout_width = width or self._layout_width or self.size.width
        columns, compact, spark = columns_for(width - 2, self.source.cluster, self._content_widths())
        self._compact, self._spark_width = compact, spark
        return self.device_table.configure(columns)

    def _content_widths(self) -> dict[str, int]:
        """How wide the longest model, vendor and host names are (measured once per new data)."""
        key = tuple((h.key, id(h.snapshot), h.name) for h in self.hosts)
        if key != self._wants_key:
            names = {h.key: h.name for h in self.hosts} if self.source.cluster else {}
            self._wants_key, self._wants = key, content_widths(self.all_refs(), names)
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

    # -- data in ---------------------------------------------------------------------------
    def poll(self) -> None:
        """Read the source (cheap, non-blocking) and redraw what changed."""
        if self._closing or self._closed or not self.screen_stack:
            return  # a timer that fires while the app shuts down: its widgets are going away
        hosts = list(self.source.hosts())
        signature = tuple((h.key, id(h.snapshot), h.error, h.retry_at) for h in hosts)
        if signature != self._signature and not self.paused:
            self._signature = signature
            self.hosts = hosts
            for host in hosts:
                if host.snapshot is not None:
                    self.history.add(host.key, host.snapshot)
                    self.energy.add(host.key, host.snapshot)
                    self.idle.add(host.key, host.snapshot)
            self._forget_gone(hosts)
            self.refresh_view()
        self._update_summary()

    def _forget_gone(self, hosts: Sequence[HostState]) -> None:
        """Drop what is kept for devices and hosts no longer reported, after the grace
        (:data:`~allsmi.dashboard.model.GONE_GRACE_SECONDS`), so memory follows what is shown."""
        now = self.clock()
        gone = self._device_retention.update(
            (ref.key for h in hosts for ref in refs_of(h.key, h.snapshot)), now)
        if gone:
            self.history.drop(gone)
            self.energy.drop(gone)
        left = self._host_retention.update((h.key for h in hosts), now)
        if left:
            self.history.forget_hosts(left)
            self.energy.forget_hosts(left)
            self.idle.drop_hosts(left)

    def _start_refresh(self) -> None:
        if self._refresh_cancel.is_set():
            return
        self._refresh_started = time.monotonic()
        # A daemon thread, not a Textual thread worker: those run on the event loop's executor,
        # whose threads are joined when the loop closes, so a slow fetch would keep the process
        # alive after the screen was restored.
        threading.Thread(target=self._refresh_in_thread, daemon=True, name="allsmi-refresh").start()

    def _refresh_in_thread(self) -> None:
        error = None
        try:
            self.source.refresh(self._refresh_cancel.is_set)
        except Exception as exc:  # shown on the summary line; the next round tries again
            error = f"refresh failed: {type(exc).__name__}: {exc}"
        if self._refresh_cancel.is_set() or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._refresh_done, error, context=self._app_context)
        except RuntimeError:  # the loop is closed: the app has ended
            pass

    def _refresh_done(self, error: str | None) -> None:
        if self._refresh_cancel.is_set() or not self.is_running:
            return
        self.refresh_error = error
        self.poll()
        # Arm the next round only now, so rounds never overlap however slow one was.
        elapsed = time.monotonic() - self._refresh_started
        self.set_timer(max(0.05, self.source.interval - elapsed), self._start_refresh)

    # -- drawing --------------------------------------------------------------------------
    def _row_context(self, refs: Sequence[DeviceRef]) -> RowContext:
        stale = frozenset(h.key for h in self.hosts if h.error is not None)
        names = {h.key: h.name for h in self.hosts} if self.source.cluster else {}
        return RowContext(palette=self._palette, history=self.history, energy=self.energy,
                          stale_hosts=stale, host_names=names, parent_names=parent_names(refs),
                          compact=self._compact, gauge_width=4 if self._compact else 9,
                          spark_width=self._spark_width,
                          idle_threshold=self.options.idle_threshold_percent)

    def all_refs(self) -> list[DeviceRef]:
        """Every device of every host, in host then snapshot order."""
        return [ref for host in self.hosts for ref in refs_of(host.key, host.snapshot)]

    def refresh_view(self) -> None:
        """Redraw the current view from the data in hand."""
        self.renders += 1
        refs = self.all_refs()
        totals = totals_by(refs, lambda r: "all", self.energy)
        self._total = totals[0] if totals else Totals("all")
        if self._fleet_totals_only():
            self._total = sum_totals("all", [h.summary for h in self.hosts if h.summary is not None])
        self.shown = order_devices(apply_filter(refs, self.filter), self.sort_key, self.descending)
        if self.view == "devices":
            self._configure_columns()  # new names may want a wider model column
        ctx = self._row_context(refs)
        if self.view == "devices":
            self.device_table.show(self.shown, ctx, self.selected)
            if self.selected not in {r.key for r in self.shown}:
                self.selected = self.shown[0].key if self.shown else None
            self._show_selected(ctx)
        elif self.view == "groups":
            self._show_totals("#group-table", "#vendor-table", self.shown)
        elif self.view == "idle":
            self._show_idle()
        else:
            self._show_hosts()
            self._show_totals("#cluster-group-table", "#cluster-vendor-table", self.shown)
        self._update_summary()

    def _show_selected(self, ctx: RowContext | None = None) -> None:
        if self.query_one("#bottom").has_class("-hidden"):
            return  # a hidden panel costs nothing; _fit_panel draws it when it comes back
        ctx = ctx or self._row_context(self.all_refs())
        by_key = {r.key: r for r in self.shown}
        ref = by_key.get(self.selected or "")
        self.query_one("#details", DetailPanel).show(ref, ctx, self.energy.joules(ref.key) if ref else None)
        if self.process_scope == "all":
            shown = self.shown
        elif ref is None:
            shown = []
        else:
            shown = [r for r in self.shown if r.key == ref.key
                     or (r.host == ref.host and r.device.parent == ref.device.id)]
        names = {h.key: h.name for h in self.hosts}
        count = self.process_table.show(shown, self.source.cluster, names)
        title = "processes: all shown devices" if self.process_scope == "all" else "processes: selected device"
        if count > MAX_PROCESS_ROWS:
            title += f" ({MAX_PROCESS_ROWS} biggest of {count})"
        hosts_here = {r.host for r in shown}
        hidden = [h.name for h in self.hosts if h.key in hosts_here and h.process_details is False]
        if hidden:
            title += f" ({safe(', '.join(hidden[:2]))}: host does not export process details)"
        elif shown and all(r.device.processes is None for r in shown):
            title += " (not reported for this device)"
        panel = self.query_one("#processes")
        if str(panel.border_title) != title:  # a new title repaints the whole table
            panel.border_title = Text(title)  # a Text: never parsed as markup

    def _group_labels(self, name: str) -> dict[str, str]:
        return dict(self.config.group(name).labels)

    def _fleet_totals_only(self) -> bool:
        """Whether the source sends totals instead of every device (a large Prometheus fleet)."""
        return self.source.cluster and not getattr(self.source, "detailed", True)

    def _show_totals(self, group_id: str, vendor_id: str, refs: Sequence[DeviceRef]) -> None:
        if self._fleet_totals_only() and group_id.startswith("#cluster"):
            fleet = self.source.totals  # type: ignore[attr-defined]
            groups = list(fleet("resource_group").values())
            vendors = list(fleet("vendor").values())
            for t in groups:
                t.labels = self._group_labels(t.name)
        else:
            groups = totals_by(refs, lambda r: r.device.resource_group or NA, self.energy,
                               self._group_labels)
            vendors = totals_by(refs, lambda r: r.device.vendor, self.energy)
        groups = order_totals(groups, self.sort_key, self.descending)
        self.query_one(group_id, DiffTable).set_rows(
            (f"group:{t.name}", totals_cells(t, self._palette)) for t in groups)
        vendors = order_totals(vendors, self.sort_key, self.descending)
        self.query_one(vendor_id, DiffTable).set_rows(
            (f"vendor:{t.name}", totals_cells(t, self._palette, with_labels=False)) for t in vendors)

    def _show_hosts(self) -> None:
        by_host = {t.name: t for t in totals_by(self.all_refs(), lambda r: r.host, self.energy)}
        table = self.query_one("#host-table", DiffTable)
        table.set_rows(host_rows(self.hosts, by_host, self._palette, self.clock(), self.source.interval,
                                 problem_width(self.hosts, self.size.width)))
        self._show_host_detail()

    def _show_host_detail(self) -> None:
        table = self.query_one("#host-table", DiffTable)
        key = None
        if table.row_count and 0 <= table.cursor_row < table.row_count:
            key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        host = next((h for h in self.hosts if f"host:{h.key}" == key), None)
        self.query_one("#host-detail", Static).update(host_detail(host, self._palette, self.clock()))

    def _update_summary(self) -> None:
        line, state = summary_lines(
            hosts=self.hosts, cluster=self.source.cluster, total=self._total, palette=self._palette,
            now=self.clock(), interval=self.source.interval, view=self.view,
            sort_key=f"idle {self.idle_sort}" if self.view == "idle" else self.sort_key,
            descending=self.idle_descending if self.view == "idle" else self.descending,
            flt=self.filter, shown=self.shown,
            process_scope=self.process_scope, paused=self.paused, refresh_error=self.refresh_error,
            note=getattr(self.source, "note", None))
        plain = line.plain + "\n" + state.plain
        if plain != self._summary_text:
            self._summary_text = plain
            # Two lines, always: no layout pass for a new text.
            try:
                bar = self.query_one("#summary", SummaryBar)
            except NoMatches:  # a timer that fires while the app shuts down: the widgets are gone
                return
            bar.update(RichGroup(safe_text(line), safe_text(state)), layout=False)

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
        if kind == "group":
            self._drill(Filter(group=None if name == NA else name))
        elif kind == "vendor":
            self._drill(Filter(vendor=name))
        elif kind == "idle":
            row = next((r for r in self.idle_rows if r.key == name), None)
            if row is not None:  # its devices: by job, pod or user, within its group
                h = row.holder
                self._drill(Filter(h.job or h.pod or h.user or "", group=row.group or None))
        elif kind == "host":
            focus = getattr(self.source, "focus", None)
            if focus is not None:  # a large fleet: fetch this host's devices from now on
                focus([name])
            self._drill(Filter(host=name))

    def on_device_table_header_selected(self, event: DeviceTable.HeaderSelected) -> None:
        for column in self.device_table.spec:
            if column.id == event.column_id and column.sort:
                self.action_sort(column.sort)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self._set_filter(Filter(event.value.strip(), self.filter.vendor, self.filter.group,
                                    self.filter.host))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self._close_filter()

    def _drill(self, flt: Filter) -> None:
        self.filter = flt
        self._switch("devices")

    def _set_filter(self, flt: Filter) -> None:
        self.filter = flt
        self.refresh_view()

    def _close_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.remove_class("-visible")
        self._focus_view()

    def _switch(self, view: str) -> None:
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
