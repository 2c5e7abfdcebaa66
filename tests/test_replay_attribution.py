"""A simulated bill's replay asks its simulated pods and jobs directly (no runner, outcome,
status and merge every cycle) while they answer the very same object: each cycle's
attribution is the attributor's, cycle by cycle, across a new answer (a job block's start)
and a source that raises."""

from __future__ import annotations

from allsmi.attribution import build_attributor
from allsmi.attribution.simulated import JOB_HOURS, SimulatedSource
from allsmi.backends.simulated import simulated_backends
from allsmi.cli.simulate.collect import DirectAttributor, ReplayCollector
from allsmi.collection.collector import Collector
from allsmi.config import parse_config
from allsmi.collection.registry import declarations

from .test_replay_cycle import replaying_collector

BLOCK = JOB_HOURS * 3600
#: Twenty minutes before a job block starts: the simulated jobs get new ids in the middle.
T0 = 1_790_000_000.0 // BLOCK * BLOCK + BLOCK - 1200
CYCLES = 40


def _run(kind: type, raising_at: int | None = None, monkeypatch=None
         ) -> tuple[list[tuple[object, ...]], object]:
    """Each cycle's devices' holders and the snapshot's attribution, and the collector."""
    now = [T0]
    collector = replaying_collector(kind, now)
    collect = SimulatedSource.collect
    out = []
    try:
        for cycle in range(CYCLES):
            if cycle == raising_at:
                monkeypatch.setattr(SimulatedSource, "collect", lambda *a: 1 / 0)
            elif raising_at is not None and cycle == raising_at + 1:
                monkeypatch.setattr(SimulatedSource, "collect", collect)
            snapshot = collector.collect_once()
            out.append((tuple((dev.id, dev.workloads, dev.waiting) for dev in snapshot.devices),
                        [(s.name, s.status, s.message) for s in snapshot.attribution],
                        snapshot.holders_unknown, snapshot.claim_conflicts,
                        snapshot.attribution_bad_shares))
            now[0] += 60.0
    finally:
        collector.close()
    return out, collector


def test_a_replay_s_attribution_is_the_attributor_s_cycle_by_cycle() -> None:
    live, _ = _run(Collector)
    replayed, collector = _run(ReplayCollector)
    assert replayed == live
    attributor = collector.attributor  # type: ignore[attr-defined]
    assert isinstance(attributor, DirectAttributor)
    # the first cycle and the job block's first through the attributor, the others directly
    assert attributor.direct == CYCLES - 2
    assert attributor.merges == 2
    jobs = {w.job_id for cycle in live for _, works, _ in cycle[0] for w in works or ()}
    assert len(jobs - {None}) >= 2 * 5  # (five simulated jobs, new ids in the middle)


def test_a_source_that_raises_is_reported_by_the_attributor(monkeypatch) -> None:
    live, _ = _run(Collector, 10, monkeypatch)
    replayed, collector = _run(ReplayCollector, 10, monkeypatch)
    assert replayed == live
    failed = live[10][1]
    assert [status for _, status, _ in failed] == ["error"]
    assert live[11][1][0][1] == "ok"
    assert collector.attributor.direct == CYCLES - 4  # type: ignore[attr-defined]


def test_a_replay_with_faults_asks_the_attributor_itself() -> None:
    now = [T0]
    config = parse_config("")
    collector = ReplayCollector(simulated_backends("mixed", clock=lambda: now[0]), config,
                                clock=lambda: now[0], inline=True, direct=False,
                                attributor=build_attributor(config, simulate=True,
                                                            declarations=declarations(),
                                                            inline=True))
    try:
        assert not isinstance(collector.attributor, DirectAttributor)
        collector.collect_once()
    finally:
        collector.close()
