"""The device table's cells: what each cell depends on (a cheap change key) and how it is drawn.

A refresh computes each visible row's keys (the rounded numbers a cell shows) and redraws a cell
only when its key changed. Which columns a width holds is :mod:`allsmi.dashboard.tables.columns`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping

from rich.cells import cell_len
from rich.text import Text

from allsmi.schema.formatting import NA, celsius, memory_pair, na, percent

from allsmi.dashboard.state.idle import allocated_idle
from allsmi.dashboard.state.model import DeviceRef, EnergyMeter, History, memory_percent
from allsmi.dashboard.state.naming import fit_apart
from allsmi.dashboard.views.render import Palette, core_strip, gauge, safe, spark_levels, spark_text

#: Health words in the compact layout, where the column is five cells wide.
_SHORT_HEALTH = {"ok": "ok", "degraded": "degr", "lost": "LOST", "unknown": "?", "stale": "stale"}


@dataclass(eq=False, repr=False)  # nothing compares or prints one
class RowContext:
    """Everything besides the device that a cell depends on."""

    palette: Palette
    history: History
    energy: EnergyMeter
    stale_hosts: frozenset[str] = frozenset()
    host_names: Mapping[str, str] = field(default_factory=dict)
    parent_names: Mapping[tuple[str, str], str] = field(default_factory=dict)
    places: Mapping[str, str] = field(default_factory=dict)
    """Row key -> the device's name after its vendor (``3``, ``7/1/0``:
    :mod:`allsmi.dashboard.state.naming`), the ``#`` column's text."""
    compact: bool = False
    gauge_width: int = 8
    spark_width: int = 0
    idle_threshold: float = 5.0
    """``[accounting] idle_threshold_percent``: held devices below it are marked idle."""

    host_cuts: dict[int, dict[str, str]] = field(default_factory=dict)
    """Width -> the host names fitted to it (:meth:`host_label`), made on first use."""

    def host_label(self, host: str, width: int) -> str:
        """The host's name in ``width`` cells, told apart from every other host's even where
        both are cut (:func:`~allsmi.dashboard.state.naming.fit_apart`)."""
        cuts = self.host_cuts.get(width)
        if cuts is None:
            cuts = self.host_cuts[width] = fit_apart(self.host_names, width)
        return cuts.get(host, host)

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


def _rpad(text: str, width: int) -> str:
    return text.rjust(width)


# -- key and render functions -------------------------------------------------------

def index_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    return (ref.key, index_text(ref, ctx.places))


def index_text(ref: DeviceRef, places: Mapping[str, str]) -> str:
    """The ``#`` cell: the vendor's index, a partition's place (``7/1/0``: the name the other
    views give it after the vendor), empty for a device without an index."""
    dev = ref.device
    if dev.parent is None:
        return "" if dev.index is None else str(dev.index)
    return places.get(ref.key, "")


def index_render(key: Any, ctx: RowContext) -> Text:
    row_key, index = key
    # Never cut: the column is as wide as the longest index (content_widths' ``idx``).
    return RowText(index, row_key, justify="right")


def model_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    return model_name(ref, ctx.parent_names, ctx.compact)


def model_name(ref: DeviceRef, parents: Mapping[tuple[str, str], str], compact: bool) -> str:
    """What the model column shows for ``ref`` (the whole text, before any cut)."""
    dev = ref.device
    name = dev.name or NA
    if dev.parent is not None:
        # A partition's row shows what tells it apart (its profile, "MIG 3g.40gb") first, at
        # any width: the parent's model is on the row above. Compared on the full names, before
        # the vendor is dropped from either.
        parent = parents.get((ref.host, dev.parent))
        if parent and name.startswith(parent + " "):
            name = name[len(parent) + 1:]
        elif compact and name.lower().startswith(dev.vendor.lower() + " "):
            name = name[len(dev.vendor) + 1:]
        return "└ " + name
    if compact and name.lower().startswith(dev.vendor.lower() + " "):
        name = name[len(dev.vendor) + 1:]  # the vendor column already says it; narrow cells
    return name


def util_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    dev = ref.device
    cores = dev.details.get("core_utilization_percent")
    value = dev.utilization_percent
    shown = None if value is None else round(value)
    if ctx.idle(ref):
        return (shown, "idle", None)
    if isinstance(cores, tuple) and cores and all(isinstance(c, (int, float)) for c in cores):
        return (shown, tuple(round(float(c) / 100 * 7) for c in cores), tuple(float(c) for c in cores))
    return (shown, None, None)


