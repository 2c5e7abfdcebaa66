"""A bill-only simulated sample (``SimulatedBackend.bill_only``: a replay into a ledger): the
sample of each unit that :meth:`SimulatedBackend._sample_unit` makes, less the fields no bill
reads, with what never changes about a unit looked up once per replay instead of worked out
every cycle (tests/test_replay_cycle.py checks it field for field against the full sample).
"""

from __future__ import annotations

import math
from typing import Any

from allsmi.schema.samplecopy import filler
from allsmi.schema import DeviceSample, derive

from .activity import busy_looking_utilization
from .scenario import Scenario
from .units import Unit


def core_utilization(mean_util: float, s: float, cores: int) -> tuple[float, ...]:
    """Each core's utilization (percent) of a device at ``mean_util``, ``s`` seconds into the
    scenario: a wave around it, within 0..100.

    Each core's value is ``round(max(0.0, min(100.0, mean_util + 5.0 * sin(6.283 * s / 41.0
    + 6.283 * i / cores))), 2)``: written out for speed (a month's bill asks this of every
    device with cores every cycle), with the same floats in the same order: the time's term
    made once per call, each core's phase once per core count, an idle device's 0.0 per core
    without the wave (``mean_util`` 0: none). tests/test_replay_cycle.py checks it against the
    formula."""
    if not mean_util:  # (0 + 0.0, within 0..100, rounded: 0.0)
        return (0.0,) * cores
    phases = CORE_PHASES.get(cores)
    if phases is None:
        phases = CORE_PHASES[cores] = tuple(6.283 * i / cores for i in range(cores))
    now = 6.283 * s / 41.0
    sin = math.sin
    return tuple([round(max(0.0, min(100.0, mean_util + 5.0 * sin(now + phase))), 2)
                  for phase in phases])


#: Each core's phase of the wave in :func:`core_utilization`, per number of cores.
CORE_PHASES: dict[int, tuple[float, ...]] = {}


#: The fields of a sample that the collector sets on it in place after the backend returns it
#: (``allsmi.collection.collector._Completing`` and ``_set_waiting``): a reused sample gets its template's
#: back before the cycle's changes, for the collector to set (or leave) again.
COLLECTOR_SET = ("resource_group", "labels", "workloads", "processes", "waiting")
#: Those of :data:`COLLECTOR_SET` that every collector sets on every sample of every cycle,
#: whatever the attribution says (``allsmi.collection.collector``: ``_in_group`` and ``attributed_device``).
GROUPING = ("resource_group", "labels")


