"""What a collection cycle does again only when its inputs changed (issue 36): counted, never
timed."""

from __future__ import annotations

from allsmi.backend_api import Backend, ProbeResult
from allsmi.collector import Collector
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
