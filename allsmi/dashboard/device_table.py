"""The device table: one row per device, updated cell by cell.

Textual's :class:`DataTable` only renders the rows on screen, so hundreds
of devices scroll without lag. Each refresh compares a cheap key per cell
(the rounded numbers it shows) with the previous one and calls
``update_cell`` only where it changed; rows are added or removed only when
devices appear, vanish or are filtered, and reordered with ``sort``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from allsmi.formatting import NA, celsius, human_bytes, na, percent
from allsmi.schema import DeviceSample

from .idle import allocated_idle
from .model import DeviceRef, EnergyMeter, History, memory_percent
from .render import Palette, core_strip, gauge, safe_text, spark_levels, spark_text

#: Health words in the compact layout, where the column is five cells wide.
_SHORT_HEALTH = {"ok": "ok", "degraded": "degr", "lost": "LOST", "unknown": "?", "stale": "stale"}


@dataclass
class RowContext:
    """Everything besides the device that a cell depends on."""

    palette: Palette
    history: History
    energy: EnergyMeter
    stale_hosts: frozenset[str] = frozenset()
    host_names: Mapping[str, str] = field(default_factory=dict)
    parent_names: Mapping[tuple[str, str], str] = field(default_factory=dict)
    compact: bool = False
    gauge_width: int = 8
    spark_width: int = 0
    idle_threshold: float = 5.0
    """``[accounting] idle_threshold_percent``: held devices below it are marked idle."""

    def idle(self, ref: DeviceRef) -> bool:
        """Whether the util column marks ``ref`` allocated but idle (:func:`allocated_idle`)."""
        return allocated_idle(ref.device, self.idle_threshold)

    def health(self, ref: DeviceRef) -> str:
        """The device's health, or ``stale`` while its host is unreachable."""
        return "stale" if ref.host in self.stale_hosts else ref.device.health


class RowText(Text):
    """The first cell of a row: knows its row key, so ``DataTable.sort`` can order rows."""

    def __init__(self, text: str, row_key: str, style: str = "", justify: Any = None) -> None:
        super().__init__(text, style=style, justify=justify)
        self.row_key = row_key


KeyFn = Callable[[DeviceRef, RowContext], Hashable]
RenderFn = Callable[[Any, RowContext], Any]


@dataclass(frozen=True)
class Column:
    """One column: how to compute its change key and how to draw that key."""

    id: str
    label: str
    width: int
    key: KeyFn
    render: RenderFn
    sort: str | None = None
    """The sort order a click on the header selects."""


def _rpad(text: str, width: int) -> str:
    return text.rjust(width)


# -- key and render functions -------------------------------------------------------

def _index_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    return (ref.key, None if ref.device.parent else ref.device.index)


def _index_render(key: Any, ctx: RowContext) -> Text:
    row_key, index = key
    return RowText("" if index is None else str(index), row_key, justify="right")


def _model_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    dev = ref.device
    name = dev.name or NA
    if ctx.compact and name.lower().startswith(dev.vendor.lower() + " "):
        name = name[len(dev.vendor) + 1:]  # the vendor column already says it; narrow cells
    if dev.parent is not None:
        parent = ctx.parent_names.get((ref.host, dev.parent))
        if parent and name.startswith(parent + " "):
            name = name[len(parent) + 1:]
        name = "└ " + name
    return name


def _util_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    dev = ref.device
    cores = dev.details.get("core_utilization_percent")
    value = dev.utilization_percent
    shown = None if value is None else round(value)
    if ctx.idle(ref):
        return (shown, "idle", None)
    if isinstance(cores, tuple) and cores and all(isinstance(c, (int, float)) for c in cores):
        return (shown, tuple(round(float(c) / 100 * 7) for c in cores), tuple(float(c) for c in cores))
    return (shown, None, None)


def _util_render(key: Any, ctx: RowContext) -> Text:
    shown, levels, cores = key
    width = ctx.gauge_width
    if levels == "idle":  # allocated but idle: the word replaces a near-empty gauge
        cells = Text("idle".ljust(width), style=f"bold {ctx.palette.warn}")
    elif cores:
        cells = core_strip(cores, width, ctx.palette)
    else:
        cells = gauge(shown, width, ctx.palette.load(shown), ctx.palette)
    cells.append(" " + _rpad(percent(shown), 4), style=ctx.palette.load(shown) if shown is not None else "dim")
    return cells


def _memory_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    dev = ref.device
    share = memory_percent(dev)
    if ctx.compact:
        return (None if share is None else round(share), None)
    return (None if share is None else round(share, 1),
            f"{human_bytes(dev.memory_used_bytes)}/{human_bytes(dev.memory_total_bytes)}")


