"""Drawing the views from the data in hand (a mixin of :class:`DashboardApp`).

The node view's table and panels are line-based and repaint only what changed
(:mod:`allsmi.dashboard.tables.device_table`, :mod:`allsmi.dashboard.tables.lines`); the
resource-group, idle and cluster views are :class:`~allsmi.dashboard.tables.difftable.DiffTable`
tables fed whole rows.
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.text import Text
from textual.css.query import NoMatches
from textual.widgets import Static

from allsmi.config import Config
from allsmi.schema.formatting import NA

from allsmi.dashboard.tables.device_table import DeviceTable, RowContext, parent_names
from allsmi.dashboard.state.filtering import Filter, apply_filter
from allsmi.dashboard.state.model import DeviceRef, EnergyMeter, History, order_devices, refs_of
from allsmi.dashboard.state.naming import DeviceNames, host_labels
from allsmi.dashboard.screen.options import DashboardOptions
from allsmi.dashboard.views.panels import MAX_PROCESS_ROWS, DetailPanel, ProcessTable, SummaryBar, holders_text
from allsmi.dashboard.views.render import Palette, safe, safe_text
from allsmi.dashboard.sources import HostState
from allsmi.dashboard.views.summary import summary_lines
from allsmi.dashboard.state.totals import Totals, order_totals, sum_totals, totals_by


def hidden_of(*tables: Sequence[str]) -> list[str]:
    """The columns the tables of a view leave out, the top table's first, each named once."""
    return list(dict.fromkeys(label for hidden in tables for label in hidden))


def scrollbar_cells(table: Any, rows: int, height: int) -> int:
    """The cells a totals table's vertical scrollbar takes with ``rows`` rows under its header
    (its max-height: ``height`` lines, the groups view's ``TOTALS_HEIGHT``, unless the
    stylesheet says fewer)."""
    limit = table.styles.max_height
    lines = int(limit.value) if limit is not None and limit.is_cells else height
    return table.styles.scrollbar_size_vertical if rows >= lines else 0


