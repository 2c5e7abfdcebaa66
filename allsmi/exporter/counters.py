"""The exporter's accumulated counters, fed one snapshot per collection cycle.

The integrals themselves come from :class:`allsmi.usage.UsageIntegrator`
(shared with the accounting ledger, so both count the same way); this module
only adds them up per device, from 0 at exporter start, and remembers when
each counter was created (OpenMetrics ``_created``).

A quantity is *known* for a device once it has reported it: energy once it
has shown a power reading or an energy counter, busy time once it has shown a
utilization. Unknown counters are ``None`` and left out of the exposition.
Totals only ever grow: increments are never negative, and a device that
drops out of a few snapshots (a backend error, a hung tool) resumes its
counters when it comes back. Totals of a device absent for longer than
``forget_after_seconds`` are dropped so that device churn (MIG
reconfiguration) cannot grow memory without bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from allsmi.exporter.builder import BackendCounter, CounterValues
from allsmi.exporter.holders import DEFAULT_MAX_HOLDER_SERIES, HolderCounters, HolderKey, HolderValues
from allsmi.schema.fields import TRAFFIC_MEASUREMENTS
from allsmi.schema import Snapshot
from allsmi.usage import (DEFAULT_IDLE_THRESHOLD_PERCENT, DEFAULT_MAX_GAP_SECONDS,
                          UsageIntegrator, billing_shares, held, split_board_energy)


#: How long the totals of a device missing from every snapshot are kept.
FORGET_AFTER_SECONDS = 3600.0
_FAILED = ("error", "timeout")
#: (schema rate field, counter attribute) of each traffic byte counter.
_TRAFFIC = tuple((m.field, m.field.replace("_per_second", "")) for m in TRAFFIC_MEASUREMENTS)


@dataclass
class _Totals:
    created: float
    last_seen: float
    energy_joules: float | None = None
    busy_seconds: float | None = None
    allocated_seconds: float | None = None
    observed_seconds: float | None = None
    idle_allocated_seconds: float | None = None
    idle_lost: bool = False
    """Held time whose idleness was unknown was seen: the idle counter is unknown for good."""
    active_seconds: float | None = None
    active_allocated_seconds: float | None = None
    """Allocated time of the intervals whose activity was known: the efficiency's denominator."""
    traffic_bytes: dict[str, float] | None = None
    """Bytes per traffic counter attribute (rate x interval), once the device reported it."""
    traffic_at: float | None = None
    """When the traffic rates were last read (the snapshot's monotonic or wall time)."""
    claim_conflicts: float | None = None
    """Cycles with conflicting claims, once an attribution source knew the holders."""

    def frozen(self) -> CounterValues:
        traffic = self.traffic_bytes or {}
        return CounterValues(self.created, self.energy_joules, self.busy_seconds,
                             self.allocated_seconds, self.observed_seconds,
                             self.idle_allocated_seconds, self.active_seconds,
                             self.active_allocated_seconds,
                             **{attr: traffic.get(attr) for _, attr in _TRAFFIC},
                             claim_conflicts=self.claim_conflicts)


def _add(total: float | None, amount: float | None) -> float | None:
    if amount is None or not amount > 0.0:  # never decrease (and NaN never gets in)
        return total
    return (total or 0.0) + amount