def util_render(key: Any, ctx: RowContext) -> Text:
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


def memory_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    dev = ref.device
    share = memory_percent(dev)
    if ctx.compact:
        return (None if share is None else round(share), None)
    return (None if share is None else round(share, 1),
            memory_pair(dev.memory_used_bytes, dev.memory_total_bytes))  # "N/A" when neither is known


#: Cells of the memory column in the wide layout (a gauge, then ``used/total``).
MEMORY_WIDTH = 27


def memory_render(key: Any, ctx: RowContext) -> Text:
    share, label = key
    bar = ctx.gauge_width if ctx.compact else max(4, ctx.gauge_width - 2)
    if label is not None:  # the gauge gives way to a long label: "1010.0 MiB/192.0 GiB" whole
        bar = max(0, min(bar, MEMORY_WIDTH - 1 - cell_len(label)))
    cells = gauge(share, bar, ctx.palette.load(share), ctx.palette)
    if label is None:
        cells.append(" " + _rpad(percent(share), 4))
    else:
        cells.append(" " + label)
    return cells


def temp_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    value = ref.device.temperature_celsius
    return None if value is None else round(value)


def temp_render(key: Any, ctx: RowContext) -> Text:
    return Text(_rpad(celsius(key), 5), style=ctx.palette.temperature(key) or "")


def power_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    dev = ref.device
    p, limit = dev.power_watts, dev.power_limit_watts
    return (None if p is None else round(p), None if limit is None else round(limit))


#: Cells of the power column in the compact layout.
COMPACT_POWER_WIDTH = 9


def power_text(power: float | None, limit: float | None, compact: bool) -> str:
    """``520/700 W`` (``520/700W`` compact); the unit is there whatever is unknown
    (``93/N/A W``). A compact cell too narrow for watts says kilowatts (``1.2/1.4kW``), so
    that nothing is cut: a cut ``1203/140…`` would read as 140 W."""
    if power is None and limit is None:
        return NA
    unit = "W" if compact and limit is not None else " W"
    text = f"{na(power, '{:.0f}')}/{na(limit, '{:.0f}')}{unit}"
    if not compact or len(text) <= COMPACT_POWER_WIDTH:
        return text
    for fmt in ("{:.1f}", "{:.0f}"):
        kw = [na(None if v is None else v / 1000.0, fmt) for v in (power, limit)]
        # the unit beside a number: 1.2kW/N/A, never 1.2/N/AkW
        text = f"{kw[0]}kW/{kw[1]}" if limit is None else f"{kw[0]}/{kw[1]}kW"
        if len(text) <= COMPACT_POWER_WIDTH:
            break
    return text


def power_render(key: Any, ctx: RowContext) -> Text:
    power, limit = key
    share = None if power is None or not limit else 100.0 * power / limit
    if ctx.compact:
        return Text(_rpad(power_text(power, limit, True), COMPACT_POWER_WIDTH), style=ctx.palette.load(share)
                    if share is not None and share >= 85 else "")
    cells = gauge(share, 5, ctx.palette.load(share), ctx.palette)
    cells.append(" " + power_text(power, limit, False))
    return cells


def health_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    return ctx.health(ref)


def health_render(key: Any, ctx: RowContext) -> Text:
    word = _SHORT_HEALTH.get(key, key) if ctx.compact else key
    return Text(word, style=ctx.palette.health(key))


def procs_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    procs = ref.device.processes
    return None if procs is None else len(procs)  # None: the backend cannot list them


def history_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
    return spark_levels(ctx.history.series(ref.key, "utilization"), ctx.spark_width)


def history_render(key: Any, ctx: RowContext) -> Text:
    return Text(spark_text(key, ctx.spark_width), style=ctx.palette.accent)


def plain_cell(key: Any, ctx: RowContext) -> Text:
    return Text(NA if key is None else safe(str(key)), style="dim" if key is None else "")


def right_cell(key: Any, ctx: RowContext) -> Text:
    return Text(NA if key is None else str(key), justify="right")


def attribute(name: str) -> KeyFn:
    return lambda ref, ctx: getattr(ref.device, name)
