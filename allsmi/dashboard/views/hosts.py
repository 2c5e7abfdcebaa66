"""The cluster view's hosts: one row per node, and the detail of the highlighted one.

A node that is down says why (the reason the fetch failed: refused, timed out,
``HTTP 500``, not JSON, wrong ``schema_version``, too large...), a node that
answers with values the parser had to null says which, a node that does not
export process details says so. The ``host`` and ``problem`` columns take the
width their content needs; the line under the table shows the highlighted
node's address, hostname and every problem in full.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rich.console import Console
from rich.containers import Lines
from rich.text import Text

from allsmi.formatting import NA, percent

from allsmi.dashboard.state.model import duplicate_ids
from allsmi.dashboard.state.totals import Totals
from allsmi.dashboard.views.groups import memory_totals, power_totals
from allsmi.dashboard.views.panels import age_text
from allsmi.dashboard.views.render import Palette, safe
from allsmi.dashboard.sources import HostState

HOST_COLUMNS = (("host", "host", None), ("state", "state", 5), ("age", "age", 8), ("devices", "devices", 7),
                ("util", "util", 5), ("power", "power / limit", None), ("memory", "memory", None),
                ("name", "hostname", None), ("error", "problem", None))
"""The hosts table; ``None`` widths follow the content, the host and hostname up to
:data:`NAME_MAX_WIDTH` (cut with an ellipsis: the line under the table has them whole), the
power and memory as wide as their longest (``9.7/19.1 kW (27 of 36)``: a number is never
cut), the problem to the screen's edge (wrapped onto more lines, never cut)."""

#: The widest the host and hostname cells grow (a Prometheus ``instance`` can be kilobytes).
NAME_MAX_WIDTH = 32


def capped(text: str, width: int = NAME_MAX_WIDTH) -> str:
    """``text`` cut to ``width`` cells with an ellipsis."""
    return text if len(text) <= width else text[:width - 1] + "\u2026"


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
        return Text("; ".join(safe(w) for w in warnings)[:200], style=palette.warn)
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


def problem_width(hosts: Sequence[HostState], screen_width: int,
                  measured: Mapping[str, int] | None = None) -> int:
    """Cells left for the problem column once the other columns of :data:`HOST_COLUMNS` are laid
    out (the ``host`` and ``hostname`` columns as wide as their longest value, the ``power`` and
    ``memory`` columns as ``measured``: their longest cells)."""
    measured = measured or {}
    fixed = sum(w for _, _, w in HOST_COLUMNS if w is not None)
    host = min(NAME_MAX_WIDTH, max((len(h.key) for h in hosts), default=4))
    name = min(NAME_MAX_WIDTH, max((len(h.name) for h in hosts if h.name != h.key), default=len(NA)))
    auto = sum(max(measured.get(cid, 19), len(label)) for cid, label, width in HOST_COLUMNS
               if width is None and cid in ("power", "memory"))
    return screen_width - fixed - max(host, 4) - max(name, 8) - auto - 2 * len(HOST_COLUMNS) - 4


def host_rows(hosts: Sequence[HostState], by_host: Mapping[str, Totals], palette: Palette, now: float,
              interval: float, screen_width: int | None = None) -> list[tuple[str, tuple[Any, ...]]]:
    """(row key, cells) of every host, in :data:`HOST_COLUMNS` order; on a screen
    ``screen_width`` cells wide, a problem longer than its column (:func:`problem_width`) is
    wrapped onto more lines of its row."""
    rows: list[tuple[str, tuple[Any, ...]]] = []
    for host in hosts:
        totals = by_host.get(host.key) or host.summary or Totals(host.key)
        if host.error is None:
            known = host.snapshot is not None or host.summary is not None
            state = Text("ok" if known else "wait", style=palette.ok)
        elif host.answered is not None:
            state = Text("flap", style=f"bold {palette.warn}")
        else:
            state = Text("down", style=f"bold {palette.hot}")
        age = host.age(now)
        stale = age is not None and age > 3 * interval
        rows.append((f"host:{host.key}", (
            capped(host.key), state,
            Text(age_text(age), justify="right", style=palette.warn if stale or host.error else ""),
            Text(str(totals.devices) + (f"+{totals.partitions}p" if totals.partitions else ""),
                 justify="right"),
            Text(percent(totals.utilization_percent), justify="right",
                 style=palette.load(totals.utilization_percent)),
            power_totals(totals),
            memory_totals(totals),
            capped(host.name) if host.name != host.key else NA,
            problem_text(host, palette, now))))
    if screen_width is None:
        return rows
    measured = {cid: max((len(cells[i]) for _, cells in rows), default=0)
                for i, (cid, _, _) in enumerate(HOST_COLUMNS) if cid in ("power", "memory")}
    width = problem_width(hosts, screen_width, measured)
    return [(key, cells[:-1] + (wrapped(cells[-1], width),)) for key, cells in rows]


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
        devices = [d for d in host.snapshot.devices if d.parent is None] if host.snapshot else []
        utils = [d.utilization_percent for d in devices if d.utilization_percent is not None]
        state = ("flap" if host.answered else "down") if host.error is not None \
            else "ok" if host.snapshot is not None else "wait"
        problem = (host.error or "") if host.error is not None else "; ".join(host_warnings(host))
        parts = len(host.snapshot.devices) - len(devices) if host.snapshot else 0
        rows.append((safe(host.key), state, str(len(devices)) + (f"+{parts}p" if parts else ""),
                     percent(sum(utils) / len(utils) if utils else None),
                     safe(host.name) if host.name != host.key else NA, safe(problem)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] + "\n"
                   for row in rows)
