"""Turning a stream of snapshots into usage increments: energy, busy, allocated, observed.

Shared by the exporter's counters and the accounting ledger, so both count
the same way. Between two consecutive valid samples of a device (at most
``max_gap_seconds`` apart) one :class:`Increment` is produced:

* ``observed_seconds``: the interval length (the denominator for coverage);
* ``busy_seconds``: utilization integrated with the trapezoid rule;
* ``allocated_seconds``: the trapezoid of "held": at least one process or one workload
  (``DeviceSample.workloads``: a pod or a job) on the device (0 or 1); ``None`` when neither
  the processes nor the workloads are known at either end;
* ``idle_allocated_seconds``: the trapezoid of "held while utilization stayed below
  ``idle_threshold_percent``" (0 or 1 at each sample; a device that reports no utilization, a
  MIG instance, by its ``compute_active_percent``), so it never exceeds ``allocated_seconds``;
  ``None`` when that is unknown, or a held device's utilization and activity both are;
* ``active_seconds``: allocated time weighted by compute activity, the trapezoid of "held x
  ``compute_active_percent`` / 100" (0 while not held), so it never exceeds
  ``allocated_seconds``; ``None`` when allocation, or the device's activity, is unknown
  (a device without an activity figure, held or not: never its headline utilization instead);
* ``energy_joules``: the delta of the device's own energy counter where it
  has one, handling resets; otherwise power integrated with the trapezoid
  rule. A partition carries no board power, so it contributes no energy and
  a sum over devices never counts a board twice.

:func:`billing_shares` gives each partition's share of its physical device (its parent the
rest), which the ledger and the exporter's ``allsmi_device_partition_share_ratio`` both use
to bill partitions at their share.

A longer gap, a lost device or an unknown value is not bridged: the interval
is simply not observed, and coverage shows it. The longest gap bridged comes
from :func:`bridged_gap_seconds`, for the exporter and the ledger alike.

Durations are measured on the snapshots' monotonic clock (``Snapshot.monotonic``)
when they carry one, so that an NTP step or a resumed VM neither inflates nor
loses time; the wall clock only places each increment: it ends at the later
snapshot's timestamp and starts the measured duration before it.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping, NamedTuple, Sequence

from allsmi.config import Config
from allsmi.fairshare import Holder, Split, Weights, split
from allsmi.schema import DeviceSample, Snapshot

__all__ = ["DEFAULT_IDLE_THRESHOLD_PERCENT", "DEFAULT_MAX_GAP_SECONDS", "Holder", "Increment",
           "Split", "UsageIntegrator", "Weights", "billing_shares", "bridged_gap_seconds",
           "held", "holder_weights", "idle_threshold_percent", "split", "split_board_energy"]

DEFAULT_MAX_GAP_SECONDS = 30.0
"""The shortest default bridged gap (seconds); longer for slower sampling."""
GAP_INTERVALS = 3.0
"""By default a gap of up to this many sampling intervals is bridged (one or two missed cycles)."""
_VALID = ("ok", "degraded")
DEFAULT_IDLE_THRESHOLD_PERCENT = 5.0
"""A held device whose utilization is below this is allocated but idle (``[accounting]``)."""
ACCOUNTING_KEYS = ("idle_threshold_percent", "grid_gco2e_per_kwh")
#: ``[accounting] grid_gco2e_per_kwh`` is at most this (grams CO2e per kWh).
MAX_GCO2E_PER_KWH = 5000.0


def grid_gco2e_per_kwh(config: Config) -> float | None:
    """``[accounting] grid_gco2e_per_kwh``: grams of CO2e per kWh of the grid (0 to 5000), or
    ``None`` when not set (``carbon_gco2e`` is then empty, never an invented 0). A bad value
    raises ``ConfigError`` naming the file, the line and the key."""
    idle_threshold_percent(config)  # checks the table's keys
    value = config.section("accounting").get("grid_gco2e_per_kwh")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or not 0.0 <= value <= MAX_GCO2E_PER_KWH:
        raise config.error(f"must be a number from 0 to {MAX_GCO2E_PER_KWH:g}, got {value!r}",
                           "accounting", "grid_gco2e_per_kwh")
    return float(value)


def idle_threshold_percent(config: Config) -> float:
    """``[accounting] idle_threshold_percent`` (default 5, 0 to 100); a bad value raises
    ``ConfigError`` naming the file, the line and the key."""
    table = config.section("accounting")
    for key in table:
        if key not in ACCOUNTING_KEYS:
            raise config.error(f"unknown key (allowed: {', '.join(ACCOUNTING_KEYS)})",
                               "accounting", key)
    value = table.get("idle_threshold_percent", DEFAULT_IDLE_THRESHOLD_PERCENT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or not 0.0 <= value <= 100.0:
        raise config.error(f"must be a number from 0 to 100, got {value!r}",
                           "accounting", "idle_threshold_percent")
    return float(value)


def bridged_gap_seconds(interval_seconds: float, configured: float | None = None,
                        speed: float = 1.0) -> float:
    """The longest gap between two samples of a device that still counts as observed.

    ``configured`` (``[ledger] max_gap_seconds``, ``serve.energy_max_gap_seconds``) wins;
    otherwise ``max(30 s, 3 x interval)``. Under ``ALLSMI_SIMULATE_SPEED`` snapshot time
    runs ``speed`` times faster, and so does the gap. Callers reject a configured gap shorter
    than the interval (it would bridge nothing).
    """
    gap = configured if configured is not None else max(DEFAULT_MAX_GAP_SECONDS,
                                                         GAP_INTERVALS * interval_seconds)
    return gap * speed


_new_tuple = tuple.__new__


class Increment(NamedTuple):
    """Usage of one device over ``[start, end)`` (unix seconds).

    Immutable; a named tuple rather than a frozen dataclass because one is built per device
    per cycle (1000 devices at 1 s: the dataclass's ``__init__`` alone was a third of the
    integrator's time)."""

    device_id: str
    start: float
    end: float
    observed_seconds: float
    allocated_seconds: float | None
    busy_seconds: float | None
    energy_joules: float | None
    idle_allocated_seconds: float | None = None
    """Held (allocated) while utilization stayed below the idle threshold; <= allocated."""
    active_seconds: float | None = None
    """Allocated time weighted by compute activity (``compute_active_percent``); <= allocated."""

    def split(self, at: float) -> tuple["Increment", "Increment"]:
        """Two increments divided at ``at`` in proportion to time (for per-minute buckets)."""
        if not self.start < at < self.end:
            raise ValueError("split point outside the increment")
        share = (at - self.start) / (self.end - self.start)

        def part(f: float, start: float, end: float) -> "Increment":
            scale = lambda v: None if v is None else v * f  # noqa: E731
            return Increment(self.device_id, start, end, self.observed_seconds * f,
                             scale(self.allocated_seconds), scale(self.busy_seconds),
                             scale(self.energy_joules), scale(self.idle_allocated_seconds),
                             scale(self.active_seconds))
        return part(share, self.start, at), part(1.0 - share, at, self.end)


class _Point:
    """The previous sample of one device, overwritten in place by the next one."""

    __slots__ = ("time", "steady", "utilization", "power", "energy", "allocated", "idle", "cycle",
                 "active")

    def __init__(self, time: float, steady: float | None, utilization: float | None,
                 power: float | None, energy: float | None, allocated: float | None,
                 idle: float | None, cycle: int, active: float | None = None) -> None:
        self.time = time
        self.steady = steady
        self.utilization = utilization
        self.power = power
        self.energy = energy
        self.allocated = allocated
        self.idle = idle
        self.cycle = cycle
        self.active = active


def held(dev: DeviceSample) -> bool | None:
    """Whether a process or a workload holds ``dev``: ``None`` only when both are unknown."""
    if dev.processes or dev.workloads:
        return True
    if dev.processes is None and dev.workloads is None:
        return None
    return False


def billing_shares(devices: tuple[DeviceSample, ...] | list[DeviceSample]) -> dict[str, float]:
    """Each partitioned device's share of its physical device, by id (absent: 1, a whole device).

    A partition (``parent`` set) holds its ``partition_share``, or when the backend cannot tell,
    an equal split among its parent's partitions in this snapshot; shares adding up to more
    than 1 are scaled down to 1. The parent holds what no partition holds (at least 0). So a
    physical device is billed at most once per hour however it is partitioned.
    """
    parts: dict[str, list[DeviceSample]] = {}
    for dev in devices:
        if dev.parent:
            parts.setdefault(dev.parent, []).append(dev)
    shares: dict[str, float] = {}
    for parent, members in parts.items():
        raw = [d.partition_share if d.partition_share is not None and d.partition_share > 0
               else 1.0 / len(members) for d in members]
        total = sum(raw)
        scale = 1.0 / total if total > 1.0 else 1.0
        for dev, share in zip(members, raw):
            shares[dev.id] = share * scale
        shares[parent] = max(0.0, 1.0 - total * scale)
    return shares


def split_board_energy(increments: list[Increment], devices: Sequence[DeviceSample],
                       shares: Mapping[str, float]) -> list[Increment]:
    """``increments`` with the energy of each partitioned board split among its partitions and
    itself by their billing ``shares`` (:func:`billing_shares`), as its allocated time is billed.

    A MIG slice (or an AMD compute partition) reports no power of its own: the board's whole
    energy is measured on the parent device, whose holder would otherwise be given the slices'
    work too. Each partition with an increment of its own and no energy of its own is given its
    share of the parent's joules, and the parent keeps the rest (its share, plus the shares of
    partitions with no increment yet), so the board's energy is counted once. Partitions that
    measure their own energy leave their board's alone."""
    kids: dict[str, list[str]] = {}
    for dev in devices:
        if dev.parent:
            kids.setdefault(dev.parent, []).append(dev.id)
    if not kids:
        return increments
    at = {inc.device_id: i for i, inc in enumerate(increments)}
    out = list(increments)
    for parent, members in kids.items():
        i = at.get(parent)
        joules = None if i is None else increments[i].energy_joules
        if joules is None or any(increments[at[m]].energy_joules is not None
                                 for m in members if m in at):
            continue
        given = 0.0
        for member in members:
            j = at.get(member)
            if j is not None:
                part = joules * shares.get(member, 0.0)
                out[j] = out[j]._replace(energy_joules=part)
                given += part
        rest = joules - given  # what no partition was given: 0 below rounding
        out[i] = out[i]._replace(  # type: ignore[index]
            energy_joules=rest if rest > 1e-9 * abs(joules) else 0.0)
    return out


def holder_weights(dev: DeviceSample) -> Weights:
    """Who holds ``dev`` now, and each holder's part of its allocated time: the allocation
    half of :func:`allsmi.fairshare.split` (declared shares, else equal parts). Shared by the
    ledger, ``allsmi idle`` and the dashboard's idle view, so all split a device alike."""
    return split(dev).allocated


class UsageIntegrator:
    """Keeps the previous sample of each device and emits increments per snapshot.

    The hot path of both the exporter and the ledger (once per device per cycle), so it is
    written out inline: no helper calls, each device's previous sample overwritten in place,
    no per-cycle set of the devices seen. tests/test_usage_fastpath.py checks it bit for bit
    against the plain formulas (:func:`held`, the trapezoid ``(a + b) / 2 * dt``) over
    thousands of cycles of the simulated node."""

    def __init__(self, max_gap_seconds: float = DEFAULT_MAX_GAP_SECONDS,
                 idle_threshold_percent: float = DEFAULT_IDLE_THRESHOLD_PERCENT) -> None:
        self.max_gap_seconds = max_gap_seconds
        self.idle_threshold_percent = idle_threshold_percent
        self._last: dict[str, _Point] = {}
        self._cycle = 0

    def update(self, snapshot: Snapshot) -> list[Increment]:
        """Feed one snapshot; return the increments since each device's previous sample."""
        return list(self.feed(snapshot.devices, snapshot.unix_time, snapshot.monotonic,
                              snapshot.holders_unknown))

    def feed(self, devices: Iterable[DeviceSample], when: float,
             steady: float | None = None,
             holders_unknown: frozenset[str] | set[str] = frozenset()) -> Iterator[Increment]:
        """Like :meth:`update` for devices sampled at ``when`` (unix seconds) and ``steady``
        (monotonic seconds, when known: durations are measured on it). A device in
        ``holders_unknown`` (``Snapshot.holders_unknown``: an attribution source failed) that
        neither a process nor a workload holds has unknown allocation, not "not held"."""
        self._cycle = cycle = self._cycle + 1
        last = self._last
        threshold = self.idle_threshold_percent
        max_gap = self.max_gap_seconds
        fresh = 0  # devices stored in this cycle, each counted once
        for dev in devices:
            dev_id = dev.id
            if dev.health not in _VALID:
                lost = last.pop(dev_id, None)  # a lost device breaks the chain: no bridging
                if lost is not None and lost.cycle == cycle:
                    fresh -= 1  # stored earlier in this cycle (a repeated id)
                continue
            # held(dev) as a float, and whether it is held while idle
            procs, works = dev.processes, dev.workloads
            util = dev.utilization_percent
            if procs or works:
                allocated: float | None = 1.0
                act = dev.compute_active_percent
                # A device without a headline utilization (a MIG instance) idles by its activity.
                level = util if util is not None else act
                idle = None if level is None else float(level < threshold)
                active = None if act is None else act / 100.0
            elif procs is None and works is None or holders_unknown and dev_id in holders_unknown:
                allocated = idle = active = None
            else:
                allocated = idle = 0.0
                # Not held: no active time, where the device reports activity at all (one that
                # never does has no active time to know, as the exporter has no counter for it).
                active = None if dev.compute_active_percent is None else 0.0
            power, energy = dev.power_watts, dev.energy_joules
            prev = last.get(dev_id)
            if prev is None:
                last[dev_id] = _Point(when, steady, util, power, energy, allocated, idle, cycle,
                                      active)
                fresh += 1
                continue
            if prev.cycle != cycle:
                fresh += 1
            if steady is not None and prev.steady is not None:
                dt = steady - prev.steady  # immune to wall-clock steps
            else:
                dt = when - prev.time
            p_util, p_power, p_energy = prev.utilization, prev.power, prev.energy
            p_alloc, p_idle, p_active = prev.allocated, prev.idle, prev.active
            prev.time, prev.steady, prev.utilization, prev.power, prev.energy = \
                when, steady, util, power, energy
            prev.allocated, prev.idle, prev.cycle, prev.active = allocated, idle, cycle, active
            if dt <= 0 or dt > max_gap:
                continue
            # each trapezoid is (a + b) / 2.0 * dt, None when either end is unknown
            if p_energy is not None and energy is not None:
                joules = energy - p_energy
                if not joules >= 0:
                    # The counter reset (driver reload): the new reading is what was used
                    # since the reset; prefer the integral of power when we have it, which
                    # covers the whole interval.
                    joules = energy if p_power is None or power is None \
                        else (p_power + power) / 2.0 * dt
            else:
                joules = None if p_power is None or power is None else (p_power + power) / 2.0 * dt
            # (the tuple made directly: a NamedTuple's own __new__ is a Python function, a
            # third of the cost of an increment; a replayed month makes 1.8 million)
            yield _new_tuple(Increment, (
                dev_id, when - dt, when, dt,
                None if p_alloc is None or allocated is None else (p_alloc + allocated) / 2.0 * dt,
                None if p_util is None or util is None else (p_util + util) / 2.0 * dt / 100.0,
                joules,
                None if p_idle is None or idle is None else (p_idle + idle) / 2.0 * dt,
                None if p_active is None or active is None else (p_active + active) / 2.0 * dt))
        if len(last) > fresh:
            for gone in [key for key, point in last.items() if point.cycle != cycle]:
                del last[gone]  # vanished devices: their next appearance starts afresh
