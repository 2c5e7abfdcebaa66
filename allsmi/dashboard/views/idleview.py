"""The idle view's cells: one row per holder of allocated-but-idle devices (key ``i``).

Pure functions from :class:`allsmi.dashboard.state.idle.IdleRow` to table cells and lines of text;
the app puts them in a :class:`allsmi.dashboard.tables.difftable.DiffTable`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Collection, Iterable, Mapping, Sequence

from rich.text import Text

from allsmi.schema.formatting import NA, above_zero

from allsmi.dashboard.state.idle import IdleRow, row_text
from allsmi.dashboard.state.filtering import Filter, apply_filter, text_matches
from allsmi.dashboard.state.naming import DeviceNames
from allsmi.dashboard.views.activity import holder_words
from allsmi.dashboard.views.render import Palette, safe
from allsmi.dashboard.views.panels import holders_text

IDLE_COLUMNS = (("group", "group", 14), ("idle", "idle h", 7), ("cost", "idle cost", 10),
                ("user", "user", 12), ("job", "job", 10), ("pod", "namespace/pod", 40),
                ("devices", "devices", None))
"""Columns of the idle view: the group, its idle device-hours and idle cost (first, so that a
narrow terminal shows them beside the group), the holder, the devices. A longer text is cut
with an ellipsis (:class:`~allsmi.dashboard.tables.difftable.DiffTable`); the filter finds it
whole. On a terminal narrower than they need, :func:`idle_columns` fits them to it."""

#: The cells around each column's text (the table's cell padding, one each side).
CELL_PADDING = 2
#: The narrowest the namespace/pod and devices columns are cut to before anything else gives way.
POD_MIN, DEVICES_MIN = 20, 16
#: The namespace/pod column is never cut shorter (a narrower terminal scrolls sideways).
POD_NARROWEST = 12
#: On a terminal still too narrow, the columns that narrow then (to these widths), in order.
NARROWER = (("group", 10), ("user", 11), ("job", 8))  # (user: "(unclaimed)" whole)


def idle_columns(width: int) -> tuple[tuple[str, str, int | None], ...]:
    """:data:`IDLE_COLUMNS` fitted to ``width`` cells (from about 70 on, never wider: the
    table does not scroll sideways): as they are where they fit; else the namespace/pod column narrows (to
    :data:`POD_MIN`) beside a devices column of what is left (at least :data:`DEVICES_MIN`);
    else the devices are left out (the holder's row drills down to them: ``Enter``) and the
    group, user and job columns narrow (:data:`NARROWER`) as far as the namespace/pod column
    needs to keep :data:`POD_MIN` cells."""
    fixed = {cid: w for cid, _, w in IDLE_COLUMNS if cid not in ("pod", "devices")}

    def left() -> int:  # cells for the namespace/pod and devices columns, padding included
        return width - sum(w + CELL_PADDING for w in fixed.values())  # type: ignore[operator]

    def spec(pod: int, devices: int | None, drop: bool = False) -> tuple[tuple[str, str, int | None], ...]:
        sizes = {**fixed, "pod": pod, "devices": devices}
        return tuple((cid, label, sizes[cid]) for cid, label, _ in IDLE_COLUMNS
                     if not (drop and cid == "devices"))

    full = dict((cid, w) for cid, _, w in IDLE_COLUMNS)["pod"]
    room = left() - 2 * CELL_PADDING
    if room >= full + 2 * DEVICES_MIN:  # (the devices column takes what its names need)
        return IDLE_COLUMNS
    if room >= POD_MIN + DEVICES_MIN:
        pod = min(full, room - DEVICES_MIN)  # type: ignore[type-var]
        return spec(pod, room - pod)
    for cid, narrower in NARROWER:
        if left() - CELL_PADDING >= POD_MIN:
            break
        fixed[cid] = narrower
    return spec(max(POD_NARROWEST, min(full, left() - CELL_PADDING)), None, drop=True)  # type: ignore[type-var]


#: The user cell of the row of idle time no holder claimed: the rest of a device whose declared
#: shares add up to less than 1, or whose holders are nobody in particular.
UNCLAIMED = "(unclaimed)"


def pod_text(row: IdleRow) -> str:
    """``namespace/pod`` (either part may be unknown), or ``-``."""
    ns, pod = row.holder.namespace, row.holder.pod
    if ns is None and pod is None:
        return "-"
    return f"{ns or NA}/{pod or NA}"


def hours_text(seconds: float) -> str:
    """Device-hours with enough digits for minutes of idle time: 0.004, 0.25, 12.5; ``<0.001``
    for seconds of it (never a 0 for a holder listed because it sat idle), as ``allsmi idle``."""
    hours = seconds / 3600.0
    if hours < 0.1:
        return above_zero(hours, 3)
    if hours < 100:
        return f"{hours:.2f}"
    return f"{hours:.0f}"


def cost_text(row: IdleRow) -> str:
    """``0.42 USD``, or ``-`` where the group has no price (or energy is unknown)."""
    if row.idle_cost is None:
        return "-"
    return f"{row.idle_cost:.2f} {row.currency or ''}".strip()


def devices_text(row: IdleRow, names: Mapping[str, str]) -> str:
    """The devices, by their short names (``nvidia 0, nvidia 1``)."""
    return ", ".join(names.get(key, key.rpartition("\x1f")[2]) for key in row.devices)


def idle_cells(row: IdleRow, names: Mapping[str, str], palette: Palette) -> tuple[Any, ...]:
    """One row of the idle view, in :data:`IDLE_COLUMNS` order."""
    h = row.holder
    if not any(h):  # the part no holder claimed (declared shares short of 1, holders unknown)
        return (Text(row.group or NA, style="bold"),
                Text(hours_text(row.idle_seconds), justify="right", style=palette.warn),
                Text(cost_text(row), justify="right"), Text(UNCLAIMED, style="italic"), "-", "-",
                devices_text(row, names))
    return (Text(row.group or NA, style="bold"),
            Text(hours_text(row.idle_seconds), justify="right", style=palette.warn),
            Text(cost_text(row), justify="right"), h.user or "-", h.job or "-", pod_text(row),
            devices_text(row, names))


def matches(row: IdleRow, flt: Filter, names: Mapping[str, str],
            found: Collection[str] = ()) -> bool:
    """Whether the text filter finds the row: its holder (group, user, namespace, pod, job), a
    device's short name, or one of its devices as the device view's text filter finds them
    (``found``: their row keys; ``mi300x`` typed in the device view keeps the holders of MI300X
    devices here, not an empty view)."""
    if not flt.text:
        return True
    needle = flt.text.lower()
    hay = list(row_text(row)) + [names.get(k, k) for k in row.devices]
    return any(needle in value.lower() for value in hay) or any(k in found for k in row.devices)


def drill_filter(row: IdleRow, refs: Sequence[Any]) -> Filter:
    """What ``Enter`` on ``row`` shows: the devices it held idle and those it holds now, the
    holder known exactly as the idle view knows it (:func:`allsmi.usage.holder_weights`), not
    whatever its name finds as text (job ``703`` is in pid ``17034``; an ``(unclaimed)`` row
    has no name at all)."""
    from allsmi.usage import holder_weights
    keys = set(row.devices)
    if any(row.holder):
        keys.update(ref.key for ref in refs
                    if (ref.device.resource_group or "") == row.group
                    and any(h == row.holder for h, _ in holder_weights(ref.device)))
    return Filter(devices=frozenset(keys), label=holder_label(row))


def holder_label(row: IdleRow) -> str:
    """Who the row is, for the state line of its drill-down (``job 4931180  user alice``)."""
    h = row.holder
    if not any(h):
        return f"{UNCLAIMED} in {row.group or NA}"
    return holder_words(h.pod, h.job, h.user, h.namespace)


def _duration(seconds: float) -> str:
    """``45 s``, ``9 min 58 s``, ``2 h 5 min``."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def idle_title(span: tuple[float, float] | None, threshold: float, points: int,
               shown: Sequence[IdleRow], width: int | None = None) -> Text:
    """The line above the table: the window, the threshold, the totals shown. Where it is
    longer than ``width`` cells, the words about the threshold give way first (``held, ``, then
    the whole ``(util < 5%)``), so that the totals are never cut. A total cost leaves out the
    holders whose cost is unknown (no price, or energy unknown): it says how many, and where
    there is no room for that, it is marked as the lower bound it is (``≥0.03 USD``, as the
    reports mark such sums); the note under the table says it in full (:func:`idle_note`)."""
    head = (f" (held, util < {threshold:g}%)", f" (util < {threshold:g}%)", "")
    tails = [""]
    if span is None:
        rest = ", waiting for samples"
    else:
        rest = f", last {_duration(max(0.0, span[1] - span[0]))}"
        if shown:
            total = sum(r.idle_seconds for r in shown)
            rest += f": {len(shown)} holder{'' if len(shown) == 1 else 's'}, {hours_text(total)} device-h"
            costs: dict[str, float] = {}
            for row in shown:
                if row.idle_cost is not None:
                    costs[row.currency or ""] = costs.get(row.currency or "", 0.0) + row.idle_cost
            unknown = sum(1 for row in shown if row.idle_cost is None)
            sums = [f"{cost:.2f} {currency}".rstrip() for currency, cost in sorted(costs.items())]
            tails = ["".join(f", {s}" for s in sums)]
            if sums and unknown:  # never a part read as the whole
                tails = [tails[0] + f" ({holders_text(unknown)} without a known cost not included)",
                         tails[0] + f" ({unknown} not included)", "".join(f", ≥{s}" for s in sums)]
    words, tail = next(((h, t) for t in tails for h in head
                        if width is None or len("Allocated but idle" + h + rest + t) <= width),
                       (head[-1], tails[-1]))
    text = Text()
    text.append("Allocated but idle", style="bold")
    text.append(words + rest + tail)
    return text


