"""``allsmi idle``: who held devices that sat idle, and what that cost.

The same sources, window and grouping options as ``allsmi export`` (the ledger,
Prometheus or a simulation), reported for the holders of allocated-but-idle devices:
one row per holder (resource group, user, namespace, pod, job by default) with
idle-allocated device-hours, sorted by idle cost, then idle hours.

Exit statuses: 0 written (also when nothing sat idle); 1 the source could not be read or
the output not written; 2 bad options or configuration; 3 written, but the source had no
device data at all for the window; 128 + N killed by signal N.
"""

from __future__ import annotations

import csv
import io
import json
import time
from typing import Any

import click

from allsmi.cli.reportcmd import Failed, Run, build, guarded, prepare, source_options, write_output

IDLE_FORMATS = ("table", "csv", "json")
DEFAULT_KEYS = ("resource_group", "user", "namespace", "pod", "job")
#: Columns of the CSV and of each JSON row (the export's names), then ``devices``.
COLUMNS = ("resource_group", "user", "namespace", "pod", "job", "vendor", "model", "host",
           "idle_allocated_device_hours", "allocated_device_hours", "idle_cost", "cost",
           "currency", "device_count", "devices")


def _default_keys(prometheus: bool) -> tuple[str, ...]:
    # Prometheus knows users only from exporters run with --processes: asked for explicitly.
    return tuple(k for k in DEFAULT_KEYS if not (prometheus and k == "user"))


@click.command()
@source_options
@click.option("--format", "output_format", type=click.Choice(IDLE_FORMATS), default="table",
              show_default=True, help="table for people; csv and json use the export's column "
                                      "names.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write to FILE atomically (owner-only) instead of stdout.")
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
    guarded(Run(started=time.time(), textfile=None), _idle, **opts)


def _idle(run: Run, output_format: str, output: str | None, **opts: Any) -> None:
    plan = prepare(run, default_group_by=_default_keys, **opts)
    report = build(plan)
    rows = idle_rows(report)
    if output_format == "json":
        data = to_json(report, rows)
    elif output_format == "csv":
        data = to_csv(rows)
    else:
        data = to_table(report, rows)
    write_output(data, output)
    if report.warnings:
        raise Failed("coverage", f"{report.source} gave a partial answer (--allow-partial): "
                                 f"{'; '.join(report.warnings)}; the idle time may be short", 3)
    if report.coverage_ratio is None:
        from allsmi.accounting.periods import iso
        raise Failed("coverage", f"no device data for {iso(report.window.start)} to "
                                 f"{iso(report.window.end)} in {report.source}", 3)


def idle_rows(report: Any) -> list[dict[str, Any]]:
    """The rows with idle-allocated time, as JSON-ready dicts, most expensive first."""
    from allsmi.accounting.formats import json_row
    out = []
    for row in report.rows:
        if not row.idle_allocated_device_hours:  # none, or unknown
            continue
        item = json_row(row)
        item["devices"] = list(row.idle_devices)
        out.append(item)
    out.sort(key=lambda r: (-(r["idle_cost"] or 0.0), -r["idle_allocated_device_hours"],
                            tuple(str(r[k] or "") for k in COLUMNS[:8])))
    return out


def to_json(report: Any, rows: list[dict[str, Any]]) -> str:
    """``{"source", "period_start", "period_end", "group_by", "rows": [...]}``."""
    from allsmi.accounting.periods import iso
    doc = {"source": report.source, "period_start": iso(report.window.start),
           "period_end": iso(report.window.end), "group_by": list(report.group_by), "rows": rows}
    if report.warnings:
        doc["warnings"] = list(report.warnings)
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(value)
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)


def to_csv(rows: list[dict[str, Any]]) -> str:
    """The :data:`COLUMNS`, devices separated by spaces; text guarded against formulas."""
    from allsmi.formatting import csv_cell
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([csv_cell(_cell(row[c])) for c in COLUMNS])
    return buf.getvalue()


def to_table(report: Any, rows: list[dict[str, Any]]) -> str:
    """An aligned text table with only the grouping columns in use."""
    from allsmi.accounting.periods import iso
    keys = [k for k in COLUMNS[:8] if k in report.group_by]
    head = keys + ["idle h", "allocated h", "idle cost", "devices"]
    body = []
    for row in rows:
        cost = "" if row["idle_cost"] is None else \
            f"{row['idle_cost']:.2f} {row['currency'] or ''}".strip()
        body.append([row[k] or "-" for k in keys] + [
            f"{row['idle_allocated_device_hours']:.2f}",
            "" if row["allocated_device_hours"] is None else f"{row['allocated_device_hours']:.2f}",
            cost, " ".join(row["devices"])])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = [f"allocated-but-idle devices, {iso(report.window.start)} to "
             f"{iso(report.window.end)} ({report.source})"]
    for cells in [head] + body:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip())
    if not body:
        lines.append("no allocated-but-idle time in this window")
    return "\n".join(lines) + "\n"
