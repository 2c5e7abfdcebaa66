"""The ``--format table`` view for people (uses rich; never on the JSON/CSV path)."""

from __future__ import annotations

import io

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from allsmi.schema.formatting import (NA, SOURCE_SHORT, celsius, human_bytes, percent, waiting_summary,
                               waiting_words, watts)
from allsmi.schema import DeviceSample, Snapshot

_HEALTH_STYLE = {"ok": "green", "degraded": "yellow", "lost": "bold red", "unknown": "dim"}
HEADERS = ("#", "vendor", "model", "group", "health", "util", "active", "memory", "temp",
           "power / limit", "procs", "held by", "waiting")
RIGHT = ("#", "util", "temp", "procs")
#: The text columns that give way (cut with an ellipsis) before a number is ever cut: a long
#: model or group name, or many holders (the JSON and CSV formats have them whole), each at
#: most this wide, and narrower where the line would not fit (never below its header). The
#: other columns (numbers, health, waiting) and every header are never cut: where they alone
#: do not fit, the line is longer than the width.
TEXT_WIDTHS = {"vendor": 16, "model": 48, "group": 32, "held by": 32}
#: Cells between two columns.
GAP = 2
#: The width of a table not shown on a terminal (and without ``$COLUMNS``).
DEFAULT_WIDTH = 200
_STATUS_STYLE = {"ok": "green", "unavailable": "dim", "error": "bold red", "timeout": "bold yellow"}


def table_width() -> int:
    """``$COLUMNS``, else the terminal's width, else :data:`DEFAULT_WIDTH` (stdout is a pipe or
    a file)."""
    import shutil
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


def column_widths(rows: list[tuple[str, ...]], width: int) -> list[int]:
    """Each column's width: its widest cell or header, the text columns (:data:`TEXT_WIDTHS`)
    narrowed, widest first, until the line fits ``width`` or each is down to its header."""
    widths = [max([cell_len(h)] + [cell_len(row[i]) for row in rows]) for i, h in enumerate(HEADERS)]
    text = [i for i, h in enumerate(HEADERS) if h in TEXT_WIDTHS]
    for i in text:
        widths[i] = min(widths[i], max(TEXT_WIDTHS[HEADERS[i]], cell_len(HEADERS[i])))
    excess = sum(widths) + GAP * (len(widths) - 1) - width
    while excess > 0:
        wide = [i for i in text if widths[i] > cell_len(HEADERS[i])]
        if not wide:
            break  # only what is never cut is left: the line is longer than ``width``
        widest = max(wide, key=lambda i: widths[i] - cell_len(HEADERS[i]))
        widths[widest] -= 1
        excess -= 1
    return widths


def render_table(snapshot: Snapshot, width: int | None = None) -> str:
    """Devices (partitions indented under their parent) and backend statuses as text, in
    ``width`` cells (default: :func:`table_width`) where the numbers fit."""
    host = snapshot.host
    rows = [cells(dev) for dev in snapshot.devices]
    width = width or table_width()
    widths = column_widths(rows, width)
    buf = io.StringIO()
    console = Console(file=buf, width=max(width, sum(widths) + GAP * (len(widths) - 1)),
                      force_terminal=False, no_color=True, highlight=False)
    console.print(f"{escape(host.hostname)}  CPU {percent(host.cpu_utilization_percent)}  "
                  f"memory {human_bytes(host.memory_used_bytes)} / {human_bytes(host.memory_total_bytes)}  "
                  f"{snapshot.timestamp:%Y-%m-%d %H:%M:%S} UTC")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column, column_width in zip(HEADERS, widths):
        table.add_column(column, justify="right" if column in RIGHT else "left", no_wrap=True,
                         overflow="ellipsis", width=column_width)
    for dev, row in zip(snapshot.devices, rows):
        table.add_row(*(Text(cell, style=_HEALTH_STYLE.get(dev.health, "")) if column == "health"
                        else Text(cell) for column, cell in zip(HEADERS, row)))
    if snapshot.devices:
        console.print(table)
    else:
        console.print("No accelerators found.")
    console.print()
    for status in snapshot.backends:
        style = _STATUS_STYLE.get(status.status, "")
        message = f"  {status.message}" if status.message else ""
        console.print(f"backend {escape(status.name):<12} [{style}]{status.status}[/]"
                      f"{escape(message)}")
    for status in snapshot.attribution:
        style = _STATUS_STYLE.get(status.status, "")
        message = f"  {status.message}" if status.message else ""
        console.print(f"attribution {escape(status.name):<12} [{style}]{status.status}[/]"
                      f"{escape(message)}")
    return buf.getvalue()


def cells(dev: DeviceSample) -> tuple[str, ...]:
    """One device's row, as text (never rich markup), a cell per :data:`HEADERS`."""
    name = dev.name or NA
    if dev.parent:
        name = f"  └ {name}"
    memory = f"{human_bytes(dev.memory_used_bytes)} / {human_bytes(dev.memory_total_bytes)}"
    power = f"{watts(dev.power_watts)} / {watts(dev.power_limit_watts)}"
    return (NA if dev.index is None else str(dev.index), dev.vendor, name,
            dev.resource_group or NA, dev.health, percent(dev.utilization_percent), active(dev),
            memory, celsius(dev.temperature_celsius), power,
            NA if dev.processes is None else str(len(dev.processes)), held_by(dev), waiting(dev))


def active(dev: DeviceSample) -> str:
    """The share of compute units busy and what measured it, as the dashboard's ``active``
    column shows it (``20% sm``); N/A where the hardware does not say (never 0, never the
    headline utilization in its place)."""
    if dev.compute_active_percent is None:
        return f"{NA:>4}"
    short = SOURCE_SHORT.get(dev.compute_active_source or "", "?")
    return f"{percent(dev.compute_active_percent):>4} {short}"  # (the % signs aligned)


def waiting(dev: DeviceSample) -> str:
    """What the device's holders waited on, as the dashboard's ``waiting`` column says it: the
    costliest reason among them and how many more holders there are (``input +1``); ``-`` when
    they are not classified (no holder, or no waiting step)."""
    summary = waiting_summary(dev)
    return "-" if summary is None else waiting_words(summary)


def held_by(dev: DeviceSample) -> str:
    """Who holds the device, shortly: ``namespace/pod`` or ``job ID (user)``, and how many
    more; ``-`` when nobody, N/A when no attribution source is active."""
    if dev.workloads is None:
        return NA
    if not dev.workloads:
        return "-"
    first = dev.workloads[0]
    if first.pod is not None:
        text = f"{first.namespace}/{first.pod}" if first.namespace else first.pod
    elif first.job_id is not None:
        text = f"job {first.job_id}" + (f" ({first.user})" if first.user else "")
    else:
        text = first.user or first.source
    more = len(dev.workloads) - 1
    return text + (f" +{more}" if more else "")
