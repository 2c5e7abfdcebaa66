"""Sums in the report. A sum of the lines that know a value leaves out those that do not: it
is a lower bound, shown as at least it (``≥``). Sums of money are never across currencies, and
never "unknown" when nothing summed was priced.

Amounts in different currencies do not add up (allsmi knows no exchange rate): where the
report's groups bill in several currencies, every sum of an amount is one figure per currency,
keyed ``<column>_<currency>`` (a column per currency) or on a line of its own (the totals).
With one currency (or none) the plain column is the sum of every row.

A row whose cost is unknown because its group has no price, and that bills in none of the
report's currencies, could add to any of them: every currency's sum then leaves it out.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from allsmi.schema import WAITING_REASONS

#: Said where a cost is empty because nothing summed in it is priced.
NO_PRICE = "no price"
#: Said where nothing is summed (no row bills, or could bill, in that currency): a blank cell.
NOTHING = ""

Figures = dict[str, Any]


def total(items: Iterable[float | None]) -> float | None:
    """The sum of the known values; ``None`` when none is known."""
    known = [v for v in items if v is not None]
    return sum(known) if known else None


def ratio(part: float | None, whole: float | None) -> float | None:
    """``part / whole``; ``None`` when either is unknown or the whole is 0."""
    return None if part is None or not whole else part / whole


#: What a column is a part of: where that is known to be nothing, so is the column, known or
#: not (idle or active time of a row that held nothing, the cost of idle time that was none).
#: A waiting reason's seconds are part of the allocated time, and its cost is their cost.
PART_OF = {"idle_allocated_device_hours": "allocated_device_hours",
           "active_device_hours": "allocated_device_hours",
           "idle_cost": "idle_allocated_device_hours"}


def _part_of(column: str) -> str | None:
    if column.startswith("waiting_") and column.endswith("_cost"):
        return column[:-len("_cost")] + "_seconds"
    if column.startswith("waiting_") and column.endswith("_seconds"):
        return "allocated_device_hours"
    return PART_OF.get(column)


def nothing(row: dict[str, Any], column: str) -> bool:
    """Whether the row's ``column`` is known to be 0: its value, or, where it is unknown, what
    it is a part of (:data:`PART_OF`): a reason's cost when the reason took no time."""
    value = row.get(column)
    if value is not None:
        return bool(value == 0)
    part_of = _part_of(column)
    return part_of is not None and nothing(row, part_of)


def left_out(row: dict[str, Any], column: str) -> bool:
    """Whether the row's unknown ``column`` leaves something out of a sum of it (not where it
    is known to be nothing: :func:`nothing`)."""
    return row.get(column) is None and not nothing(row, column)


def partial_columns(rows: Sequence[dict[str, Any]], columns: Iterable[str]) -> frozenset[str]:
    """The columns some of ``rows`` know and others leave out (:func:`left_out`): their total
    is a lower bound."""
    return frozenset(c for c in columns if any(left_out(r, c) for r in rows)
                     and any(r.get(c) is not None for r in rows))


def money_column(column: str) -> bool:
    """Whether an export column is an amount of money (in its row's currency)."""
    return column in ("cost", "idle_cost", "forecast_month_end_cost", "budget") \
        or column.endswith("_cost")


def currency_of(row: dict[str, Any]) -> str | None:
    """A row's currency (the export gives ``""`` for none)."""
    return row.get("currency") or None


def unpriced(row: dict[str, Any]) -> bool:
    """Whether the row's group has no price (its costs are "no price", not unknown)."""
    return row.get("price_per_device_hour") is None and row.get("price_per_kwh") is None


