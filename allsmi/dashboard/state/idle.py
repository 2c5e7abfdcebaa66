"""Allocated-but-idle devices and who holds them, computed with no UI involved.

A device is *allocated but idle* while a process or a workload (pod, batch job) holds it and
its utilization stays below ``[accounting] idle_threshold_percent``: :func:`allocated_idle`
says so for one sample (the device table's marker), :class:`IdleMeter` measures it over the
dashboard's history window with the shared :class:`allsmi.usage.UsageIntegrator` (the same
trapezoids as the exporter's ``allsmi_device_idle_allocated_seconds_total`` and the ledger),
split among the holders with :func:`allsmi.usage.holder_weights` (the allocated half of
:func:`allsmi.fairshare.split`, the ledger's rule: declared shares, else equal parts) and
priced with the group's prices like ``allsmi idle``'s ``idle_cost``.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from allsmi.config import Config
from allsmi.schema.formatting import money_rank
from allsmi.schema import DeviceSample, Snapshot
from allsmi.usage import (Holder, UsageIntegrator, Weights, billing_shares, bridged_gap_seconds,
                          held, holder_weights, split_board_energy)

from allsmi.dashboard.state.model import device_key

#: Orders of the idle view: by idle cost (then idle time), or by idle time (then cost).
IDLE_SORTS = ("cost", "time")
#: The row of idle time whose holder nobody knows (processes without a user, pod or job).
NOBODY = Holder()


def allocated_idle(dev: DeviceSample, threshold: float) -> bool:
    """Whether ``dev`` is held (a process or a workload on it) while its utilization is below
    ``threshold`` percent; unknown holders or utilization are never called idle."""
    util = dev.utilization_percent
    if util is None:  # a MIG instance: its compute activity says whether it idles
        util = dev.compute_active_percent
    return util is not None and util < threshold and bool(held(dev))


@dataclass(frozen=True, slots=True)
class _Part:
    """One holder's share of one device's increment."""

    device: str
    """Device key (:func:`allsmi.dashboard.state.model.device_key`)."""
    group: str
    holder: Holder
    idle_seconds: float
    allocated_seconds: float
    idle_billed_seconds: float
    idle_energy_joules: float | None


@dataclass(eq=False, repr=False)  # nothing compares or prints one
class IdleRow:
    """One holder of allocated-but-idle devices over the window."""

    group: str
    holder: Holder
    idle_seconds: float = 0.0
    allocated_seconds: float = 0.0
    idle_billed_seconds: float = 0.0
    idle_energy_joules: float | None = None
    devices: list[str] = field(default_factory=list)
    """Device keys, in the order they first sat idle."""
    idle_cost: float | None = None
    currency: str | None = None

    @property
    def key(self) -> str:
        """A row key unique among holders."""
        return "\x1f".join((self.group, *(v or "" for v in self.holder)))

    @property
    def idle_device_hours(self) -> float:
        """Idle-allocated device-hours."""
        return self.idle_seconds / 3600.0

    def price(self, config: Config) -> None:
        """``idle_cost`` from the group's prices (as ``allsmi idle``): idle billed hours x
        price per device-hour + idle energy kWh x price per kWh; ``None`` without prices."""
        group = config.group(self.group)
        per_hour, per_kwh = group.price_per_device_hour, group.price_per_kwh
        if per_hour is None and per_kwh is None:
            return
        cost = 0.0
        if per_hour is not None:
            cost += self.idle_billed_seconds / 3600.0 * per_hour
        if per_kwh is not None:
            if self.idle_energy_joules is None and self.idle_seconds > 0:
                return  # energy unknown: the cost is unknown, never under-counted
            cost += (self.idle_energy_joules or 0.0) / 3.6e6 * per_kwh
        self.idle_cost, self.currency = cost, group.currency


#: Pieces of idle time (device x holder x snapshot, about 200 bytes each) kept over all hosts,
#: shared equally among them (about 80 MiB): one host of 4096 idle devices, each held by one
#: workload, keeps about 100 snapshots.
MAX_PARTS = 400_000
#: A host's clock further off this machine's than this (the snapshot's time against when it
#: arrived, which includes the fetch and the interval) is said to be skewed.
SKEW_LIMIT_SECONDS = 120.0


class IdleMeter:
    """Idle-allocated time of every holder over the last ``points`` snapshots of each host.

    One :class:`UsageIntegrator` per host (device ids repeat across hosts). Each snapshot's
    increments are split among the device's holders at the end of the increment (at its start
    if it ended with none), as the ledger does, and kept with the snapshot; the oldest
    snapshot's parts leave the window when a new one arrives, so memory stays bounded.
    """

    def __init__(self, threshold: float, points: int, interval: float,
                 config: Config | None = None, speed: float = 1.0) -> None:
        self.threshold = threshold
        self.points = points
        self.config = config or Config()
        # ``speed``: snapshot time runs that much faster than the sampling (ALLSMI_SIMULATE_SPEED)
        self._gap = bridged_gap_seconds(interval, speed=speed)
        self._integrators: dict[str, UsageIntegrator] = {}
        self._holders: dict[str, dict[str, Weights]] = {}
        self._window: dict[str, collections.deque[tuple[float, float, list[_Part]]]] = {}
        self._seen: dict[str, float] = {}
        self._parts: dict[str, int] = {}
        self.offsets: dict[str, float] = {}
        """Per host: how far its clock is ahead of this machine's (seconds; negative: behind),
        from its last snapshot's time and when it was received."""
        self.known: dict[str, bool] = {}
        """Per host: whether its last snapshot told who holds its devices (processes or
        workloads known for at least one device)."""

    def add(self, host: str, snapshot: Snapshot, now: float | None = None) -> None:
        """Feed one snapshot of ``host`` (repeats of the same snapshot are ignored), received at
        ``now`` on this machine's clock (default: the time of the call)."""
        when = snapshot.unix_time
        if self._seen.get(host) == when:
            return
        self._seen[host] = when
        if now is not None:  # a host's clock against this machine's: said when far off (skewed)
            self.offsets[host] = when - now
        integrator = self._integrators.get(host)
        if integrator is None:
            integrator = self._integrators[host] = UsageIntegrator(self._gap, self.threshold)
        by_id = {dev.id: dev for dev in snapshot.devices}
        self.known[host] = any(held(dev) is not None for dev in snapshot.devices)
        previous = self._holders.get(host, {})
        holders = {dev.id: holder_weights(dev) for dev in snapshot.devices if held(dev)}
        shares = billing_shares(snapshot.devices) if any(d.parent for d in snapshot.devices) else {}
        parts: list[_Part] = []
        start = when
        increments = integrator.update(snapshot)
        if shares:  # a board's energy goes to its partitions by their shares, as the ledger's
            increments = split_board_energy(list(increments), snapshot.devices, shares)
        for inc in increments:
            start = min(start, inc.start)
            idle, alloc = inc.idle_allocated_seconds, inc.allocated_seconds
            if not idle or alloc is None:
                continue
            dev = by_id[inc.device_id]
            group = dev.resource_group or ""
            whole = self.config.group(group).partition_billing == "whole"
            share = 1.0 if whole else shares.get(dev.id, 1.0)
            energy = None if inc.energy_joules is None or inc.observed_seconds <= 0 else \
                inc.energy_joules * min(1.0, idle / inc.observed_seconds)
            owners = holders[dev.id] if dev.id in holders else previous.get(dev.id, ())
            given = sum(w for _, w in owners)
            pieces = list(owners) + ([(NOBODY, 1.0 - given)] if given < 1.0 - 1e-9 else [])
            key = device_key(host, dev.id)
            for holder, weight in pieces:
                parts.append(_Part(key, group, holder, idle * weight, alloc * weight,
                                   idle * weight * share, None if energy is None else energy * weight))
        self._holders[host] = holders
        window = self._window.setdefault(host, collections.deque(maxlen=self.points))
        if len(window) == window.maxlen:
            self._parts[host] = self._parts.get(host, 0) - len(window[0][2])
        window.append((start, when, parts))
        # Bounded memory whatever the hosts report: beyond its share of MAX_PARTS pieces of idle
        # time, a host's oldest snapshots leave the window early (the title says how long it covers).
        count = self._parts[host] = self._parts.get(host, 0) + len(parts)
        share = MAX_PARTS // len(self._window)
        while count > share and len(window) > 1:
            count -= len(window.popleft()[2])
        self._parts[host] = count

    def skewed(self, limit: float = SKEW_LIMIT_SECONDS) -> dict[str, float]:
        """Hosts whose clock is more than ``limit`` seconds off this machine's, with the offset."""
        return {host: off for host, off in self.offsets.items() if abs(off) > limit}

    def span(self) -> tuple[float, float] | None:
        """(start, end) of the window in unix seconds, or ``None`` when empty: each host's window
        measured on its own clock (a host whose clock is an hour off does not stretch it), the
        longest of them, ending at the newest snapshot."""
        ends = [(w[0][0], w[-1][1]) for w in self._window.values() if w]
        if not ends:
            return None
        longest = max(e - s for s, e in ends)
        newest = max(e for _, e in ends)
        return newest - longest, newest

    def rows(self, devices: Callable[[str], bool] | None = None) -> list[IdleRow]:
        """Holders with idle time in the window (of the devices ``devices`` accepts), priced,
        most expensive first (then most idle time)."""
        out: dict[tuple[str, Holder], IdleRow] = {}
        for window in self._window.values():
            for _start, _end, parts in window:
                for part in parts:
                    if devices is not None and not devices(part.device):
                        continue
                    row = out.get((part.group, part.holder))
                    if row is None:
                        row = out[(part.group, part.holder)] = IdleRow(part.group, part.holder)
                    row.idle_seconds += part.idle_seconds
                    row.allocated_seconds += part.allocated_seconds
                    row.idle_billed_seconds += part.idle_billed_seconds
                    if part.idle_energy_joules is not None:
                        row.idle_energy_joules = (row.idle_energy_joules or 0.0) + part.idle_energy_joules
                    if part.device not in row.devices:
                        row.devices.append(part.device)
        rows = [r for r in out.values() if r.idle_seconds > 0]
        for row in rows:
            row.price(self.config)
        return order_rows(rows, "cost")

    def drop_hosts(self, hosts: Iterable[str]) -> None:
        """Drop these hosts' integrators and idle windows (hosts that left)."""
        gone = set(hosts)
        self.forget([h for h in self._seen if h not in gone])

    def forget(self, hosts: Iterable[str]) -> None:
        """Drop hosts not in ``hosts`` (they left the cluster)."""
        keep = set(hosts)
        for table in (self._integrators, self._holders, self._window, self._seen, self._parts, self.known,
                      self.offsets):
            for host in [h for h in table if h not in keep]:
                del table[host]  # type: ignore[attr-defined]


