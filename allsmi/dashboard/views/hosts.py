"""The cluster view's hosts: one row per node, and the detail of the highlighted one.

A node that is down says why (the reason the fetch failed: refused, timed out,
``HTTP 500``, not JSON, wrong ``schema_version``, too large...), a node that
answers with values the parser had to null says which, a node that does not
export process details says so. The ``host`` and ``problem`` columns take the
width their content needs; the line under the table shows the highlighted
node's address, hostname and every problem in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rich.console import Console
from rich.cells import cell_len
from rich.containers import Lines
from rich.text import Text

from allsmi.schema.formatting import NA, percent

from allsmi.dashboard.state.model import duplicate_ids, refs_of
from allsmi.dashboard.state.totals import Totals, totals_by, totals_value
from allsmi.dashboard.views.amounts import power_totals
from allsmi.dashboard.views.groups import fit_columns, memory_totals, names_apart
from allsmi.dashboard.views.panels import age_text
from allsmi.dashboard.views.render import Palette, safe
from allsmi.dashboard.sources import HostState

HOST_COLUMNS = (("host", "host", None), ("state", "state", None), ("age", "age", None),
                ("devices", "devices", None), ("util", "util", None), ("power", "power / limit", None),
                ("memory", "memory", None), ("name", "hostname", None), ("error", "problem", None))
"""The hosts table, most needed first; :func:`host_layout` sizes each column to its longest
cell (a number is never cut). The host and hostname are cut with an ellipsis (at most
:data:`NAME_MAX_WIDTH`; the line under the table has them whole), the problem takes the room
left (wrapped onto more lines, never cut)."""

#: The widest the host and hostname cells grow (a Prometheus ``instance`` can be kilobytes).
NAME_MAX_WIDTH = 32
#: The columns that give way on a narrow terminal, first first (the line under the table shows
#: the highlighted host's hostname and problem in full; host, state and util stay: power and
#: memory go last, below about 60 columns, rather than be cut by the table's edge).
HOST_DROP_ORDER = ("name", "error", "age", "devices", "power", "memory")
#: The host column's width while columns are fitted (a longer host is cut before a column of
#: numbers gives way, and grows back into the room left), and its narrowest; the narrowest the
#: problem column is shown at.
HOST_WIDTH, HOST_MIN_WIDTH, PROBLEM_MIN_WIDTH = 12, 8, 16
#: The most cells of warnings a host's row shows (cut with an ellipsis; the line under the
#: table has them whole).
PROBLEM_MAX_WIDTH = 200


def capped(text: str, width: int = NAME_MAX_WIDTH) -> str:
    """``text`` cut to ``width`` cells (not characters: a wide one takes two) with an ellipsis."""
    if cell_len(text) <= width:
        return text
    cut = Text(text)
    cut.truncate(width, overflow="ellipsis")
    return cut.plain


def host_warnings(host: HostState) -> list[str]:
    """What is wrong with a host that answers: duplicate device ids, values the parser nulled."""
    out = source_faults(host)
    dups = duplicate_ids(host.snapshot)
    if dups:
        out.append(f"duplicate device id{'s' if len(dups) > 1 else ''} {', '.join(dups[:3])}"
                   f"{' ...' if len(dups) > 3 else ''} (every device is shown)")
    if host.problems:
        out.append(f"bad values ignored: {'; '.join(host.problems)}")
    if host.shared:
        out.append(shared_warning(host.shared, host.shared_with))
    return out


def source_faults(host: HostState) -> list[str]:
    """The host's backends and attribution sources that failed or hung in its last snapshot
    (``backend amd timeout: no answer within 5 s``): its row says which node it is."""
    snap = host.snapshot
    if snap is None:
        return []
    out = []
    for what, statuses in (("backend", snap.backends), ("attribution", snap.attribution)):
        for status in statuses:
            if status.status in ("error", "timeout"):
                said = f"{what} {status.name} {status.status}"
                out.append(f"{said}: {status.message}" if status.message else said)
    return out


def shared_warning(count: int, others: Sequence[str] = ()) -> str:
    """The warning for devices another host reports too (:attr:`HostState.shared`)."""
    where = f" ({', '.join(others[:2])}{' ...' if len(others) > 2 else ''})" if others else ""
    return (f"{count} device{'s' if count > 1 else ''} also reported by another instance{where}, "
            "counted twice: read each node one way, allsmi serve or a textfile snapshot "
            "(docs/exporter.md)")


def retry_note(host: HostState, now: float) -> str:
    """`` (retry in 12 s)`` while a down host waits, `` (retrying)`` once its retry is due or
    running (a retry takes up to the timeout), "" when no retry is planned."""
    if host.retry_at is None:
        return ""
    left = host.retry_at - now
    return " (retrying)" if left < 0.5 else f" (retry in {left:.0f} s)"


def flap_note(host: HostState, now: float) -> str:
    """``flapping: answered 2 of the last 8 polls, devices from 12 s ago; `` or ""."""
    if host.answered is None:
        return ""
    answered, asked = host.answered
    age = host.age(now)
    shown = f", devices from {age_text(age)} ago" if host.snapshot is not None and age is not None else ""
    return f"flapping: answered {answered} of the last {asked} polls{shown}; "


def problem_text(host: HostState, palette: Palette, now: float) -> Text:
    """The problem cell: why a host is down (and when it is retried), or its warnings."""
    if host.error is not None:
        return Text(f"{flap_note(host, now)}unreachable: {safe(host.error)}{retry_note(host, now)}",
                    style=palette.warn if host.answered else palette.hot)
    warnings = host_warnings(host)
    if warnings:
        return Text(capped("; ".join(safe(w) for w in warnings), PROBLEM_MAX_WIDTH), style=palette.warn)
    return Text("")


def wrapped(text: Text, width: int | None, max_lines: int = 6) -> Text:
    """``text`` broken into lines of at most ``width`` cells (at most ``max_lines``, the last
    one marked when cut), so that a long problem is read in full on its row."""
    if width is None or width < 8 or len(text.plain) <= width:
        return text
    lines = text.wrap(Console(width=width, legacy_windows=False), width, overflow="fold")
    if len(lines) > max_lines:
        lines = Lines(list(lines)[:max_lines])
        last = lines[-1]
        last.truncate(width - 1)
        last.append("\u2026")
    return Text("\n").join(lines)


@dataclass
class HostsLayout:
    """What the hosts table shows at one width."""

    columns: list[tuple[str, str, int]]
    """(column id, label, cells) of the columns shown, in :data:`HOST_COLUMNS` order."""
    rows: list[tuple[str, tuple[Any, ...]]]
    hidden: list[str]
    """The labels of the columns left out, for the state line."""

    @property
    def lines(self) -> int:
        """Lines of the rows (a wrapped problem makes a taller row)."""
        return sum(1 + max((c.plain.count("\n") for c in cells if isinstance(c, Text)), default=0)
                   for _, cells in self.rows)


def host_cells(host: HostState, totals: Totals, palette: Palette, now: float, interval: float,
               compact: bool = False) -> tuple[Text, ...]:
    """One host's row in :data:`HOST_COLUMNS` order (the problem on one line); ``compact``:
    memory in one unit for both values, as power always is."""
    if host.error is None:
        known = host.snapshot is not None or host.summary is not None
        state = Text("ok" if known else "wait", style=palette.ok)
    elif host.answered is not None:
        state = Text("flap", style=f"bold {palette.warn}")
    else:
        state = Text("down", style=f"bold {palette.hot}")
    age = host.age(now)
    stale = age is not None and age > 3 * interval
    # a host never heard from has devices nobody counted: unknown, not 0
    heard = host.snapshot is not None or host.summary is not None
    return (Text(capped(safe(host.key))), state,
            Text(age_text(age), justify="right", style=palette.warn if stale or host.error else ""),
            Text(str(totals.devices) + (f"+{totals.partitions}p" if totals.partitions else "")
                 if heard else NA, justify="right", style="" if heard else "dim"),
            Text(percent(totals.utilization_percent), justify="right",
                 style=palette.load(totals.utilization_percent)),
            Text(power_totals(totals)),
            Text(memory_totals(totals, compact)),
            Text(capped(safe(host.name)) if host.name != host.key else NA),
            problem_text(host, palette, now))


def order_hosts(hosts: Sequence[HostState], by_host: Mapping[str, Totals], key: str,
                descending: bool) -> list[HostState]:
    """The hosts in the dashboard's sort order, as the groups and vendors below are sorted:
    ``index`` keeps the order they were given in (reversed when descending), any other key
    orders them by the same quantity of their totals, unknown last in both directions, ties
    in the given order."""
    if key == "index":
        return list(reversed(hosts)) if descending else list(hosts)

    def rank(item: tuple[int, HostState]) -> tuple[int, float, int]:
        position, host = item
        value = totals_value(by_host.get(host.key) or host.summary or Totals(host.key), key)
        if value is None:
            return (1, 0.0, position)
        return (0, -value if descending else value, position)

    return [host for _, host in sorted(enumerate(hosts), key=rank)]


def host_layout(hosts: Sequence[HostState], by_host: Mapping[str, Totals], palette: Palette,
                now: float, interval: float, width: int | None = None) -> HostsLayout:
    """The hosts table ``width`` cells wide (every column when ``width`` is None): columns as
    wide as their longest cell; on a narrow terminal a long host is cut first, then columns
    dropped in :data:`HOST_DROP_ORDER`, memory in one unit where that keeps a column more; the
    problem takes the room left, a longer one wrapped onto more lines of its row."""
    best: HostsLayout | None = None
    for compact in (False, True):
        rows = [(f"host:{h.key}", host_cells(h, by_host.get(h.key) or h.summary or Totals(h.key),
                                              palette, now, interval, compact)) for h in hosts]
        natural = {cid: max([len(label)] + [cells[i].cell_len for _, cells in rows])
                   for i, (cid, label, _) in enumerate(HOST_COLUMNS)}
        problems = any(cells[-1].plain for _, cells in rows)
        shown, hidden = _fit_hosts(natural, width, problems)
        if best is not None and len(hidden) >= len(best.hidden):
            break  # one unit shows no more: the usual form
        rows = names_apart(rows, natural["host"])  # two addresses cut alike stay apart
        index = [i for i, (cid, _, _) in enumerate(HOST_COLUMNS) if cid in shown]
        problem = natural["error"] if "error" in shown else None
        best = HostsLayout([(cid, label, natural[cid]) for cid, label, _ in HOST_COLUMNS if cid in shown],
                           [(key, tuple(wrapped(cells[i], problem) if HOST_COLUMNS[i][0] == "error"
                                        else cells[i] for i in index)) for key, cells in rows],
                           hidden)
        if not hidden:
            break
    assert best is not None
    return best


def _fit_hosts(natural: dict[str, int], width: int | None, problems: bool) -> tuple[list[str], list[str]]:
    """The columns shown and the labels of those left out (:func:`fit_columns`: the host's
    name cut, the problem taking the room left)."""
    shown = [cid for cid, _, _ in HOST_COLUMNS]
    if width is None:
        return shown, []
    labels = {cid: label for cid, label, _ in HOST_COLUMNS}
    shown = fit_columns(natural, width, shown, HOST_DROP_ORDER, "host", HOST_WIDTH,
                        HOST_MIN_WIDTH, "error", PROBLEM_MIN_WIDTH)
    left_out = [cid for cid in HOST_DROP_ORDER if cid not in shown and (problems or cid != "error")]
    return shown, [labels[cid] for cid in left_out]


def host_detail(host: HostState | None, palette: Palette, now: float) -> Text:
    """Everything about one host, wrapped (the line under the hosts table)."""
    if host is None:
        return Text("No host selected.", style="dim")
    text = Text()
    text.append(safe(host.key), style="bold")
    if host.address and host.address != host.key:
        text.append(f"  {safe(host.address)}", style="dim")
    if host.name != host.key:
        text.append(f"  reports hostname {safe(host.name)}")
    if host.error is not None:
        if host.answered is not None:
            text.append(f"\n{flap_note(host, now).rstrip('; ')}", style=f"bold {palette.warn}")
        text.append("\ndown: ", style=f"bold {palette.hot}")
        text.append(safe(host.error), style=palette.hot)
        text.append(retry_note(host, now))
    for warning in host_warnings(host):
        text.append("\nwarning: ", style=f"bold {palette.warn}")
        text.append(safe(warning), style=palette.warn)
    if host.process_details is False:
        text.append("\nthis host does not export process command lines or users", style="dim")
    return text


def plain_hosts(hosts: Sequence[HostState], now: float) -> str:
    """The hosts as a plain table (no colour, no cursor movement) for a pipe or ``TERM=dumb``."""
    rows = [("HOST", "STATE", "DEVICES", "UTIL", "HOSTNAME", "PROBLEM")]
    for host in hosts:
        state = ("flap" if host.answered else "down") if host.error is not None \
            else "ok" if host.snapshot is not None or host.summary is not None else "wait"
        problem = (host.error or "") if host.error is not None else "; ".join(host_warnings(host))
        if host.snapshot is None and host.summary is not None:
            # a host of a fleet too large to list its devices: its totals, as on screen
            count, parts, util = (host.summary.devices, host.summary.partitions,
                                  host.summary.utilization_percent)
        else:  # the totals the screen's row shows, counted the same way
            totals = next(iter(totals_by(refs_of(host.key, host.snapshot), lambda r: r.host)),
                          None) or Totals(host.key)
            count, parts, util = totals.devices, totals.partitions, totals.utilization_percent
        heard = host.snapshot is not None or host.summary is not None  # else: unknown, not 0
        rows.append((safe(host.key), state, str(count) + (f"+{parts}p" if parts else "") if heard else NA,
                     percent(util), safe(host.name) if host.name != host.key else NA, safe(problem)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] + "\n"
                   for row in rows)