def idle_note(rows_shown: int, unknown_hosts: Sequence[str],
              skewed: Mapping[str, float] | None = None, unpriced: int = 0,
              unheard: Sequence[str] = (), waiting: bool = False) -> Text:
    """What the view cannot know, under the table (empty when nothing to say): hosts that do
    not say who holds their devices, hosts whose clock is off this machine's (``skewed``: name ->
    seconds ahead), holders of the total cost whose cost is unknown (``unpriced``), hosts never
    heard from (``unheard``). With no sample yet (``waiting``) no holder is known: the view does
    not say that none is idle."""
    lines: list[str] = []
    if skewed:
        named = [f"{safe(name)} {'+' if off > 0 else '-'}{_duration(abs(off))}"
                 for name, off in sorted(skewed.items(), key=lambda kv: -abs(kv[1]))]
        more = f" (+{len(named) - 3})" if len(named) > 3 else ""
        lines.append(f"Clock off this machine's on {', '.join(named[:3])}{more}: the window is "
                     "measured on each host's own clock; check their NTP.")
    if not rows_shown and not waiting:
        lines.append("No allocated-but-idle device in the window.")
    if unheard:
        shown = ", ".join(unheard[:3]) + (f" (+{len(unheard) - 3})" if len(unheard) > 3 else "")
        lines.append(f"No data yet from {safe(shown)}: {'its' if len(unheard) == 1 else 'their'} "
                     "idle time is unknown, not counted.")
    if unknown_hosts:
        shown = ", ".join(unknown_hosts[:3]) + (f" (+{len(unknown_hosts) - 3})" if len(unknown_hosts) > 3 else "")
        lines.append(f"Holders unknown on {safe(shown)}: no processes or workloads reported, "
                     "so their idle time is not counted.")
    if unpriced:
        lines.append(f"Idle cost unknown for {holders_text(unpriced)} (no price, or energy not "
                     "reported): not in the total cost.")
    return Text("\n".join(lines), style="dim")


