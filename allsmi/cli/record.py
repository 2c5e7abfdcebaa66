"""``allsmi record``: keep the accounting ledger without serving HTTP."""

from __future__ import annotations

from typing import Any

import click

from allsmi.cli.common import (build_collector, common_options, ensure_descriptors, fail,
                               log_to_stderr, settings, simulation_speed)
from allsmi.cli.snapshot_run import leave_now
from allsmi.cli.stopsignals import StartupStopped, StopSignals


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
    # first of all: SIGTERM while the backends are built is a clean stop too (stopsignals)
    signals = StopSignals()
    try:
        _record(signals, ledger_path, **opts)
    except StartupStopped:
        click.echo(f"allsmi: {signals.name} while starting: stopped", err=True)
    finally:
        signals.restore()


def _record(signals: StopSignals, ledger_path: str | None, **opts: Any) -> None:
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
    collector = None
    try:
        collector = build_collector(s)
        collector.subscribe(recorder.on_snapshot)
        # SIGHUP too (its terminal closed, an ssh session ended): the interval in progress is
        # written as for SIGTERM, not lost with the process. From here on a signal only stops
        # the wait below (start-up is no longer cut short).
        signals.started()
        click.echo(f"allsmi: recording {ledger.interval_seconds}-second intervals into "
                   f"{ledger.path} (sampling every {s.interval:g} s); stop with SIGTERM or Ctrl-C",
                   err=True)
        collector.start()
        signals.wait()
    finally:
        if collector is not None:
            collector.close()
        recorder.close()
    stuck = collector.stuck
    try:
        _say_what_was_lost(recorder)
    except click.exceptions.Exit as exc:
        if stuck:
            leave_now(exc.exit_code, stuck)
        raise
    if stuck:
        # a backend stuck in a vendor call can hang the interpreter's exit for ever (the
        # library's exit handlers wait for that call): the ledger is closed, leave without it
        leave_now(0, stuck)


def _say_what_was_lost(recorder: Any) -> None:
    """Warn of refused intervals; exit 1 naming the ledger for what it could not take."""
    path = recorder.settings.path
    if recorder.refused_intervals:
        click.echo(f"allsmi: warning: {recorder.refused_intervals} interval(s) were refused: "
                   f"{path} already held time placed there (the wall clock stepped back "
                   "into recorded time, or into time already rolled up and pruned, or time was "
                   "recorded there earlier under a wall clock that was ahead)", err=True)
    if recorder.unwritten or recorder.dropped_intervals:
        raise fail(f"{recorder.unwritten + recorder.dropped_intervals} completed interval(s) could "
                   f"not be written to {path}: {recorder.last_error}", 1)
    if recorder.last_error:
        raise fail(f"recording failed: {recorder.last_error}", 1)
