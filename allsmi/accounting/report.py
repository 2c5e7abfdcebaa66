"""Billing rows: usage per device, grouped, priced and checked for coverage.

Both sources (the ledger and Prometheus) produce :class:`Part` records, one
per device (and per user where known) with the dimensions in force; this
module groups them by the ``--group-by`` keys and computes the columns.

* ``observed_device_hours``: time the devices were watched with valid samples;
* ``allocated_device_hours``: time a device had at least one process;
* ``used_device_hours``: utilization-weighted time (busy seconds);
* ``avg_utilization_ratio``: used / observed hours of the devices that report
  utilization (MIG instances and GPUs in MIG mode do not);
* ``billed_device_hours``: allocated device-hours weighted by each device's
  share of its physical device (1 for a whole device; a partition's share, its
  parent the rest), so a partitioned device is billed at most once per hour; in
  a group with ``partition_billing = "whole"`` it equals the allocated hours;
* ``energy_kwh``: board energy (partitions carry none, so nothing is counted twice);
* ``idle_allocated_device_hours``: allocated time during which utilization stayed below
  ``[accounting] idle_threshold_percent`` (never more than the allocated hours);
* ``cost`` = billed_device_hours x price_per_device_hour + energy_kwh x
  price_per_kwh, with the group's prices from the configuration at export
  time; a price that is not set charges nothing, and with neither price set,
  or with the hours priced unknown, or with ``price_per_kwh`` alone and the energy
  unknown, the cost is empty (never an invented 0). A group with ``bill_by = "used"`` prices the
  used (busy) device-hours at the billing share instead of the billed ones;
* ``allocation_method`` / ``usage_method``: how the row's allocated time, and its used time
  and energy, were split among the devices' holders (:mod:`allsmi.fairshare`), ``mixed``
  when the row's time saw more than one method, empty when nobody held the devices;
* ``carbon_gco2e`` = energy_kwh x the group's ``grid_gco2e_per_kwh`` (else
  ``[accounting] grid_gco2e_per_kwh``); empty when neither is set or energy is unknown;
* ``idle_cost``: the part of ``cost`` spent on allocated-but-idle time: idle billed
  device-hours x price_per_device_hour + the energy of idle time x price_per_kwh; empty
  when ``cost`` is;
* ``coverage_ratio`` = observed hours / (device_count x window hours). A device
  that moved to another group mid-window appears in both groups' rows with
  the part of the window it spent there; the overall coverage (exit status)
  counts it once.
* ``active_device_hours``: allocated time weighted by compute activity (``compute_active_percent``:
  SM activity, GFX busy...; not the headline utilization; a holder's is its allocated time x
  the device's activity over it), empty where no device of the row reports activity;
  ``efficiency_ratio`` = active / allocated device-hours, empty where the activity of some of
  the allocated time is unknown (never counted as inactive); ``activity_method`` names what the
  activity measured;
* ``waiting_<reason>_seconds``: allocated time during which the holders were ``computing`` or
  waiting on ``input``, the ``host``, ``communication``, ``nothing`` or ``unknown``
  (docs/activity.md); ``waiting_<reason>_cost``: that part of ``cost``, each of the finest
  parts' cost x the reason's seconds / its allocated seconds, summed (so rows add up whatever
  the grouping: :mod:`allsmi.accounting.sums`); empty where nothing was classified or nothing
  is priced;
* ``attribution_coverage_ratio`` = observed hours whose holders were known / observed hours:
  below 1 where an attribution source failed or timed out and its last answer was too old to
  carry (that time's allocation is unknown, never booked as unallocated); empty where unknown
  (a ledger recorded before it was counted, or the Prometheus source).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from allsmi.accounting.periods import Window
from allsmi.accounting.sums import (Spent, Sums, accumulate, efficiency, money, quantities,
                                    sort_key, spent)
from allsmi.config import Config
from allsmi.schema import WAITING_REASONS
from allsmi.usage import grid_gco2e_per_kwh

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Part:
    """Usage of one device (or one user's share of it) over the window, in seconds and joules."""

    resource_group: str
    labels: Labels
    vendor: str
    model: str
    host: str
    device: str
    """Unique across hosts, e.g. ``host/device-id``."""
    observed_s: float
    allocated_s: float | None
    busy_s: float | None
    busy_observed_s: float
    energy_j: float | None
    mem_sum: float | None = None
    mem_samples: int = 0
    mem_peak: float | None = None
    user: str | None = None
    """Set on holder shares; ``None`` on device totals, the unattributed share and holders
    whose user is unknown (and likewise ``namespace``, ``pod`` and ``job``)."""
    billed_s: float | None = None
    """Allocated seconds x the billing share; ``None``: as allocated (a whole device, or a
    source that does not know shares)."""
    namespace: str | None = None
    pod: str | None = None
    job: str | None = None
    idle_s: float | None = None
    """Allocated seconds while utilization stayed below the idle threshold (<= allocated)."""
    idle_billed_s: float | None = None
    """Idle seconds x the billing share; ``None``: as idle."""
    idle_energy_j: float | None = None
    """Energy used during the idle-allocated time."""
    used_billed_s: float | None = None
    """Busy seconds x the billing share; ``None``: as busy."""
    allocation_method: str | None = None
    usage_method: str | None = None
    """How the part's time was split among holders (:mod:`allsmi.fairshare`); ``None``: unknown
    or nobody held it."""
    attributed_s: float | None = None
    """Observed seconds whose holders were known (device totals only; ``None``: unknown)."""
    active_s: float | None = None
    """Allocated seconds weighted by compute activity; ``None``: no activity known."""
    active_allocated_s: float | None = None
    """Allocated seconds whose activity was known (``active_s``'s denominator)."""
    activity_method: str | None = None
    """What the activity measured (``sm_active``, ``gfx_busy``...; ``mixed``)."""
    waiting_s: tuple[float, ...] | None = None
    """Allocated seconds per waiting reason, in :data:`WAITING_REASONS` order; ``None``: none
    classified."""


@dataclass(frozen=True)
class Row:
    """One line of the export."""

    window: Window
    resource_group: str
    labels: Labels
    vendor: str | None
    model: str | None
    host: str | None
    user: str | None
    device_count: int
    observed_device_hours: float
    allocated_device_hours: float | None
    billed_device_hours: float | None
    used_device_hours: float | None
    avg_utilization_ratio: float | None
    energy_kwh: float | None
    avg_memory_used_bytes: float | None
    peak_memory_used_bytes: float | None
    price_per_device_hour: float | None
    price_per_kwh: float | None
    cost: float | None
    currency: str | None
    coverage_ratio: float | None
    namespace: str | None = None
    pod: str | None = None
    job: str | None = None
    idle_allocated_device_hours: float | None = None
    idle_cost: float | None = None
    idle_devices: tuple[str, ...] = ()
    """The row's devices (``host/device-id``) with idle-allocated time, sorted."""
    idle_billed_device_hours: float | None = None
    """Idle hours at the billing shares (what ``price_per_device_hour`` prices in ``idle_cost``)."""
    idle_energy_kwh: float | None = None
    """Energy of the idle-allocated time (what ``price_per_kwh`` prices in ``idle_cost``)."""
    used_billed_device_hours: float | None = None
    """Used hours at the billing shares (what ``price_per_device_hour`` prices in ``cost`` with
    ``bill_by = "used"``)."""
    allocation_method: str | None = None
    usage_method: str | None = None
    carbon_gco2e: float | None = None
    bill_by: str = "allocated"
    budget: float | None = None
    """The group's ``budget_per_month`` (in its currency)."""
    budget_used_ratio: float | None = None
    """``cost`` / ``budget``: this row's share of the group's monthly budget."""
    forecast_month_end_cost: float | None = None
    """``cost`` extrapolated linearly to the whole calendar month holding the window."""
    attribution_coverage_ratio: float | None = None
    """Observed time whose holders were known over observed time (see the module docstring)."""
    active_device_hours: float | None = None
    efficiency_ratio: float | None = None
    activity_method: str | None = None
    waiting_seconds: tuple[float, ...] | None = None
    """Per reason of :data:`WAITING_REASONS` (the ``waiting_<reason>_seconds`` columns)."""
    waiting_cost: tuple[float, ...] | None = None
    """Per reason, its part of ``cost`` (the ``waiting_<reason>_cost`` columns)."""
    waiting_billed_device_hours: tuple[float, ...] | None = None
    """Per reason, the part of the hours ``price_per_device_hour`` prices (billed, or used with
    ``bill_by = "used"``) spent on it; ``None`` where nothing was classified or allocated."""
    waiting_energy_kwh: tuple[float, ...] | None = None
    """Per reason, the part of ``energy_kwh`` spent on it (as ``waiting_billed_device_hours``)."""
    active_cost: float | None = None
    """The part of ``cost`` that bought compute activity (each part's cost x its efficiency,
    summed); ``None`` where ``cost`` is, or the activity of priced allocated time is unknown."""

    def value(self, column: str) -> Any:
        """The value of an export column (the per-reason columns included)."""
        if column.startswith("waiting_"):
            reason, _, kind = column[len("waiting_"):].rpartition("_")
            values = self.waiting_seconds if kind == "seconds" else self.waiting_cost
            return None if values is None else values[WAITING_REASONS.index(reason)]
        return getattr(self, column)


#: The per-reason export columns: ``waiting_<reason>_seconds`` then ``waiting_<reason>_cost``.
WAITING_COLUMNS: tuple[str, ...] = tuple(f"waiting_{r}_seconds" for r in WAITING_REASONS) + \
    tuple(f"waiting_{r}_cost" for r in WAITING_REASONS)


@dataclass(frozen=True)
class Report:
    """All rows of one export, and the coverage of the whole window."""

    window: Window
    group_by: tuple[str, ...]
    rows: tuple[Row, ...]
    label_names: tuple[str, ...]
    coverage_ratio: float | None
    """Observed device time over (distinct devices x window), all rows; ``None`` with no devices."""
    source: str
    price_sources: tuple[tuple[str, str], ...] | None = None
    """Per priced group, where its prices came from (``config`` or ``published``); ``None``
    where the source publishes none (the ledger)."""
    source_data: str | None = None
    """Which of the source's data gave the figures (Prometheus: roll-ups or raw counters)."""
    warnings: tuple[str, ...] = ()
    """The source's warnings about partial answers (accepted by ``--allow-partial``)."""
    notes: tuple[str, ...] = ()
    """What the bill should warn about that is no partial answer (groups the configuration no
    longer declares: :func:`undeclared_groups`; the source's warnings, budgets overrun, added
    by the command): said on stderr and carried in the JSON's ``warnings``, from this one list."""
    budget_totals: tuple[tuple[str, float, str, float | None, float | None, bool], ...] | None \
        = None
    """Per budgeted group, (group, budget, currency, cost, forecast, partial) over the month to
    date, where read apart from this report's rows (a window shorter than the month)."""


#: The grouping keys of a device part, and of a holder share (``--group-by``).
DEVICE_KEYS = ("vendor", "model", "host")
HOLDER_KEYS = ("user", "namespace", "pod", "job")
_Key = tuple


def _key(part: Part, group_by: Sequence[str], keys: Sequence[str] = DEVICE_KEYS) -> _Key:
    return (part.resource_group, part.labels) + tuple(
        getattr(part, k) if k in group_by else None for k in keys)


def _prices(grp: Any, published: Mapping[str, Any] | None, sources: dict[str, str]) -> Any:
    """``grp`` with the prices the exporters published (``published``) unless the local
    configuration prices it; notes in ``sources`` which were used."""
    if grp.price_per_device_hour is not None or grp.price_per_kwh is not None:
        sources[grp.name] = "config"
        return grp
    given = (published or {}).get(grp.name)
    if given is None or (given.per_device_hour is None and given.per_kwh is None):
        return grp
    sources[grp.name] = "published"
    # a budget in another currency than the costs is never compared with them (no exchange
    # rate): :func:`allsmi.accounting.prometheus.prices.currency_conflicts` says so
    budget = grp.budget_per_month if given.currency == grp.currency else None
    return replace(grp, price_per_device_hour=given.per_device_hour,
                   price_per_kwh=given.per_kwh, currency=given.currency, budget_per_month=budget)


def _budget(budget: float | None, cost: float | None, factor: float | None) -> dict[str, float | None]:
    """The budget columns of a row costing ``cost`` (no ratio to a budget of 0, nor to one so
    small, 1e-320, that it is no finite number: never ``inf``, which JSON cannot hold)."""
    ratio = None if cost is None or not budget or not math.isfinite(cost / budget) else cost / budget
    return {"budget": budget, "budget_used_ratio": ratio,
            "forecast_month_end_cost": None if cost is None or factor is None else cost * factor}


def month_factor(window: Window) -> float | None:
    """The calendar month holding ``window`` (in its time zone) over the window's length, for
    a linear forecast to the month's end; ``None`` when the window spans two months."""
    start = window.start
    first = start.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (first.replace(year=first.year + 1, month=1) if first.month == 12
                 else first.replace(month=first.month + 1))
    if window.end.timestamp() > following.timestamp() or window.seconds <= 0:
        return None
    return (following.timestamp() - first.timestamp()) / window.seconds


def build_report(device_parts: Iterable[Part], window: Window, group_by: Sequence[str],
                 config: Config, holder_parts: Iterable[Part] | None = None,
                 source: str = "", source_data: str | None = None,
                 published: Mapping[str, Any] | None = None) -> Report:
    """Group, price and check coverage. ``holder_parts`` is needed when grouping by user,
    namespace, pod or job; given, it is also what each row's cost per waiting reason and on
    compute activity are summed from, whatever the grouping (:mod:`allsmi.accounting.sums`)."""
    group_by = tuple(group_by)
    by_holder = any(k in group_by for k in HOLDER_KEYS)
    holder_parts = None if holder_parts is None else list(holder_parts)
    device_parts = list(device_parts)
    devices = accumulate(device_parts, lambda p: _key(p, group_by))
    seconds = max(window.seconds, 1)
    # Distinct devices: one that changed group mid-window is expected once, not once per group.
    seen = set().union(*(acc.devices for acc in devices.values())) if devices else set()
    total_observed = sum(acc.observed for acc in devices.values())
    coverage = total_observed / (len(seen) * seconds) if seen else None

    row_key = lambda p: _key(p, group_by, DEVICE_KEYS + HOLDER_KEYS)  # noqa: E731
    if by_holder:
        if holder_parts is None:
            raise ValueError("grouping by user, namespace, pod or job needs the holder shares")
        accs = accumulate(holder_parts, row_key)
    else:
        accs = {k + (None,) * len(HOLDER_KEYS): v for k, v in devices.items()}
    sources: dict[str, str] = {}
    groups = {g: _prices(config.group(g), published, sources) for g in sorted({k[0] for k in accs})}
    shares = spent(device_parts if holder_parts is None else holder_parts, row_key,
                   lambda g: groups.get(g) or _prices(config.group(g), published, {}))

    carbon_default = grid_gco2e_per_kwh(config)
    rows: list[Row] = []
    label_names: set[str] = set()
    factor = month_factor(window)
    width = 2 + len(DEVICE_KEYS)
    for key in sorted(accs, key=sort_key):
        acc = accs[key]
        group, labels, vendor, model, host, user, namespace, pod, job = key
        label_names.update(name for name, _ in labels)
        whole = devices.get(key[:width], acc)  # with holders, count and coverage are the devices'
        count = len(whole.devices)
        grp = groups[group]
        q = quantities(acc, grp)
        intensity = grp.grid_gco2e_per_kwh if grp.grid_gco2e_per_kwh is not None \
            else carbon_default
        carbon = None if intensity is None or q.kwh is None else q.kwh * intensity
        cost = money(grp, q.priced_h, q.kwh)
        rows.append(Row(
            window=window, resource_group=group, labels=labels, vendor=vendor, model=model,
            host=host, user=user, namespace=namespace, pod=pod, job=job, device_count=count,
            observed_device_hours=acc.observed / 3600.0, allocated_device_hours=q.allocated_h,
            billed_device_hours=q.billed_h,
            used_device_hours=q.used_h,
            avg_utilization_ratio=(acc.busy / acc.busy_observed
                                   if acc.busy is not None and acc.busy_observed > 0 else None),
            energy_kwh=q.kwh,
            avg_memory_used_bytes=(acc.mem_sum / acc.mem_samples
                                   if acc.mem_sum is not None and acc.mem_samples else None),
            peak_memory_used_bytes=acc.mem_peak,
            price_per_device_hour=grp.price_per_device_hour, price_per_kwh=grp.price_per_kwh,
            cost=cost, currency=grp.currency,
            coverage_ratio=whole.observed / (count * seconds) if count else None,
            attribution_coverage_ratio=(min(1.0, whole.attributed / whole.observed)
                                        if whole.attributed is not None and whole.observed > 0
                                        else None),
            idle_allocated_device_hours=q.idle_h,
            idle_cost=None if q.idle_h is None or cost is None
            else money(grp, q.idle_billed_h, q.idle_kwh),
            idle_devices=tuple(sorted(acc.idle_devices)),
            idle_billed_device_hours=q.idle_billed_h, idle_energy_kwh=q.idle_kwh,
            used_billed_device_hours=q.used_billed_h,
            allocation_method=acc.allocation_method, usage_method=acc.usage_method,
            carbon_gco2e=carbon, bill_by=grp.bill_by,
            **_activity(acc, grp, cost, shares.get(key)),
            **_budget(grp.budget_per_month, cost, factor)))
    return Report(window=window, group_by=group_by, rows=tuple(rows),
                  label_names=tuple(sorted(label_names)), coverage_ratio=coverage, source=source,
                  source_data=source_data, notes=undeclared_groups(config, groups),
                  price_sources=None if published is None else tuple(sorted(sources.items())))


def undeclared_groups(config: Config, groups: Mapping[str, Any]) -> tuple[str, ...]:
    """A warning naming the billed groups that a configuration declaring groups does not
    declare (no ``[groups.NAME]`` table, rule or default names them: a group renamed or removed
    since the usage was recorded) and that no price reaches (the exporters' published prices):
    their rows' cost is empty, the price unknown, never 0. Empty when there are none, and
    without any ``[groups.NAME]`` table (nothing is priced: every cost is empty)."""
    if not config.groups:
        return ()
    declared = set(config.groups) | {config.default_group} | {r.resource_group
                                                              for r in config.rules}
    names = sorted(g for g, grp in groups.items() if g not in declared
                   and grp.price_per_device_hour is None and grp.price_per_kwh is None)
    if not names:
        return ()
    where = f" ({config.path})" if config.path else ""
    return (f"resource group(s) {', '.join(names)} are billed but not declared in the "
            f"configuration{where}: no [groups.NAME] table, rule or default names them (renamed "
            "or removed since the usage was recorded?), so their price is unknown and their "
            "cost is left empty, not 0; declare them with their prices to bill them",)


def _activity(acc: Sums, grp: Any, cost: float | None, spent_on: Spent | None) -> dict[str, Any]:
    """The activity columns of a row: active hours, efficiency, seconds per waiting reason, and
    what its cost was spent on (per reason, and on activity), summed from its finest parts."""
    waits = None if acc.waits is None else tuple(acc.waits)
    spent_on = spent_on or Spent()
    classified = waits is not None and acc.allocated is not None  # (none allocated: known 0s)
    reason_hours = tuple(spent_on.reason_hours) if classified else None
    reason_kwh = tuple(spent_on.reason_kwh) if classified else None
    return {
        "active_device_hours": None if acc.active is None else acc.active / 3600.0,
        "efficiency_ratio": efficiency(acc.active, acc.active_allocated, acc.allocated),
        "activity_method": acc.activity_method,
        "waiting_seconds": waits,
        "waiting_billed_device_hours": reason_hours, "waiting_energy_kwh": reason_kwh,
        "waiting_cost": None if cost is None or reason_hours is None or reason_kwh is None
        else tuple(money(grp, h, k) or 0.0 for h, k in zip(reason_hours, reason_kwh)),
        "active_cost": None if cost is None or spent_on.active_unknown
        else money(grp, spent_on.active_hours, spent_on.active_kwh)}
