"""One backend and the single worker thread that calls it (see :class:`BackendRunner`).

The collector keeps one runner per backend: each call runs on the runner's own thread, within
the collector's timeout; a backend that is unavailable is probed again every
:data:`REPROBE_SECONDS`, and one whose vendor is certainly absent gets no thread at all.
"""

from __future__ import annotations

import bisect
import operator
import threading
import time

from allsmi.backend_api import Backend, BackendError, BackendTimeout, BackendUnavailable, ProbeResult
from allsmi.support.lazylog import failed_once, get_logger
from allsmi.schema.records import Record, record
from allsmi.schema import BackendStatus, DeviceSample
from allsmi.support.worker import SingleFlight

log = get_logger(__name__)  # logging imported when first used (allsmi/support/lazylog.py)

#: How long an unavailable backend is left alone before it is probed again.
REPROBE_SECONDS = 60.0


@record
class _Outcome(Record):
    """One call's answer: its status, message, devices and how long it took."""

    status: str
    message: str
    devices: tuple[DeviceSample, ...]
    duration: float


#: What :func:`checked` finds in a well-made sample: DeviceSample objects alone.
_SAMPLES_ONLY = {DeviceSample}


def checked(returned: object, warnings: list[str]) -> tuple[DeviceSample, ...]:
    """What ``sample()`` ``returned``, as the devices a cycle takes: a plug-in's list, tuple or
    generator of them. Whatever is not a :class:`DeviceSample` is left out and said in
    ``warnings`` (the collector's grouping and every consumer read each device's fields); a
    subclass is copied into a DeviceSample (the copies the collector makes know only that
    class). Anything but an iterable of items raises :class:`BackendError` (status ``error``)."""
    if returned is None or isinstance(returned, (str, bytes, dict)):
        raise BackendError(f"sample() returned {type(returned).__name__}, not a list of DeviceSample")
    try:
        devices = tuple(returned)  # type: ignore[call-overload]
    except TypeError:
        raise BackendError(f"sample() returned {type(returned).__name__}, "
                           "not a list of DeviceSample") from None
    if not devices or set(map(type, devices)) == _SAMPLES_ONLY:  # (every cycle: as it is)
        return devices
    kept: list[DeviceSample] = []
    dropped: list[str] = []
    for dev in devices:
        if type(dev) is DeviceSample:
            kept.append(dev)
        elif isinstance(dev, DeviceSample):
            kept.append(DeviceSample(**{name: getattr(dev, name)
                                        for name in DeviceSample.__dataclass_fields__}))
        else:
            dropped.append(type(dev).__name__)
    if dropped:
        warnings.append(f"sample() returned {len(dropped)} item(s) that are not a DeviceSample "
                        f"({', '.join(sorted(set(dropped)))}); left out")
    return tuple(kept)


_ID = operator.attrgetter("id")


def unique_devices(statuses: list[BackendStatus], devices: list[DeviceSample], fresh: list[bool],
                   spans: list[tuple[int, int]]
                   ) -> tuple[list[BackendStatus], list[DeviceSample], list[bool]]:
    """``statuses``, and ``devices`` (with their ``fresh`` flags) without a device whose id is empty or was
    already reported this cycle (by its own backend or an earlier one): the first keeps it,
    as every consumer keys devices by id (a Prometheus series, a ledger row). Each backend
    whose device is left out says so in its status (``statuses[i]``; ``spans``: the index of
    each backend's first device and of its status, in order). Every cycle: one pass over
    the ids, in C, when none clashes."""
    ids = set(map(_ID, devices))
    if len(ids) == len(devices) and "" not in ids:
        return statuses, devices, fresh
    kept: list[DeviceSample] = []
    kept_fresh: list[bool] = []
    owner: dict[str, str] = {}
    notes: dict[int, list[str]] = {}
    starts = [first for first, _ in spans]
    for n, (dev, new) in enumerate(zip(devices, fresh)):
        status = spans[bisect.bisect_right(starts, n) - 1][1]
        name = statuses[status].name
        if dev.id and dev.id not in owner:
            owner[dev.id] = name
            kept.append(dev)
            kept_fresh.append(new)
            continue
        notes.setdefault(status, []).append(
            "a device without an id" if not dev.id else
            f"device id {dev.id!r} " + ("reported twice" if owner[dev.id] == name
                                         else f"already reported by backend {owner[dev.id]}"))
    for status, said in notes.items():
        old = statuses[status]
        message = "; ".join(filter(None, (old.message, f"left out: {', '.join(said)}")))
        statuses[status] = BackendStatus(old.name, old.status, message, old.duration_seconds)
    return statuses, kept, kept_fresh


