"""The report as FinOps FOCUS 1.2 charges, and the ``[export.focus]`` table.

Each report row becomes up to two ``Usage`` charges: its allocated
device-hours (``PricingUnit`` ``Hours``; its used ones in a group with ``bill_by =
"used"``, what its ``cost`` prices) and its board energy (``kWh``). A row
whose allocation is unknown has no hours charge (allsmi does not invent
one), and a row without board energy (partition-only rows, e.g. MIG slices)
has no energy charge.

The output is checked against the FinOps Foundation's validator
(``focus-validator`` 2.2.1, FOCUS 1.2 rules) by
``tests/accounting/test_focus_validator.py``: no mandatory rule may fail.

Values FOCUS requires that allsmi has no natural source for come from
``[export.focus]`` (see :func:`focus_settings`); a charge whose group sets no
price for it is free: unit prices and costs are 0, ``x_PriceConfigured`` is
``false`` and its currency is the table's ``currency``. When
``invoice_issuer_name`` differs from ``provider_name``, FOCUS reads the charges
as collected by that third party: ``BilledCost`` is 0 and ``EffectiveCost``,
``ListCost`` and ``ContractedCost`` carry the amount.

Beyond FOCUS' own columns, each charge carries allsmi's report columns as extension columns
(:data:`EXTENSIONS`, ``x_`` + the name in PascalCase): the row's hours, coverage, activity
(``x_ActiveDeviceHours``, ``x_EfficiencyRatio``, ``x_ActivityMethod``) and seconds per waiting
reason (``x_Waiting<Reason>Seconds``), and the charge's own part of the idle and waiting costs
(``x_IdleCost``, ``x_Waiting<Reason>Cost``). Unknown values are null (an empty CSV cell).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping

from allsmi.accounting.columns import DIGITS, column_type, price_text
from allsmi.accounting.periods import UTC
from allsmi.accounting.report import WAITING_COLUMNS, Report, Row
from allsmi.config import Config
from allsmi.config.currencies import currency_problem

FOCUS_VERSION = "1.2"
DEFAULT_PROVIDER = "On-premises"
DEFAULT_CURRENCY = "USD"
SERVICE_NAME = "Accelerators"
SERVICE_CATEGORY = "AI and Machine Learning"
SERVICE_SUBCATEGORY = "AI Platforms"
#: Prefix of the tag keys allsmi defines (FOCUS: provider-defined keys carry a prefix; the
#: group labels, the one user-defined scheme, carry none).
TAG_PREFIX = "allsmi/"
#: Report dimensions that become provider-defined tags (``allsmi/<name>``), in this order.
TAG_DIMENSIONS = ("resource_group", "vendor", "model", "host", "user", "namespace", "pod", "job")

#: Column -> type. ``datetime`` is RFC 3339 UTC text in CSV and a UTC timestamp in Parquet.
COLUMN_TYPES: dict[str, str] = {
    "BillingAccountId": "string", "BillingAccountName": "string",
    "BillingPeriodStart": "datetime", "BillingPeriodEnd": "datetime", "BillingCurrency": "string",
    "InvoiceId": "string", "InvoiceIssuerName": "string", "ProviderName": "string",
    "PublisherName": "string",
    "ChargePeriodStart": "datetime", "ChargePeriodEnd": "datetime", "ChargeCategory": "string",
    "ChargeClass": "string", "ChargeFrequency": "string", "ChargeDescription": "string",
    "PricingCategory": "string",
    "BilledCost": "decimal", "EffectiveCost": "decimal", "ListCost": "decimal",
    "ContractedCost": "decimal",
    "ConsumedQuantity": "decimal", "ConsumedUnit": "string", "PricingQuantity": "decimal",
    "PricingUnit": "string", "ListUnitPrice": "decimal", "ContractedUnitPrice": "decimal",
    "ServiceName": "string", "ServiceCategory": "string", "ServiceSubcategory": "string",
    "ResourceId": "string", "ResourceName": "string", "ResourceType": "string",
    "SkuId": "string", "SkuPriceId": "string",
    "SubAccountId": "string", "SubAccountName": "string", "SubAccountType": "string",
    "Tags": "string",
}

#: The report's columns (:mod:`allsmi.accounting.columns`) each charge carries as FOCUS
#: extension columns, named by :func:`extension` and typed and rounded as the CSV declares them,
#: in this order. Those in :data:`PER_CHARGE` are this charge's part of the row's value; the
#: others are the row's, the same on each of its charges. ``price_configured`` is FOCUS's own.
EXTENSIONS: tuple[str, ...] = (
    "observed_device_hours", "used_device_hours", "device_count", "coverage_ratio",
    "price_configured", "idle_allocated_device_hours", "idle_cost",
    "active_device_hours", "efficiency_ratio", "activity_method") + WAITING_COLUMNS
#: ``waiting_<reason>_cost``, in :data:`allsmi.schema.WAITING_REASONS` order.
WAITING_COSTS = tuple(c for c in WAITING_COLUMNS if c.endswith("_cost"))
PER_CHARGE = ("price_configured", "idle_cost") + WAITING_COSTS


def extension(column: str) -> str:
    """The FOCUS extension column of a report column: ``x_`` and the name in PascalCase
    (``used_device_hours`` is ``x_UsedDeviceHours``, ``waiting_input_cost``
    ``x_WaitingInputCost``)."""
    return "x_" + "".join(word.capitalize() for word in column.split("_"))


COLUMN_TYPES.update({extension(c): "bool" if c == "price_configured" else column_type(c)
                     for c in EXTENSIONS})
COLUMNS = tuple(COLUMN_TYPES)

_NAMES = ("provider_name", "publisher_name", "invoice_issuer_name", "billing_account_id",
          "billing_account_name", "currency")
#: The FOCUS column names are accepted as spellings of the same keys.
_ALIASES = {"ProviderName": "provider_name", "PublisherName": "publisher_name",
            "InvoiceIssuerName": "invoice_issuer_name", "BillingAccountId": "billing_account_id",
            "BillingAccountName": "billing_account_name", "BillingCurrency": "currency"}
MAX_NAME = 200


@dataclass(frozen=True)
class FocusSettings:
    """``[export.focus]``: FOCUS values allsmi cannot know (defaults in the docs)."""

    provider_name: str = DEFAULT_PROVIDER
    publisher_name: str = DEFAULT_PROVIDER
    invoice_issuer_name: str = DEFAULT_PROVIDER
    billing_account_id: str = DEFAULT_PROVIDER
    billing_account_name: str = DEFAULT_PROVIDER
    currency: str = DEFAULT_CURRENCY
    """``BillingCurrency`` of charges from groups without a price (and so without a currency)."""


def focus_settings(config: Config) -> FocusSettings:
    """Validate ``[export.focus]``; a bad or unknown key raises ConfigError naming file, line, key.

    Defaults: ``provider_name`` "On-premises"; ``publisher_name``,
    ``invoice_issuer_name`` and ``billing_account_id`` default to
    ``provider_name``; ``billing_account_name`` to ``billing_account_id``;
    ``currency`` to the one currency the configured groups use, else USD.
    """
    table = config.section("export").get("focus", {})
    if not isinstance(table, Mapping):
        raise config.error("must be a table ([export.focus])", "export", "focus")
    values: dict[str, str] = {}
    for key, value in table.items():
        name = _ALIASES.get(key, key)
        if name not in _NAMES:
            raise config.error(f"unknown key (allowed: {', '.join(_NAMES)})", "export", "focus", key)
        if name in values:
            raise config.error(f"given twice (as {name} and {key})", "export", "focus", key)
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME \
                or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise config.error(f"must be a non-empty single-line string of at most {MAX_NAME} "
                               f"characters, got {value!r}", "export", "focus", key)
        values[name] = value.strip()
    if "currency" in values:
        values["currency"] = values["currency"].upper()
        problem = currency_problem(values["currency"])
        if problem:
            raise config.error(problem, "export", "focus",
                               next(k for k in table if _ALIASES.get(k, k) == "currency"))
    provider = values.get("provider_name", DEFAULT_PROVIDER)
    account = values.get("billing_account_id", provider)
    currencies = {g.currency for g in config.groups.values() if g.currency}
    return FocusSettings(
        provider_name=provider,
        publisher_name=values.get("publisher_name", provider),
        invoice_issuer_name=values.get("invoice_issuer_name", provider),
        billing_account_id=account,
        billing_account_name=values.get("billing_account_name", account),
        currency=values.get("currency", currencies.pop() if len(currencies) == 1 else
                            DEFAULT_CURRENCY))


def _utc(value: dt.datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _compact(value: dt.datetime) -> str:
    return value.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _decimal(value: float | None, digits: int = 6) -> Decimal | None:
    """``value`` rounded to ``digits`` places, exactly as the CSV prints it."""
    if value is None:
        return None
    return Decimal(f"{value:.{digits}f}")


def _text(value: Decimal | None) -> str:
    if value is None:
        return ""
    six = value.quantize(Decimal("0.000001"))
    text = format(six if six == value else value, "f")  # 6 places, more only where exact needs
    return text[1:] if text.startswith("-") and value == 0 else text  # no "-0.000000"


def invoice_id(settings: FocusSettings, report: Report) -> str:
    """One stable id per billing account and period, e.g. ``On-premises/20260301T000000Z-20260401T000000Z``."""
    return f"{settings.billing_account_id}/{_compact(report.window.start)}-{_compact(report.window.end)}"


def tags(row: Row) -> str:
    """FOCUS ``Tags``: the group's labels unprefixed, allsmi's dimensions as ``allsmi/<name>``."""
    out: dict[str, str] = dict(row.labels)
    for name in TAG_DIMENSIONS:
        value = getattr(row, name, None)
        if value:
            out[TAG_PREFIX + name] = value
    return json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def focus_records(report: Report, settings: FocusSettings) -> list[dict[str, Any]]:
    """The charges as typed values (``None`` is null), one dict per charge, in report order."""
    out: list[dict[str, Any]] = []
    # FOCUS: when someone other than the provider issues the invoice, the provider's charges
    # are paid to that third party and their BilledCost is 0 (EffectiveCost keeps the amount).
    invoiced_by_provider = settings.invoice_issuer_name == settings.provider_name
    for row in report.rows:
        what = " ".join(x for x in (row.vendor, row.model) if x) or "accelerators"
        where = f" on {row.host}" if row.host else ""
        holder = [x for x in (row.user, row.namespace and f"namespace {row.namespace}",
                              row.pod and f"pod {row.pod}", row.job and f"job {row.job}") if x]
        who = f" for {', '.join(holder)}" if holder else ""
        sku_dims = "/".join(x for x in (row.vendor, row.model) if x)
        common: dict[str, Any] = {
            "BillingAccountId": settings.billing_account_id,
            "BillingAccountName": settings.billing_account_name,
            "BillingPeriodStart": row.window.start, "BillingPeriodEnd": row.window.end,
            "BillingCurrency": row.currency or settings.currency,
            "InvoiceId": invoice_id(settings, report),
            "InvoiceIssuerName": settings.invoice_issuer_name,
            "ProviderName": settings.provider_name, "PublisherName": settings.publisher_name,
            "ChargePeriodStart": row.window.start, "ChargePeriodEnd": row.window.end,
            "ChargeCategory": "Usage", "ChargeClass": None, "ChargeFrequency": "Usage-Based",
            "PricingCategory": "Standard",
            "ServiceName": SERVICE_NAME, "ServiceCategory": SERVICE_CATEGORY,
            "ServiceSubcategory": SERVICE_SUBCATEGORY,
            "ResourceId": row.host or None, "ResourceName": row.host or None,
            "ResourceType": "Host" if row.host else None,
            "SubAccountId": row.resource_group, "SubAccountName": row.resource_group,
            "SubAccountType": "Resource group",
            "Tags": tags(row),
            **{extension(c): _row_value(row, c) for c in EXTENSIONS if c not in PER_CHARGE}}
        charges = []
        if row.bill_by == "used":  # the hours the cost prices: used ones (no idle part known)
            if row.used_billed_device_hours is not None:
                charges.append(("used device-hours", "device-hours", row.used_billed_device_hours,
                                "Hours", row.price_per_device_hour, None,
                                row.waiting_billed_device_hours))
        elif row.billed_device_hours is not None:  # unknown allocation: no made-up charge
            # Billed: allocated hours at each partition's share of its physical device.
            charges.append(("allocated device-hours", "device-hours", row.billed_device_hours,
                            "Hours", row.price_per_device_hour, row.idle_billed_device_hours,
                            row.waiting_billed_device_hours))
        if row.energy_kwh is not None:  # partitions own no board energy: hours charge only
            charges.append(("energy", "energy", row.energy_kwh, "kWh", row.price_per_kwh,
                            row.idle_energy_kwh, row.waiting_energy_kwh))
        for label, sku, quantity, unit, price, idle, waited in charges:
            qty = _decimal(quantity)
            unit_price = Decimal(price_text(price)) if price is not None else Decimal(0)
            cost = qty * unit_price  # exact: the validator checks price x quantity = cost
            sku_id = f"{sku}/{sku_dims}" if sku_dims else sku
            out.append({
                **common,
                "ChargeDescription": f"{what}{where}{who}: {label} "
                                     f"(resource group {row.resource_group})",
                "BilledCost": cost if invoiced_by_provider else Decimal(0), "EffectiveCost": cost, "ListCost": cost, "ContractedCost": cost,
                "ConsumedQuantity": qty, "ConsumedUnit": unit, "PricingQuantity": qty,
                "PricingUnit": unit, "ListUnitPrice": unit_price, "ContractedUnitPrice": unit_price,
                "SkuId": sku_id, "SkuPriceId": f"{sku_id}@{row.resource_group}",
                "x_PriceConfigured": price is not None,
                # The part of this charge spent on allocated-but-idle time (null: unknown).
                "x_IdleCost": None if idle is None or row.idle_allocated_device_hours is None
                else min(_decimal(idle) or Decimal(0), qty) * unit_price,
                **_waiting_costs(waited, qty, unit_price)})
    return out


def _row_value(row: Row, column: str) -> Any:
    """The row's value of a report column as FOCUS holds it: rounded as the CSV prints it; an
    unknown value is null (never 0)."""
    value = row.value(column)
    if value is None or value == "":
        return None
    return _decimal(value, DIGITS[column]) if column_type(column) == "decimal" else value


def _waiting_costs(waited: tuple[float, ...] | None, qty: Decimal,
                   unit_price: Decimal) -> dict[str, Decimal | None]:
    """``x_Waiting<Reason>Cost`` of one charge: the part of its quantity spent on each reason
    (``waited``, the row's ``waiting_billed_device_hours`` or ``waiting_energy_kwh``, summed
    from its finest parts; rounded as printed, never above the quantity), at the charge's unit
    price, as ``x_IdleCost``; so, as a row's charges add up to its ``cost``, they add up to its
    ``waiting_<reason>_cost``. Null where nothing was classified or the allocation is unknown."""
    parts = waited or (None,) * len(WAITING_COSTS)
    return {extension(column): None if part is None
            else min(_decimal(part) or Decimal(0), qty) * unit_price
            for column, part in zip(WAITING_COSTS, parts)}


def cell(value: Any) -> str:
    """The CSV text of one typed FOCUS value (null is an empty cell)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return _text(value)
    if isinstance(value, dt.datetime):
        return _utc(value)
    return str(value)