class ViewDrawing:
    """The app's drawing (``self`` is the :class:`~allsmi.dashboard.screen.app.DashboardApp`)."""

    # The app provides these (declared for readers and type checkers).
    source: Any
    config: Config
    options: DashboardOptions
    clock: Any
    view: str
    sort_key: str
    descending: bool
    filter: Filter
    process_scope: str
    paused: bool
    selected: str | None
    hosts: list[HostState]
    shown: list[DeviceRef]
    history: History
    energy: EnergyMeter
    names: DeviceNames
    refresh_error: str | None
    renders: int
    idle_sort: str
    idle_descending: bool
    _palette: Palette
    _compact: bool
    _spark_width: int
    _total: Totals
    _layout_width: int
    totals_hidden: list[str]
    hosts_hidden: list[str]
    _summary_text: str
    device_table: DeviceTable
    process_table: ProcessTable

    def host_names(self) -> dict[str, str]:
        """Host key -> the name the host column shows (a cluster's; none on one node): the
        name each reports, with its address where two report the same (:func:`host_labels`)."""
        return host_labels((h.key, h.name) for h in self.hosts) if self.source.cluster else {}

    def _row_context(self, refs: Sequence[DeviceRef]) -> RowContext:
        stale = frozenset(h.key for h in self.hosts if h.error is not None)
        names = self.host_names()
        return RowContext(palette=self._palette, history=self.history, energy=self.energy,
                          stale_hosts=stale, host_names=names, parent_names=parent_names(refs),
                          places=self.names.places,
                          compact=self._compact, gauge_width=4 if self._compact else 9,
                          spark_width=self._spark_width,
                          idle_threshold=self.options.idle_threshold_percent)

    @property
    def layout_width(self) -> int:
        """The screen's width: that of the last resize (``size`` may still be the old one
        during it)."""
        return self._layout_width or self.size.width  # type: ignore[attr-defined]

    def all_refs(self) -> list[DeviceRef]:
        """Every device of every host, in host then snapshot order."""
        return [ref for host in self.hosts for ref in refs_of(host.key, host.snapshot)]

    def refresh_view(self) -> None:
        """Redraw the current view from the data in hand."""
        self.renders += 1
        self.names.update((h.key, h.snapshot) for h in self.hosts)
        refs = self.all_refs()
        totals = totals_by(refs, lambda r: "all", self.energy)
        self._total = totals[0] if totals else Totals("all")
        if self._fleet_totals_only():
            self._total = sum_totals("all", [h.summary for h in self.hosts if h.summary is not None])
        self.shown = order_devices(apply_filter(refs, self.filter, self.names.places, self.host_names()),
                                   self.sort_key,
                                   self.descending)
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
            from allsmi.dashboard.views.idleview import show_idle  # imported on the view's first use
            show_idle(self)
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
        count = self.process_table.show(shown, self.source.cluster, self.host_names(), self.names.places)
        title = "processes: all shown devices" if self.process_scope == "all" else "processes: selected device"
        if count > MAX_PROCESS_ROWS:
            title += f" ({MAX_PROCESS_ROWS} biggest of {count})"
        if self.process_table.hidden:
            title += f" (too narrow for {', '.join(self.process_table.hidden)})"
        hosts_here = {r.host for r in shown}
        labels = self.host_names()
        hidden = [labels.get(h.key, h.name) for h in self.hosts
                  if h.key in hosts_here and h.process_details is False]
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
        from allsmi.dashboard.tables.difftable import DiffTable  # these views' tables: imported with the views
        from allsmi.dashboard.views.groups import TOTALS_HEIGHT, totals_layout  # (their layout too)
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
        vendors = order_totals(vendors, self.sort_key, self.descending)
        table = self.query_one(group_id, DiffTable)
        # the width of the last resize (``size`` may lag during one), less a vertical scrollbar
        # where a table has more rows than its height (``.totals``' max-height)
        # (``.totals``' max-height; the cluster view's vendors have fewer lines on a short screen)
        vendor_table = self.query_one(vendor_id, DiffTable)
        width = self.layout_width - max(scrollbar_cells(table, len(groups), TOTALS_HEIGHT),
                                        scrollbar_cells(vendor_table, len(vendors), TOTALS_HEIGHT))
        layout = totals_layout(groups, vendors, self._palette, width)
        self.totals_hidden = layout.hidden  # said on the state line, as the device table's
        table.set_rows(layout.groups, layout.columns)
        vendor_table.set_rows(layout.vendors, layout.vendor_columns)

    def _show_hosts(self) -> None:
        from allsmi.dashboard.tables.difftable import DiffTable
        from allsmi.dashboard.views.hosts import host_layout, order_hosts  # (on first use)
        by_host = {t.name: t for t in totals_by(self.all_refs(), lambda r: r.host, self.energy)}
        table = self.query_one("#host-table", DiffTable)
        hosts = order_hosts(self.hosts, by_host, self.sort_key, self.descending)
        args = (hosts, by_host, self._palette, self.clock(), self.source.interval)
        # its scrollbar's cells are kept (``scrollbar-gutter: stable``): one layout for any rows
        layout = host_layout(*args, self.layout_width - table.styles.scrollbar_size_vertical)
        self.hosts_hidden = layout.hidden  # said on the state line, before the totals' own
        table.set_rows(layout.rows, layout.columns)
        self._show_host_detail()

    def _show_host_detail(self) -> None:
        from allsmi.dashboard.tables.difftable import DiffTable
        from allsmi.dashboard.views.hosts import host_detail
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
            note=getattr(self.source, "note", None),
            hidden=getattr(self, "hidden_columns", ()) if self.view == "devices"
            else getattr(self, "totals_hidden", ()) if self.view == "groups"
            else hidden_of(getattr(self, "hosts_hidden", ()), getattr(self, "totals_hidden", ()))
            if self.view == "cluster" else (),
            count=holders_text(len(getattr(self, "idle_rows", ()))) if self.view == "idle" else None,
            width=max(1, self.size.width - 2))  # inside the bar's padding
        plain = line.plain + "\n" + state.plain
        if plain != self._summary_text:
            self._summary_text = plain
            # Two lines, always: no layout pass for a new text.
            try:
                bar = self.query_one("#summary", SummaryBar)
            except NoMatches:  # a timer that fires while the app shuts down: the widgets are gone
                return
            bar.set_lines([safe_text(line), safe_text(state)])