class BackendRunner:
    """Owns one backend and the single worker thread that calls it."""

    def __init__(self, backend: Backend, timeout: float,
                 reprobe_seconds: float = REPROBE_SECONDS, inline: bool = False) -> None:
        self.backend = backend
        self.timeout = timeout
        self.reprobe_seconds = reprobe_seconds
        self._flight: SingleFlight[_Outcome] = SingleFlight(
            f"allsmi-backend-{backend.display_name}", self._call, on_exit=self._exit,
            inline=inline)
        self._opened = False
        self._unavailable_until = 0.0
        self._phase = ""
        self._sample_here = False
        #: Held while the backend is sampled on the caller's thread (:meth:`wait`); closing it
        #: waits for that sample: a close on the worker (after :meth:`request_close`) while the
        #: collector's thread was inside ``sample()`` freed what the sample was reading.
        self._sampling = threading.RLock()
        self.probe_result: ProbeResult | None = None
        """The last :meth:`Backend.probe` answer, as the worker thread got it (for ``doctor``)."""
        self._failures_said: set[str] = set()  # a bug's line is said once (failed_once)

    @property
    def name(self) -> str:
        """The backend's display name."""
        return self.backend.display_name

    def start_call(self) -> bool:
        """Ask the worker for one sample; ``False`` while the previous call still runs.

        A backend that has no worker thread yet and whose vendor is certainly absent
        (:meth:`Backend.quick_probe`, files and ``PATH`` only) is answered here, on the caller's
        thread, and gets no thread: a machine without that vendor runs none for it."""
        if self._answered_without_worker():
            return True
        flight = self._flight
        if self._opened and not flight.closing and flight.busy_for() is None \
                and self.backend.sample_isolated:
            self._sample_here = True  # called by wait(), on the caller's thread
            return True
        return flight.start()

    def _answered_without_worker(self) -> bool:
        flight = self._flight
        if self._opened or flight.thread is not None or flight.inline or flight.closing:
            return False
        now = time.monotonic()
        if now < self._unavailable_until and flight.last is not None:
            return True  # still unavailable: the last answer stands until the re-probe
        try:
            quick = self.backend.quick_probe()
        except Exception as exc:  # noqa: BLE001 - quick_probe never raises; a plug-in's may
            failed_once(log, self._failures_said,  # then probe() is asked, on its thread
                        f"backend {self.name}: quick_probe failed", exc)
            return False
        if quick is None or quick.available:
            return False
        self.probe_result = quick
        self._unavailable_until = now + self.reprobe_seconds
        return flight.settle(_Outcome("unavailable", quick.reason or "not available", (),
                                      time.monotonic() - now))

    def busy_for(self) -> float | None:
        """Seconds the current call has been running, or ``None`` when idle."""
        return self._flight.busy_for()

    @property
    def phase(self) -> str:
        """What the worker is doing: ``probe``, ``open``, ``sample`` or ``""`` when idle."""
        return self._phase if self._flight.busy_for() is not None else ""

    def wait(self, deadline: float, stop: threading.Event | None = None) -> _Outcome | None:
        """The outcome of the call in flight, or ``None`` if it misses ``deadline`` (monotonic)
        or ``stop`` is set first (:meth:`SingleFlight.wait`).

        A backend whose sample is isolated (:attr:`Backend.sample_isolated`) is sampled here,
        on the caller's thread, within its own timeout: its worker is not woken for it."""
        if self._sample_here:
            self._sample_here = False
            with self._sampling:
                if self._flight.closing:  # asked to close since start_call: not sampled now
                    return _Outcome("unavailable", "closing", (), 0.0)
                outcome = self._call()
            self._flight.settle(outcome)
            return outcome
        if self._flight.thread is None:  # no worker, so no call in flight: the answer stands
            return self._flight.last
        return self._flight.wait(deadline, stop)

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
                if not isinstance(probe, ProbeResult):  # a plug-in's bug: said, not a crash
                    raise BackendError(f"probe() returned {type(probe).__name__}, "
                                       "not a ProbeResult")
                self.probe_result = probe
                if not probe.available:
                    self._unavailable_until = started + self.reprobe_seconds
                    return done("unavailable", probe.reason or "not available")
                self._phase = "open"
                self.backend.open()
                self._opened = True
            self._phase = "sample"
            self.backend.warnings = []
            devices = checked(self.backend.sample(), self.backend.warnings)
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
            failed_once(log, self._failures_said, f"backend {self.name} failed in {self._phase}()",
                        exc)
            if not self._opened:
                self._reset()
            return done("error", f"internal error: {type(exc).__name__}: {exc}")

    def _reset(self) -> None:
        """Close the backend so that the next call probes and opens it afresh."""
        self._opened = False
        self._safe_close()

    def _exit(self) -> None:
        self._phase = "close"  # the worker's last call: a close that hangs is stuck in it
        self._safe_close()

    def _safe_close(self) -> None:
        # Not during a sample on the caller's thread (which the backend bounds by its timeout;
        # past that, closed anyway, as a hung call is aborted by closing).
        held = self._sampling.acquire(timeout=self.timeout + 1.0)
        try:
            self.backend.close()
        except Exception as exc:  # close() must never raise, but a third-party one might
            failed_once(log, self._failures_said, f"closing backend {self.name} failed", exc)
        finally:
            if held:
                self._sampling.release()

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
    def never_ran(self) -> bool:
        """Whether no call ever ran on a worker thread (every answer came from the quick probe,
        on the collector's thread): closing has no thread to wait for and no opened backend
        whose hung call it would abort, so it needs no closing thread of its own."""
        return self._flight.thread is None and not self._flight.inline and not self._opened

    @property
    def stuck(self) -> bool:
        """Whether the worker thread is still alive after :meth:`close` (a call never returned)."""
        thread = self._flight.thread
        return self._flight.closing and thread is not None and thread.is_alive()
