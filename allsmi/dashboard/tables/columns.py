"""The device table's columns: which fit a width, and in which order.

Each column names its cell's change key and how that key is drawn (:mod:`allsmi.dashboard.tables.cells`);
the table widget (:mod:`allsmi.dashboard.tables.device_table`) turns the drawn cells into lines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from rich.cells import cell_len

from allsmi.dashboard.views.activity import active_key, active_render, waiting_key, waiting_render
from allsmi.dashboard.state.model import DeviceRef
from allsmi.dashboard.tables.cells import (
    COMPACT_POWER_WIDTH, MEMORY_WIDTH, KeyFn, RenderFn, RowContext, RowText, attribute, health_key,
    health_render, history_key, history_render, index_key, index_render, index_text, memory_key,
    memory_render, model_key, plain_cell, power_key, power_render, procs_key, right_cell, temp_key,
    temp_render, util_key, util_render, model_name)

__all__ = ["Column", "RowContext", "RowText", "columns_for", "content_widths",
           "hidden_columns", "model_name", "parent_names"]

#: Cells of the ``#`` column in the wide and the compact layout (wider for longer indexes).
INDEX_WIDTH, INDEX_WIDTH_COMPACT = 3, 2
#: Cells of the host column in the wide layout before it grows.
HOST_WIDTH = 16


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


#: The widest a column grows to show its longest text (model names, host names).
MAX_GROWN_WIDTH = 64
#: The narrowest model column (tiny terminals), and the longest history sparkline.
MODEL_MIN_WIDTH, HISTORY_MAX_WIDTH = 8, 400
#: Below the compact layout's width, columns are kept in this order while they fit.
NARROW_PRIORITY = ("idx", "model", "host", "util", "health", "memory", "temp", "power", "vendor")


def content_widths(refs: Sequence[DeviceRef], host_names: Mapping[str, str],
                   places: Mapping[str, str] | None = None) -> dict[str, int]:
    """The cells the longest text of each growable column needs: ``model`` (wide layout),
    ``model_compact`` (vendor left out), ``vendor`` and ``host`` (capped at
    :data:`MAX_GROWN_WIDTH`), and ``idx`` (never capped: an index or a partition's place,
    ``places``, is never cut)."""
    parents = parent_names(refs)
    places = places or {}
    widths = {"model": 0, "model_compact": 0, "vendor": 0, "host": 0}
    idx = 0
    for ref in refs:
        idx = max(idx, cell_len(index_text(ref, places)))
        for key, text in (("model", model_name(ref, parents, False)),
                          ("model_compact", model_name(ref, parents, True)),
                          ("vendor", ref.device.vendor), ("host", host_names.get(ref.host, ref.host))):
            widths[key] = max(widths[key], cell_len(text))
    return {**{key: min(MAX_GROWN_WIDTH, value) for key, value in widths.items()}, "idx": idx}


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
    return Column("history", "util history", spark, history_key, history_render)


def host_key(width: int) -> KeyFn:
    """The host column's cell ``width`` cells wide: the host's name, cut so that two hosts'
    stay apart (``vm (10.0.0.1:9477)`` and ``vm (10.0.0.2:9477)``: ``vm…0.1:9…``)."""
    return lambda ref, ctx: ctx.host_label(ref.host, width)


def columns_for(width: int, cluster: bool,
                wants: Mapping[str, int] | None = None) -> tuple[list[Column], bool, int]:
    """The columns that fit a table ``width`` cells wide: (columns, compact, spark width), the
    host column's cells cut for its width (:func:`host_key`)."""
    columns, compact, spark = _columns_for(width, cluster, wants)
    return [replace(c, key=host_key(c.width)) if c.id == "host" else c for c in columns], compact, spark


def _columns_for(width: int, cluster: bool,
                 wants: Mapping[str, int] | None = None) -> tuple[list[Column], bool, int]:
    """The columns that fit a table ``width`` cells wide: (columns, compact, spark width).

    ``wants`` (:func:`content_widths`) says how wide the cut columns' texts are: room
    left over widens the model column first, then host and vendor, then adds columns
    (group, procs, the history sparkline). Narrower than the compact layout, columns
    are dropped in :data:`NARROW_PRIORITY` order so that no row scrolls sideways.
    """
    wants = dict(wants or {})
    digits = wants.get("idx", 0)  # an index is never cut: the column fits the longest
    host = Column("host", "host", HOST_WIDTH, lambda r, c: c.host_names.get(r.host, r.host), plain_cell)
    procs = Column("procs", "procs", 5, procs_key, right_cell)
    full = [
        Column("idx", "#", max(INDEX_WIDTH, digits), index_key, index_render, sort="index"),
        Column("vendor", "vendor", 11, attribute("vendor"), plain_cell),
        Column("model", "model", 22, model_key, plain_cell),
        Column("util", "util", 15, util_key, util_render, sort="utilization"),
        Column("memory", "memory", MEMORY_WIDTH, memory_key, memory_render, sort="memory"),
        Column("temp", "temp", 5, temp_key, temp_render, sort="temperature"),
        Column("power", "power / limit", 17, power_key, power_render, sort="power"),
        Column("health", "health", 8, health_key, health_render),
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
                           Column("group", "group", 12, attribute("resource_group"), plain_cell))
            room -= 14
        spark = 0
        if room >= 12:
            spark = min(HISTORY_MAX_WIDTH, room - 2)
            columns.append(_history(spark))
        return columns, False, spark
    idx_width = max(INDEX_WIDTH_COMPACT, digits)
    compact = [
        Column("idx", "#", idx_width, index_key, index_render, sort="index"),
        Column("vendor", "vendor", 6, attribute("vendor"), plain_cell),
        Column("model", "model", 16, model_key, plain_cell),
        Column("util", "util", 9, util_key, util_render, sort="utilization"),
        Column("memory", "mem", 9, memory_key, memory_render, sort="memory"),
        Column("temp", "temp", 5, temp_key, temp_render, sort="temperature"),
        Column("power", "power", COMPACT_POWER_WIDTH, power_key, power_render, sort="power"),
        Column("health", "hlth", 5, health_key, health_render),
    ]
    if cluster:
        # 13 cells: a partition's "└ MIG 3g.40gb" whole (its profile is what tells it apart).
        compact[1] = Column("host", "host", 9, lambda r, c: c.host_names.get(r.host, r.host), plain_cell)
        compact[2] = Column("model", "model", 13, model_key, plain_cell)
    wants["model"] = wants.get("model_compact", 0)
    room = width - sum(c.width + 2 for c in compact)
    # a MIG slice's index (7/13/0) is wider than a device's: the cells it lacks come out of the
    # model column, as few as needed (down to a slice's "└ MIG 3g.40gb"), not the vendor column
    short = min(-room, idx_width - INDEX_WIDTH_COMPACT, compact[2].width - 13)
    if short > 0:
        compact[2] = replace(compact[2], width=compact[2].width - short)
        room += short
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