def show_idle(app: Any) -> None:
    """Draw the idle view of ``app`` (a :class:`allsmi.dashboard.screen.app.DashboardApp`; this
    module is imported on the view's first use)."""
    from allsmi.dashboard.state.idle import order_rows
    from allsmi.dashboard.tables.difftable import DiffTable
    from textual.widgets import Static
    flt: Filter = app.filter
    refs = app.all_refs()
    rest = replace(flt, text="")  # what narrows the devices; the text may name holders instead
    allowed = {r.key for r in apply_filter(refs, rest)} if rest.active else None
    rows = app.idle.rows(None if allowed is None else allowed.__contains__)
    found = ({r.key for r in refs if text_matches(r, flt.text, app.names.places, app.host_names())}
             if flt.text else set())
    labels = app.host_names() or {h.key: h.name for h in app.hosts}  # (a cluster's: told apart)
    names = device_names(app.names, {key for row in rows for key in row.devices},
                         app.source.cluster, labels)
    rows = [r for r in rows if matches(r, flt, names, found)]
    rows = order_rows(rows, app.idle_sort, app.idle_descending)
    table = app.query_one("#idle-table", DiffTable)
    # the width of the last resize, less the table's vertical scrollbar (kept for any rows)
    table.set_rows(((f"idle:{r.key}", idle_cells(r, names, app._palette)) for r in rows),
                   idle_columns(app.layout_width - 2 - table.styles.scrollbar_size_vertical))
    app.idle_rows = rows
    app.query_one("#idle-title", Static).update(
        idle_title(app.idle.span(), app.idle.threshold, app.idle.points, rows,
                   app.layout_width - 2))  # inside the title's padding
    unknown = [labels[h.key] for h in app.hosts if h.snapshot is not None and h.snapshot.devices
               and not app.idle.known.get(h.key, False)]
    skewed = {labels.get(k, k): off for k, off in app.idle.skewed().items()}
    costs = [r.idle_cost for r in rows]
    unpriced = costs.count(None) if any(c is not None for c in costs) else 0
    app.query_one("#idle-note", Static).update(
        idle_note(len(rows), unknown, skewed, unpriced,
                  [labels[h.key] for h in app.hosts if h.snapshot is None and h.summary is None],
                  app.idle.span() is None))


def device_names(names: DeviceNames, keys: Iterable[str], cluster: bool,
                 hosts: Mapping[str, str]) -> dict[str, str]:
    """Row key -> the device's one name (``nvidia 0``, ``nvidia 7/1/0``:
    :mod:`allsmi.dashboard.state.naming`), after its host's in a cluster (``node-a:nvidia 0``);
    a device whose name was never known by its id."""
    out = {}
    for key in keys:
        host, _, ident = key.partition("\x1f")
        name = names.name(key) or ident.partition("\x1f")[0]
        out[key] = f"{hosts.get(host, host)}:{name}" if cluster else name
    return out
