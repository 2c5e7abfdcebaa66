"""The simulated cluster: a backend like the others, driven by a scenario file.

``--simulate mixed`` (or ``--simulate PATH``) replaces the hardware backends
with one :class:`SimulatedBackend` per backend named in the scenario. Each
impersonates that backend, taking its identity from the installed backend class
of that name (its own declarations, one source of truth): ``vendor`` and ``kind``,
:attr:`Backend.unreported_fields` (left ``None`` whatever the scenario says) and
:meth:`Backend.model_name` (each scenario ``model`` goes through it). Id formats,
partitions carrying their GPU's bus id and their ``partition_share`` follow the real
backends too, so consumers cannot tell it from hardware; only the backend status
message says "simulated (scenario NAME)". The scenario format is documented in
``docs/simulation.md``.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from allsmi.backend_api import Backend, BackendError, ProbeResult
from allsmi.schema import DeviceSample, ProcessSample, derive

from .activity import busy_looking_utilization, device_activity, job_draws, process_evidence, stalling
from .billed import BilledSampling, core_utilization
from .jobs import MIB, JobDraws
from .model import LoadCycle, in_window
from .identity import installed_backend, partition_share
from .scenario import DeviceSpec, FaultSpec, Scenario, load_scenario
from .scenariofile import SCENARIO_DIR, ScenarioError, builtin_scenarios
from .units import Unit, lost_samples, make_unit

__all__ = ["SCENARIO_DIR", "DeviceSpec", "FaultSpec", "Scenario", "ScenarioError", "SimulatedBackend",
           "builtin_scenarios", "installed_backend", "load_scenario", "partition_share",
           "simulated_backends"]

#: The fields of a sample that no bill reads (the ledger, its fair shares and waiting reasons):
#: left ``None`` by a backend with ``bill_only`` set. tests/test_replay_invariants.py checks
#: that a bill-only replay books exactly what a full one does.
UNBILLED = ("temperature_celsius", "fan_percent", "clock_mhz", "details", "sm_occupancy_percent",
            "tensor_active_percent", "memory_bandwidth_percent", "pcie_rx_bytes_per_second",
            "pcie_tx_bytes_per_second")

#: Finds the class of an installed backend by its registry name (``None`` when there is none).
Impersonate = Callable[[str], "type[Backend] | None"]

class SimulatedBackend(BilledSampling, Backend):
    """Impersonates one backend (``target``) of a scenario."""

    name = "simulated"
    vendor = ""
    kind = "gpu"
    fresh_samples = True
    """Every sample is a new object this backend keeps no reference to: the collector fills in
    its group and holders on it rather than copying it (``allsmi.collection.collector._Completing``)."""
    bill_only = False
    """Sample only what a bill reads (a replay into a ledger: ``allsmi.cli.simulate.bill``): the
    fields in :data:`UNBILLED` stay ``None`` instead of being computed every cycle; everything
    else (utilization, memory, power and energy, processes, compute activity, interconnect
    traffic) is exactly what a full sample has."""

    def __init__(self, *, scenario: str | Path | Scenario = "mixed", target: str | None = None,
                 clock: Callable[[], float] = time.time, timeout_seconds: float = 5.0,
                 options: Any = None, impersonate: Impersonate = installed_backend) -> None:
        """``impersonate`` finds the real backend class of ``target`` (the registry passes its
        own loader); it is asked once, at :meth:`open`."""
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._scenario_ref = scenario
        self._scenario: Scenario | None = scenario if isinstance(scenario, Scenario) else None
        self._target = target
        self._clock = clock
        self._impersonate = impersonate
        self._real: type[Backend] | None = None
        self._units: list[Unit] = []
        self._jobs = JobDraws()
        #: Per unit, the fields of its samples that never change (see :meth:`_sample_unit`).
        self._static: dict[str, dict[str, Any]] = {}
        #: Per unit, its sample and its partitions' with those fields, built (and checked) once:
        #: each cycle derives from them only what moves (see :meth:`_templates_of`).
        self._templates: dict[str, tuple[DeviceSample, tuple[DeviceSample, ...]]] = {}
        #: Per unit, what a bill-only sample of it needs that never changes (see
        #: :meth:`_plan_of`).
        self._plans: dict[str, tuple[Any, ...]] = {}
        #: Per unit, its job and what is the same for all of it (see :meth:`_load`).
        self._current: dict[str, tuple[Any, ...]] = {}
        self.templates_built = 0
        """Units whose templates were built (once each per :meth:`open`; tests count them)."""
        #: What the host evidence of each process of the last sample is made of (see
        #: :meth:`host_evidence`): made when asked, for the processes asked about.
        self._evidence: dict[int, tuple[str | None, bool, float]] = {}
        #: Per unit, its activity fields while no process holds it (the same every cycle), and
        #: (bill-only) its idle sample with its memory used (see :meth:`_sample_unit`).
        self._quiet: dict[str, dict[str, Any]] = {}
        self._idle: dict[str, tuple[int, DeviceSample]] = {}
        #: (``reuse_samples``) each sample's template, fields, last sample, filler; the one before.
        self._kept: dict[Any, tuple[Any, ...]] = {}
        self._switched: dict[Any, tuple[Any, ...]] = {}
        #: The fields the impersonated backend never reports, ``None`` each (made at the first
        #: sample after :meth:`open`).
        self._blank: dict[str, None] | None = None
        #: What the impersonated backend declares its activity to measure (see :meth:`open`).
        self._source: str | None = None
        self._closed = threading.Event()
        if self._scenario is not None and target is not None:
            self._adopt_identity()

    # -- identity ----------------------------------------------------------
    @property
    def display_name(self) -> str:
        return self._target or self.name

    @property
    def scenario(self) -> Scenario:
        """The loaded scenario (loads it on first use)."""
        if self._scenario is None:
            self._scenario = load_scenario(self._scenario_ref)  # type: ignore[arg-type]
        return self._scenario

    @property
    def impersonated(self) -> "type[Backend] | None":
        """The real backend class whose declarations this one follows (known after :meth:`open`)."""
        return self._real

    def _adopt_identity(self) -> None:
        specs = [s for s in self.scenario.devices if s.backend == self._target]
        if specs:
            self.vendor = specs[0].vendor  # type: ignore[misc]
            self.kind = specs[0].kind  # type: ignore[misc]
        if self._real is not None:
            # The real backend's own declarations win over what the scenario file says.
            self.vendor = self._real.vendor  # type: ignore[misc]
            self.kind = self._real.kind  # type: ignore[misc]

    # -- contract ----------------------------------------------------------
    def probe(self) -> ProbeResult:
        try:
            scenario = self.scenario
        except ScenarioError as exc:
            return ProbeResult(False, str(exc))
        targets = scenario.backend_names()
        if self._target is not None and self._target not in targets:
            return ProbeResult(False, f"scenario {scenario.name!r} has no {self._target} devices")
        if not targets:
            return ProbeResult(False, f"scenario {scenario.name!r} has no devices")
        return ProbeResult(True, "", {"scenario": scenario.name, "source": scenario.source})

    def open(self) -> None:
        scenario = self.scenario
        if self._target is not None and self._real is None:
            real = self._impersonate(self._target)
            self._real = real if real is not None and real.name != self.name else None
        self._adopt_identity()
        self._closed.clear()
        self._units = []
        self._static, self._templates, self._idle, self._quiet = {}, {}, {}, {}
        self._plans, self._kept, self._switched, self._current = {}, {}, {}, {}
        self._blank = None
        self._source = getattr(self._real, "compute_active_source", None) if self._real else None
        for spec in scenario.devices:
            if self._target is not None and spec.backend != self._target:
                continue
            for index in range(spec.first_index, spec.first_index + spec.count):
                self._units.append(self._make_unit(scenario, spec, index))

    def _vendor_kind(self, spec: DeviceSpec) -> tuple[str, str]:
        """(vendor, kind): the real backend's declarations, else the scenario's."""
        return (self._real.vendor, self._real.kind) if self._real is not None else (spec.vendor, spec.kind)

    def _model_name(self, model: str) -> str | None:
        """The scenario's model as the real backend names it (``RNGD`` -> ``Furiosa RNGD``)."""
        return self._real.model_name(model) if self._real is not None else model

    def _make_unit(self, scenario: Scenario, spec: DeviceSpec, index: int) -> Unit:
        return make_unit(scenario, spec, index, self._vendor_kind(spec)[0],
                         self._model_name(spec.model))

    def sample(self) -> list[DeviceSample]:
        scenario = self.scenario
        self.warnings = [f"simulated (scenario {scenario.name})"]
        if self._target is not None and self._real is None:
            self.warnings.append(f"no installed backend {self._target!r}: its declarations "
                                 "(unreported fields, model names) are not applied")
        now = self._clock()
        s = now - scenario.epoch
        for fault in scenario.faults:
            if fault.backend != self.display_name or not in_window(s, fault.every_seconds, fault.duration_seconds):
                continue
            if fault.type == "error":
                raise BackendError(fault.message)
            if fault.type == "hang":
                # Interruptible by close(), so a hung simulated backend can be shut down cleanly.
                if self._closed.wait(fault.seconds):
                    raise BackendError("closed while hanging")
        # What the real backend never reports, the simulation does not invent: those fields
        # are built as None.
        blank = self._blank
        if blank is None:
            unreported = self._real.unreported_fields if self._real is not None else frozenset()
            blank = self._blank = {name: None for name in unreported}
        out: list[DeviceSample] = []
        self._evidence = {}
        sample_unit = self._billed_unit if self.bill_only else self._sample_unit
        for unit in self._units:
            out.extend(sample_unit(scenario, unit, s, blank))
        return out

    def host_evidence(self, pids: Any) -> dict[int, dict[str, Any]]:
        """What the simulated processes ``pids`` did on the host at the last sample (the fields
        of ``allsmi.hostactivity.sampler.ProcessActivity``): a pure function of the sample's
        time, as everything simulated (``backends/simulated/activity.py``)."""
        made = self._evidence
        return {pid: process_evidence(*made[pid]) for pid in pids if pid in made}

    def _activity(self, unit: Unit, job: int, r: float, util: float,
                  procs: tuple[ProcessSample, ...]) -> dict[str, Any]:
        """``unit``'s activity fields now, and its processes' host evidence remembered. Those
        of a unit that no process holds are the same whenever it is so (made once)."""
        if not procs:
            quiet = self._quiet.get(unit.key)
            if quiet is not None:
                return quiet
        spec = unit.spec
        busy = bool(procs)
        partition = unit.parent is not None
        looking = not partition and unit.index in spec.busy_looking
        draws = job_draws(spec.backend, unit.key, job, partition)  # (drawn once per job)
        stall = stalling(draws[0], r)
        # (source: what the impersonated backend declares its activity measures, else the table's)
        fields = device_activity(spec.backend, unit.key, job, r, util, busy, looking,
                                 partition=partition, source=self._source, stall=stall,
                                 billed_only=self.bill_only, draws=draws)
        if looking:
            stall = None
        for i, proc in enumerate(procs):
            helper = i > 0 and proc.user == procs[0].user  # a helper of the same user
            self._evidence[proc.pid] = (stall, not helper, r)
        if not busy:
            self._quiet[unit.key] = fields
        return fields

    def close(self) -> None:
        self._closed.set()

    # -- the model -----------------------------------------------------------
    def _lost(self, scenario: Scenario, unit: Unit, s: float) -> bool:
        if not scenario.faults:
            return False
        ref = f"{unit.spec.backend}:{unit.index}"
        return any(f.type == "lost" and f.device == ref
                   and in_window(s, f.every_seconds, f.duration_seconds) for f in scenario.faults)

    #: Backends whose real tools report each process's share of the device's compute engines
    #: (NVIDIA per-process SM, AMD engine counters, Rebellions contexts); the others do not.
    ACTIVITY_BACKENDS = ("nvidia", "amd", "rebellions")

    def _load(self, scenario: Scenario, cycle: LoadCycle, unit: Unit, s: float,
              memory_total: int, activity: bool = False
              ) -> tuple[float, int, tuple[ProcessSample, ...], int, float]:
        """(utilization %, memory used, processes, job number, seconds into cycle)."""
        job, r = cycle.position(s)
        # [job, memory size, what the unit keeps of it, the job's share of the rest]: made at
        # the job's first sample, not at each (a month's bill samples a unit 44,640 times).
        current = self._current.get(unit.key)
        if current is None or current[0] != job or current[1] != memory_total:
            current = self._current[unit.key] = (job, memory_total, int(
                memory_total * 0.006) // MIB * MIB, self._jobs.draw(scenario, unit.key, job)[0])
        _, _, overhead, frac = current
        if r >= cycle.active:
            return 0.0, overhead, (), job, r
        ramp = min(1.0, r / 30.0)
        job_mem = int((memory_total - overhead) * frac * ramp) // MIB * MIB
        util = cycle.utilization(r)
        procs = self._jobs.processes(scenario, unit.key, job, job_mem, util, activity) \
            if job_mem > 0 else ()
        return util, overhead + job_mem, procs, job, r

    def _static_of(self, unit: Unit, vendor: str, kind: str) -> dict[str, Any]:
        """The fields of ``unit``'s samples that never change."""
        spec = unit.spec
        return dict(id=unit.id, vendor=vendor, kind=kind, backend=self.display_name,
                    index=unit.index, uuid=unit.uuid, name=unit.name, bus_id=unit.bus_id,
                    driver_version=spec.driver_version, firmware_version=spec.firmware_version)

    def _sample_unit(self, scenario: Scenario, unit: Unit, s: float,
                     blank: dict[str, None]) -> list[DeviceSample]:
        spec = unit.spec
        vendor, kind = self._vendor_kind(spec)
        static = self._static.get(unit.key)
        if static is None:  # (the same every cycle: made once per unit)
            static = self._static[unit.key] = self._static_of(unit, vendor, kind)

        def device(**fields: Any) -> DeviceSample:
            return DeviceSample(**{**fields, **blank}) if blank else DeviceSample(**fields)

        moved: Callable[..., DeviceSample] = derive
        if blank:
            def moved(template: DeviceSample, **fields: Any) -> DeviceSample:
                return derive(template, **{**fields, **blank})

        if scenario.faults and self._lost(scenario, unit, s):
            return lost_samples(unit, static, self.display_name, not self.bill_only, device)
        loads = [(c, *self._load(scenario, c.cycle, c, s, c.memory_total)) for c in unit.children] \
            if unit.children else [(unit, *self._load(scenario, unit.cycle, unit, s, unit.memory_total,
                                                      spec.backend in self.ACTIVITY_BACKENDS))]
        assert unit.wobble is not None
        span = 0.92 * spec.power_limit_watts - spec.power_idle_watts - unit.wobble.amp
        k = span / 100.0 / len(loads)
        total_util = sum(l[1] for l in loads)
        mean_util = total_util / len(loads)
        power = spec.power_idle_watts + unit.wobble.value(s) + k * total_util
        energy = None
        if spec.has_energy_counter:
            energy = (spec.power_idle_watts * s + unit.wobble.cumulative(s)
                      + k * sum(l[0].cycle.cumulative(s) for l in loads))
        # (a bill-only sample is made by _billed_unit, but for a lost unit's: made above)
        # Temperature follows the job's base load with a thermal lag (tau 90 s).
        heat = sum(self._heat(l[0].cycle, l[5]) for l in loads) / len(loads)
        temp = spec.temperature_idle_celsius \
            + (spec.temperature_max_celsius - spec.temperature_idle_celsius) \
            * min(1.0, heat + 0.1 * (mean_util / 100.0 - heat) if mean_util else heat)
        clock = spec.clock_max_mhz if mean_util > 0 else spec.clock_idle_mhz
        fan = (30.0 + 65.0 * heat) if spec.has_fan else None
        details: dict[str, Any] = {}
        util: float | None = mean_util
        if spec.cores and not unit.children:
            cores = core_utilization(mean_util, s, spec.cores)
            details["core_utilization_percent"] = cores
            util = sum(cores) / len(cores)
        children_out: list[DeviceSample] = []
        activity: dict[str, Any] = {}
        template, child_templates = self._templates.get(unit.key) \
            or self._templates_of(unit, static, blank)
        if unit.children:
            util = None  # NVML reports no utilization for a GPU in MIG mode, nor per instance
            details["mig_mode"] = "enabled"
            for (child, child_util, used, procs, job, r), child_template in zip(loads, child_templates):
                children_out.append(moved(child_template,
                                          **self._activity(child, job, r, child_util, procs),
                                          memory_used_bytes=used, processes=procs))
            used_total = sum(l[2] for l in loads)
            procs_parent: tuple[ProcessSample, ...] = ()
        else:
            _, _, used_total, procs_parent, job, r = loads[0]
            activity = self._activity(unit, job, r, util, procs_parent)  # (the cores' mean)
            if unit.index in spec.busy_looking and util is not None:
                util = busy_looking_utilization(util, bool(procs_parent))
        parent = moved(
            template, **activity, utilization_percent=None if util is None else round(util, 2),
            memory_used_bytes=used_total,
            temperature_celsius=round(temp, 1), power_watts=round(power, 3),
            energy_joules=None if energy is None else round(energy, 3),
            clock_mhz=clock, fan_percent=None if fan is None else round(fan, 1),
            processes=procs_parent, details=details)
        return [parent] + children_out

    def _templates_of(self, unit: Unit, static: dict[str, Any], blank: dict[str, None]
                      ) -> tuple[DeviceSample, tuple[DeviceSample, ...]]:
        """``unit``'s sample and its partitions' with what never changes (their identity,
        health, memory size and power limit, a MIG instance's ids in its details; ``blank``
        left ``None``), built once."""
        spec = unit.spec
        self.templates_built += 1
        self._templates[unit.key] = made = (
            DeviceSample(**{**static, "health": "ok", "memory_total_bytes": unit.memory_total,
                            "power_limit_watts": spec.power_limit_watts, **blank}),
            tuple(DeviceSample(**{
                "id": c.id, "vendor": static["vendor"], "kind": static["kind"],
                "backend": self.display_name, "uuid": c.uuid, "name": c.name, "bus_id": c.bus_id,
                "parent": unit.id, "partition_share": c.share,
                "driver_version": spec.driver_version, "firmware_version": spec.firmware_version,
                "health": "ok", "memory_total_bytes": c.memory_total,
                # (a MIG instance's ids, as the NVIDIA backend's: not in a bill-only sample,
                # whose details stay empty)
                "details": {} if self.bill_only else dict(c.details), **blank})
                for c in unit.children))
        return made

    @staticmethod
    def _heat(cycle: LoadCycle, r: float) -> float:
        target = cycle.base / 100.0
        if r < cycle.active:
            return target * (1.0 - math.exp(-r / 90.0))
        peak = target * (1.0 - math.exp(-cycle.active / 90.0))
        return peak * math.exp(-(r - cycle.active) / 90.0)


def simulated_backends(scenario_ref: str | Path | Scenario, *, timeout_seconds: float = 5.0,
                       clock: Callable[[], float] = time.time,
                       impersonate: Impersonate = installed_backend) -> Sequence[SimulatedBackend]:
    """One backend per backend the scenario impersonates (raises :class:`ScenarioError`).

    ``scenario_ref`` is a built-in name, a file path, or an already loaded :class:`Scenario`;
    ``impersonate`` finds each impersonated backend's class (the registry passes its loader).
    """
    scenario = scenario_ref if isinstance(scenario_ref, Scenario) else load_scenario(scenario_ref)
    return [SimulatedBackend(scenario=scenario, target=name, clock=clock, timeout_seconds=timeout_seconds,
                             impersonate=impersonate)
            for name in scenario.backend_names()]
