"""What a collection cycle does again only when its inputs changed (issue 36): counted, never
timed."""

from __future__ import annotations

import pytest

from allsmi.backend_api import Backend, ProbeResult
from allsmi.collection.collector import Collector
from allsmi.schema import DeviceSample


class _Absent(Backend):
    """A vendor certainly absent (answered on the collector's thread, re-probed later)."""

    name = "absent"
    vendor = "amd"

    def __init__(self) -> None:
        super().__init__()
        self.quick = 0

    def quick_probe(self) -> ProbeResult | None:
        self.quick += 1
        return ProbeResult(False, "no AMD GPU here")

    def probe(self) -> ProbeResult:  # never reached: the quick probe answers
        raise AssertionError("probe() called")

    def open(self) -> None:
        raise AssertionError("open() called")

    def sample(self) -> list[DeviceSample]:
        raise AssertionError("sample() called")


class _One(Backend):
    name = "one"
    vendor = "nvidia"

    def __init__(self) -> None:
        super().__init__()
        self.message = ""

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> list[DeviceSample]:
        if self.message:
            self.warnings.append(self.message)
        return [DeviceSample(id="GPU-0", vendor="nvidia", kind="gpu", backend=self.name,
                             health="ok", utilization_percent=5.0)]


def test_an_unchanged_answer_keeps_its_status_and_a_new_one_shows_at_once() -> None:
    absent, one = _Absent(), _One()
    collector = Collector([absent, one], interval_seconds=1.0, timeout_seconds=5.0)
    try:
        first = collector.collect_once()

        def unwaited(deadline: float) -> None:
            raise AssertionError("a runner without a worker has no call to wait for")

        collector.runners[0]._flight.wait = unwaited  # type: ignore[method-assign]
        second = collector.collect_once()
        assert absent.quick == 1  # asked once, then its answer stands until the re-probe
        by_name = {s.name: s for s in second.backends}
        assert by_name["absent"] == first.backends[0]
        assert by_name["absent"].status == "unavailable"
        assert by_name["absent"].message == "no AMD GPU here"
        assert by_name["absent"] is {s.name: s for s in first.backends}["absent"]  # made once
        # the sampled backend's answer is new every cycle: its status is too, and says so
        one.message = "GPU 0: something changed"
        third = collector.collect_once()
        status = {s.name: s for s in third.backends}["one"]
        assert status.message == "GPU 0: something changed"
        assert status is not {s.name: s for s in second.backends}["one"]
        # a re-probe's new answer is a new status in the same cycle
        collector.runners[0]._unavailable_until = 0.0
        fourth = collector.collect_once()
        assert absent.quick == 2
        assert {s.name: s for s in fourth.backends}["absent"] is not by_name["absent"]
    finally:
        collector.close()


def _nvidia_collector(monkeypatch, gpus):
    from allsmi.backends.nvidia import NvidiaBackend
    from tests.backends.nvml_fake import FakeNvml
    FakeNvml(gpus).install(monkeypatch)
    backend = NvidiaBackend(process_owner=lambda pid: (None, None), timeout_seconds=1.0)
    return backend, Collector([backend], interval_seconds=1.0, timeout_seconds=1.5)


def test_an_isolated_backend_is_sampled_on_the_collectors_thread_its_reads_on_its_pool(
        monkeypatch) -> None:
    """Once open, the NVIDIA backend (whose reads run on its own reader pool, each within the
    timeout) is sampled on the collector's thread: its worker is not woken each cycle. The
    GPU reads themselves stay off the collector's thread."""
    import threading

    import pynvml

    from tests.backends.nvml_fake import FakeGpu
    backend, collector = _nvidia_collector(
        monkeypatch, [FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(4)])
    sampled_on: list[int] = []
    read_on: list[int] = []
    real_sample = backend.sample
    real_util = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetUtilizationRates")
    returned: list[list[DeviceSample]] = []

    def sample():
        sampled_on.append(threading.get_ident())
        returned.append(list(real_sample()))
        return returned[-1]

    def util(*args):  # the library's entry point, as the backend calls it
        read_on.append(threading.get_ident())
        return real_util(*args)

    monkeypatch.setattr(backend, "sample", sample)
    monkeypatch.setitem(pynvml._nvmlGetFunctionPointer_cache, "nvmlDeviceGetUtilizationRates", util)
    try:
        first = collector.collect_once()  # probe and open: on the backend's worker
        assert [d.health for d in first.devices] == ["ok"] * 4
        worker = collector.runners[0]._flight.thread
        assert worker is not None and sampled_on == [worker.ident]
        for _ in range(3):
            snap = collector.collect_once()
            assert [d.health for d in snap.devices] == ["ok"] * 4
            assert snap.backends[0].status == "ok"
            # the backend's samples are made fresh each cycle: completed in place, not copied
            assert all(a is b for a, b in zip(snap.devices, returned[-1]))
            assert all(d.resource_group for d in snap.devices)
        me = threading.get_ident()
        assert sampled_on[1:] == [me] * 3
        assert me not in read_on and len(read_on) == 16
    finally:
        collector.close()


