"""The billing report's export columns, declared once: names, decimal places and types.

The CSV, JSON and Parquet writers (:mod:`allsmi.accounting.formats`) print these columns, and
the FOCUS export (:mod:`allsmi.accounting.focus`) derives its extension columns (``x_...``)
from the same names, places and types, so a column added here reaches every format.
"""

from __future__ import annotations

from allsmi.accounting.report import WAITING_COLUMNS

#: Columns before the group labels, and after them. Label columns are ``label_<name>``.
HEAD_COLUMNS = ("period_start", "period_end", "resource_group")
KEY_COLUMNS = ("vendor", "model", "host", "user", "namespace", "pod", "job")
TAIL_COLUMNS = KEY_COLUMNS + (
    "device_count", "observed_device_hours", "allocated_device_hours",
    "idle_allocated_device_hours", "billed_device_hours", "used_device_hours",
    "avg_utilization_ratio", "energy_kwh", "avg_memory_used_bytes", "peak_memory_used_bytes",
    "price_per_device_hour", "price_per_kwh", "cost", "idle_cost", "currency", "coverage_ratio",
    "allocation_method", "usage_method", "carbon_gco2e",
    "budget", "budget_used_ratio", "forecast_month_end_cost", "attribution_coverage_ratio",
    "active_device_hours", "efficiency_ratio", "activity_method") + WAITING_COLUMNS

#: Decimal places per numeric column (fixed, so reruns give identical bytes).
DIGITS = {"observed_device_hours": 6, "allocated_device_hours": 6, "billed_device_hours": 6,
          "idle_allocated_device_hours": 6, "idle_cost": 6, "used_device_hours": 6,
          "avg_utilization_ratio": 6, "energy_kwh": 6, "avg_memory_used_bytes": 0,
          "peak_memory_used_bytes": 0, "cost": 6, "coverage_ratio": 6, "carbon_gco2e": 3,
          "budget_used_ratio": 6, "forecast_month_end_cost": 6, "attribution_coverage_ratio": 6,
          "active_device_hours": 6, "efficiency_ratio": 6,
          **{c: 3 if c.endswith("_seconds") else 6 for c in WAITING_COLUMNS}}

#: Columns printed with :data:`PRICE_DIGITS` significant digits in every format (CSV, JSON,
#: FOCUS unit prices): a price averaged over the window from the prices the exporters published
#: carries float noise (0.14000000000000004), which no format shows.
PRICE_COLUMNS = ("price_per_device_hour", "price_per_kwh", "budget")
PRICE_DIGITS = 10


def price_text(value: float) -> str:
    """A price (or budget) as every format prints it: :data:`PRICE_DIGITS` significant digits."""
    return format(value, f".{PRICE_DIGITS}g")


#: Text columns (the labels, ``label_<name>``, too).
TEXT = ("resource_group",) + KEY_COLUMNS + ("currency", "allocation_method", "usage_method",
                                            "activity_method")


def column_type(col: str) -> str:
    """Type of one column: ``string``, ``int``, ``decimal`` or ``datetime`` (for Parquet;
    ``datetime`` cells are RFC 3339 with an offset)."""
    if col in ("period_start", "period_end"):
        return "datetime"
    if col in TEXT or col.startswith("label_"):
        return "string"
    if col == "device_count":
        return "int"
    return "decimal"


def column_types(header: list[str]) -> dict[str, str]:
    """Type of each CSV column: string, int, decimal or datetime."""
    return {col: column_type(col) for col in header}
