"""The one sampling loop shared by every consumer.

Each backend is driven by a :class:`BackendRunner`: one worker thread per
backend, the only thread that ever calls into it. A cycle asks every runner
for a sample at once and waits for each until its own deadline, so a hung
vendor call costs the other backends nothing past that timeout. A runner
whose previous call is still hung is not asked again (no pile-up of
threads); it reports ``timeout`` until the call returns. Errors become
backend status, never a crash.

Consumers read :attr:`Collector.latest` (an immutable :class:`Snapshot`), the
bounded :attr:`Collector.history`, or subscribe to be called once per cycle.
"""

from __future__ import annotations

import collections
import datetime as dt
import operator
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from allsmi.backend_api import Backend
from allsmi.collection.backendrunner import REPROBE_SECONDS, BackendRunner, unique_devices
from allsmi.config import Config
from allsmi.collection.groups import group_names
from allsmi.collection.host import HostSampler
from allsmi.support.lazylog import get_logger
from allsmi.schema.samplecopy import field_cleaning, filler
from allsmi.schema import BackendStatus, DeviceSample, Snapshot, derive

__all__ = ["REPROBE_SECONDS", "BackendRunner", "Collector"]  # the runner's names, public here too

if TYPE_CHECKING:  # imported by whoever builds one (the CLI), not by every collector
    from allsmi.attribution import Attribution, Attributor
    from allsmi.schema import HolderWaiting
    from allsmi.collection.waiting import WaitingClassifier

log = get_logger(__name__)  # logging imported when first used (allsmi/support/lazylog.py)

SnapshotCallback = Callable[[Snapshot], None]

#: What a device's resource group depends on (:func:`allsmi.collection.groups.group_names`'s facts; a
#: partition's also on its parent's, which is among the same devices).
_GROUP_FACTS = operator.attrgetter("id", "vendor", "backend", "name", "uuid", "index", "bus_id",
                                   "parent")


class _Unsaid:
    """No attribution this cycle: no conflicting claims, no ignored shares."""

    conflicts: tuple[str, ...] = ()
    bad_shares: tuple[tuple[str, str, int], ...] = ()


_UNSAID = _Unsaid()


def _in_group(dev: DeviceSample, fresh: bool, placed: tuple[Any, dict[str, str]]
              ) -> DeviceSample:
    """``dev`` in its resource group, ``placed`` ((its name, its labels) cleaned: the labels
    copied for this device), with :class:`_Completing`."""
    return _IN_GROUP(dev, fresh, {"resource_group": placed[0], "labels": dict(placed[1])})


def attributed_device(dev: DeviceSample, result: "Attribution",
                      placed: tuple[Any, dict[str, str]], fresh: bool = False) -> DeviceSample:
    """``dev`` in its resource group, ``placed`` (see :func:`_in_group`), and with what the
    attribution sources say about it and its processes: one copy for the cycle's changes, or
    none when the device is ``fresh`` (see :class:`_Completing`; a replay's: simulate.collect)."""
    workloads = result.device_workloads(dev.id)
    processes = dev.processes
    if workloads is None and not result.processes:
        return _in_group(dev, fresh, placed)
    if processes and result.processes:
        changed = []
        for proc in processes:
            info = result.process(proc.pid)
            changed.append(derive(proc, job_id=info.job_id, pod_uid=info.pod_uid,
                                  container_id=info.container_id) if info else proc)
        processes = tuple(changed)
    return _ATTRIBUTED(dev, fresh, {"resource_group": placed[0], "labels": dict(placed[1]),
                                    "workloads": workloads, "processes": processes})


class _Completing:
    """``dev`` with ``changes`` (one set of fields, :attr:`names`): a copy, or, when ``fresh``
    (made this cycle by a backend that keeps nothing of what it returns: ``fresh_samples``),
    ``dev`` itself with them filled in before anyone else sees it, as a copy would have them
    (:func:`allsmi.schema.fill`'s work, its maker for these fields looked up once: the
    collector completes every device every cycle, a replayed month 1.8 million times)."""

    __slots__ = ("names", "_make")

    def __init__(self, *names: str) -> None:
        self.names = names
        self._make: Any = None

    def __call__(self, dev: DeviceSample, fresh: bool, changes: dict[str, Any]) -> DeviceSample:
        if not fresh:
            return derive(dev, **changes)
        make = self._make
        if make is None:  # (the group's name and labels come cleaned: see Collector._groups)
            make = self._make = filler(DeviceSample, self.names,
                                       cleaned=("resource_group", "labels"))
        return make(dev, changes, None)  # type: ignore[no-any-return]


