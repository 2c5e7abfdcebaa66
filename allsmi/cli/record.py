"""``allsmi record``: keep the accounting ledger without serving HTTP."""

from __future__ import annotations

import signal
import threading
from typing import Any

import click

from allsmi.cli.common import (build_collector, common_options, ensure_descriptors, fail,
                               log_to_stderr, settings, simulation_speed)


@click.command()
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file (default: $ALLSMI_LEDGER, ledger.path, "
                   "$XDG_STATE_HOME/allsmi/ledger.db or /var/lib/allsmi/ledger.db for root).")
@common_options
def record(ledger_path: str | None, **opts: Any) -> None:
    """Record per-device usage into the ledger until SIGTERM or Ctrl-C.

    Every minute (ledger.interval_seconds) of every device is written in one
    transaction; a crash loses at most the minute in progress. Use
    `allsmi export` to turn the ledger into a bill. `allsmi serve --ledger`
    records the same way while serving Prometheus.

    \b
    Examples:
      allsmi record                                   default ledger location
      allsmi record --ledger /var/lib/allsmi/ledger.db --interval 1
      ALLSMI_SIMULATE_SPEED=60 allsmi record --simulate mixed --ledger /tmp/demo.db
    """
    from allsmi.accounting.ledger.store import LedgerError
    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.accounting.settings import ledger_settings
    from allsmi.config import ConfigError

    s = settings(**opts)
    ensure_descriptors()  # before the ledger is opened
    log_to_stderr()
    try:
        ledger = ledger_settings(s.config, path_flag=ledger_path)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    from allsmi.cli.configcheck import check_ledger_gap
    from allsmi.usage import bridged_gap_seconds
    try:
        check_ledger_gap(s.config, ledger.max_gap_seconds, s.interval)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    gap = bridged_gap_seconds(s.interval, ledger.max_gap_seconds, simulation_speed(s.simulate is not None))
    try:
        recorder = LedgerRecorder(ledger.path, s.config, settings=ledger, max_gap_seconds=gap)
    except LedgerError as exc:
        raise fail(str(exc), 1) from None
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    # SIGHUP too (its terminal closed, an ssh session ended): the interval in progress is
    # written as for SIGTERM, not lost with the process
    previous = {sig: signal.signal(sig, on_signal)
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    collector = build_collector(s)
    collector.subscribe(recorder.on_snapshot)
    click.echo(f"allsmi: recording {ledger.interval_seconds}-second intervals into {ledger.path} "
               f"(sampling every {s.interval:g} s); stop with SIGTERM or Ctrl-C", err=True)
    try:
        collector.start()
        while not stop.wait(3600):
            pass
    finally:
        collector.close()
        recorder.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if recorder.refused_intervals:
        click.echo(f"allsmi: warning: {recorder.refused_intervals} interval(s) were refused: "
                   f"{ledger.path} already held time placed there (the wall clock stepped back "
                   "into recorded time, or into time already rolled up and pruned, or time was "
                   "recorded there earlier under a wall clock that was ahead)", err=True)
    if recorder.unwritten or recorder.dropped_intervals:
        raise fail(f"{recorder.unwritten + recorder.dropped_intervals} completed interval(s) could "
                   f"not be written to {ledger.path}: {recorder.last_error}", 1)
    if recorder.last_error:
        raise fail(f"recording failed: {recorder.last_error}", 1)