def _memory_render(key: Any, ctx: RowContext) -> Text:
    share, label = key
    cells = gauge(share, ctx.gauge_width if ctx.compact else max(4, ctx.gauge_width - 2),
                  ctx.palette.load(share), ctx.palette)
    if label is None:
        cells.append(" " + _rpad(percent(share), 4))
    else:
        cells.append(" " + label)
    return cells


def _temp_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    value = ref.device.temperature_celsius
    return None if value is None else round(value)


def _temp_render(key: Any, ctx: RowContext) -> Text:
    return Text(_rpad(celsius(key), 5), style=ctx.palette.temperature(key) or "")


def _power_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    dev = ref.device
    p, limit = dev.power_watts, dev.power_limit_watts
    return (None if p is None else round(p), None if limit is None else round(limit))


def _power_text(power: float | None, limit: float | None, compact: bool) -> str:
    unit = "W" if compact else " W"
    if power is None and limit is None:
        return NA
    return f"{na(power, '{:.0f}')}/{na(limit, '{:.0f}', unit)}"


def _power_render(key: Any, ctx: RowContext) -> Text:
    power, limit = key
    share = None if power is None or not limit else 100.0 * power / limit
    if ctx.compact:
        return Text(_rpad(_power_text(power, limit, True), 9), style=ctx.palette.load(share)
                    if share is not None and share >= 85 else "")
    cells = gauge(share, 5, ctx.palette.load(share), ctx.palette)
    cells.append(" " + _power_text(power, limit, False))
    return cells


def _health_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    return ctx.health(ref)


def _health_render(key: Any, ctx: RowContext) -> Text:
    word = _SHORT_HEALTH.get(key, key) if ctx.compact else key
    return Text(word, style=ctx.palette.health(key))


def _procs_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    procs = ref.device.processes
    return None if procs is None else len(procs)  # None: the backend cannot list them


def _history_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    return spark_levels(ctx.history.series(ref.key, "utilization"), ctx.spark_width)


def _history_render(key: Any, ctx: RowContext) -> Text:
    return Text(spark_text(key, ctx.spark_width), style=ctx.palette.accent)


def _plain(key: Any, ctx: RowContext) -> Text:
    return Text(NA if key is None else str(key), style="dim" if key is None else "")


def _right(key: Any, ctx: RowContext) -> Text:
    return Text(NA if key is None else str(key), justify="right")


def _attr(name: str) -> KeyFn:
    return lambda ref, ctx: getattr(ref.device, name)


def columns_for(width: int, cluster: bool) -> tuple[list[Column], bool, int]:
    """The columns that fit a table ``width`` cells wide: (columns, compact, spark width)."""
    host = Column("host", "host", 16, lambda r, c: c.host_names.get(r.host, r.host), _plain)
    full = [
        Column("idx", "#", 3, _index_key, _index_render, sort="index"),
        Column("vendor", "vendor", 11, _attr("vendor"), _plain),
        Column("model", "model", 22, _model_key, _plain),
        Column("util", "util", 15, _util_key, _util_render, sort="utilization"),
        Column("memory", "memory", 27, _memory_key, _memory_render, sort="memory"),
        Column("temp", "temp", 5, _temp_key, _temp_render, sort="temperature"),
        Column("power", "power / limit", 17, _power_key, _power_render, sort="power"),
        Column("health", "health", 8, _health_key, _health_render),
        Column("procs", "procs", 5, _procs_key, _right),
    ]
    needed = sum(c.width + 2 for c in full) + 2 + (18 if cluster else 0)
    if width >= needed:
        columns = full[:1] + ([host] if cluster else []) + full[1:]
        room = width - needed
        if room >= 14:
            columns.insert(4 if cluster else 3,
                           Column("group", "group", 12, _attr("resource_group"), _plain))
            room -= 14
        spark = 0
        if room >= 12:
            spark = min(60, room - 2)
            columns.append(Column("history", "util history", spark, _history_key, _history_render))
        return columns, False, spark
    compact = [
        Column("idx", "#", 2, _index_key, _index_render, sort="index"),
        Column("vendor", "vendor", 6, _attr("vendor"), _plain),
        Column("model", "model", 16, _model_key, _plain),
        Column("util", "util", 9, _util_key, _util_render, sort="utilization"),
        Column("memory", "mem", 9, _memory_key, _memory_render, sort="memory"),
        Column("temp", "temp", 5, _temp_key, _temp_render, sort="temperature"),
        Column("power", "power", 9, _power_key, _power_render, sort="power"),
        Column("health", "hlth", 5, _health_key, _health_render),
    ]
    if cluster:
        compact[1] = Column("host", "host", 10, lambda r, c: c.host_names.get(r.host, r.host), _plain)
        compact[2] = Column("model", "model", 12, _model_key, _plain)
    return compact, True, 0