#: A device completed with its resource group and labels; and with what attribution says too.
_IN_GROUP = _Completing("resource_group", "labels")
_ATTRIBUTED = _Completing("resource_group", "labels", "workloads", "processes")


#: ``object.__setattr__(dev, "waiting", ...)``: the slot's own setter, which it calls.
_SET_WAITING = DeviceSample.waiting.__set__  # type: ignore[attr-defined]


def _set_waiting(devices: Sequence[DeviceSample],
                 reasons: Sequence["tuple[HolderWaiting, ...] | None"] | None) -> None:
    """Each device's ``waiting`` set to its ``reasons`` (``None``: the step is off). Only for
    the cycle's own copies of the devices (:func:`attributed_device`'s), which nobody else has
    seen yet: filled in before the snapshot publishes them, as their constructor would."""
    if reasons is not None:
        for dev, waiting in zip(devices, reasons):
            _SET_WAITING(dev, waiting)


class Collector:
    """Runs collection cycles over a set of backends; never overlapping."""

    def __init__(self, backends: Sequence[Backend], config: Config | None = None, *,
                 interval_seconds: float | None = None, timeout_seconds: float | None = None,
                 history_size: int | None = None, host_sampler: HostSampler | None = None,
                 attributor: "Attributor | None" = None,
                 waiting: "WaitingClassifier | None" = None,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] | None = None, inline: bool = False) -> None:
        self.config = config or Config()
        self.clock = clock
        """Wall clock for snapshot timestamps (injectable for accelerated simulation)."""
        self.monotonic: Callable[[], float] = monotonic or (
            time.monotonic if clock is time.time else clock)
        """The clock durations are measured on: ``monotonic`` when given, else
        ``time.monotonic``, or an injected ``clock`` alone (the simulation's, which is derived
        from the monotonic clock and never steps)."""
        self.interval = interval_seconds or self.config.interval_seconds
        self.timeout = timeout_seconds or self.config.backend_timeout_seconds
        self.runners = [BackendRunner(b, self.timeout, inline=inline) for b in backends]
        """With ``inline``, each backend is called in the collecting thread (no worker, no
        timeout): only for backends that cannot hang, such as a simulation being replayed."""
        self.attributor = attributor
        """Who holds each device (allsmi.attribution): asked once per cycle, within its own
        timeout, after the resource groups are assigned; ``None``: no attribution at all."""
        self.host = host_sampler or HostSampler()
        self._waiting = waiting
        """What each holder waited on (allsmi.collection.waiting): run once per cycle after the
        attribution; made from the configuration on first use when not given."""
        self._history: collections.deque[Snapshot] = collections.deque(
            maxlen=history_size or self.config.history_size)
        self._latest: Snapshot | None = None
        self._cycle_lock = threading.Lock()
        self._group_memo: dict[tuple[object, ...], str] = {}  # a group by facts (assign_groups)
        self._last_groups: tuple[object, list[str],
                                 dict[str, tuple[Any, dict[str, str]]]] | None = None
        self.group_assignments = 0
        """Cycles whose resource groups were worked out (the others carried the last ones)."""
        self._said: dict[int, tuple[object, BackendStatus]] = {}
        """Per runner, its last outcome and the status made of it: an outcome kept from cycle
        to cycle (a vendor answered absent until its re-probe) is not made a status again."""
        self._subscribers: list[SnapshotCallback] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first = threading.Event()
        self.cycle_errors = 0
        """Cycles that raised (logged); the loop goes on."""

    # -- reading ---------------------------------------------------------
    @property
    def latest(self) -> Snapshot | None:
        """The most recent snapshot, or ``None`` before the first cycle completes."""
        return self._latest

    @property
    def history(self) -> tuple[Snapshot, ...]:
        """Recent snapshots, oldest first (bounded by ``history_size``)."""
        return tuple(self._history)

    def subscribe(self, callback: SnapshotCallback) -> None:
        """Call ``callback(snapshot)`` after every cycle, on the collector's thread."""
        self._subscribers.append(callback)

    def wait_for_first(self, timeout: float | None = None) -> Snapshot | None:
        """Block until the first snapshot exists (or ``timeout``)."""
        self._first.wait(timeout)
        return self._latest

    # -- collecting ------------------------------------------------------
    def collect_once(self) -> Snapshot:
        """Run one cycle now and return its snapshot. Cycles are serialized."""
        with self._cycle_lock:
            statuses, devices, fresh = self.sampled()
            # Sampled last so that its CPU figure covers the cycle just run.
            host = self.host.sample()
            wall = self.clock()
            steady = wall if self.monotonic is self.clock else self.monotonic()
            groups, labels = self._groups(devices, host.hostname)
            attributed, attribution, unknown, said = self._attribute(devices, groups, labels,
                                                                     wall, fresh)
            if any(dev.processes or dev.workloads for dev in attributed):  # someone holds one
                _set_waiting(attributed, self.waiting.reasons(attributed, unknown))
            snapshot = Snapshot(timestamp=dt.datetime.fromtimestamp(wall, dt.timezone.utc),
                                monotonic=steady,
                                host=host,
                                devices=attributed,
                                backends=tuple(statuses),
                                attribution=attribution,
                                holders_unknown=unknown,
                                claim_conflicts=frozenset(said.conflicts),
                                attribution_bad_shares=said.bad_shares)
            self._latest = snapshot
            self._history.append(snapshot)
            self._first.set()
        for callback in list(self._subscribers):
            try:
                callback(snapshot)
            except Exception:
                log.exception("snapshot subscriber failed")
        return snapshot

    def sampled(self) -> tuple[list[BackendStatus], list[DeviceSample], list[bool]]:
        """One cycle's asking of every runner (see :meth:`collect_once`): each backend's
        status, the devices they returned, and whether each device is fresh (made this cycle
        by a backend that keeps nothing of what it returns: ``fresh_samples``). A replay
        overrides it (``allsmi.cli.simulate.bill``)."""
        started = time.monotonic()
        asked = {id(r): r.start_call() for r in self.runners}
        statuses: list[BackendStatus] = []
        devices: list[DeviceSample] = []
        fresh: list[bool] = []
        spans: list[tuple[int, int]] = []  # each answer's first device and its status
        for runner in self.runners:
            if not asked[id(runner)]:
                busy, phase = runner.busy_for() or 0.0, runner.phase
                statuses.append(BackendStatus(
                    runner.name, "timeout",
                    f"previous call{f' ({phase}())' if phase else ''} still running after "
                    f"{busy:.1f} s (timeout {self.timeout:g} s)", None))
                continue
            outcome = runner.wait(started + self.timeout, self._stop)  # (not past close())
            if outcome is None:
                why = "before the collector closed" if self._stop.is_set() else f"within {self.timeout:g} s"
                phase = runner.phase
                statuses.append(BackendStatus(runner.name, "timeout", f"no answer {why}" + (
                    f" (still in {phase}())" if phase else ""), self.timeout))
                continue
            said = self._said.get(id(runner))
            if said is None or said[0] is not outcome:  # a new answer (not one kept)
                said = self._said[id(runner)] = (outcome, BackendStatus(
                    runner.name, outcome.status, outcome.message, round(outcome.duration, 6)))
            statuses.append(said[1])
            spans.append((len(devices), len(statuses) - 1))
            devices.extend(outcome.devices)
            # a backend whose samples are new each cycle and kept by nobody (the simulation)
            fresh.extend([getattr(runner.backend, "fresh_samples", False)] * len(outcome.devices))
        return unique_devices(statuses, devices, fresh, spans)  # an id that clashes: left out

    @property
    def waiting(self) -> "WaitingClassifier":
        """The waiting classification step (its settings from ``[activity]``; a bad table
        raises ``ConfigError`` here, which the CLI checks before starting)."""
        if self._waiting is None:  # imported on first need: a node with no holder never pays
            from allsmi.hostactivity.settings import activity_settings
            from allsmi.collection.waiting import WaitingClassifier
            self._waiting = WaitingClassifier.for_backends(
                activity_settings(self.config), [r.backend for r in self.runners],
                getattr(self.attributor, "proc_root", "/proc"))
        return self._waiting

    def _groups(self, devices: list[DeviceSample], hostname: str
                ) -> tuple[list[str], dict[str, tuple[Any, dict[str, str]]]]:
        """Each device's resource group (:func:`group_names`) and each group's name and labels
        as a sample holds them (cleaned here, once per group: each device is then given its
        own copy of the labels): the last cycle's when every device's facts that rules match
        on are the same (an idle node's cycle after cycle); worked out afresh when any is
        not."""
        facts = (hostname, tuple(map(_GROUP_FACTS, devices)))
        last = self._last_groups
        if last is not None and last[0] == facts:
            return last[1], last[2]
        groups = group_names(devices, hostname, self.config, self._group_memo)
        name, labels = (field_cleaning(DeviceSample, f) for f in ("resource_group", "labels"))
        placed = {group: (name(group), labels(self.config.group(group).labels))
                  for group in set(groups)}
        self._last_groups = (facts, groups, placed)
        self.group_assignments += 1
        return groups, placed

    def _attribute(self, devices: list[DeviceSample], groups: list[str],
                   placed: dict[str, tuple[Any, dict[str, str]]], wall: float, fresh: list[bool]
                   ) -> tuple[tuple[DeviceSample, ...], tuple[BackendStatus, ...], frozenset[str],
                              "Attribution | _Unsaid"]:
        """``devices`` in their resource ``groups`` (each group's name and labels as
        :meth:`_groups` ``placed`` them, the labels copied for each device), with their
        workloads and their processes' job/pod/container ids, the attribution sources'
        statuses, the devices whose holders are unknown this cycle, and the attribution
        itself (its conflicts and ignored shares, for the snapshot); copies of them, except
        those ``fresh`` (:class:`_Completing`). Bounded by the attributor's own timeout; a
        failure here costs the snapshot its attribution (every device's holders unknown),
        never the snapshot."""
        if self.attributor is None:
            return tuple(_in_group(dev, new, placed[group])
                         for dev, group, new in zip(devices, groups, fresh)), (), frozenset(), \
                _UNSAID
        try:
            result = self.attributor.resolve(devices, now=wall)
            return (tuple(attributed_device(dev, result, placed[group], new)
                          for dev, group, new in zip(devices, groups, fresh)),
                    tuple(result.statuses), frozenset(result.unknown), result)
        except Exception as exc:  # resolve() never raises; a bug in it must not cost the cycle
            log.exception("attribution failed")
            return tuple(_in_group(dev, new, placed[group])
                         for dev, group, new in zip(devices, groups, fresh)), \
                (BackendStatus("attribution", "error",
                               f"internal error: {type(exc).__name__}: {exc}"),), \
                frozenset(dev.id for dev in devices), _UNSAID

    def start(self) -> None:
        """Collect in a background thread every ``interval`` seconds until :meth:`close`."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, daemon=True, name="allsmi-collector")
        self._thread.start()

    def _loop(self) -> None:
        next_due = time.monotonic()
        while not self._stop.is_set():
            try:
                self.collect_once()
            except Exception:  # the loop must outlive any one bad cycle, loudly
                self.cycle_errors += 1
                log.exception("collection cycle failed; collecting again next interval")
            next_due += self.interval
            now = time.monotonic()
            if next_due < now:  # a slow cycle: skip missed slots rather than bunch up
                next_due = now + self.interval
            self._stop.wait(next_due - now)

    def close(self) -> None:
        """Stop the loop and close every backend. Idempotent."""
        self.close_within(2.0)

    def close_within(self, grace: float) -> bool:
        """Stop the loop and close every backend at once, bounded by about ``2 * grace``
        seconds past the cycle in flight (which waits for a backend no more than a few seconds
        once closing: ``SingleFlight.wait``); ``False`` when some backend's thread is stuck
        (see :attr:`stuck`)."""
        self._stop.set()
        # The cycle in flight ends first, with every backend still open (a backend closed under
        # it gave that last cycle, which the ledger books, a half-read sample).
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.timeout + 5)
        for runner in self.runners:
            runner.request_close()
        deadline = time.monotonic() + grace
        ran = [runner for runner in self.runners if not runner.never_ran]
        for runner in self.runners:
            if runner.never_ran:  # an absent vendor's: nothing opened, nothing to wait for
                runner.finish_close(deadline, grace)
        attributor = self.attributor
        if attributor is not None and getattr(attributor, "never_ran", False):
            attributor.close()  # no source opened anything (a node without them)
            attributor = None
        if len(ran) == 1 and attributor is None:
            # One backend to close (a one-shot snapshot of one vendor's machine): here, as
            # bounded as on a thread of its own (finish_close gives up after about 2 * grace).
            ran[0].finish_close(deadline, grace)
            return not self.stuck
        closers = [threading.Thread(target=runner.finish_close, args=(deadline, grace),
                                    daemon=True, name=f"allsmi-closing-{runner.name}")
                   for runner in ran]
        if attributor is not None:  # closed alongside the backends, within the same grace
            closers.append(threading.Thread(target=attributor.close, daemon=True,
                                            name="allsmi-closing-attribution"))
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join(grace * 2 + 1)
        return not self.stuck

    @property
    def stuck(self) -> list[str]:
        """Backends whose thread is still inside a vendor call after :meth:`close`."""
        return [runner.name for runner in self.runners if runner.stuck]

    def __enter__(self) -> "Collector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