class BilledSampling:
    """``SimulatedBackend``'s bill-only sampling: a mix-in of that class alone, whose state
    (its templates, plans and idle samples) and model steps (``_load``, ``_activity``) it
    uses."""

    reuse_samples = False
    """(With ``bill_only``) each unit's sample of the last cycle is filled in again with this
    cycle's values, not copied afresh from its template (all 37 fields): only for a replay that
    keeps no sample past its cycle (``allsmi.cli.simulate.bill``: its recorder reads each snapshot
    once, and keeps values, never samples). tests/test_replay_cycle.py checks the replay's
    samples, cycle by cycle, against fresh copies."""

    grouped_in_place = False
    """(With :attr:`reuse_samples`) a sample's :data:`GROUPING` is left as its collector set it
    the cycle before, not put back from the template: only for a collector that sets it again
    on each sample every cycle, or leaves it where it knows that the very same sample holds
    what it would set (``allsmi.cli.simulate.collect.ReplayCollector``, whose devices are those of
    the live collector: tests/test_replay_carry.py)."""

    def _made(self: Any, key: Any, template: DeviceSample, changes: dict[str, Any]
              ) -> DeviceSample:
        """``derive(template, **changes)``, with the fields the real backend never reports
        (``_blank``) ``None``; with :attr:`reuse_samples`, the sample made last cycle for
        ``key`` from the same template with the same fields changed, filled in with ``changes``
        (and the template's :data:`COLLECTOR_SET`): the same sample, field for field, with a
        third of the work (a month's bill makes 1.8 million)."""
        blank = self._blank
        if not self.reuse_samples:
            return derive(template, **{**changes, **blank}) if blank else derive(template, **changes)
        names = tuple(changes)
        kept = self._kept.get(key)
        if kept is None or kept[0] is not template or kept[1] != names:
            # The sample made for ``key`` before the last one, when it is of this template
            # with these fields (a unit busy again after a few idle cycles, or idle again: a
            # month's bill switches a few units a cycle, each switch a whole copy otherwise).
            other = self._switched.get(key)
            if kept is not None:
                self._switched[key] = kept
            if other is not None and other[0] is template and other[1] == names:
                self._kept[key] = kept = other
                return kept[3](kept[2], {**changes, **blank} if kept[4] else changes,  # type: ignore[no-any-return]
                               template)
            sample = derive(template, **{**changes, **blank}) if blank else derive(template, **changes)
            # (the template's COLLECTOR_SET back first: cleaned when it was made). The fields
            # the real backend never reports (``_blank``, None) stay None in the sample once
            # made: filled in again only where the collector sets them too (up to twelve
            # fields of half the mixed node's devices, each cleaned, every cycle), from
            # ``changes`` with ``_blank`` over it (``merge``: not the case of the mixed node).
            blank = blank or {}
            moving = tuple(name for name in names if name not in blank or name in COLLECTOR_SET)
            merge = any(name in blank for name in moving)
            restored = COLLECTOR_SET if not self.grouped_in_place \
                else tuple(name for name in COLLECTOR_SET if name not in GROUPING)
            self._kept[key] = (template, names, sample, filler(DeviceSample, moving, restored),
                               merge)
            return sample
        return kept[3](kept[2], {**changes, **blank} if kept[4] else changes,  # type: ignore[no-any-return]
                       template)

    def _billed_unit(self: Any, scenario: Scenario, unit: Unit, s: float,
                     blank: dict[str, None]) -> list[DeviceSample]:
        """:meth:`_sample_unit` of a ``bill_only`` backend: the same samples, field for field,
        with what is constant per unit (its templates, its power's slope, which of its
        branches apply) looked up once per unit instead of worked out every cycle. Written
        out for speed: a month's bill samples each unit 44,640 times."""
        if scenario.faults and self._lost(scenario, unit, s):
            return self._sample_unit(scenario, unit, s, blank)
        plan = self._plans.get(unit.key)
        if plan is None:
            plan = self._plan_of(unit, blank)
        template, child_templates, k, activity, looking, cores = plan
        spec = unit.spec
        wobble = unit.wobble
        load = self._load
        idle_watts = spec.power_idle_watts
        if unit.children:
            loads = [load(scenario, c.cycle, c, s, c.memory_total) for c in unit.children]
            total_util = sum(l[0] for l in loads)
            power = idle_watts + wobble.value(s) + k * total_util
            energy = None
            if spec.has_energy_counter:
                energy = (idle_watts * s + wobble.cumulative(s)
                          + k * sum(c.cycle.cumulative(s) for c in unit.children))
            out: list[DeviceSample] = [template]  # (replaced below)
            used_total = 0
            for child, child_template, (child_util, used, procs, job, r) in zip(
                    unit.children, child_templates, loads):
                changes = self._activity(child, job, r, child_util, procs).copy()
                changes["memory_used_bytes"] = used
                changes["processes"] = procs
                out.append(self._made((unit.key, child.key), child_template, changes))
                used_total += used
            changes = {"utilization_percent": None, "memory_used_bytes": used_total,
                       "power_watts": round(power, 3),
                       "energy_joules": None if energy is None else round(energy, 3),
                       "processes": ()}
            out[0] = self._made(unit.key, template, changes)
            return out
        util, used_total, procs, job, r = load(scenario, unit.cycle, unit, s, unit.memory_total,
                                               activity)
        # (the same arithmetic as _sample_unit's over its one load)
        total_util = 0 + util
        power = idle_watts + wobble.value(s) + k * total_util
        energy = None
        if spec.has_energy_counter:
            energy = idle_watts * s + wobble.cumulative(s) + k * (0 + unit.cycle.cumulative(s))
        mean_util = total_util / 1
        if cores:
            per_core = core_utilization(mean_util, s, cores)
            shown: float = sum(per_core) / len(per_core)
        else:
            shown = mean_util
        fields = self._activity(unit, job, r, shown, procs)  # (as _sample_unit: the cores' mean)
        if looking:
            shown = busy_looking_utilization(shown, bool(procs))
        if not procs and shown == 0.0:
            # Idle: all but its power and energy is the unit's idle sample (made once).
            idle = self._idle.get(unit.key)
            if idle is None or idle[0] != used_total:
                changes = fields.copy()
                changes["utilization_percent"] = round(shown, 2)
                changes["memory_used_bytes"] = used_total
                changes["processes"] = procs
                if blank:
                    changes.update(blank)
                idle = self._idle[unit.key] = (used_total, derive(template, **changes))
            changes = {"power_watts": round(power, 3),
                       "energy_joules": None if energy is None else round(energy, 3)}
            return [self._made(unit.key, idle[1], changes)]
        changes = fields.copy()
        changes["utilization_percent"] = round(shown, 2)
        changes["memory_used_bytes"] = used_total
        changes["power_watts"] = round(power, 3)
        changes["energy_joules"] = None if energy is None else round(energy, 3)
        changes["processes"] = procs
        return [self._made(unit.key, template, changes)]

    def _plan_of(self: Any, unit: Unit, blank: dict[str, None]) -> tuple[Any, ...]:
        """What :meth:`_billed_unit` needs of ``unit`` that never changes, made once: its
        templates, its power's slope per percent of utilization, whether its tool reports
        per-process activity, whether it is a busy-looking device, and its cores."""
        spec = unit.spec
        vendor, kind = self._vendor_kind(spec)
        static = self._static.get(unit.key)
        if static is None:
            static = self._static[unit.key] = self._static_of(unit, vendor, kind)
        template, child_templates = self._templates.get(unit.key) \
            or self._templates_of(unit, static, blank)
        assert unit.wobble is not None
        span = 0.92 * spec.power_limit_watts - spec.power_idle_watts - unit.wobble.amp
        k = span / 100.0 / (len(unit.children) or 1)
        plan = self._plans[unit.key] = (
            template, child_templates, k, spec.backend in self.ACTIVITY_BACKENDS,
            unit.parent is None and unit.index in spec.busy_looking and not unit.children,
            spec.cores if spec.cores and not unit.children else 0)
        return plan
