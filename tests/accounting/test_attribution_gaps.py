"""Issue 19 item 6: a kubelet that hangs 4 s of every 10 s never makes a held device look free.

A real gRPC pod-resources server (tests/attribution/helpers.py) made to hang, the real
``KubeletSource`` and ``Attributor``, the collector on an injected clock (one simulated second a
cycle), the recorder and ``allsmi export``: one pod holds the GPU for the whole 59 s (no process
on it: an allocated, idle pod). With the last answer carried (the default), all 59 s are
allocated; with nothing carried, the hung time's allocation is unknown, never booked as
unallocated, and the export's ``attribution_coverage_ratio`` shows the gap.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("grpc")

from allsmi.accounting.recorder import LedgerRecorder  # noqa: E402
from allsmi.attribution import Attributor  # noqa: E402
from allsmi.collection import registry  # noqa: E402
from allsmi.attribution.kubernetes import KubeletSource  # noqa: E402
from allsmi.attribution.settings import AttributionSettings  # noqa: E402
from allsmi.collection.collector import Collector  # noqa: E402
from allsmi.config import parse_config  # noqa: E402
from allsmi.schema import DeviceSample  # noqa: E402

from ..attribution.helpers import PodResourcesServer, pod  # noqa: E402
from .helpers import Clocks, SteadyBackend, export_first_hour, rows  # noqa: E402

UUID = "GPU-11111111-2222-3333-4444-555555555555"
#: One idle GPU that lists no process.
GPU = DeviceSample(id=UUID, uuid=UUID, vendor="nvidia", kind="gpu", backend="steady", index=0,
                   name="Steady GPU", health="ok", utilization_percent=0.0, power_watts=100.0,
                   processes=())


def _record(db: Path, carry: float | None) -> LedgerRecorder:
    server = PodResourcesServer()
    server.pods = [pod("ml", "trainer", {"main": [("nvidia.com/gpu", [UUID])]})]
    clocks = Clocks()
    kw = {} if carry is None else {"carry_seconds": carry}
    # The resource names come from the backends' declarations, as the CLI hands them in.
    settings = AttributionSettings.declared(registry.declarations())
    attributor = Attributor([KubeletSource(server.socket, settings, timeout_seconds=5)], 0.2, **kw)
    config = parse_config("")
    collector = Collector([SteadyBackend([GPU])], config, interval_seconds=1.0,
                          clock=clocks.wall, monotonic=clocks.monotonic, attributor=attributor)
    recorder = LedgerRecorder(db, config)
    collector.subscribe(recorder.on_snapshot)
    try:
        for t in range(60):
            if t % 10 == 6:  # the kubelet hangs for 4 cycles
                server.hang()
            elif t % 10 == 0:
                server.mode = "answer"
                server.release()
            collector.collect_once()
            clocks.steady += 1.0
    finally:
        server.release()
        collector.close()
        recorder.close()
        server.stop()
    assert recorder.unwritten == 0 and recorder.last_error is None
    return recorder


def test_a_hanging_kubelet_is_carried_for_a_bounded_time(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    _record(db, None)
    ((observed, allocated, attributed),) = rows(
        db, "SELECT SUM(observed_ms), SUM(allocated_ms), SUM(attributed_ms) FROM intervals")
    assert observed == 59_000
    assert allocated == 59_000, "held by the pod all along, as the kubelet said before it hung"
    assert attributed == 59_000
    row = export_first_hour(tmp_path, db)
    assert row["allocated_device_hours"] == pytest.approx(59 / 3600, abs=1e-6)
    assert row["attribution_coverage_ratio"] == 1.0


@pytest.mark.alone  # an answering kubelet must answer within the 0.2 s deadline of each cycle
def test_without_a_carried_answer_the_hung_time_is_unknown_not_unallocated(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    _record(db, 0.0)
    ((observed, allocated, attributed),) = rows(
        db, "SELECT SUM(observed_ms), SUM(allocated_ms), SUM(attributed_ms) FROM intervals")
    assert observed == 59_000
    # 36 cycles answer, 24 hang; an answering cycle that misses its 0.2 s deadline on a loaded
    # machine is unknown too (18 of 36 were once): at least some answered, never all
    assert 10_000 <= attributed <= 45_000, "some cycles hung: their holders are unknown"
    assert allocated == attributed, "every second whose holders were known was held"
    row = export_first_hour(tmp_path, db)
    assert row["allocated_device_hours"] == pytest.approx(attributed / 3.6e6, abs=1e-6)
    assert row["attribution_coverage_ratio"] == pytest.approx(attributed / observed, abs=1e-6)
    assert row["attribution_coverage_ratio"] < 0.8