def order_rows(rows: Sequence[IdleRow], key: str = "cost", descending: bool = True) -> list[IdleRow]:
    """By idle cost then idle time, or by idle time then cost; ties by group and holder so the
    order is stable. Costs are ranked within their currency (currencies in alphabetical
    order: no exchange rate is known), and rows whose cost is unknown come after every priced
    one, by idle time, as ``allsmi idle`` ranks them; by time, rows of the same idle time follow
    the same rule. Ascending is the exact reverse."""
    if key not in IDLE_SORTS:
        raise ValueError(f"unknown idle sort {key!r} (known: {', '.join(IDLE_SORTS)})")
    ordered = sorted(rows, key=lambda r: r.key)
    if key == "cost":
        out = sorted(ordered, key=lambda r: money_rank(r.idle_cost, r.currency, r.idle_seconds))
        return out if descending else out[::-1]
    # By idle time; ties (holders sharing a device equally) by cost within their currency, an
    # unknown cost after every priced one: never one currency's amount against another's.
    out = sorted(ordered, key=lambda r: (-r.idle_seconds, r.idle_cost is None, r.currency or "",
                                         -(r.idle_cost or 0.0)))
    return out if descending else out[::-1]


def row_text(row: IdleRow) -> Iterable[str]:
    """The strings the idle view's text filter looks in."""
    yield row.group
    yield from (v for v in row.holder if v)
