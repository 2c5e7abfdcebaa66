"""Billing a simulation: the scenario replayed over a past window into a temporary ledger, which
``allsmi export --simulate`` and ``allsmi idle --simulate`` then read like any other."""

from __future__ import annotations

import math
import time
from typing import Any

from allsmi.cli.reportcmd import Failed


def simulated_ledger(scenario: Any, window: Any, config: Any, directory: str,
                     step: float | None = None, row_seconds: int | None = None) -> str:
    """Replay ``scenario`` over the window (never past now) into a ledger in ``directory``.

    Simulated values are a pure function of time, so any past window can be
    recorded after the fact, exactly as a recorder running then would have. It is
    sampled at the ledger's resolution (one cycle per ledger interval, not per
    second: the bill's totals stay within 0.5 % of a 20 s replay, which
    tests/accounting checks), and the simulated backends and pods are called in this
    thread (``inline``): a pure function needs no worker thread and no deadline.

    The temporary ledger is thrown away when the command ends, so it is kept for the
    window alone: its rows are as long as the window's alignment allows (a quarter hour
    for every ``--period``; the bill counts whole rows, so they must not straddle the
    window's edges), with no checkpoints, no pruning and no fsync. The same recorder
    sums the same samples into fewer rows: the totals are those of one-interval rows.
    ``step`` (seconds between samples) and ``row_seconds`` (a divisor of 900) override both
    choices, as the tests' reference replay does.
    """
    from dataclasses import replace

    from allsmi import registry
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.accounting.settings import ROLLUP_SECONDS, ledger_settings
    from allsmi.attribution import build_attributor
    from allsmi.backends.simulated import simulated_backends
    from allsmi.collector import Collector
    from allsmi.config import ConfigError
    from allsmi.host import HostSampler
    from allsmi.registry import enabled_only
    from allsmi.schema import HostSample

    start = window.start.timestamp()
    end = min(window.end.timestamp(), time.time())
    path = f"{directory}/ledger.db"
    try:  # one cycle per ledger interval, at least 20 s apart
        configured = ledger_settings(config, path_flag=path)
    except ConfigError as exc:
        raise Failed("config", str(exc), 2) from None
    step = step or float(max(20, configured.interval_seconds))
    # Rows as long as both edges of the window allow (a divisor of a quarter hour).
    row = row_seconds or math.gcd(ROLLUP_SECONDS, *(
        int(t) % ROLLUP_SECONDS or ROLLUP_SECONDS for t in (window.start_unix, window.end_unix)))
    scratch_settings = replace(configured, interval_seconds=row, checkpoint_seconds=0,
                               retention_days=None, rollup_retention_days=None)
    now = [start]
    clock = lambda: now[0]  # noqa: E731
    try:
        recorder = LedgerRecorder(path, config, settings=scratch_settings,
                                  max_gap_seconds=3 * step)
        recorder.ledger.scratch()  # deleted on exit: no fsync per interval
        # The simulated pods and jobs (and any real source configured) are billed too.
        attributor = build_attributor(config, simulate=True, declarations=registry.declarations(),
                                      inline=True)
    except ConfigError as exc:
        raise Failed("config", str(exc), 2) from None

    class PastHost(HostSampler):
        """The host of a replayed past: its name (what the ledger records); its CPU and memory
        then are unknown (``None``), not this machine's now, and are not read every cycle."""

        def sample(self) -> HostSample:
            return HostSample(hostname=self.hostname)

    backends = enabled_only(simulated_backends(scenario, clock=clock), config.backends_enabled)
    collector = Collector(backends, config, clock=clock,
                          timeout_seconds=config.backend_timeout_seconds, attributor=attributor,
                          host_sampler=PastHost(), inline=True)
    collector.subscribe(recorder.on_snapshot)
    try:
        while now[0] <= end:
            collector.collect_once()
            now[0] += step
    finally:
        collector.close()
        recorder.close()
    return path
