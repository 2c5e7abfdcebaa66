"""What an idle node's attribution does again each cycle (issue 36): a source's kept answer
keeps its status, and the merge of unchanged answers is the last cycle's; any change merges
afresh in the same cycle. Counted, never timed."""

from __future__ import annotations

from dataclasses import replace

from allsmi.attribution import Attributor, SourceResult, SourceUnavailable, Workload
from allsmi.attribution.runner import AttributionSource
from allsmi.schema import ProcessSample

from .helpers import mixed_devices

DEVICES = mixed_devices()


class Absent(AttributionSource):
    name = "kubernetes"
    reprobe_seconds = 60.0

    def __init__(self) -> None:
        self.calls = 0

    def collect(self, devices, now):
        self.calls += 1
        raise SourceUnavailable("no kubelet socket")


class ByProcess(AttributionSource):
    """Names a job for each device that has a process (the cgroup source's shape)."""

    name = "cgroup"
    only_processes = True

    def __init__(self) -> None:
        self.calls = 0

    def collect(self, devices, now):
        self.calls += 1
        return SourceResult({dev.id: (Workload("cgroup", job_id="42"),)
                             for dev in devices if dev.processes})


def test_an_idle_node_merges_once_and_a_change_shows_in_the_same_cycle() -> None:
    absent, procs = Absent(), ByProcess()
    idle = [replace(d, processes=()) for d in DEVICES]
    with Attributor([absent, procs], timeout_seconds=5.0) as attributor:
        first = attributor.resolve(idle)  # no device has a process: the cgroup source is not asked
        attributor.resolve(idle)
        merges = attributor.merges
        later = [attributor.resolve(idle) for _ in range(3)]
        assert (absent.calls, procs.calls) == (1, 0)  # resting, and answered without a call
        assert attributor.merges == merges  # the same answers: the last merge carried
        for result in later:
            assert [s.status for s in result.statuses] == [s.status for s in first.statuses]
            assert all(a is b for a, b in zip(result.statuses, later[0].statuses))
            assert result.device_workloads(idle[0].id) == ()
        assert [s.status for s in later[-1].statuses] == ["unavailable", "ok"]
        # a process appears: asked, merged afresh, the holder shown in this very cycle
        busy = [replace(idle[0], processes=(ProcessSample(pid=7),)), *idle[1:]]
        held = attributor.resolve(busy)
        assert procs.calls == 1 and attributor.merges == merges + 1
        assert held.device_workloads(idle[0].id) == (Workload("cgroup", job_id="42"),)
        # other devices (other ids): merged again as well
        fewer = attributor.resolve(busy[:2])
        assert attributor.merges == merges + 2
        assert set(fewer.workloads or {}) == {d.id for d in busy[:2]}


def test_a_carried_answer_keeps_the_holders_not_the_pids() -> None:
    """A failing source's last answer stands in for it (30 s): its holders, but not what it
    said of each pid, which may be another process's by then (a reused pid was given the
    ended process's job)."""
    from allsmi.attribution import ProcessAttribution, SourceError

    class Flaky(ByProcess):
        def collect(self, devices, now):
            if self.calls:
                raise SourceError("cannot read /proc")
            result = super().collect(devices, now)
            return replace(result, processes={7: ProcessAttribution("42")})

    dev = replace(DEVICES[0], processes=(ProcessSample(pid=7),))
    with Attributor([Flaky()], timeout_seconds=5.0) as attributor:
        assert attributor.resolve([dev]).process(7).job_id == "42"
        carried = attributor.resolve([dev])
    assert carried.statuses[0].status == "error" and "last answered" in carried.statuses[0].message
    assert carried.device_workloads(dev.id) == (Workload("cgroup", job_id="42"),)
    assert carried.process(7) == ProcessAttribution()
