"""The notes of the report's page: what the reader must be told beside the figures."""

from __future__ import annotations

from typing import Any

from allsmi.accounting.htmlreport.month import NOT_IN_WINDOW, NOT_READ, month_note
from allsmi.accounting.htmlreport.sums import several


def page_notes(c: Any, month: bool) -> None:
    """What the reader must be told: low coverage, raw counters, partial answers, and what is
    missing (no data, no prices, no budgets, no activity). ``c``: the page's
    :class:`~allsmi.accounting.htmlreport.data.Content`, its lines built; ``month``: whether
    the month to date was read (:mod:`.month`)."""
    v = c.views
    coverage = v.groups.coverage_ratio
    if v.groups.warnings:
        c.warnings.append("The source gave a partial answer (--allow-partial): "
                          + "; ".join(v.groups.warnings)
                          + ". The coverage is lowered to 0: the bill may be short.")
    if coverage is None:
        c.missing.append("No device data in this window: there is nothing to chart"
                         + (", only the month to date of the groups with a budget (below)."
                            if c.budget_groups else "."))
    elif coverage < v.threshold:
        c.warnings.append(f"The data covers {coverage:.2%} of the device time in this window, "
                          f"below the threshold of {v.threshold:.2%}: the figures may be short.")
    c.warnings.extend(f"The source warns: {note}" for note in v.notes)
    c.warnings.extend(f"Over budget: {note}." for note in v.overruns)
    if v.groups.source_data and "raw counters" in v.groups.source_data:
        c.warnings.append(f"Part of this bill came from raw counters, not from the hourly "
                          f"roll-ups: {v.groups.source_data}.")
    if coverage is None:
        return
    if not c.budget_priced:
        c.missing.append("No prices: no group has price_per_device_hour or price_per_kwh, so "
                         "there are no costs, budgets or forecasts to show.")
    unpriced = [line.names[0] for line in c.groups if line.figures.get("cost") is None]
    if c.priced and unpriced:
        c.missing.append("Groups without prices (their cost is unknown, not 0, and left out of "
                         "the totals): " + ", ".join(unpriced) + ".")
    if c.priced and not c.budgeted:
        c.missing.append("No budgets: no group has budget_per_month; costs "
                         + ("and forecasts are " if month else "are ")
                         + "shown without one.")
    if c.priced and any(NOT_READ in line.empty.values() for line in c.groups):
        c.missing.append(month_note(month))
    alone = [line.names[0] for line in c.budget_groups[len(c.groups):]]
    if alone:
        c.missing.append("Groups with no device in this window, listed in the budget table "
                         "for their month to date (their cost in the window: "
                         + NOT_IN_WINDOW + "): " + ", ".join(alone) + ".")
    if not c.activity:
        c.missing.append("Compute activity is not measured by this export: active "
                         "device-hours, efficiency and waiting reasons are shown as "
                         "\"not measured\".")
    shown = (c.group_totals + c.budget_totals + c.holders_total + c.trend + c.waiting
             + c.holders_rest + c.pools)
    if any(line.partial for line in shown):
        c.missing.append("A figure marked ≥ is a total of the lines that know it: it leaves "
                         "out the lines where it is unknown, so the whole is at least that.")
    if several(c.currencies):
        c.missing.append("The groups' costs and budgets are in different currencies ("
                         + ", ".join(c.currencies) + "): amounts in different currencies are "
                         "never added, so every sum is given per currency (a total line or a "
                         "column per currency), the holders are ranked by cost within each "
                         "currency, and the charts draw none (amounts in several currencies "
                         "share no axis); the holders are charted by device-hours.")
