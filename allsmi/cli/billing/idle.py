"""``allsmi idle``: who held devices that sat idle, and what that cost.

The same sources, window and grouping options as ``allsmi export`` (the ledger,
Prometheus or a simulation), reported for the holders of allocated-but-idle devices:
one row per holder (resource group, user, namespace, pod, job by default) with
idle-allocated device-hours, sorted by idle cost within each currency, then idle hours (rows
whose idle cost is unknown last).

Exit statuses: 0 written (also when nothing sat idle); 1 the source could not be read or
the output not written; 2 bad options or configuration; 3 written, but the source had no
device data at all for the window; 128 + N killed by signal N.
"""

from __future__ import annotations

import time
from typing import Any

import click

from allsmi.cli.billing import holderreport
from allsmi.cli.billing.holderreport import (
    KEYS, aligned, currencies_note, held_unknown, money, rank)
from allsmi.cli.billing.reportcmd import Run, guarded, source_options

#: Columns of the CSV and of each JSON row (the export's names), then ``devices``.
COLUMNS = KEYS + ("idle_allocated_device_hours", "allocated_device_hours", "idle_cost", "cost",
                  "currency", "device_count", "devices")


@click.command()
@source_options
@holderreport.output_options
def idle(**opts: Any) -> None:
    """List who held allocated-but-idle devices over a window, by idle cost.

    A device is allocated but idle while a process or a workload (pod, batch job) holds it
    and its utilization stays below [accounting] idle_threshold_percent (default 5).
    idle_cost is the part of the holder's cost spent on that time.

    \b
    Examples:
      allsmi idle --simulate mixed --period yesterday
      allsmi idle --period last-month --group-by resource_group,namespace --format csv
      allsmi idle --prometheus http://prometheus:9090 --since 2026-03-01 --format json
    """
    guarded(Run(started=time.time(), textfile=None), holderreport.run_report, rows=idle_rows,
            columns=COLUMNS, table=to_table, short="the idle time may be short", **opts)


def idle_rows(report: Any) -> list[dict[str, Any]]:
    """The rows with idle-allocated time, as JSON-ready dicts, most expensive first
    (:func:`allsmi.cli.billing.holderreport.rank`): time as
    reported (rounded to the microhour, as every output rounds it), so that float noise in
    counters' rates (a Prometheus source) lists no holder idle for 0.000000 hours. A holder
    whose idle time is unknown (it held a device that reports neither utilization nor compute
    activity) is listed too, after those whose idle cost is known, its idle time and idle cost
    null: it may have held devices idle, and is never left out as if it had not; so is one
    whose allocated time is unknown (:func:`~allsmi.cli.billing.holderreport.held_unknown`)."""
    from allsmi.accounting.formats import json_row
    out = []
    for row in report.rows:
        if row.idle_allocated_device_hours is None:
            if not row.allocated_device_hours and not held_unknown(row):  # held nothing
                continue
        elif not row.idle_allocated_device_hours:  # none
            continue
        item = json_row(row)
        if item["idle_allocated_device_hours"] == 0:  # below what the output can show
            continue
        item["devices"] = list(row.idle_devices)
        out.append(item)
    return rank(out, lambda r: r["idle_cost"], "idle_allocated_device_hours")


def to_table(report: Any, rows: list[dict[str, Any]]) -> str:
    """An aligned text table with only the grouping columns in use."""
    from allsmi.accounting.periods import iso
    from allsmi.schema.formatting import above_zero
    keys = [k for k in KEYS if k in report.group_by]
    head = keys + ["idle h", "allocated h", "idle cost", "devices"]
    body = [[row[k] or "-" for k in keys] + [
        "unknown" if row["idle_allocated_device_hours"] is None
        else above_zero(row["idle_allocated_device_hours"], 2),
        "unknown" if row["allocated_device_hours"] is None
        else above_zero(row["allocated_device_hours"], 2),
        money(row["idle_cost"], row["currency"]), " ".join(row["devices"])] for row in rows]
    return aligned(f"allocated-but-idle devices, {iso(report.window.start)} to "
                   f"{iso(report.window.end)} ({report.source}){currencies_note(rows)}", head, body,
                   "no allocated-but-idle time in this window")
