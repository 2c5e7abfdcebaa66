"""Writing a :class:`Report` as CSV, JSON or a FOCUS-style CSV.

Output is deterministic: rows in a fixed order, numbers with fixed precision,
no generation timestamp, so exporting the same window twice gives the same
bytes. Text cells are neutralized against spreadsheet formula injection.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Any

from allsmi.accounting.periods import UTC, iso
from allsmi.accounting.report import Report, Row
from allsmi.formatting import csv_cell

#: Columns before the group labels, and after them. Label columns are ``label_<name>``.
HEAD_COLUMNS = ("period_start", "period_end", "resource_group")
TAIL_COLUMNS = ("vendor", "model", "host", "user", "device_count", "observed_device_hours",
                "allocated_device_hours", "used_device_hours", "avg_utilization_ratio", "energy_kwh",
                "avg_memory_used_bytes", "peak_memory_used_bytes", "price_per_device_hour",
                "price_per_kwh", "cost", "currency", "coverage_ratio")

#: Decimal places per numeric column (fixed, so reruns give identical bytes).
_DIGITS = {"observed_device_hours": 6, "allocated_device_hours": 6, "used_device_hours": 6,
           "avg_utilization_ratio": 6, "energy_kwh": 6, "avg_memory_used_bytes": 0,
           "peak_memory_used_bytes": 0, "cost": 6, "coverage_ratio": 6}

FOCUS_COLUMNS = (
    "BillingAccountId", "BillingAccountName", "BillingPeriodStart", "BillingPeriodEnd",
    "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory", "ChargeFrequency", "ChargeDescription",
    "BilledCost", "EffectiveCost", "ListCost", "BillingCurrency", "ConsumedQuantity", "ConsumedUnit",
    "PricingQuantity", "PricingUnit", "ListUnitPrice", "ServiceName", "ServiceCategory",
    "ResourceId", "ResourceName", "ResourceType", "SkuId", "SubAccountId", "SubAccountName", "Tags",
    "x_UsedDeviceHours", "x_DeviceCount", "x_CoverageRatio")


def _fixed(value: float | None, digits: int) -> str:
    if value is None:
        return ""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.000000"


def _price(value: float | None) -> str:
    return "" if value is None else format(value, ".10g")


def columns(report: Report) -> list[str]:
    """The CSV header of ``report``."""
    return list(HEAD_COLUMNS) + [f"label_{n}" for n in report.label_names] + list(TAIL_COLUMNS)


def _values(report: Report, row: Row) -> dict[str, str]:
    labels = dict(row.labels)
    out = {"period_start": iso(row.window.start), "period_end": iso(row.window.end),
           "resource_group": row.resource_group, "vendor": row.vendor or "", "model": row.model or "",
           "host": row.host or "", "user": row.user or "", "device_count": str(row.device_count),
           "price_per_device_hour": _price(row.price_per_device_hour),
           "price_per_kwh": _price(row.price_per_kwh), "currency": row.currency or ""}
    for name in report.label_names:
        out[f"label_{name}"] = labels.get(name, "")
    for col, digits in _DIGITS.items():
        out[col] = _fixed(getattr(row, col), digits)
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


def to_json(report: Report) -> str:
    """``{"period_start", "period_end", "group_by", "coverage_ratio", "rows": [...]}``."""
    rows: list[dict[str, Any]] = []
    for row in report.rows:
        item: dict[str, Any] = {"resource_group": row.resource_group, "labels": dict(row.labels),
                                "vendor": row.vendor, "model": row.model, "host": row.host,
                                "user": row.user, "device_count": row.device_count}
        for col in TAIL_COLUMNS[5:]:
            value = getattr(row, col)
            item[col] = _round(value, _DIGITS[col]) if col in _DIGITS else value
        rows.append(item)
    doc = {"source": report.source, "period_start": iso(report.window.start),
           "period_end": iso(report.window.end), "group_by": list(report.group_by),
           "coverage_ratio": _round(report.coverage_ratio, 6), "rows": rows}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _utc(value: dt.datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_focus(report: Report) -> str:
    """FinOps FOCUS-style CSV: per row, one charge for allocated device-hours and one for energy.

    ``BilledCost`` and ``EffectiveCost`` are quantity x the group's price; a
    charge whose price is not configured has them empty (allsmi does not
    invent a price), which FOCUS validators report, so set prices for groups
    you bill this way.
    """
    out: list[dict[str, str]] = []
    for row in report.rows:
        dims = {"resource_group": row.resource_group, "vendor": row.vendor, "model": row.model,
                "host": row.host, "user": row.user}
        tags = {k: v for k, v in dims.items() if v}
        tags.update({f"label_{k}": v for k, v in row.labels})
        what = " ".join(x for x in (row.vendor, row.model) if x) or "accelerator"
        where = f" on {row.host}" if row.host else ""
        who = f" for {row.user}" if row.user else ""
        common = {
            "BillingAccountId": row.resource_group, "BillingAccountName": row.resource_group,
            "BillingPeriodStart": _utc(row.window.start), "BillingPeriodEnd": _utc(row.window.end),
            "ChargePeriodStart": _utc(row.window.start), "ChargePeriodEnd": _utc(row.window.end),
            "ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based",
            "BillingCurrency": row.currency or "", "ServiceName": "Accelerators",
            "ServiceCategory": "AI and Machine Learning", "ResourceId": row.host or "",
            "ResourceName": row.host or "", "ResourceType": "Accelerator" if row.host else "",
            "SkuId": "/".join(x for x in (row.vendor, row.model) if x),
            "SubAccountId": row.user or "", "SubAccountName": row.user or "",
            "Tags": json.dumps(tags, sort_keys=True, separators=(",", ":")),
            "x_UsedDeviceHours": _fixed(row.used_device_hours, 6),
            "x_DeviceCount": str(row.device_count), "x_CoverageRatio": _fixed(row.coverage_ratio, 6)}
        charges = []
        if row.allocated_device_hours is not None:  # unknown allocation: no made-up charge
            charges.append(("allocated device-hours", row.allocated_device_hours, "Hours",
                            row.price_per_device_hour))
        if row.energy_kwh is not None:
            charges.append(("energy", row.energy_kwh, "kWh", row.price_per_kwh))
        for label, quantity, unit, price in charges:
            cost = None if price is None else quantity * price
            out.append({**common,
                        "ChargeDescription": f"{what}{where}{who}: {label} "
                                             f"(resource group {row.resource_group})",
                        "BilledCost": _fixed(cost, 6), "EffectiveCost": _fixed(cost, 6),
                        "ListCost": _fixed(cost, 6), "ConsumedQuantity": _fixed(quantity, 6),
                        "ConsumedUnit": unit, "PricingQuantity": _fixed(quantity, 6),
                        "PricingUnit": unit, "ListUnitPrice": _price(price)})
    return _write_csv(list(FOCUS_COLUMNS), out)


WRITERS = {"csv": to_csv, "json": to_json, "focus": to_focus}


def render(report: Report, output_format: str) -> str:
    """The report in ``output_format`` (csv, json or focus)."""
    return WRITERS[output_format](report)
