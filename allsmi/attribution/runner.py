"""Runs the attribution sources isolated, like the collector runs backends.

Each source has one worker thread, the only thread that calls it. A cycle
asks every source at once and waits for each until the shared deadline, so
a hung kubelet costs the snapshot at most ``timeout_seconds`` and the other
sources nothing. A source whose previous call is still hung is not asked
again (no pile-up of threads); it reports ``timeout`` until the call
returns. A source that answered ``unavailable`` is not asked again for its
``reprobe_seconds`` (the kubelet source: ``REPROBE_SECONDS``; sources that
only look at a local directory: 0, asked every cycle so that a job directory
made by the first prolog loses nothing); its last answer is reported
meanwhile. Errors become status, never an exception out of :meth:`resolve`.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Sequence

from allsmi.support.lazylog import failed_once, get_logger
from allsmi.schema.records import Record, record
from allsmi.schema import BackendStatus, DeviceSample
from allsmi.support.worker import SingleFlight

from .model import (Attribution, ProcessAttribution, SourceError, SourceResult, SourceTimeout,
                    SourceUnavailable, Workload)

log = get_logger(__name__)  # logging imported when first used (allsmi/support/lazylog.py)

#: How long a source that answered ``unavailable`` is left alone before it is asked again
#: (the collector's schedule for an unavailable backend, ``allsmi.collection.collector.REPROBE_SECONDS``).
REPROBE_SECONDS = 60.0
#: A source that fails or times out: its last good answer stands for this long (seconds since
#: that answer), so a kubelet that hangs now and then does not make held devices look free;
#: after that, the devices it could speak for have unknown holders until it answers again.
CARRY_SECONDS = 30.0
_FAILED = ("error", "timeout")


class AttributionSource(ABC):
    """One way of learning who holds the devices. Subclasses set :attr:`name`."""

    name: str = ""
    #: Seconds to leave the source alone after it answered ``unavailable`` (0: ask every cycle).
    reprobe_seconds: float = 0.0
    #: A pure function of its arguments that cannot hang (the simulation): may run inline.
    pure: bool = False
    #: It reads only the devices' processes (the cgroup source): with no process on any device
    #: its answer is empty, so it is then answered without a call once it has answered ``ok``
    #: (an idle node's cycle hands nothing to its thread).
    only_processes: bool = False

    def absent(self) -> str | None:
        """Why the source is certainly unavailable here, from the file system alone (a missing
        socket or folder: one ``stat``, which cannot hang), or ``None`` when it may be there.
        Asked on the resolving thread while the source has no worker thread yet, so that a
        node without the source never starts one (as a backend's ``quick_probe``)."""
        return None

    @abstractmethod
    def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
        """Who holds ``devices`` at wall time ``now``.

        Raises :class:`SourceUnavailable` when the source is absent here, :class:`SourceError`
        (or :class:`SourceTimeout`) when it is present but failing. Called from one thread only.
        """

    def close(self) -> None:
        """Release what the source holds (a channel); may be called while a call hangs."""


@record
class _Outcome(Record):
    """One call's answer: its status, message, result and how long it took."""

    status: str
    message: str
    result: SourceResult | None
    duration: float


#: The answer of a source that reads only processes when no device has one.
_NOTHING = _Outcome("ok", "", SourceResult(), 0.0)


class SourceRunner:
    """Owns one source and the single worker thread that calls it."""

    def __init__(self, source: AttributionSource, inline: bool = False) -> None:
        self.source, self.reprobe_seconds = source, source.reprobe_seconds
        self._failures_said: set[str] = set()  # a bug's line is said once (failed_once)
        self._unavailable: tuple[float, _Outcome] | None = None
        self._request: tuple[tuple[DeviceSample, ...], float] = ((), 0.0)
        self._flight: SingleFlight[_Outcome] = SingleFlight(
            f"allsmi-attribution-{source.name}", lambda: self._call(*self._request),
            inline=inline and source.pure)

    @property
    def name(self) -> str:
        return self.source.name

    def start_call(self, devices: tuple[DeviceSample, ...], now: float) -> bool:
        """Ask the worker for one answer; ``False`` while the previous call still runs.

        A source that reads only processes (:attr:`AttributionSource.only_processes`), whose
        last answer was ``ok``, is answered here when no device has a process: nothing. Before
        its worker thread exists, a source that says it is :meth:`~AttributionSource.absent`
        is answered here ``unavailable``, and one that reads only processes with none to read,
        ``ok`` and nothing, as its call would have answered."""
        if self._flight.thread is None and not self._flight.inline:
            begun = time.monotonic()
            why = self.source.absent()
            if why is not None:
                if self._flight.settle(_Outcome("unavailable", why, None, time.monotonic() - begun)):
                    return True
            elif self.source.only_processes and not any(dev.processes for dev in devices) \
                    and self._flight.settle(_NOTHING):
                return True
        if self.source.only_processes and not any(dev.processes for dev in devices):
            last = self._flight.last
            if last is not None and last.status == "ok" and self._flight.settle(_NOTHING):
                return True

        def hand_over() -> None:
            self._request = (devices, now)
        return self._flight.start(hand_over)

    def busy_for(self) -> float:
        return self._flight.busy_for() or 0.0

    def resting(self, now: float) -> _Outcome | None:
        """The last ``unavailable`` outcome while the source rests after it (monotonic ``now``)."""
        if self._unavailable is not None and now < self._unavailable[0]:
            return self._unavailable[1]
        return None

    def wait(self, deadline: float) -> _Outcome | None:
        """The outcome of the call in flight, or ``None`` if it misses ``deadline`` (monotonic)."""
        outcome = self._flight.wait(deadline)
        if outcome is not None:
            self._unavailable = ((time.monotonic() + self.reprobe_seconds, outcome)
                                 if outcome.status == "unavailable" and self.reprobe_seconds > 0
                                 else None)
        return outcome

    def _call(self, devices: tuple[DeviceSample, ...], now: float) -> _Outcome:
        started = time.monotonic()

        def done(status: str, message: str, result: SourceResult | None = None) -> _Outcome:
            return _Outcome(status, message, result, time.monotonic() - started)

        try:
            result = self.source.collect(devices, now)
            if not isinstance(result, SourceResult):
                raise TypeError(f"collect() returned {type(result).__name__}, not SourceResult")
            return done("ok", result.message, result)
        except SourceUnavailable as exc:
            return done("unavailable", str(exc) or "not available")
        except SourceTimeout as exc:
            return done("timeout", str(exc) or "timed out")
        except SourceError as exc:
            return done("error", str(exc) or type(exc).__name__)
        except Exception as exc:  # a bug in one source must not take the snapshot down
            failed_once(log, self._failures_said, f"attribution source {self.name} failed", exc)
            return done("error", f"internal error: {type(exc).__name__}: {exc}")

    def close(self, grace: float = 2.0) -> None:
        self._flight.request_close()
        thread = self._flight.thread
        try:
            self.source.close()  # also how a hung call is aborted (a closed gRPC channel)
        except Exception as exc:
            failed_once(log, self._failures_said, f"closing attribution source {self.name} failed",
                        exc)
        if thread is not None:
            thread.join(grace)


class Attributor:
    """Asks every source once per snapshot and merges their answers.

    ``resolve(devices)`` never raises and never takes longer than about ``timeout_seconds``.
    Sources are merged in the order given: when two sources name the same holder of a device
    (the same pod, or the same job id), it is listed once, with the fields of the first source
    that knew them, so that billing never counts a holder twice.
    """

    def __init__(self, sources: Sequence[AttributionSource], timeout_seconds: float = 2.0,
                 inline: bool = False, carry_seconds: float = CARRY_SECONDS,
                 proc_root: str = "/proc") -> None:
        self.timeout = timeout_seconds
        self.proc_root = proc_root
        """Where processes are read (``[attribution] proc_root``): the waiting step's too."""
        self.carry_seconds = carry_seconds
        #: ``inline``: sources that are ``pure`` (the simulation) run in the resolving thread.
        self.runners = [SourceRunner(s, inline) for s in sources]
        self._lock = threading.Lock()
        #: Each source's last good answer and when it came (monotonic).
        self._last: dict[str, tuple[float, SourceResult]] = {}
        self._said: dict[str, tuple[_Outcome, BackendStatus]] = {}
        self._last_merge: tuple[tuple[object, ...], tuple[SourceResult, ...],
                                tuple[BackendStatus, ...], bool | str, Attribution] | None = None
        self.merges = 0
        """Merges made (the rest were the previous cycle's, carried: what a test counts)."""

    @property
    def source_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.runners)

    def resolve(self, devices: Sequence[DeviceSample], now: float | None = None) -> Attribution:
        """Who holds each of ``devices`` (and who each of their processes belongs to)."""
        devices = tuple(devices)
        wall = time.time() if now is None else now
        with self._lock:
            started = time.monotonic()
            resting = {id(r): r.resting(started) for r in self.runners}
            asked = {id(r): resting[id(r)] is None and r.start_call(devices, wall)
                     for r in self.runners}
            statuses: list[BackendStatus] = []
            results: list[SourceResult] = []
            bad_shares: list[tuple[str, str, int]] = []
            blind: bool | str = False
            for runner in self.runners:
                rest = resting[id(runner)]
                if rest is not None:
                    statuses.append(self._status(runner.name, rest))
                    continue
                if not asked[id(runner)]:
                    status = BackendStatus(
                        runner.name, "timeout",
                        f"previous call still running after {runner.busy_for():.1f} s "
                        f"(timeout {self.timeout:g} s)", None)
                else:
                    outcome = runner.wait(started + self.timeout)
                    if outcome is None:
                        status = BackendStatus(runner.name, "timeout",
                                               f"no answer within {self.timeout:g} s", self.timeout)
                    else:
                        status = self._status(runner.name, outcome)
                        if outcome.result is not None:
                            results.append(outcome.result)
                            self._last[runner.name] = (time.monotonic(), _carriable(outcome.result))
                            bad_shares.extend((runner.name, reason, count) for reason, count
                                              in (outcome.result.bad_shares or {}).items())
                status, carried = self._carry(status, results)
                statuses.append(status)
                if status.status in _FAILED and not carried:  # "processes": those devices only
                    blind = blind is True or not runner.source.only_processes or "processes"
        merged = self._merged(devices, results, tuple(statuses), blind)
        return replace(merged, bad_shares=tuple(bad_shares)) if bad_shares else merged

    def _status(self, name: str, outcome: _Outcome) -> BackendStatus:
        """The status of a source's ``outcome``, made once per outcome: one kept from cycle
        to cycle (a source resting after ``unavailable``, one that reads only processes
        answered without a call) keeps its status."""
        said = self._said.get(name)
        if said is None or said[0] is not outcome:
            said = self._said[name] = (outcome, BackendStatus(
                name, outcome.status, outcome.message, round(outcome.duration, 6)))
        return said[1]

    def _merged(self, devices: tuple[DeviceSample, ...], results: list[SourceResult],
                statuses: tuple[BackendStatus, ...], blind: bool | str) -> Attribution:
        """:func:`merge`, or the last cycle's merge when its inputs are the same: the same
        devices (by id; with ``blind == "processes"``, whether each has processes: those are
        the unknown ones), the very same answers and statuses (an idle node's cycle after cycle)."""
        ids = tuple((dev.id,) if blind == "processes" and dev.processes else dev.id for dev in devices)
        last = self._last_merge
        if last is not None and last[0] == ids and last[3] == blind \
                and len(last[1]) == len(results) and all(a is b for a, b in zip(last[1], results)):
            if len(last[2]) == len(statuses) and all(a is b for a, b in zip(last[2], statuses)):
                return last[4]
            # The very same answers with new statuses (a source asked again, as a simulated
            # one is every cycle of a replay): the holders merged stand, the statuses are new.
            prior = last[4]
            works = prior.workloads or {}
            merged = replace(prior, statuses=_with_conflicts(
                statuses, [(dev_id, works[dev_id]) for dev_id in prior.conflicts])
                if prior.conflicts else statuses)
            self._last_merge = (ids, last[1], statuses, blind, merged)
            return merged
        merged = merge(devices, results, statuses, blind)
        self._last_merge = (ids, tuple(results), statuses, blind, merged)
        self.merges += 1
        return merged

    def _carry(self, status: BackendStatus,
               results: list[SourceResult]) -> tuple[BackendStatus, bool]:
        """(a failed source's status, whether its last good answer was added to ``results``:
        while it is at most :attr:`carry_seconds` old; the status message says so)."""
        if status.status not in _FAILED:
            return status, False
        last = self._last.get(status.name)
        if last is None or time.monotonic() - last[0] > self.carry_seconds:
            return status, False
        results.append(last[1])
        age = time.monotonic() - last[0]
        return BackendStatus(status.name, status.status,
                             f"{status.message}; holders as it last answered {age:.0f} s ago",
                             status.duration_seconds), True

    @property
    def never_ran(self) -> bool:
        """Whether no source was ever called (each answered on the resolving thread, or none
        asked): closing then has no call to abort and no thread to wait for."""
        return all(r._flight.thread is None and not r._flight.inline for r in self.runners)

    def close(self) -> None:
        for runner in self.runners:
            runner.close()

    def __enter__(self) -> "Attributor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _carriable(result: SourceResult) -> SourceResult:
    """What of ``result`` may stand in for its source later: its holders, not its processes
    (a pid it named may be another process by then: unknown, never the old one's job)."""
    return replace(result, processes={}) if result.processes else result


