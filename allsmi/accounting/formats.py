"""Writing a :class:`Report` as CSV, JSON, FOCUS 1.2 CSV, or either table as Parquet.

Output is deterministic: rows in a fixed order, numbers with fixed precision,
no generation timestamp, so exporting the same window twice gives the same
bytes. Text cells are neutralized against spreadsheet formula injection.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from allsmi.accounting.columns import (DIGITS, HEAD_COLUMNS, KEY_COLUMNS, PRICE_COLUMNS,
                                       TAIL_COLUMNS, column_types, price_text)
from allsmi.accounting.focus import COLUMN_TYPES, COLUMNS, FocusSettings, cell, focus_records
from allsmi.accounting.periods import iso
from allsmi.accounting.report import Report, Row
from allsmi.schema.formatting import csv_cell


def _fixed(value: float | None, digits: int) -> str:
    if value is None:
        return ""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.000000"


def _price(value: float | None) -> str:
    return "" if value is None else price_text(value)


def columns(report: Report) -> list[str]:
    """The CSV header of ``report``."""
    return list(HEAD_COLUMNS) + [f"label_{n}" for n in report.label_names] + list(TAIL_COLUMNS)


def _values(report: Report, row: Row) -> dict[str, str]:
    labels = dict(row.labels)
    out = {"period_start": iso(row.window.start), "period_end": iso(row.window.end),
           "resource_group": row.resource_group, "device_count": str(row.device_count),
           "price_per_device_hour": _price(row.price_per_device_hour),
           "price_per_kwh": _price(row.price_per_kwh), "currency": row.currency or "",
           "allocation_method": row.allocation_method or "", "usage_method": row.usage_method or "",
           "activity_method": row.activity_method or "",
           "budget": _price(row.budget)}
    for col in KEY_COLUMNS:
        out[col] = getattr(row, col) or ""
    for name in report.label_names:
        out[f"label_{name}"] = labels.get(name, "")
    for col, digits in DIGITS.items():
        out[col] = _fixed(row.value(col), digits)
    return out


def _write_csv(header: list[str], rows: list[dict[str, str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([csv_cell(row.get(col, "")) for col in header])
    return buf.getvalue()


def to_csv(report: Report) -> str:
    """One row per group; columns from :func:`columns`."""
    return _write_csv(columns(report), [_values(report, r) for r in report.rows])


def _round(value: float | None, digits: int) -> float | int | None:
    if value is None:
        return None
    if digits == 0:
        return int(round(value))
    rounded = round(value, digits)
    return 0.0 if rounded == 0 else rounded


def json_row(row: Row) -> dict[str, Any]:
    """One row as JSON: the CSV columns (labels as one object, ``labels``; unknown is null)."""
    item: dict[str, Any] = {"resource_group": row.resource_group, "labels": dict(row.labels)}
    for col in TAIL_COLUMNS:
        value = row.value(col)
        if col in DIGITS:
            value = _round(value, DIGITS[col])
        elif col in PRICE_COLUMNS and value is not None:
            value = float(price_text(value))  # as the CSV prints it
        item[col] = value
    return item


def to_json(report: Report) -> str:
    """``{"period_start", "period_end", "group_by", "coverage_ratio", "rows": [...]}``."""
    rows = [json_row(row) for row in report.rows]
    doc: dict[str, Any] = {"source": report.source}
    if report.source_data:
        doc["source_data"] = report.source_data
    if report.price_sources is not None:
        doc["prices"] = dict(report.price_sources)
    doc.update({"period_start": iso(report.window.start),
           "period_end": iso(report.window.end), "group_by": list(report.group_by),
           "coverage_ratio": _round(report.coverage_ratio, 6), "rows": rows})
    warnings = document_warnings(report)
    if warnings:
        doc["warnings"] = warnings
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def document_warnings(report: Report) -> list[str]:
    """What a document of ``report`` warns about, once each, as stderr said it: the source's
    partial answers (``warnings``), then ``notes`` (undeclared groups, time the ledger no longer
    holds, conflicting claims, copies of series, budgets overrun...)."""
    return list(dict.fromkeys(tuple(report.warnings) + tuple(report.notes)))


def focus_table(report: Report, settings: FocusSettings) -> tuple[list[str], list[dict[str, str]]]:
    """FOCUS 1.2 columns and one row of cells per charge (see :mod:`allsmi.accounting.focus`)."""
    return list(COLUMNS), [{c: cell(v) for c, v in r.items()} for r in focus_records(report, settings)]


def to_focus(report: Report, settings: FocusSettings | None = None) -> str:
    """FinOps FOCUS 1.2 CSV: per row, a charge for allocated device-hours and one for energy."""
    header, rows = focus_table(report, settings or FocusSettings())
    return _write_csv(header, rows)


def to_parquet(report: Report, settings: FocusSettings | None = None) -> bytes:
    """The CSV's columns and rows as Parquet (needs the ``allsmi[parquet]`` extra)."""
    from allsmi.accounting.parquet import table_bytes
    header = columns(report)
    return table_bytes(header, column_types(header), [_values(report, r) for r in report.rows])


def to_focus_parquet(report: Report, settings: FocusSettings | None = None) -> bytes:
    """The FOCUS CSV's columns and charges as Parquet (needs the ``allsmi[parquet]`` extra)."""
    from allsmi.accounting.parquet import table_bytes
    header, rows = focus_table(report, settings or FocusSettings())
    return table_bytes(header, COLUMN_TYPES, rows)


WRITERS = {"csv": to_csv, "json": to_json, "focus": to_focus, "parquet": to_parquet,
           "focus-parquet": to_focus_parquet}
#: Formats whose output is binary (written with --output, or to a pipe).
BINARY = ("parquet", "focus-parquet")


def render(report: Report, output_format: str, focus: FocusSettings | None = None) -> str | bytes:
    """The report in ``output_format``; ``focus`` holds the ``[export.focus]`` values."""
    if output_format in ("csv", "json"):
        return WRITERS[output_format](report)  # type: ignore[operator]
    return WRITERS[output_format](report, focus)  # type: ignore[operator]
