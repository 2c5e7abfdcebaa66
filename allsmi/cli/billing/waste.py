"""``allsmi waste``: where the money went, and what each holder waited on.

The same sources, window and grouping options as ``allsmi export`` (the ledger, Prometheus
or a simulation). One row per holder (resource group, user, namespace, pod, job by default)
that held devices in the window: its cost, the part of it that bought compute activity
(``active_cost``: the cost of each device the holder held x its efficiency over that time,
summed, so that rows add up whatever the grouping), the rest (``lost_cost``), and the cost of
each waiting reason (docs/activity.md), sorted by money lost within each currency. ``evidence`` says, in words,
what the holder's allocated time went to.

Exit statuses: as ``allsmi idle``: 0 written; 1 the source could not be read or the output not
written; 2 bad options or configuration; 3 written, but the source had no device data at all
for the window; 128 + N killed by signal N.
"""

from __future__ import annotations

import time
from typing import Any

import click

from allsmi.cli.billing import holderreport
from allsmi.cli.billing.holderreport import (
    KEYS, aligned, currencies_note, held_unknown, money, rank)
from allsmi.cli.billing.reportcmd import Run, guarded, source_options
from allsmi.schema import WAITING_REASONS

#: Columns of the CSV and of each JSON row (the export's names where they are the export's).
COLUMNS = KEYS + (
    "allocated_device_hours", "active_device_hours", "efficiency_ratio", "activity_method",
    "cost", "active_cost", "lost_cost", "currency",
    *(f"waiting_{r}_seconds" for r in WAITING_REASONS),
    *(f"waiting_{r}_cost" for r in WAITING_REASONS), "evidence", "device_count")


@click.command()
@source_options
@holderreport.output_options
def waste(**opts: Any) -> None:
    """Rank holders by money lost: cost not spent on compute activity, and what they waited on.

    Activity is the devices' compute activity (SM active, GFX busy...; not the headline
    utilization). Each holder's allocated time is split by what it was doing: computing, or
    waiting on input, the host, communication, nothing, or unknown (docs/activity.md).

    \b
    Examples:
      allsmi waste --simulate mixed --period yesterday
      allsmi waste --period last-week --format csv
      allsmi waste --prometheus http://prometheus:9090 --period last-week --format json
    """
    guarded(Run(started=time.time(), textfile=None), holderreport.run_report, rows=waste_rows,
            columns=COLUMNS, table=to_table, short="the figures may be short", **opts)


def evidence(item: dict[str, Any]) -> str:
    """What the allocated time went to, in words: the reasons by their share of it (with the
    time no reason was booked for, where that is 0.5 % of it or more: a ledger recorded before
    the classification, or with it switched off, for part of the window), then the efficiency."""
    if item["allocated_device_hours"] is None:
        return ("allocated time unknown: none of its devices could list its processes or "
                "workloads")
    waits = [(r, item[f"waiting_{r}_seconds"]) for r in WAITING_REASONS]
    total = sum(s for _, s in waits if s)
    parts = []
    if total:
        allocated = max(total, 3600.0 * (item["allocated_device_hours"] or 0.0))
        if allocated - total >= 0.005 * allocated:
            waits.append(("not classified", allocated - total))
        for reason, seconds in sorted(waits, key=lambda w: -(w[1] or 0.0)):
            if seconds:
                parts.append(f"{reason} {100.0 * seconds / allocated:.0f} % "
                             f"({_duration(seconds)})")
    else:
        parts.append("waiting reasons not measured")
    if item["efficiency_ratio"] is not None:
        parts.append(f"compute active {100.0 * item['efficiency_ratio']:.0f} % of allocated "
                     f"time ({item['activity_method'] or 'unknown source'})")
    else:
        parts.append("compute activity not measured")
    return "; ".join(parts)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def waste_rows(report: Any) -> list[dict[str, Any]]:
    """The rows with allocated time, as JSON-ready dicts, most money lost first. A row whose
    allocated time is unknown (:func:`~allsmi.cli.billing.holderreport.held_unknown`) is
    listed too, last, its allocated time and what it lost null: it may have held devices."""
    from allsmi.accounting.formats import json_row
    out = []
    for row in report.rows:
        if not row.allocated_device_hours and not held_unknown(row):  # none
            continue
        full = json_row(row)
        item = {k: full.get(k) for k in COLUMNS if k in full}
        cost, active_cost = row.cost, row.active_cost
        item["active_cost"] = None if active_cost is None else round(active_cost, 6)
        item["lost_cost"] = None if active_cost is None or cost is None \
            else round(cost - active_cost, 6)
        item["evidence"] = evidence(item)
        out.append({k: item.get(k) for k in COLUMNS})
    return rank(out, _lost, "allocated_device_hours")


#: The waiting reasons whose time is known to buy no compute (computing may; unknown may).
_LOST_REASONS = tuple(r for r in WAITING_REASONS if r not in ("computing", "unknown"))


def _lost(row: dict[str, Any]) -> float | None:
    """What a row ranks by: its lost cost, else (its activity unknown) the cost of the time it
    was known to wait on input, the host, communication or nothing, at least that was lost;
    ``None`` when no cost of it is known (no price, nothing measured)."""
    if row["allocated_device_hours"] is None:  # whether it held anything is unknown
        return None
    if row["lost_cost"] is not None:
        return float(row["lost_cost"])
    known = [row[f"waiting_{r}_cost"] for r in _LOST_REASONS
             if row[f"waiting_{r}_cost"] is not None]
    return sum(known) if known else None


def to_table(report: Any, rows: list[dict[str, Any]]) -> str:
    """An aligned text table with only the grouping columns in use."""
    from allsmi.accounting.periods import iso
    from allsmi.schema.formatting import above_zero
    keys = [k for k in KEYS if k in report.group_by]
    head = keys + ["allocated h", "efficiency", "cost", "lost", "evidence"]
    body = [[row[k] or "-" for k in keys] + [
        "unknown" if row["allocated_device_hours"] is None
        else above_zero(row["allocated_device_hours"], 2),
        "" if row["efficiency_ratio"] is None else f"{100.0 * row['efficiency_ratio']:.0f} %",
        money(row["cost"], row["currency"]), money(row["lost_cost"], row["currency"]),
        row["evidence"]] for row in rows]
    return aligned(f"where the money went, {iso(report.window.start)} to "
                   f"{iso(report.window.end)} ({report.source}), most lost first{currencies_note(rows)}",
                   head, body,
                   "no allocated time in this window")
