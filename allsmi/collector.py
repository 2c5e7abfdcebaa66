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
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from allsmi.backend_api import (Backend, BackendError, BackendTimeout, BackendUnavailable,
                                ProbeResult)
from allsmi.config import Config
from allsmi.groups import assign_groups
from allsmi.host import HostSampler
from allsmi.schema import BackendStatus, DeviceSample, Snapshot, derive
from allsmi.worker import SingleFlight

if TYPE_CHECKING:  # imported by whoever builds one (the CLI), not by every collector
    from allsmi.attribution import Attribution, Attributor

log = logging.getLogger(__name__)

#: How long an unavailable backend is left alone before it is probed again.
REPROBE_SECONDS = 60.0


@dataclass(frozen=True)
class _Outcome:
    status: str
    message: str
    devices: tuple[DeviceSample, ...]
    duration: float


class BackendRunner:
    """Owns one backend and the single worker thread that calls it."""

    def __init__(self, backend: Backend, timeout: float,
                 reprobe_seconds: float = REPROBE_SECONDS, inline: bool = False) -> None:
        self.backend = backend
        self.timeout = timeout
        self.reprobe_seconds = reprobe_seconds
        self._flight: SingleFlight[_Outcome] = SingleFlight(
            f"allsmi-backend-{backend.display_name}", self._call, on_exit=self._safe_close,
            inline=inline)
        self._opened = False
        self._unavailable_until = 0.0
        self._phase = ""
        self.probe_result: ProbeResult | None = None
        """The last :meth:`Backend.probe` answer, as the worker thread got it (for ``doctor``)."""

    @property
    def name(self) -> str:
        """The backend's display name."""
        return self.backend.display_name

    def start_call(self) -> bool:
        """Ask the worker for one sample; ``False`` while the previous call still runs."""
        return self._flight.start()

    def busy_for(self) -> float | None:
        """Seconds the current call has been running, or ``None`` when idle."""
        return self._flight.busy_for()

    @property
    def phase(self) -> str:
        """What the worker is doing: ``probe``, ``open``, ``sample`` or ``""`` when idle."""
        return self._phase if self._flight.busy_for() is not None else ""

    def wait(self, deadline: float) -> _Outcome | None:
        """The outcome of the call in flight, or ``None`` if it misses ``deadline`` (monotonic)."""
        return self._flight.wait(deadline)

    def _call(self) -> _Outcome:
        started = time.monotonic()

        def done(status: str, message: str, devices: tuple[DeviceSample, ...] = ()) -> _Outcome:
            return _Outcome(status, message, devices, time.monotonic() - started)

        last = self._flight.last
        if not self._opened and started < self._unavailable_until and last is not None:
            return last  # still unavailable; do not re-probe every cycle
        try:
            if not self._opened:
                self._phase = "probe"
                probe = self.backend.probe()
                self.probe_result = probe
                if not probe.available:
                    self._unavailable_until = started + self.reprobe_seconds
                    return done("unavailable", probe.reason or "not available")
                self._phase = "open"
                self.backend.open()
                self._opened = True
            self._phase = "sample"
            self.backend.warnings = []
            devices = tuple(self.backend.sample())
            return done("ok", "; ".join(self.backend.warnings), devices)
        except BackendUnavailable as exc:
            self._reset()
            self._unavailable_until = started + self.reprobe_seconds
            return done("unavailable", str(exc) or "not available")
        except BackendError as exc:
            if not self._opened:
                self._reset()  # open() failed part-way: release what it started before a retry
            timed_out = isinstance(exc, BackendTimeout) or isinstance(exc.__cause__, TimeoutError)
            return done("timeout" if timed_out else "error", str(exc) or type(exc).__name__)
        except Exception as exc:  # a bug in a backend must not take the others down
            log.exception("backend %s failed", self.name)
            if not self._opened:
                self._reset()
            return done("error", f"internal error: {type(exc).__name__}: {exc}")

    def _reset(self) -> None:
        """Close the backend so that the next call probes and opens it afresh."""
        self._opened = False
        self._safe_close()

    def _safe_close(self) -> None:
        try:
            self.backend.close()
        except Exception:  # close() must never raise, but a third-party one might
            log.exception("closing backend %s failed", self.name)

    def close(self, grace: float = 2.0) -> None:
        """Stop the worker and close the backend; abort a hung call via ``backend.close()``.

        Bounded by about ``2 * grace`` seconds whatever the backend does: see :meth:`finish_close`.
        """
        self.request_close()
        self.finish_close(time.monotonic() + grace, grace)

    def request_close(self) -> None:
        """Tell the worker to stop after its current call (returns at once)."""
        self._flight.request_close()

    def finish_close(self, deadline: float, grace: float = 2.0) -> bool:
        """Wait until ``deadline`` for the worker, then abort a hung call; ``True`` if it stopped.

        A worker still inside a vendor call at ``deadline`` gets ``backend.close()`` called
        from a helper thread (how a backend aborts a hung call: it kills its child process or
        sets its stop event), which is waited for at most ``grace`` more seconds, since
        ``close()`` may block on the same stuck library. A worker stuck in a C call that
        never returns cannot be stopped at all: it is left as a daemon thread and
        :attr:`stuck` says so, so that a command can leave with ``os._exit`` instead of
        waiting for it at interpreter exit.
        """
        thread = self._flight.thread
        if thread is None:
            self._safe_close()
            return True
        thread.join(max(0.0, deadline - time.monotonic()))
        if not thread.is_alive():
            return True
        closer = threading.Thread(target=self._safe_close, daemon=True,
                                  name=f"allsmi-close-{self.name}")
        closer.start()
        closer.join(grace)
        thread.join(0.1 if closer.is_alive() else grace)
        if thread.is_alive():
            log.warning("backend %s did not stop (stuck in %s); its thread is left as a daemon",
                        self.name, self._phase or "a call")
            return False
        return True

    @property
    def stuck(self) -> bool:
        """Whether the worker thread is still alive after :meth:`close` (a call never returned)."""
        thread = self._flight.thread
        return self._flight.closing and thread is not None and thread.is_alive()


