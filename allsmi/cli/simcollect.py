"""The collector of a simulated bill's replay (:mod:`allsmi.cli.simbill`): the live collector's
cycle, with the simulated backends asked for their samples directly."""

from __future__ import annotations

from typing import Any

from allsmi.collector import Collector
from allsmi.schema import BackendStatus, DeviceSample


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
    cycle by cycle, against the runners'."""

    def __init__(self, *args: Any, direct: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._direct: tuple[list[BackendStatus], list[Any]] | None = None
        self._may_go_direct = direct

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
