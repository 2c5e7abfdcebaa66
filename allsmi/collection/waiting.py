"""What each holder of an allocated device was waiting on: one reason per holder per interval.

The rule (docs/activity.md), tried in this order for each holder (as :mod:`allsmi.fairshare`
names holders: a user, a namespace and pod, a job) with its processes on the device:

1. the device's processes are not listed: ``unknown``;
2. none of the holder's processes is on the device: ``nothing`` (allocated, unused), unless
   some of the device's processes cannot be told apart among its holders (``unknown``);
3. the device's activity is not reported: ``unknown``;
4. activity (``compute_active_percent``, else ``utilization_percent``) at or above the idle
   threshold: ``computing`` (unless each of the holder's processes reports 0 % of the device);
5. below it, from the host evidence of the holder's processes and the node:
   ``input`` (at least ``input_blocked_fraction`` of its processes in I/O wait: a thread in
   uninterruptible sleep when read, or ``input_delay_fraction`` of the interval in block-I/O
   wait by delay accounting; or reading ``input_read_bytes_per_second`` or more), then
   ``communication`` (the device's interconnect or the node's InfiniBand/RoCE ports moving
   ``communication_bytes_per_second`` or more), then ``host`` (a process at
   ``host_cpu_fraction`` of a core or more, or its threads on a CPU or waiting for one that
   share of the interval, or its cgroup, or one above it, throttled in
   ``host_throttled_fraction`` of its CPU-limit periods), then ``nothing`` when every signal
   was read and all were quiet;
6. anything else is ``unknown``, with what was missing: never a guess.

Input is tried before communication and host because a process blocked on reading is the
most specific evidence; communication before host because a collective that waits spins a
core (NCCL's proxy thread), which alone would read as host-bound.
"""

from __future__ import annotations

import logging
import re
from typing import Collection, Protocol, Sequence

from allsmi.fairshare import Holder, claim_units
from allsmi.hostactivity.cgrouptree import CgroupTree
from allsmi.hostactivity.quiet import cpu_bound, in_io_wait, not_quiet, plural, rate_text
from allsmi.hostactivity.sampler import (HostActivity, HostActivitySampler, NodeActivity,
                                         ProcessActivity)
from allsmi.hostactivity.settings import ActivitySettings
from allsmi.schema import DeviceSample, HolderWaiting, ProcessSample, derive

log = logging.getLogger(__name__)


def holders(dev: DeviceSample) -> list[tuple[Holder, tuple[ProcessSample, ...]]]:
    """The holders of ``dev`` (nobody-in-particular left out), each with its processes on it,
    in a stable order."""
    units = claim_units(dev)
    if len(units) == 1 and len(units[0].members) == 1:  # the common case: one holder
        holder, procs = units[0].members[0]
        return [(holder, procs)] if any(holder) else []
    found: dict[Holder, list[ProcessSample]] = {}
    for unit in units:
        for holder, procs in unit.members:
            if any(holder):
                mine = found.setdefault(holder, [])
                mine.extend(p for p in procs if p not in mine)
    return sorted(((h, tuple(p)) for h, p in found.items()),
                  key=lambda item: tuple(v or "" for v in item[0]))


def device_activity(dev: DeviceSample) -> tuple[float, str] | None:
    """(percent, what it is) of the device's compute activity, ``None`` when not reported:
    ``compute_active_percent`` (named by its source), else the headline utilization."""
    if dev.compute_active_percent is not None:
        return dev.compute_active_percent, f"compute active, {dev.compute_active_source or 'source unknown'}"
    if dev.utilization_percent is not None:
        return dev.utilization_percent, "utilization; compute activity not reported"
    return None


def _both(rx: float | None, tx: float | None) -> float | None:
    """rx plus tx, what of them is known (``None``: neither)."""
    if rx is None:
        return tx
    return rx if tx is None else rx + tx


def _traffic(dev: DeviceSample, node: NodeActivity) -> tuple[float | None, float | None]:
    """(device interconnect, node InfiniBand) bytes per second, rx plus tx of what is known
    (enough to call traffic busy; :func:`allsmi.hostactivity.quiet.not_quiet` asks for both directions to call it quiet);
    ``None`` unknown."""
    return (_both(dev.interconnect_rx_bytes_per_second, dev.interconnect_tx_bytes_per_second),
            _both(node.infiniband_rx_bytes_per_second, node.infiniband_tx_bytes_per_second))


