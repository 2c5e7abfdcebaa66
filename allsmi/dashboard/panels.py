"""The smaller widgets: summary bar, device details, processes, totals tables."""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Sequence

from rich.console import Group as RichGroup
from rich.table import Table
from rich.text import Text
from textual.widgets import DataTable, Static

from allsmi.formatting import NA, celsius, human_bytes, na, percent, watts
from allsmi.schema import DeviceSample, ProcessSample

from .device_table import RowContext, RowText, describe_device
from .model import DeviceRef, Totals, memory_percent
from .render import Palette, core_strip, spark


def energy_text(joules: float | None) -> str:
    """Energy in the unit people read bills in: J, Wh or kWh."""
    if joules is None:
        return NA
    if joules < 3600.0:
        return f"{joules:.0f} J"
    if joules < 3.6e6:
        return f"{joules / 3600.0:.1f} Wh"
    return f"{joules / 3.6e6:.2f} kWh"


def age_text(age: float | None) -> str:
    """"0.4 s" / "12 s" / "3 min" / "never"."""
    if age is None:
        return "never"
    if age < 10:
        return f"{age:.1f} s"
    if age < 120:
        return f"{age:.0f} s"
    if age < 7200:
        return f"{age / 60:.0f} min"
    return f"{age / 3600:.0f} h"


def labels_text(labels: dict[str, str] | Any) -> str:
    """``team=ml project=llm`` (sorted), or empty."""
    return " ".join(f"{k}={v}" for k, v in sorted(dict(labels).items()))


class SummaryBar(Static):
    """Two lines at the top: the host (or fleet) and the state of the view."""

    DEFAULT_CSS = """
    SummaryBar { height: 2; padding: 0 1; }
    """


class DetailPanel(Static):
    """Everything about the selected device, with its history as sparklines."""

    def show(self, ref: DeviceRef | None, ctx: RowContext, energy: float | None) -> None:
        """Draw ``ref`` (or a hint when nothing is selected)."""
        if ref is None:
            self.update(Text("No device selected.", style="dim"))
            return
        self.update(self.render_device(ref, ctx, energy, max(20, self.size.width - 2)))

    @staticmethod
    def render_device(ref: DeviceRef, ctx: RowContext, energy: float | None, width: int) -> RichGroup:
        """The panel's content for ``ref`` at ``width`` cells."""
        dev = ref.device
        pal = ctx.palette
        health = ctx.health(ref)
        title = Text()
        title.append(describe_device(dev), style="bold")
        title.append(f"  {dev.name or NA}  ")
        title.append(health, style=pal.health(health))
        if ctx.host_names and len(ctx.host_names) > 1:
            title.append(f"  on {ctx.host_names.get(ref.host, ref.host)}", style=pal.accent)
        ident = Text(f"group {dev.resource_group or NA}", style="")
        if dev.labels:
            ident.append(f"  {labels_text(dev.labels)}", style=pal.accent)
        ids = Text(f"id {dev.id}", style="dim")
        extra = []
        if dev.bus_id:
            extra.append(f"bus {dev.bus_id}")
        extra.append(f"driver {dev.driver_version or NA}")
        if dev.firmware_version:
            extra.append(f"fw {dev.firmware_version}")
        ids.append("  " + "  ".join(extra))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=6, style="bold")
        grid.add_column(width=20, no_wrap=True)
        grid.add_column(no_wrap=True)
        spark_width = max(0, width - 29)
        key = ref.key
        hist = ctx.history
        util = dev.utilization_percent
        grid.add_row("util", Text(percent(util), style=pal.load(util)),
                     Text(spark(hist.series(key, "utilization"), spark_width), style=pal.accent))
        share = memory_percent(dev)
        grid.add_row("mem", Text(f"{human_bytes(dev.memory_used_bytes)}/{human_bytes(dev.memory_total_bytes)}",
                                 style=pal.load(share)),
                     Text(spark(hist.series(key, "memory"), spark_width), style=pal.accent))
        limit = dev.power_limit_watts
        power_series = hist.series(key, "power")
        top = limit or max((v for v in power_series if v is not None), default=0.0) or 1.0
        grid.add_row("power", f"{watts(dev.power_watts)} / {watts(limit)}",
                     Text(spark(power_series, spark_width, 0.0, top), style=pal.accent))
        temp = dev.temperature_celsius
        grid.add_row("temp", Text(celsius(temp), style=pal.temperature(temp) or ""),
                     Text(spark(hist.series(key, "temperature"), spark_width, 20.0, 100.0),
                          style=pal.accent))
        grid.add_row("clock", na(dev.clock_mhz, "{:.0f}", " MHz"),
                     f"fan {percent(dev.fan_percent)}   energy since start {energy_text(energy)}")
        cores = dev.details.get("core_utilization_percent")
        if isinstance(cores, tuple) and cores and all(isinstance(c, (int, float)) for c in cores):
            values = [float(c) for c in cores]
            grid.add_row("cores", core_strip(values, min(len(values), 20), pal),
                         " ".join(f"{v:.0f}" for v in values))
        return RichGroup(title, ident, ids, grid)