class UsageCounters:
    """Per-device energy, busy, allocated and observed totals since start-up."""

    def __init__(self, max_gap_seconds: float = DEFAULT_MAX_GAP_SECONDS,
                 forget_after_seconds: float = FORGET_AFTER_SECONDS,
                 idle_threshold_percent: float = DEFAULT_IDLE_THRESHOLD_PERCENT,
                 holder_users: bool = False,
                 max_holder_series: int = DEFAULT_MAX_HOLDER_SERIES) -> None:
        self.integrator = UsageIntegrator(max_gap_seconds, idle_threshold_percent)
        #: Per-holder parts of the same increments (user label only with ``holder_users``).
        self.holder_counters = HolderCounters(users=holder_users, max_series=max_holder_series)
        self.forget_after_seconds = forget_after_seconds
        self._totals: dict[str, _Totals] = {}
        self._backends: dict[str, BackendCounter] = {}
        self._backends_present: set[str] = set()
        #: Declared shares not billed as written, by (attribution source, reason), since
        #: start-up (``errors``).
        self._bad_shares: dict[tuple[str, str], BackendCounter] = {}

    @property
    def max_gap_seconds(self) -> float:
        """Longest interval between two samples that is still integrated."""
        return self.integrator.max_gap_seconds

    def update(self, snapshot: Snapshot) -> None:
        """Account for one snapshot (call once per collection cycle, in order)."""
        now = snapshot.unix_time
        for dev in snapshot.devices:
            totals = self._totals.get(dev.id)
            if totals is None:
                totals = self._totals[dev.id] = _Totals(created=now, last_seen=now)
            totals.last_seen = now
            if dev.workloads is not None:  # an attribution source knows its holders
                totals.claim_conflicts = (totals.claim_conflicts or 0.0) + (
                    1.0 if dev.id in snapshot.claim_conflicts else 0.0)
            if dev.health in ("ok", "degraded"):
                if totals.observed_seconds is None:
                    totals.observed_seconds = 0.0
                known = held(dev)
                if totals.allocated_seconds is None and known is not None:
                    totals.allocated_seconds = 0.0  # unknown holders never make a 0
                # Only a device that reports utilization can say whether it idles; one held
                # while its idleness is unknown loses the counter (never a known 0).
                if totals.idle_allocated_seconds is None and known is not None and \
                        (dev.utilization_percent is not None
                         or dev.compute_active_percent is not None) and not totals.idle_lost:
                    totals.idle_allocated_seconds = 0.0
                if totals.energy_joules is None and (dev.power_watts is not None
                                                     or dev.energy_joules is not None):
                    totals.energy_joules = 0.0
                if totals.busy_seconds is None and dev.utilization_percent is not None:
                    totals.busy_seconds = 0.0
                if totals.active_seconds is None and dev.compute_active_percent is not None:
                    totals.active_seconds = totals.active_allocated_seconds = 0.0
                self._traffic(totals, dev, now if snapshot.monotonic is None
                              else snapshot.monotonic)
            else:
                totals.traffic_at = None  # a lost device's traffic is not bridged
        self.holder_counters.observe(snapshot.devices, now)
        incs = self.integrator.update(snapshot)
        if any(d.parent for d in snapshot.devices):  # a board's energy to its partitions too
            incs = split_board_energy(incs, snapshot.devices, billing_shares(snapshot.devices))
        for inc in incs:
            self.holder_counters.add(inc)
            totals = self._totals[inc.device_id]
            totals.observed_seconds = _add(totals.observed_seconds, inc.observed_seconds)
            totals.allocated_seconds = _add(totals.allocated_seconds, inc.allocated_seconds)
            if inc.idle_allocated_seconds is None and inc.allocated_seconds:
                totals.idle_lost, totals.idle_allocated_seconds = True, None
            elif not totals.idle_lost:
                totals.idle_allocated_seconds = _add(totals.idle_allocated_seconds,
                                                     inc.idle_allocated_seconds)
            totals.busy_seconds = _add(totals.busy_seconds, inc.busy_seconds)
            totals.active_seconds = _add(totals.active_seconds, inc.active_seconds)
            if inc.active_seconds is not None:  # (unknown activity: neither grows)
                totals.active_allocated_seconds = _add(totals.active_allocated_seconds,
                                                       inc.allocated_seconds)
            totals.energy_joules = _add(totals.energy_joules, inc.energy_joules)
        stale = [key for key, t in self._totals.items()
                 if now - t.last_seen > self.forget_after_seconds]
        for key in stale:
            del self._totals[key]
        self.holder_counters.forget(now)

        for source, reason, count in snapshot.attribution_bad_shares:
            entry = self._bad_shares.get((source, reason)) or BackendCounter(created=now, errors=0)
            self._bad_shares[(source, reason)] = BackendCounter(entry.created, entry.errors + count)

        for status in snapshot.backends:
            entry = self._backends.get(status.name) or BackendCounter(created=now, errors=0)
            if status.status in _FAILED:
                entry = BackendCounter(entry.created, entry.errors + 1)
            self._backends[status.name] = entry
            if status.status != "unavailable":
                self._backends_present.add(status.name)

    def _traffic(self, totals: _Totals, dev: object, at: float) -> None:
        """Add each traffic rate x the time since the previous sample (a rate is measured over
        the interval that ends with its sample); gaps longer than the bridged gap are not
        counted, as for energy."""
        before, totals.traffic_at = totals.traffic_at, at
        dt = None if before is None else at - before
        for field, attr in _TRAFFIC:
            rate = getattr(dev, field)
            if rate is None:
                continue
            traffic = totals.traffic_bytes
            if traffic is None:
                traffic = totals.traffic_bytes = {}
            if attr not in traffic:
                traffic[attr] = 0.0
            elif dt is not None and 0 < dt <= self.max_gap_seconds:
                traffic[attr] += rate * dt

    def devices(self) -> Mapping[str, CounterValues]:
        """Immutable totals of every device still remembered, by device id."""
        return {key: t.frozen() for key, t in self._totals.items()}

    def holders(self) -> Mapping[HolderKey, HolderValues]:
        """Immutable per-holder totals (:mod:`allsmi.exporter.holders`)."""
        return self.holder_counters.values()

    def backends(self) -> Mapping[str, BackendCounter]:
        """Errors per backend since start-up."""
        return dict(self._backends)

    def bad_shares(self) -> Mapping[tuple[str, str], BackendCounter]:
        """Declared shares not billed as written, per attribution source and reason, since
        start-up (``errors``)."""
        return dict(self._bad_shares)

    def backends_present(self) -> frozenset[str]:
        """Backends that have been present (not ``unavailable``) at least once since start-up.

        A vendor that was never found is left out of the backend families, so
        that a node without AMD GPUs does not report ``allsmi_backend_up{backend="amd"} 0``
        forever; a backend that worked and then became unavailable stays listed
        with 0, which is what an alert should see.
        """
        return frozenset(self._backends_present)