def _fill(first: Workload, later: Workload) -> Workload:
    """``first`` with its unknown fields taken from ``later`` (same holder, another source)."""
    values = {name: getattr(first, name) if getattr(first, name) is not None else getattr(later, name)
              for name in ("namespace", "pod", "container", "job_id", "user")}
    return Workload(first.source, **values,
                    share=first.share if first.share is not None else later.share)


def merge(devices: Sequence[DeviceSample], results: Sequence[SourceResult],
          statuses: tuple[BackendStatus, ...], blind: bool | str = False) -> Attribution:
    """The merged :class:`Attribution` of the answers of the sources that answered ``ok`` (or
    are carried). ``blind``: a source failed with nothing to carry, so a device no answer
    names a holder of has unknown holders (``Attribution.unknown``), not none; ``"processes"``:
    only sources that read the devices' processes failed, so only devices with processes."""
    scope = [dev for dev in devices if blind is True or dev.processes] if blind else []
    if not results:
        return Attribution(None, {}, statuses, frozenset(dev.id for dev in scope))
    workloads: dict[str, tuple[Workload, ...]] = {}
    conflicts: list[tuple[str, tuple[Workload, ...]]] = []
    for dev in devices:
        merged: dict[tuple[str, ...], Workload] = {}
        named: dict[tuple[str, ...], set[str]] = {}
        for result in results:
            for work in result.workloads.get(dev.id, ()):
                key = work.key()
                merged[key] = _fill(merged[key], work) if key in merged else work
                named.setdefault(key, set()).add(work.source)
        workloads[dev.id] = tuple(merged.values())
        if len(named) > 1 and len(results) > 1 and _conflicting(named):
            conflicts.append((dev.id, workloads[dev.id]))
    if conflicts:
        statuses = _with_conflicts(statuses, conflicts)
    unknown = frozenset(dev.id for dev in scope if not workloads[dev.id])
    processes: dict[int, ProcessAttribution] = {}
    for result in results:
        for pid, info in result.processes.items():
            old = processes.get(pid)
            processes[pid] = info if old is None else ProcessAttribution(
                old.job_id or info.job_id, old.pod_uid or info.pod_uid,
                old.container_id or info.container_id)
    return Attribution(workloads, processes, statuses, unknown,
                       tuple(dev_id for dev_id, _ in conflicts))