class SafeTable(DataTable[Any]):
    """A DataTable whose every cell goes through :func:`safe_text`: a ``str`` cell is never
    parsed as Rich markup (``[/]`` in a command line is text) and control characters never
    reach the terminal, whatever a process, a device or a host sent."""

    def add_row(self, *cells: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().add_row(*(safe_text(c) for c in cells), **kwargs)

    def update_cell(self, row_key: Any, column_key: Any, value: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().update_cell(row_key, column_key, safe_text(value), **kwargs)


class DeviceTable(SafeTable):
    """A :class:`DataTable` of devices that updates only the cells that changed."""

    DEFAULT_CSS = """
    DeviceTable { height: 1fr; }
    """
    # In row-cursor mode DataTable's Home/End scroll sideways; people expect first/last device.
    BINDINGS = [Binding("home", "scroll_top", "First row", show=False),
                Binding("end", "scroll_bottom", "Last row", show=False)]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, cell_padding=1, **kwargs)
        self.spec: list[Column] = []
        self._keys: dict[str, list[Hashable]] = {}
        self._order: list[str] = []
        self._pending: dict[str, DeviceRef] = {}
        self._ctx: RowContext | None = None
        self.cell_updates = 0
        """Cells rewritten since the table was built (for tests and the benchmark)."""

    def configure(self, columns: Sequence[Column]) -> bool:
        """Use ``columns``; rebuilds the table only when the set of columns changed."""
        if [(c.id, c.width) for c in columns] == [(c.id, c.width) for c in self.spec]:
            self.spec = list(columns)  # same layout; render functions may have new widths baked in
            return False
        self.spec = list(columns)
        self.clear(columns=True)
        for column in self.spec:
            self.add_column(column.label, key=column.id, width=column.width)
        self._keys.clear()
        self._pending.clear()
        self._order = []
        return True

    def invalidate(self) -> None:
        """Forget every cell key so the next :meth:`show` redraws all cells (theme change)."""
        for keys in self._keys.values():
            keys[:] = [object()] * len(keys)

    def show(self, refs: Sequence[DeviceRef], ctx: RowContext, selected: str | None) -> None:
        """Make the table show ``refs`` in this order, touching only what changed.

        Rows off screen are only noted; their cells are brought up to date when
        they scroll into view, so a refresh costs the same with 30 or 3000 devices.
        """
        self._ctx = ctx
        wanted = {r.key for r in refs}
        for gone in [k for k in self._keys if k not in wanted]:
            self.remove_row(gone)
            del self._keys[gone]
            self._pending.pop(gone, None)
        for ref in refs:
            if ref.key not in self._keys:
                keys = [column.key(ref, ctx) for column in self.spec]
                self.add_row(*(c.render(k, ctx) for c, k in zip(self.spec, keys)), key=ref.key)
                self._keys[ref.key] = keys
            else:
                self._pending[ref.key] = ref
        order = [r.key for r in refs]
        if order != self._order:
            position = {key: i for i, key in enumerate(order)}
            first = self.spec[0].id
            self.sort(first, key=lambda cell: position[cell.row_key])
            self._order = order
        if selected is not None and selected in wanted:
            row = self.get_row_index(selected)
            if row != self.cursor_row:
                self.move_cursor(row=row, animate=False)
        self.flush_visible()

    def flush_visible(self, margin: int = 4) -> None:
        """Bring the cells of the rows on screen (and ``margin`` around) up to date."""
        ctx = self._ctx
        if ctx is None or not self._pending:
            return
        top = max(0, int(self.scroll_y) - margin)
        bottom = min(len(self._order), int(self.scroll_y) + max(self.size.height, 1) + margin)
        for key in self._order[top:bottom]:
            ref = self._pending.pop(key, None)
            if ref is not None:
                self._update_row(ref, ctx)

    def flush_all(self) -> None:
        """Bring every row up to date (tests and screenshots of whole tables)."""
        ctx = self._ctx
        if ctx is None:
            return
        for ref in list(self._pending.values()):
            self._update_row(ref, ctx)
        self._pending.clear()

    def _update_row(self, ref: DeviceRef, ctx: RowContext) -> None:
        old = self._keys[ref.key]
        for i, column in enumerate(self.spec):
            key = column.key(ref, ctx)
            if key != old[i]:
                self.update_cell(ref.key, column.id, column.render(key, ctx))
                old[i] = key
                self.cell_updates += 1

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.flush_visible()

    def on_resize(self) -> None:
        self.flush_visible()

    @property
    def order(self) -> list[str]:
        """Row keys in display order."""
        return list(self._order)


def parent_names(refs: Sequence[DeviceRef]) -> dict[tuple[str, str], str]:
    """(host, device id) -> model name, for shortening partition names."""
    return {(r.host, r.device.id): r.device.name for r in refs if r.device.name}


def describe_device(dev: DeviceSample) -> str:
    """"nvidia 3" style short name for status lines and the processes panel."""
    return f"{dev.vendor} {NA if dev.index is None else dev.index}"