class DiffTable(DataTable[Any]):
    """A DataTable fed whole rows; only changed cells are rewritten."""

    def __init__(self, columns: Sequence[tuple[str, str, int | None]], **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._spec = list(columns)
        self._rows: dict[str, tuple[Hashable, ...]] = {}
        self._order: list[str] = []

    def on_mount(self) -> None:
        for key, label, width in self._spec:
            self.add_column(label, key=key, width=width)

    def set_rows(self, rows: Iterable[tuple[str, Sequence[Any]]]) -> None:
        """Show ``rows`` (row key, cells) in this order."""
        rows = list(rows)
        wanted = {key for key, _ in rows}
        for gone in [k for k in self._rows if k not in wanted]:
            self.remove_row(gone)
            del self._rows[gone]
        for key, cells in rows:
            cells = (_keyed(cells[0], key), *cells[1:])
            frozen = tuple(_freeze(c) for c in cells)
            old = self._rows.get(key)
            if old is None:
                self.add_row(*cells, key=key)
            elif old != frozen:
                for (column, _label, _w), cell, before, after in zip(self._spec, cells, old, frozen):
                    if before != after:
                        self.update_cell(key, column, cell)
            self._rows[key] = frozen
        order = [key for key, _ in rows]
        if order != self._order:
            position = {key: i for i, key in enumerate(order)}
            self._sort_by(position)
            self._order = order

    def _sort_by(self, position: dict[str, int]) -> None:
        first = self._spec[0][0]
        self.sort(first, key=lambda cell: position[cell.row_key])

    @property
    def row_keys(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)


def _keyed(cell: Any, key: str) -> RowText:
    """The first cell as a :class:`RowText`, so rows can be sorted by key."""
    if isinstance(cell, Text):
        return RowText(cell.plain, key, style=str(cell.style), justify=cell.justify)
    return RowText(str(cell), key)


def _freeze(cell: Any) -> Hashable:
    if isinstance(cell, Text):
        return (cell.plain, str(cell.style), tuple((s.start, s.end, str(s.style)) for s in cell.spans))
    return cell


class ProcessTable(DiffTable):
    """Processes on the selected device (and its partitions) or on every device shown."""

    COLUMNS = (("pid", "pid", 8), ("user", "user", 10), ("device", "device", 10),
               ("memory", "memory", 10), ("command", "command", None))

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.COLUMNS, **kwargs)

    def show(self, refs: Sequence[DeviceRef], host_label: bool, names: dict[str, str]) -> None:
        """Processes of ``refs``, biggest memory first."""
        rows: list[tuple[int, str, tuple[Any, ...]]] = []
        for ref in refs:
            dev = ref.device
            where = describe_device(dev) if not dev.parent else f"{dev.vendor} {dev.index}*"
            if host_label:
                where = f"{names.get(ref.host, ref.host)}:{dev.index if dev.index is not None else NA}"
            for proc in dev.processes:
                rows.append((-(proc.memory_bytes or 0), f"{ref.key}\x1e{proc.pid}",
                             self._cells(proc, where)))
        rows.sort(key=lambda r: (r[0], r[1]))
        self.set_rows((key, cells) for _, key, cells in rows)

    @staticmethod
    def _cells(proc: ProcessSample, where: str) -> tuple[Any, ...]:
        return (Text(str(proc.pid), justify="right"), proc.user or NA, where,
                Text(human_bytes(proc.memory_bytes), justify="right"), proc.command or NA)


TOTALS_COLUMNS = (("name", "name", 14), ("devices", "devices", 9), ("util", "util", 5),
                  ("memory", "memory", 17), ("power", "power / limit", 15),
                  ("energy", "energy", 10), ("procs", "procs", 5), ("hosts", "hosts", 5),
                  ("labels", "labels", None))
"""Columns of the group and vendor totals (vendors leave out ``labels``)."""


def totals_cells(totals: Totals, palette: Palette, with_labels: bool = True) -> tuple[Any, ...]:
    """One totals row (group or vendor), in :data:`TOTALS_COLUMNS` order."""
    util = totals.utilization_percent
    devices = str(totals.devices)
    if totals.partitions:
        devices += f"+{totals.partitions}p"
    if totals.lost:
        devices += f" {totals.lost}!"
    memory = f"{human_bytes(totals.memory_used_bytes)}/{human_bytes(totals.memory_total_bytes)}"
    power = f"{_kw(totals.power_watts)}/{_kw(totals.power_limit_watts)}"
    cells: tuple[Any, ...] = (
        Text(totals.name, style="bold"),
        Text(devices, justify="right", style=palette.hot if totals.lost else ""),
        Text(percent(util), justify="right", style=palette.load(util)),
        Text(memory, style=palette.load(totals.memory_percent)),
        power, Text(energy_text(totals.energy_joules), justify="right"),
        Text(str(totals.processes), justify="right"),
        Text(str(len(totals.hosts)), justify="right"))
    return cells + (labels_text(totals.labels),) if with_labels else cells


def _kw(value: float | None) -> str:
    if value is None:
        return NA
    if value >= 10000:
        return f"{value / 1000:.1f} kW"
    return watts(value)


def device_lines(devices: Iterable[DeviceSample]) -> int:
    """How many devices (not partitions) are in ``devices``."""
    return sum(1 for d in devices if d.parent is None)