def money_currencies(rows: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """The currencies the rows give an amount in (a cost or a budget), sorted."""
    return tuple(sorted({cur for r in rows if (cur := currency_of(r))
                         and (r.get("cost") is not None or r.get("budget") is not None)}))


def several(report_currencies: Sequence[str]) -> bool:
    return len(report_currencies) > 1


def key(column: str, currency: str | None, report_currencies: Sequence[str]) -> str:
    """Where a sum of ``column`` in ``currency`` is kept: the column itself with one currency
    or none, ``<column>_<currency>`` with several."""
    return f"{column}_{currency}" if several(report_currencies) else column


def money_keys(column: str, title: str,
               report_currencies: Sequence[str]) -> tuple[tuple[str, str, str | None], ...]:
    """A table's columns for the sums of ``column``: ``(title, key, currency)``, one per
    currency with several (``cost (EUR)``), else one."""
    if several(report_currencies):
        return tuple((f"{title} ({cur})", key(column, cur, report_currencies), cur)
                     for cur in report_currencies)
    return ((title, column, report_currencies[0] if report_currencies else None),)


def budget_once(rows: Iterable[Figures]) -> list[Figures]:
    """``rows`` to sum, each group's budget counted once: a group whose labels changed has a
    row per set of labels, each with the group's whole budget."""
    seen: set[Any] = set()
    out = []
    for row in rows:
        group = row.get("resource_group")
        out.append({**row, "budget": None} if row.get("budget") is not None and group in seen
                   else row)
        seen.add(group)
    return out


def money_sum(rows: Sequence[dict[str, Any]], column: str, currency: str | None,
              report_currencies: Sequence[str]) -> tuple[float | None, bool, str | None]:
    """``column`` summed over the ``rows`` in ``currency`` (over all of them with one currency
    or none): ``(value, partial, empty)``. ``partial``: the sum leaves out rows that could add to
    it (:func:`left_out`: where the value is unknown and not known to be nothing); ``empty``: what a ``None``
    value says instead of unknown (:data:`NO_PRICE`, or :data:`NOTHING` where no row could add
    to it), or ``None``."""
    if several(report_currencies):
        mine = [r for r in rows if currency_of(r) == currency]
        # rows in none of the report's currencies (no price, so no amount) could add to any
        counted = [r for r in rows if currency_of(r) == currency
                   or currency_of(r) not in report_currencies]
    else:
        mine = counted = list(rows)
    if not counted:
        return None, False, NOTHING
    value = total(r.get(column) for r in mine)
    # a group without a budget has none (a budget needs a currency): it leaves nothing out
    partial = value is not None and column != "budget" and any(left_out(r, column)
                                                                for r in counted)
    empty = NO_PRICE if value is None and column != "budget" \
        and all(map(unpriced, mine or counted)) else None
    return value, partial, empty


def money_figures(rows: Sequence[dict[str, Any]], columns: Iterable[str],
                  report_currencies: Sequence[str], currency: str | None = None,
                  keyed: bool = True) -> tuple[Figures, set[str], dict[str, str]]:
    """The money ``columns`` summed over ``rows``: ``(figures, partial, empty)`` (see
    :func:`money_sum`). ``keyed``: one figure per currency of the report, under
    :func:`key`; else the plain columns, in ``currency`` only."""
    figures: Figures = {}
    partial: set[str] = set()
    empty: dict[str, str] = {}
    wanted = (report_currencies or (None,)) if keyed else (currency,)
    for column in columns:
        for cur in wanted:
            name = key(column, cur, report_currencies) if keyed else column
            figures[name], left_out, said = money_sum(rows, column, cur, report_currencies)
            if left_out:
                partial.add(name)
            if said is not None:
                empty[name] = said
    return figures, partial, empty


def reason_columns(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``{reason: {"seconds": column, "cost": column}}`` of the waiting reasons some row knows
    (none where activity is not measured), in :data:`allsmi.schema.WAITING_REASONS`' order."""
    rows = list(rows)
    out: dict[str, dict[str, str]] = {}
    for reason in WAITING_REASONS:
        columns = {kind: f"waiting_{reason}_{kind}" for kind in ("seconds", "cost")}
        if any(r.get(columns["seconds"]) is not None for r in rows):
            out[reason] = columns
    return out
