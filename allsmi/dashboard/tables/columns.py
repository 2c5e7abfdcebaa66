"""The device table's columns: what each cell depends on (a cheap change key) and how it is drawn.

A refresh computes each visible row's keys (the rounded numbers a cell
shows) and redraws a cell only when its key changed; the table widget
(:mod:`allsmi.dashboard.tables.device_table`) turns the drawn cells into lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Mapping, Sequence

from rich.cells import cell_len
from rich.text import Text

from allsmi.formatting import NA, celsius, human_bytes, na, percent
from allsmi.schema import DeviceSample

from allsmi.dashboard.views.activity import active_key, active_render, waiting_key, waiting_render
from allsmi.dashboard.state.idle import allocated_idle
from allsmi.dashboard.state.model import DeviceRef, EnergyMeter, History, memory_percent
from allsmi.dashboard.views.render import Palette, core_strip, gauge, safe, spark_levels, spark_text

#: Cells of the ``#`` column in the wide and the compact layout (wider for longer indexes).
INDEX_WIDTH, INDEX_WIDTH_COMPACT = 3, 2
#: Cells of the host column in the wide layout before it grows.
HOST_WIDTH = 16
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
    # Never cut: the column is as wide as the longest index (content_widths' ``idx``).
    return RowText("" if index is None else str(index), row_key, justify="right")


def _model_key(ref: DeviceRef, ctx: RowContext) -> Hashable:
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
    return Text(NA if key is None else safe(str(key)), style="dim" if key is None else "")


def _right(key: Any, ctx: RowContext) -> Text:
    return Text(NA if key is None else str(key), justify="right")


def _attr(name: str) -> KeyFn:
    return lambda ref, ctx: getattr(ref.device, name)


#: The widest a column grows to show its longest text (model names, host names).
MAX_GROWN_WIDTH = 64
#: The narrowest model column (tiny terminals), and the longest history sparkline.
MODEL_MIN_WIDTH, HISTORY_MAX_WIDTH = 8, 400
#: Below the compact layout's width, columns are kept in this order while they fit.
NARROW_PRIORITY = ("idx", "model", "host", "util", "health", "memory", "temp", "power", "vendor")


def content_widths(refs: Sequence[DeviceRef], host_names: Mapping[str, str]) -> dict[str, int]:
    """The cells the longest text of each growable column needs: ``model`` (wide layout),
    ``model_compact`` (vendor left out), ``vendor`` and ``host`` (capped at
    :data:`MAX_GROWN_WIDTH`)."""
    parents = parent_names(refs)
    widths = {"model": 0, "model_compact": 0, "vendor": 0, "host": 0, "idx": 0}
    for ref in refs:
        if ref.device.index is not None and not ref.device.parent:
            widths["idx"] = max(widths["idx"], len(str(ref.device.index)))
        for key, text in (("model", model_name(ref, parents, False)),
                          ("model_compact", model_name(ref, parents, True)),
                          ("vendor", ref.device.vendor), ("host", host_names.get(ref.host, ref.host))):
            widths[key] = max(widths[key], cell_len(text))
    return {key: min(MAX_GROWN_WIDTH, value) for key, value in widths.items()}


def _grow(columns: list[Column], room: int, wants: Mapping[str, int], order: Sequence[str]) -> int:
    """Widen the columns named in ``order``, first first, up to what their text wants; the room left."""
    for cid in order:
        for i, column in enumerate(columns):
            if column.id == cid:
                extra = min(room, max(0, wants.get(cid, 0) - column.width))
                if extra > 0:
                    columns[i] = replace(column, width=column.width + extra)
                    room -= extra
    return room


def _history(spark: int) -> Column:
    return Column("history", "util history", spark, _history_key, _history_render)


def columns_for(width: int, cluster: bool,
                wants: Mapping[str, int] | None = None) -> tuple[list[Column], bool, int]:
    """The columns that fit a table ``width`` cells wide: (columns, compact, spark width).

    ``wants`` (:func:`content_widths`) says how wide the cut columns' texts are: room
    left over widens the model column first, then host and vendor, then adds columns
    (group, procs, the history sparkline). Narrower than the compact layout, columns
    are dropped in :data:`NARROW_PRIORITY` order so that no row scrolls sideways.
    """
    wants = dict(wants or {})
    digits = wants.get("idx", 0)  # an index is never cut: the column fits the longest
    host = Column("host", "host", HOST_WIDTH, lambda r, c: c.host_names.get(r.host, r.host), _plain)
    procs = Column("procs", "procs", 5, _procs_key, _right)
    full = [
        Column("idx", "#", max(INDEX_WIDTH, digits), _index_key, _index_render, sort="index"),
        Column("vendor", "vendor", 11, _attr("vendor"), _plain),
        Column("model", "model", 22, _model_key, _plain),
        Column("util", "util", 15, _util_key, _util_render, sort="utilization"),
        Column("memory", "memory", 27, _memory_key, _memory_render, sort="memory"),
        Column("temp", "temp", 5, _temp_key, _temp_render, sort="temperature"),
        Column("power", "power / limit", 17, _power_key, _power_render, sort="power"),
        Column("health", "health", 8, _health_key, _health_render),
        procs,
    ]
    active = Column("active", "active", 9, active_key, active_render)  # "100% core"
    waiting = Column("waiting", "waiting", 12, waiting_key, waiting_render)
    needed = sum(c.width + 2 for c in full) + 2 + (HOST_WIDTH + 2 if cluster else 0)
    if width >= needed:
        columns = full[:1] + ([host] if cluster else []) + full[1:]
        room = _beside_util(columns, width - needed, (active, waiting))  # before long names
        room = _grow(columns, room, wants, ("model", "host", "vendor"))
        if room >= 14:
            columns.insert(4 if cluster else 3,
                           Column("group", "group", 12, _attr("resource_group"), _plain))
            room -= 14
        spark = 0
        if room >= 12:
            spark = min(HISTORY_MAX_WIDTH, room - 2)
            columns.append(_history(spark))
        return columns, False, spark
    compact = [
        Column("idx", "#", max(INDEX_WIDTH_COMPACT, digits), _index_key, _index_render, sort="index"),
        Column("vendor", "vendor", 6, _attr("vendor"), _plain),
        Column("model", "model", 16, _model_key, _plain),
        Column("util", "util", 9, _util_key, _util_render, sort="utilization"),
        Column("memory", "mem", 9, _memory_key, _memory_render, sort="memory"),
        Column("temp", "temp", 5, _temp_key, _temp_render, sort="temperature"),
        Column("power", "power", 9, _power_key, _power_render, sort="power"),
        Column("health", "hlth", 5, _health_key, _health_render),
    ]
    if cluster:
        # 13 cells: a partition's "└ MIG 3g.40gb" whole (its profile is what tells it apart).
        compact[1] = Column("host", "host", 9, lambda r, c: c.host_names.get(r.host, r.host), _plain)
        compact[2] = Column("model", "model", 13, _model_key, _plain)
    wants["model"] = wants.get("model_compact", 0)
    room = width - sum(c.width + 2 for c in compact)
    if room < 0:
        return _narrowest(compact, width, wants), True, 0
    room = _beside_util(compact, room, (active, waiting))  # before long names
    room = _grow(compact, room, wants, ("model", "host", "vendor"))
    if room >= procs.width + 2:
        compact.append(procs)
        room -= procs.width + 2
    spark = 0
    if room >= 12:
        spark = min(HISTORY_MAX_WIDTH, room - 2)
        compact.append(_history(spark))
    return compact, True, spark


#: Every column of the wide layout, as :func:`hidden_columns` names them.
ALL_COLUMNS = (("idx", "#"), ("host", "host"), ("vendor", "vendor"), ("model", "model"),
               ("group", "group"), ("util", "util"), ("active", "active"), ("waiting", "waiting"),
               ("memory", "memory"), ("temp", "temp"),
               ("power", "power"), ("health", "health"), ("procs", "procs"),
               ("history", "util history"))


def hidden_columns(columns: Sequence[Column], cluster: bool) -> list[str]:
    """The columns a terminal this narrow leaves out (said on the state line)."""
    shown = {c.id for c in columns}
    hidden = [(cid, label) for cid, label in ALL_COLUMNS
              if cid not in shown and (cluster or cid != "host")]
    # the activity and what holders wait on first: a narrow state line may cut the rest
    return [label for cid, label in sorted(hidden, key=lambda h: h[0] not in FIRST_NAMED)]


#: Hidden columns named before the others (:func:`hidden_columns`).
FIRST_NAMED = ("active", "waiting")


def _beside_util(columns: list[Column], room: int, extra: Sequence[Column]) -> int:
    """Put ``extra`` (the activity and waiting columns) right after ``util`` while they fit;
    the room left."""
    at = next(i for i, c in enumerate(columns) if c.id == "util") + 1
    for column in extra:
        if room < column.width + 2:
            break
        columns.insert(at, column)
        at += 1
        room -= column.width + 2
    return room


def _narrowest(compact: list[Column], width: int, wants: Mapping[str, int]) -> list[Column]:
    """The compact columns that fit ``width``, kept in :data:`NARROW_PRIORITY` order. The
    model column is as wide as its longest name (at most its compact width) or what is left
    after ``#``, but never under :data:`MODEL_MIN_WIDTH`; every row has these two."""
    widths: dict[str, int] = {}
    used = 0
    for column in sorted(compact, key=lambda c: NARROW_PRIORITY.index(c.id)):
        cells = column.width
        if column.id == "model":
            cells = min(cells, wants.get("model") or cells)
            cells = max(MODEL_MIN_WIDTH, min(cells, width - used - 2))
        if used + cells + 2 <= width or column.id in ("idx", "model"):
            widths[column.id] = cells
            used += cells + 2
    return [replace(c, width=widths[c.id]) for c in compact if c.id in widths]


def parent_names(refs: Sequence[DeviceRef]) -> dict[tuple[str, str], str]:
    """(host, device id) -> model name, for shortening partition names."""
    return {(r.host, r.device.id): r.device.name for r in refs if r.device.name}


def describe_device(dev: DeviceSample) -> str:
    """"nvidia 3" style short name for status lines and the processes panel."""
    return f"{dev.vendor} {NA if dev.index is None else dev.index}"
