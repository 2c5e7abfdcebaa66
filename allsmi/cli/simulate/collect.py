"""The collector of a simulated bill's replay (:mod:`allsmi.cli.simulate.bill`): the live collector's
cycle, with the simulated backends and the simulated pods and jobs asked directly."""

from __future__ import annotations

from typing import Any

from allsmi.collection.collector import Collector, attributed_device
from allsmi.schema import BackendStatus, DeviceSample

#: ``object.__setattr__(dev, "workloads", ...)``: the slot's own setter, which it calls.
_SET_WORKLOADS = DeviceSample.workloads.__set__  # type: ignore[attr-defined]


class ReplayCollector(Collector):
    """A collector whose backends are the simulation's: pure functions of time, called in the
    collecting thread (``inline``), which fail only where the scenario has faults.

    With ``direct`` (a scenario without faults), once every backend has answered ``ok``
    through its runner (which probed and opened it), a cycle asks each backend for its sample
    itself: no runner, outcome and status per backend per cycle (ten backends, a month's
    44,640 cycles), and the cycle's statuses are those of that first answer (nothing a replay
    feeds reads them: the recorder books devices). A backend that raises sends the cycle
    through the runners again, which ask every backend afresh (a sample is a pure function of
    the time) and report it as they always did. tests/test_replay_cycle.py checks the devices,
    cycle by cycle, against the runners'.

    With ``direct`` too, a device that a simulated backend hands back as the very object of
    the last cycle (``reuse_samples``) keeps the group and labels set on it then: the
    backends leave them (``grouped_in_place``), and while the attribution and the groups are
    the same objects as the last cycle's, only its workloads (which the backend puts back) are
    set again (:meth:`_completed`)."""

    def __init__(self, *args: Any, direct: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._direct: tuple[list[BackendStatus], list[Any]] | None = None
        self._may_go_direct = direct
        #: The last cycle's attribution, groups, placements, completed devices and their
        #: workloads (see :meth:`_completed`).
        self._done: tuple[Any, Any, Any, tuple[DeviceSample, ...], tuple[Any, ...]] | None = None
        self._carries = False
        if direct:
            for runner in self.runners:
                if hasattr(runner.backend, "grouped_in_place"):
                    runner.backend.grouped_in_place = True  # type: ignore[attr-defined]
                    self._carries = True
            if self.attributor is not None:
                self.attributor = DirectAttributor(self.attributor)  # type: ignore[assignment]

    def sampled(self) -> tuple[list[BackendStatus], list[DeviceSample], list[bool]]:
        direct = self._direct
        if direct is None:
            statuses, devices, fresh = super().sampled()
            backends = [runner.backend for runner in self.runners]
            if self._may_go_direct and len(statuses) == len(backends) \
                    and all(status.status == "ok" for status in statuses) \
                    and all(getattr(backend, "fresh_samples", False) for backend in backends):
                self._direct = (statuses, backends)
            return statuses, devices, fresh
        statuses, backends = direct
        devices: list[DeviceSample] = []
        try:
            for backend in backends:
                devices.extend(backend.sample())
        except Exception:  # (a bug: the runners report it, as for any backend)
            return super().sampled()
        return list(statuses), devices, [True] * len(devices)

    def _attribute(self, devices: list[DeviceSample], groups: list[str], placed: Any,
                   wall: float, fresh: list[bool]) -> Any:
        if not self._carries or self.attributor is None:
            return super()._attribute(devices, groups, placed, wall, fresh)
        try:
            result = self.attributor.resolve(devices, now=wall)
            return (self._completed(devices, groups, placed, fresh, result),
                    tuple(result.statuses), frozenset(result.unknown), result)
        except Exception:  # (a bug: the collector's own cycle reports it, as it always did)
            self._done = None
            return super()._attribute(devices, groups, placed, wall, fresh)

    def _completed(self, devices: list[DeviceSample], groups: list[str], placed: Any,
                   fresh: list[bool], result: Any) -> tuple[DeviceSample, ...]:
        """``devices`` completed as :func:`allsmi.collection.collector.attributed_device` completes them,
        but for a fresh device that is the very object completed the last cycle at its place,
        while ``result`` (the attribution), ``groups`` and ``placed`` (their names and labels)
        are the last cycle's objects and attribute no process: that one still holds the group,
        labels and processes it would be given (its backend leaves them,
        ``grouped_in_place``) and gets its workloads back (its backend put back its own).
        Written out for speed: a month's replay completes 1.8 million devices, nearly all of
        them so. tests/test_replay_carry.py checks the devices against the live collector's."""
        done = self._done
        if done is None or done[0] is not result or done[1] is not groups \
                or done[2] is not placed or result.processes or len(done[3]) != len(devices):
            out = tuple(attributed_device(dev, result, placed[group], new)
                        for dev, group, new in zip(devices, groups, fresh))
        else:
            completed = []
            for dev, old, workloads, group, new in zip(devices, done[3], done[4], groups, fresh):
                if dev is old and new:
                    _SET_WORKLOADS(dev, workloads)
                else:
                    dev = attributed_device(dev, result, placed[group], new)
                completed.append(dev)
            out = tuple(completed)
        self._done = (result, groups, placed, out, tuple([dev.workloads for dev in out]))
        return out


class DirectAttributor:
    """The replay's attribution: an :class:`allsmi.attribution.runner.Attributor` whose sources
    are all ``pure`` (the simulated pods and jobs), asked directly once it has answered ``ok``.

    A pure source answers the very same object for the same devices for hours (a job block, a
    day): while each source does, for the same devices, the cycle's attribution is the last
    one, as merged then (with that cycle's statuses: nothing a replay feeds reads their
    timings), without the runners' calls, outcomes, statuses and merge of every cycle. Any
    other answer, or a source that raises, sends the cycle through the attributor, which asks
    every source afresh (a pure source's answer is a function of its arguments).
    tests/test_replay_cycle.py checks the attributions cycle by cycle against the
    attributor's."""

    def __init__(self, attributor: Any) -> None:
        self.attributor = attributor
        self._sources = [runner.source for runner in attributor.runners] \
            if all(runner.source.pure for runner in attributor.runners) else None
        self._last: tuple[tuple[str, ...], tuple[Any, ...], Any] | None = None
        self.direct = 0
        """Cycles answered directly (what a test counts)."""

    def resolve(self, devices: Any, now: float | None = None) -> Any:
        sources, last = self._sources, self._last
        ids = tuple([dev.id for dev in devices])  # (a list made first: no generator's frames)
        if sources is not None and last is not None and last[0] == ids:
            try:
                answers = tuple(source.collect(devices, now) for source in sources)
            except Exception:  # (a bug: the attributor's runners report it)
                answers = ()
            if len(answers) == len(last[1]) and all(a is b for a, b in zip(answers, last[1])):
                self.direct += 1
                return last[2]
        result = self.attributor.resolve(devices, now=now)
        self._last = None
        if sources is not None and result.statuses \
                and all(status.status == "ok" for status in result.statuses):
            try:  # (the answers just merged: a pure source's, asked again)
                self._last = (ids, tuple(source.collect(devices, now) for source in sources),
                              result)
            except Exception:  # nothing kept: the next cycle goes through the attributor,
                pass  # whose statuses report a source that raises
        return result

    def __getattr__(self, name: str) -> Any:  # (closing, never_ran, merges: the attributor's)
        return getattr(self.attributor, name)