def _read(procs: Sequence[ProcessSample], host: HostActivity
          ) -> tuple[list[ProcessActivity], int]:
    """(the evidence of each process of ``procs`` once, how many could not be read). A pid
    listed twice is one process; so are pids that are threads of one process (``/proc/TID``
    gives the whole process's figures: counted for each, its reading would be twice)."""
    seen: dict[int, ProcessActivity] = {}
    unread: set[int] = set()
    for p in procs:
        a = host.processes.get(p.pid)
        if a is None:
            unread.add(p.pid)
            continue
        key = a.pid if a.tgid is None else a.tgid
        if key not in seen or a.pid == key:  # (the process's own pid: its main thread's figures)
            seen[key] = a
    return list(seen.values()), len(unread)


def classify_holder(dev: DeviceSample, procs: Sequence[ProcessSample], host: HostActivity,
                    s: ActivitySettings, untold: int = 0, explain: bool = True) -> tuple[str, str]:
    """(reason, evidence) of one holder of ``dev`` with its processes ``procs`` on it;
    ``untold``: processes of the device that belong to none of its holders as far as can be
    told (several pods whose processes carry no job id). Without ``explain``, the evidence of
    a computing holder (the common case) is not written out (``""``)."""
    if dev.processes is None:
        return "unknown", "unknown: the device's processes are not listed"
    if not procs:
        if untold:
            return "unknown", (f"unknown: {plural(untold, 'process')} on the device cannot be "
                               "told apart among its holders")
        return "nothing", "nothing: no process of the holder on the device"
    percent = dev.compute_active_percent  # (device_activity's figure; its words when needed)
    if percent is None:
        percent = dev.utilization_percent
        if percent is None:
            return "unknown", "unknown: the device reports no activity"
    # Computing: the device at or above the threshold, and not every process of the holder
    # at 0 % of it (None: not known to be idle). The loop of an all() written out: a replayed
    # month asks it of a million holders.
    computing = False
    if percent >= s.idle_threshold_percent:
        for p in procs:
            if p.utilization_percent != 0:
                computing = True
                break
    if computing:
        if not explain:
            return "computing", ""
        return "computing", f"computing: {percent:.0f} % ({device_activity(dev)[1]})"  # type: ignore[index]
    what = device_activity(dev)[1]  # type: ignore[index]
    below = f"{percent:.0f} % ({what})"
    seen, unread = _read(procs, host)
    if not seen:
        return "unknown", f"unknown: {below}; the holder's processes could not be read"
    n = len(seen)
    # input: that share of all its processes (one not read is not known to wait)
    blocked = sum(1 for a in seen if in_io_wait(a, s))
    reads = [a.read_bytes_per_second for a in seen]
    read = sum(r for r in reads if r is not None)
    io_pressure = host.node.pressure_percent.get("io")
    extra = f", node I/O pressure {io_pressure:.0f} %" if io_pressure and io_pressure >= 1 else ""
    if (blocked and blocked >= s.input_blocked_fraction * (n + unread)) \
            or read >= s.input_read_bytes_per_second:
        delays = [a.blocked_fraction for a in seen if a.blocked_fraction is not None]
        notes = [f"block-I/O wait up to {max(delays) * 100:.0f} % of the interval"] \
            if delays and max(delays) >= s.input_delay_fraction else []
        notes += [f"{unread} not read"] if unread else []
        how = f" ({'; '.join(notes)})" if notes else ""
        return "input", (f"input: {blocked} of {plural(n + unread, 'process')} in I/O wait{how}, "
                         f"{rate_text(read)} read{extra}; device {below}")
    # communication
    link, ib = _traffic(dev, host.node)
    if link is not None and link >= s.communication_bytes_per_second:
        return "communication", f"communication: device links {rate_text(link)}; device {below}"
    if ib is not None and ib >= s.communication_bytes_per_second:
        return "communication", f"communication: node InfiniBand/RoCE {rate_text(ib)}; device {below}"
    # host
    busy = [a for a in seen if cpu_bound(a) >= s.host_cpu_fraction]
    if busy:
        top = max(busy, key=cpu_bound)
        how = f"{(top.cpu_cores or 0.0) * 100:.0f} % of a core"
        if (top.runnable_fraction or 0.0) > (top.cpu_cores or 0.0):
            how += f", wanting a CPU {top.runnable_fraction * 100:.0f} % of the time"  # type: ignore[operator]
        return "host", f"host: {len(busy)} of {plural(n, 'process')} CPU-bound ({how}); device {below}"
    # the most throttled process, and the cgroup level whose limit throttled it
    share, where = max(((a.throttled_fraction, a.throttled_cgroup or "") for a in seen
                        if a.throttled_fraction is not None), default=(None, ""))
    if share is not None and share >= s.host_throttled_fraction:
        at = f" (at {where})" if where else ""
        return "host", (f"host: cgroup CPU-throttled {share * 100:.0f} % of its "
                        f"CPU-limit periods{at}; device {below}")
    # nothing, when every signal was read and each was quiet
    directions = (dev.interconnect_rx_bytes_per_second, dev.interconnect_tx_bytes_per_second)
    missing = not_quiet(seen, reads, link, ib, host.node, s, blocked, unread, directions)
    if missing:
        return "unknown", f"unknown: {below}; {missing}"
    return "nothing", (f"nothing: {plural(n, 'process')} idle (no I/O wait, "
                       f"{rate_text(read)} read, under {s.quiet_cpu_fraction * 100:.0f} % CPU), "
                       f"no traffic; device {below}")