def test_a_hung_gpu_still_costs_the_collector_no_more_than_its_timeout(monkeypatch) -> None:
    """Sampled on the collector's thread, a GPU that hangs is still reported as not answering
    within the backend's timeout, the other GPUs read, and the next cycle comes."""
    import time

    from tests.backends.nvml_fake import FakeGpu
    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(3)]
    backend, collector = _nvidia_collector(monkeypatch, gpus)
    try:
        collector.collect_once()
        gpus[1].stall_s = 5.0
        started = time.monotonic()
        snap = collector.collect_once()
        assert time.monotonic() - started < 4  # bounded by the 1 s timeout, not the 5 s stall
        health = [d.health for d in snap.devices]
        assert health[0] == health[2] == "ok" and health[1] == "unknown"
        assert "did not answer" in snap.backends[0].message
        gpus[1].stall_s = 0.0
    finally:
        collector.close()


def test_groups_are_worked_out_again_only_when_the_devices_facts_change() -> None:
    from allsmi.config import parse_config

    class Named(_One):
        def __init__(self) -> None:
            super().__init__()
            self.names = ["Alpha", "Alpha"]

        def sample(self) -> list[DeviceSample]:
            return [DeviceSample(id=f"GPU-{i}", vendor="nvidia", kind="gpu", backend=self.name,
                                 index=i, name=name, health="ok", utilization_percent=5.0 * i)
                    for i, name in enumerate(self.names)]

    config = parse_config('[[rules]]\nmodel = "Beta"\nresource_group = "beta"\n\n'
                          '[groups.beta]\nlabels = { team = "b" }\n')
    backend = Named()
    collector = Collector([backend], config, interval_seconds=1.0, timeout_seconds=5.0)
    try:
        snaps = [collector.collect_once() for _ in range(4)]
        assert collector.group_assignments == 1  # the same facts: carried
        for snap in snaps:
            assert [d.resource_group for d in snap.devices] == [config.default_group] * 2
            assert [d.utilization_percent for d in snap.devices] == [0.0, 5.0]
        backend.names = ["Alpha", "Beta"]  # a fact a rule matches on changes
        snap = collector.collect_once()
        assert collector.group_assignments == 2
        assert [d.resource_group for d in snap.devices] == [config.default_group, "beta"]
        assert dict(snap.devices[1].labels) == {"team": "b"}
        collector.collect_once()
        assert collector.group_assignments == 2
    finally:
        collector.close()


@pytest.mark.parametrize("fresh", [False, True])
def test_a_group_s_name_and_labels_are_cleaned_once_per_assignment_each_device_its_own_labels(
        fresh: bool) -> None:
    """The collector cleans each group's name and labels when it works the groups out, as the
    sample's own cleaning does, and gives every device a labels dictionary of its own: a copy
    (derive) or a sample filled in (a fresh backend's), the same."""
    from allsmi.schema import text
    from allsmi.config import parse_config

    class Three(_One):
        fresh_samples = fresh

        def sample(self) -> list[DeviceSample]:
            return [DeviceSample(id=f"GPU-{i}", vendor="nvidia", kind="gpu", backend=self.name,
                                 index=i, name="H100", health="ok") for i in range(3)]

    from dataclasses import replace
    long = "y" * 300
    parsed = parse_config('[[rules]]\nmodel = "H100"\nresource_group = "beta"\n\n'
                          '[groups.beta]\nlabels = { team = "b", other = "v" }\n')
    # A group name and label values a config file may not hold (refused there:
    # tests/test_cli_errors.py), as a scenario or a future source could hand them over: the
    # collector still cleans them.
    group = "beta\x1b[2J\u202e" + "x" * 300
    hostile = {"team": f"b\u0007{long}", "other": "v\u001b"}
    config = replace(parsed, rules=tuple(replace(r, resource_group=group) for r in parsed.rules),
                     groups={group: replace(parsed.groups["beta"], name=group, labels=hostile)})
    raw_labels = dict(config.group(group).labels)
    collector = Collector([Three()], config, interval_seconds=1.0, timeout_seconds=5.0)
    try:
        for _ in range(3):
            devices = collector.collect_once().devices
            assert [d.resource_group for d in devices] == [text.clean_optional(group)] * 3
            assert all(d.labels == text.clean_mapping(raw_labels) for d in devices)
            assert len({id(d.labels) for d in devices} | {id(config.group(group).labels)}) == 4
        assert collector.group_assignments == 1
        devices[0].labels["team"] = "changed"  # type: ignore[index]
        assert devices[1].labels == text.clean_mapping(raw_labels)
        assert dict(config.group(group).labels) == raw_labels
        assert collector.collect_once().devices[0].labels == text.clean_mapping(raw_labels)
    finally:
        collector.close()