def _conflicting(named: dict[tuple[str, ...], set[str]]) -> bool:
    """Whether two holders of a device come from sources that say nothing of each other (a pod
    from the kubelet, a job from the job-mapping directory): claims no one source vouches for
    together, each billed a part of the device."""
    sources = list(named.values())
    return any(not a & b for i, a in enumerate(sources) for b in sources[i + 1:])


def claimant(work: Workload) -> str:
    """A holder in words: ``kubernetes pod ml/trainer``, ``hpc-job job 1234``."""
    if work.pod is not None:
        return f"{work.source} pod {work.namespace or ''}/{work.pod}"
    if work.job_id is not None:
        return f"{work.source} job {work.job_id}"
    return f"{work.source} user {work.user or '?'}"


def _with_conflicts(statuses: tuple[BackendStatus, ...],
                    conflicts: list[tuple[str, tuple[Workload, ...]]]) -> tuple[BackendStatus, ...]:
    """``statuses`` with each conflict named in the message of every source taking part."""
    involved = {w.source for _, works in conflicts for w in works}
    shown = "; ".join(f"{dev_id} ({', '.join(claimant(w) for w in works)})"
                      for dev_id, works in conflicts[:5])
    more = f"; and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
    note = (f"{len(conflicts)} device(s) claimed by holders of different sources at once, each "
            f"billed a part: {shown}{more}")
    return tuple(BackendStatus(st.name, st.status, f"{st.message}; {note}" if st.message else note,
                               st.duration_seconds) if st.name in involved else st
                 for st in statuses)