def classify(dev: DeviceSample, host: HostActivity, s: ActivitySettings,
             memo: dict[tuple[object, ...], HolderWaiting] | None = None,
             known: dict[str, tuple[object, ...]] | None = None, explain: bool = True
             ) -> tuple[HolderWaiting, ...] | None:
    """``dev``'s ``waiting``: one entry per holder, ``None`` when nobody holds it. ``memo``
    keeps the entries already made (the same holder with the same evidence, cycle after
    cycle, is one object, cleaned once); ``known``, each device's holders as last found, made
    again only when its processes (the very objects) or workloads changed. Without
    ``explain``, each entry's evidence is ``""`` (its reason is what a bill books): the same
    holder with the same reason is then one entry for as long as it is in ``memo``."""
    last = known.get(dev.id) if known is not None else None
    if last is not None and last[0] is dev.processes and last[1] == dev.workloads:
        found, untold = last[2], last[3]  # type: ignore[assignment]
    else:
        found = holders(dev)
        mine = {p.pid for _, procs in found for p in procs}
        listed = dev.processes or ()
        # (the holders' processes are the device's: as many pids as processes, none untold)
        untold = 0 if len(mine) == len(listed) else sum(1 for p in listed if p.pid not in mine)
        if known is not None:
            if len(known) >= 4096:
                known.clear()
            known[dev.id] = (dev.processes, dev.workloads, found, untold)
    if not found:
        return None
    out = []
    for holder, procs in found:
        reason, evidence = classify_holder(dev, procs, host, s, untold, explain)
        if not explain:
            evidence = ""
        key = (holder, reason, evidence)
        entry = memo.get(key) if memo is not None else None
        if entry is None:
            entry = HolderWaiting(reason, evidence, user=holder.user, namespace=holder.namespace,
                                  pod=holder.pod, job_id=holder.job)
            if memo is not None:
                if len(memo) >= 4096:
                    memo.clear()
                memo[key] = entry
        out.append(entry)
    return tuple(out)


def holder_pids(devices: Sequence[DeviceSample]) -> set[int]:
    """The processes whose host evidence a cycle needs: those on the devices."""
    return {p.pid for dev in devices for p in (dev.processes or ())}


class HostSource(Protocol):
    """Where a cycle's host evidence comes from: :class:`HostActivitySampler` on a real node,
    the simulation's (:mod:`allsmi.hostactivity.simulated`) under ``--simulate``."""

    def sample(self, pids: Collection[int],
               detailed: Collection[int] | None = None) -> HostActivity: ...


