"""What ``allsmi idle`` and ``allsmi waste`` share: both rank the holders of an export's report
(the same sources, window and grouping options) and write them as a table, CSV or JSON.

A command gives its rows (JSON-ready dicts, ranked) and its table; this module runs the
report, writes the chosen format and turns a partial or empty source into exit status 3.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Callable, Sequence

from allsmi.cli.billing.reportcmd import Failed, Run, build, prepare, write_output
from allsmi.cli.billing.sparing import spare_the_ledger

FORMATS = ("table", "csv", "json")
#: The holder keys a row is grouped by unless ``--group-by`` says otherwise.
DEFAULT_KEYS = ("resource_group", "user", "namespace", "pod", "job")
#: Every key a row can be grouped by, in column order.
KEYS = ("resource_group", "user", "namespace", "pod", "job", "vendor", "model", "host")


def default_keys(prometheus: bool) -> tuple[str, ...]:
    """:data:`DEFAULT_KEYS`, less ``user`` from Prometheus (which knows users only from
    exporters run with ``--processes``: asked for explicitly)."""
    return tuple(k for k in DEFAULT_KEYS if not (prometheus and k == "user"))


def run_report(run: Run, output_format: str, output: str | None, *,
               rows: Callable[[Any], list[dict[str, Any]]], columns: Sequence[str],
               table: Callable[[Any, list[dict[str, Any]]], str], short: str,
               **opts: Any) -> None:
    """Build the report ``opts`` ask for, write its ``rows`` in ``output_format`` (``columns``
    for CSV, ``table`` for people), then raise :class:`Failed` (exit 3) when the source gave a
    partial answer (``short`` says what may be short) or no device data for the window."""
    plan = prepare(run, default_group_by=default_keys, **opts)
    spare_the_ledger(run, plan.ledger, output)
    report = build(plan)
    ranked = rows(report)
    if output_format == "json":
        data = to_json(report, ranked)
    elif output_format == "csv":
        data = to_csv(ranked, columns)
    else:
        data = table(report, ranked)
    write_output(data, output)
    if report.warnings:
        raise Failed("coverage", f"{report.source} gave a partial answer (--allow-partial): "
                                 f"{'; '.join(report.warnings)}; {short}", 3)
    if report.coverage_ratio is None:
        from allsmi.accounting.periods import iso
        raise Failed("coverage", f"no device data for {iso(report.window.start)} to "
                                 f"{iso(report.window.end)} in {report.source}", 3)


def to_json(report: Any, rows: list[dict[str, Any]]) -> str:
    """``{"source", "period_start", "period_end", "group_by", "rows": [...]}`` (and
    ``warnings``: the partial answer's, and the source's said on stderr, as the export's)."""
    from allsmi.accounting.formats import document_warnings
    from allsmi.accounting.periods import iso
    doc = {"source": report.source, "period_start": iso(report.window.start),
           "period_end": iso(report.window.end), "group_by": list(report.group_by), "rows": rows}
    warnings = document_warnings(report)
    if warnings:
        doc["warnings"] = warnings
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _cell(column: str, value: Any) -> str:
    """A CSV cell: a number with the export's decimal places for ``column`` (waiting seconds 3,
    hours, ratios and costs 6: the same column prints alike in ``allsmi export``); a column the
    export has not (``active_cost``, ``lost_cost``: money) with 6."""
    from allsmi.accounting.columns import DIGITS
    from allsmi.schema.formatting import fixed
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(value)
    if isinstance(value, float) or (column in DIGITS and isinstance(value, int)
                                    and not isinstance(value, bool)):
        return fixed(value, DIGITS.get(column, 6))
    return str(value)


def to_csv(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """``columns`` of each row (lists separated by spaces); text guarded against formulas."""
    from allsmi.schema.formatting import csv_cell
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(_cell(c, row[c])) for c in columns])
    return buf.getvalue()


def aligned(title: str, head: list[str], body: list[list[Any]], empty: str) -> str:
    """``title``, then ``head`` and ``body`` as left-aligned columns (``empty`` when there is
    no row)."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = [title]
    for cells in [head] + body:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip())
    if not body:
        lines.append(empty)
    return "\n".join(lines) + "\n"


def money(value: float | None, currency: str | None) -> str:
    """``12.34 EUR``; empty when unknown."""
    return "" if value is None else f"{value:.2f} {currency or ''}".strip()


def rank(rows: list[dict[str, Any]], amount: Callable[[dict[str, Any]], float | None],
         hours: str) -> list[dict[str, Any]]:
    """``rows`` most money first, never comparing currencies: amounts are ranked within
    their currency (currencies in alphabetical order, as no exchange rate is known), then
    the rows whose ``amount`` is unknown (no price, or not measured), by ``hours``. Ties go
    by hours, then by the holder keys, so that reruns give the same order."""
    from allsmi.schema.formatting import money_rank
    return sorted(rows, key=lambda row: money_rank(amount(row), row["currency"], row[hours])
                  + (tuple(str(row[k] or "") for k in KEYS),))


def output_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--format`` and ``--output`` of ``allsmi idle`` and ``allsmi waste``."""
    import click
    command = click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
                           help="Write to FILE atomically (owner-only) instead of stdout.")(command)
    return click.option("--format", "output_format", type=click.Choice(FORMATS), default="table",
                        show_default=True,
                        help="table for people; csv and json use the export's column names.")(command)


def held_unknown(row: Any) -> bool:
    """Whether ``row`` (a report row) was observed but whether anyone held its devices is
    unknown (none of them could list its processes or workloads): it may have held devices,
    idle or wasted, so ``allsmi idle`` and ``allsmi waste`` list it, marked unknown, never
    leaving it out as if nobody had."""
    return row.allocated_device_hours is None and bool(row.observed_device_hours)


def currencies_note(rows: list[dict[str, Any]]) -> str:
    """``; costs ranked within each currency (EUR, USD)`` when the rows' costs are in more
    than one currency, else nothing."""
    found = sorted({row["currency"] for row in rows if row["currency"]})
    return f"; costs ranked within each currency ({', '.join(found)})" if len(found) > 1 else ""