SnapshotCallback = Callable[[Snapshot], None]


def _attributed(dev: DeviceSample, result: "Attribution") -> DeviceSample:
    """``dev`` with what the attribution sources say about it and its processes."""
    workloads = result.device_workloads(dev.id)
    processes = dev.processes
    if workloads is None and not result.processes:
        return dev
    if processes and result.processes:
        changed = []
        for proc in processes:
            info = result.process(proc.pid)
            changed.append(derive(proc, job_id=info.job_id, pod_uid=info.pod_uid,
                                  container_id=info.container_id) if info else proc)
        processes = tuple(changed)
    return derive(dev, workloads=workloads, processes=processes)


class Collector:
    """Runs collection cycles over a set of backends; never overlapping."""

    def __init__(self, backends: Sequence[Backend], config: Config | None = None, *,
                 interval_seconds: float | None = None, timeout_seconds: float | None = None,
                 history_size: int | None = None, host_sampler: HostSampler | None = None,
                 attributor: "Attributor | None" = None,
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
        self._history: collections.deque[Snapshot] = collections.deque(
            maxlen=history_size or self.config.history_size)
        self._latest: Snapshot | None = None
        self._cycle_lock = threading.Lock()
        self._group_memo: dict[tuple[object, ...], str] = {}
        """Each device's resource group by its facts (see :func:`assign_groups`)."""
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
            started = time.monotonic()
            asked = {id(r): r.start_call() for r in self.runners}
            statuses: list[BackendStatus] = []
            devices: list[DeviceSample] = []
            for runner in self.runners:
                if not asked[id(runner)]:
                    busy = runner.busy_for() or 0.0
                    phase = runner.phase
                    statuses.append(BackendStatus(
                        runner.name, "timeout",
                        f"previous call{f' ({phase}())' if phase else ''} still running after "
                        f"{busy:.1f} s (timeout {self.timeout:g} s)", None))
                    continue
                outcome = runner.wait(started + self.timeout)
                if outcome is None:
                    phase = runner.phase
                    statuses.append(BackendStatus(
                        runner.name, "timeout",
                        f"no answer within {self.timeout:g} s" + (f" (still in {phase}())" if phase else ""),
                        self.timeout))
                    continue
                statuses.append(BackendStatus(runner.name, outcome.status, outcome.message,
                                              round(outcome.duration, 6)))
                devices.extend(outcome.devices)
            # Sampled last so that its CPU figure covers the cycle just run.
            host = self.host.sample()
            wall = self.clock()
            steady = wall if self.monotonic is self.clock else self.monotonic()
            grouped = assign_groups(devices, host.hostname, self.config, self._group_memo)
            attributed, attribution, unknown = self._attribute(grouped, wall)
            snapshot = Snapshot(timestamp=dt.datetime.fromtimestamp(wall, dt.timezone.utc),
                                monotonic=steady,
                                host=host,
                                devices=attributed,
                                backends=tuple(statuses),
                                attribution=attribution,
                                holders_unknown=unknown)
            self._latest = snapshot
            self._history.append(snapshot)
            self._first.set()
        for callback in list(self._subscribers):
            try:
                callback(snapshot)
            except Exception:
                log.exception("snapshot subscriber failed")
        return snapshot

    def _attribute(self, devices: tuple[DeviceSample, ...], wall: float
                   ) -> tuple[tuple[DeviceSample, ...], tuple[BackendStatus, ...], frozenset[str]]:
        """``devices`` with their workloads and their processes' job/pod/container ids, the
        attribution sources' statuses, and the devices whose holders are unknown this cycle.
        Bounded by the attributor's own timeout; a failure here costs the snapshot its
        attribution (every device's holders unknown), never the snapshot."""
        if self.attributor is None:
            return devices, (), frozenset()
        try:
            result = self.attributor.resolve(devices, now=wall)
            return (tuple(_attributed(dev, result) for dev in devices), tuple(result.statuses),
                    frozenset(result.unknown))
        except Exception as exc:  # resolve() never raises; a bug in it must not cost the cycle
            log.exception("attribution failed")
            return devices, (BackendStatus("attribution", "error",
                                           f"internal error: {type(exc).__name__}: {exc}"),), \
                frozenset(dev.id for dev in devices)

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
        seconds past the cycle in flight; ``False`` when some backend's thread is stuck
        (see :attr:`stuck`)."""
        self._stop.set()
        for runner in self.runners:
            runner.request_close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.timeout + 5)
        deadline = time.monotonic() + grace
        closers = [threading.Thread(target=runner.finish_close, args=(deadline, grace),
                                    daemon=True, name=f"allsmi-closing-{runner.name}")
                   for runner in self.runners]
        if self.attributor is not None:  # closed alongside the backends, within the same grace
            closers.append(threading.Thread(target=self.attributor.close, daemon=True,
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