class WaitingClassifier:
    """The collector's step that fills ``DeviceSample.waiting``: the host read once per cycle
    for every holder process, then each held device classified. A failing reader costs the
    classification its evidence (``unknown``, saying why), never the cycle; each distinct
    problem is logged once."""

    explain = True
    """Whether each entry says why (its ``evidence``); ``False`` for a replay into a ledger
    (``allsmi.cli.simulate.bill``), which books each holder's reason and never its evidence: entries
    are then the same objects from one cycle to the next while the reasons are
    (tests/test_replay_invariants.py checks that the ledger is the same, row for row)."""

    def __init__(self, settings: ActivitySettings, source: HostSource | None = None,
                 detail: bool = True) -> None:
        """``detail``: whether ``source`` is told which processes' threads are worth reading
        (a real host's sampler; the simulation's evidence is made whole, and is not)."""
        self.settings = settings
        self.source: HostSource = source if source is not None else HostActivitySampler()
        self.detail = detail
        self._logged: set[str] = set()
        self._memo: dict[tuple[object, ...], HolderWaiting] = {}
        self._holders: dict[str, tuple[object, ...]] = {}
        self.problems: tuple[str, ...] = ()
        """What the host readers could not read in the last cycle (one line each)."""

    @classmethod
    def for_backends(cls, settings: ActivitySettings, backends: Sequence[object],
                     proc_root: str = "/proc") -> "WaitingClassifier":
        """The step for a collector over ``backends``: backends that carry their own host
        evidence (the simulation's ``host_evidence``) are asked for it, so that a simulated
        pid is never looked up in this machine's ``/proc``; otherwise the host is read, its
        processes under ``proc_root`` (``[attribution] proc_root``, as the cgroup source),
        their cgroups on the tree ``[activity] cgroup_root`` names."""
        sources = [getattr(b, "host_evidence") for b in backends
                   if callable(getattr(b, "host_evidence", None))]
        if not sources:
            tree = CgroupTree(proc_root, setting=settings.cgroup_root)
            return cls(settings, HostActivitySampler(proc_root, tree=tree))
        from allsmi.hostactivity.simulated import SimulatedHostActivity
        return cls(settings, SimulatedHostActivity(sources), detail=False)

    def _undecided(self, devices: Sequence[DeviceSample]) -> set[int]:
        """The processes whose evidence :func:`classify_holder` may read: those of devices
        below the idle threshold (or with no activity figure), and elsewhere those reporting
        0 % of their device (a holder all of whose processes do is not computing); the
        others' holders are computing, whatever their host did. A real host's sampler reads
        these processes' threads' states (I/O wait); a source that makes its evidence (the
        simulation's) is asked for these processes only."""
        threshold = self.settings.idle_threshold_percent
        out = set()
        for dev in devices:
            procs = dev.processes
            if not procs:
                continue
            percent = dev.compute_active_percent
            if percent is None:
                percent = dev.utilization_percent
            if percent is None or percent < threshold:
                out.update(p.pid for p in procs)
            else:
                out.update(p.pid for p in procs if p.utilization_percent == 0)
        return out

    def apply(self, devices: Sequence[DeviceSample],
              holders_unknown: Collection[str] = ()) -> tuple[DeviceSample, ...]:
        """``devices`` with ``waiting`` filled in where someone holds them."""
        found = self.reasons(devices, holders_unknown)
        if found is None:
            return tuple(devices)
        return tuple(dev if waiting is None and dev.waiting is None else derive(dev, waiting=waiting)
                     for dev, waiting in zip(devices, found))

    def reasons(self, devices: Sequence[DeviceSample], holders_unknown: Collection[str] = ()
                ) -> list[tuple[HolderWaiting, ...] | None] | None:
        """Each device's ``waiting`` (see :meth:`apply`); ``None`` when the step is off."""
        if not self.settings.enabled or not devices:
            return None
        try:
            if self.detail:
                # threads' states are read where the reason is decided on host evidence
                host = self.source.sample(holder_pids(devices), self._undecided(devices))
            else:
                host = self.source.sample(self._undecided(devices))
        except Exception as exc:  # a reader's bug must not cost the cycle
            log.exception("host activity readers failed")
            host = HostActivity({}, NodeActivity(
                problems=(f"host readers failed: {type(exc).__name__}: {exc}",)))
        problems = list(host.node.problems)
        for activity in host.processes.values():
            if activity.problems:  # (nearly always none: no generator made for them)
                problems.extend(p for p in activity.problems if p not in problems)
        self.problems = tuple(problems)
        for problem in problems:
            key = re.sub(r"\d+", "N", problem)  # one line per kind, not per process
            if key not in self._logged and len(self._logged) < 64:
                self._logged.add(key)
                log.warning("host activity: %s", problem)
        # (a device that neither a process nor a workload holds has no holder: ``None``, what
        # classify gives it, without asking; most devices of a node, most of the time)
        classified = self._classified
        return [None if dev.id in holders_unknown or not (dev.processes or dev.workloads)
                else classified(dev, host) for dev in devices]

    def _classified(self, dev: DeviceSample, host: HostActivity) -> tuple[HolderWaiting, ...] | None:
        """:func:`classify`; a bug of its own costs the device's holders their reason
        (``unknown``, saying so), never the cycle."""
        try:
            return classify(dev, host, self.settings, self._memo, self._holders, self.explain)
        except Exception as exc:
            if "classify" not in self._logged:
                self._logged.add("classify")
                log.exception("waiting classification failed")
            why = f"unknown: the classification failed ({type(exc).__name__}: {exc})"
            return tuple(HolderWaiting("unknown", why, user=h.user, namespace=h.namespace,
                                       pod=h.pod, job_id=h.job) for h, _ in holders(dev)) or None
