"""``allsmi export``: the billing export, from the ledger or from Prometheus.

Exit statuses: 0 complete; 3 written, but coverage below the threshold; 1 the
source could not be read or the file not written; 2 bad options or config.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import click

from allsmi.cli.common import fail, settings

EXIT_INCOMPLETE = 3
EXIT_ERROR = 1


@click.command()
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Ledger file to read (default: $ALLSMI_LEDGER, ledger.path, "
                   "$XDG_STATE_HOME/allsmi/ledger.db or /var/lib/allsmi/ledger.db for root).")
@click.option("--prometheus", "prometheus_url", metavar="URL", default=None,
              help="Compute the export with PromQL from this Prometheus server instead "
                   "(config: export.prometheus).")
@click.option("--period", metavar="PERIOD", default=None,
              help="yesterday, today, last-month, this-month, YYYY-MM or YYYY-MM-DD.")
@click.option("--since", metavar="TIME", default=None,
              help="Window start, ISO 8601 (e.g. 2026-03-01 or 2026-03-01T06:00:00Z).")
@click.option("--until", metavar="TIME", default=None,
              help="Window end (exclusive), ISO 8601; default: now.")
@click.option("--tz", "tz_name", metavar="ZONE", default=None,
              help="Time zone of periods and of times without an offset (default UTC; "
                   "config: export.tz).")
@click.option("--group-by", "group_by", metavar="KEYS", default=None,
              help="Comma-separated: resource_group, vendor, model, host, user "
                   "(default: resource_group,vendor,model,host).")
@click.option("--format", "output_format", type=click.Choice(("csv", "json", "focus")), default=None,
              help="csv (default), json, or focus (FinOps FOCUS columns).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write to FILE atomically (owner-only) instead of stdout.")
@click.option("--coverage-threshold", type=click.FloatRange(0.0, 1.0), default=None,
              help="Exit 3 when observed/expected device time is below this (default 0.95).")
@click.option("--textfile", type=click.Path(dir_okay=False), default=None,
              help="Also write the run's status for node_exporter's textfile collector.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (prices, groups, [ledger] and [export] tables).")
@click.option("--timeout", "timeout", type=click.FloatRange(min=0.1), default=None,
              help="Seconds to wait for each Prometheus query (default 30).")
@click.option("--simulate", metavar="SCENARIO", default=None,
              help="Bill a simulated node instead: replay the scenario over the window (up to "
                   "now) into a temporary ledger and export that.")
def export(ledger_path: str | None, prometheus_url: str | None, period: str | None,
           since: str | None, until: str | None, tz_name: str | None, group_by: str | None,
           output_format: str | None, output: str | None, coverage_threshold: float | None,
           textfile: str | None, config_path: str | None, timeout: float | None,
           simulate: str | None) -> None:
    """Export allocated/used device-hours, energy and cost per resource group.

    Reruns for the same window give identical bytes. The exit status is 3 when
    the data covers less than the threshold of the window (the file is still
    written), so a cron job can alert on gaps.

    \b
    Examples:
      allsmi export --period yesterday --output /srv/billing/gpu-$(date -d yesterday +%F).csv
      allsmi export --period 2026-03 --tz Europe/Berlin --format focus -o march.csv
      allsmi export --prometheus http://prometheus:9090 --period last-month --group-by resource_group,model
      allsmi export --since 2026-03-01T00:00:00Z --until 2026-03-02T00:00:00Z --group-by resource_group,user
      allsmi export --simulate mixed --period yesterday --config prices.toml
    """
    from allsmi.accounting.periods import PeriodError, window_from, zone
    from allsmi.accounting.settings import export_defaults, ledger_settings, parse_group_by
    from allsmi.config import ConfigError

    started = time.time()
    s = settings(config_path, simulate, None, None)
    config = s.config
    try:
        defaults = export_defaults(config)
        if sum(x is not None for x in (prometheus_url, ledger_path, s.simulate)) > 1:
            raise fail("give one of --ledger, --prometheus and --simulate")
        use_prometheus = None if s.simulate else (
            prometheus_url or (None if ledger_path else defaults.prometheus))
        ledger = None if (use_prometheus or s.simulate) else \
            ledger_settings(config, path_flag=ledger_path).path
    except ConfigError as exc:
        raise fail(str(exc)) from None
    try:
        keys = parse_group_by(group_by) if group_by else defaults.group_by
    except ValueError as exc:
        raise fail(f"--group-by: {exc}") from None
    fmt = output_format or defaults.format
    threshold = defaults.coverage_threshold if coverage_threshold is None else coverage_threshold
    try:
        tz = zone(tz_name or defaults.tz)
        window = window_from(period, since, until, tz)
    except PeriodError as exc:
        raise fail(str(exc)) from None
    if use_prometheus and "user" in keys:
        raise fail("--group-by user needs the ledger: Prometheus has no per-user accounting")

    with tempfile.TemporaryDirectory(prefix="allsmi-export-") as scratch:
        if s.simulate:
            ledger = _simulated_ledger(s.scenario, window, config, scratch)
        report = _report(window, keys, config, ledger, use_prometheus,
                         timeout or defaults.timeout_seconds)
    from allsmi.accounting.formats import render
    text = render(report, fmt)
    if output:
        from allsmi.atomic import write_atomic
        try:
            write_atomic(output, text)
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror or exc}", EXIT_ERROR) from None
    else:
        click.echo(text, nl=False)

    coverage = report.coverage_ratio
    complete = coverage is not None and coverage >= threshold
    status_path = textfile or defaults.textfile
    if status_path:
        from allsmi.accounting.status import write_status
        try:
            write_status(status_path, started, complete, coverage, window.end.timestamp())
        except OSError as exc:
            raise fail(f"cannot write {status_path}: {exc.strerror or exc}", EXIT_ERROR) from None
    if not complete:
        raise fail(_incomplete_message(report, threshold), EXIT_INCOMPLETE)


def _simulated_ledger(scenario: Any, window: Any, config: Any, directory: str) -> str:
    """Replay ``scenario`` over the window (never past now) into a ledger in ``directory``.

    Simulated values are a pure function of time, so any past window can be
    recorded after the fact, exactly as a recorder running then would have.
    """
    from dataclasses import replace

    from allsmi.accounting.recorder import LedgerRecorder
    from allsmi.backends.simulated import simulated_backends
    from allsmi.collector import Collector
    from allsmi.config import ConfigError

    start = window.start.timestamp()
    end = min(window.end.timestamp(), time.time())
    step = 20.0 if end - start <= 2 * 86400 else 60.0  # a month still replays in minutes
    now = [start]
    clock = lambda: now[0]  # noqa: E731
    ledger_table = {**config.section("ledger"), "max_gap_seconds": 3 * step}
    ledger_config = replace(config, sections={**config.sections, "ledger": ledger_table})
    path = f"{directory}/ledger.db"
    try:
        recorder = LedgerRecorder(path, ledger_config)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    collector = Collector(list(simulated_backends(scenario, clock=clock)), config, clock=clock,
                          timeout_seconds=config.backend_timeout_seconds)
    collector.subscribe(recorder.on_snapshot)
    try:
        while now[0] <= end:
            collector.collect_once()
            now[0] += step
    finally:
        collector.close()
        recorder.close()
    return path


def _report(window: Any, keys: tuple[str, ...], config: Any, ledger: Any,
            prometheus_url: str | None, timeout: float) -> Any:
    from allsmi.accounting.report import build_report
    if prometheus_url:
        from allsmi.accounting.promsource import PrometheusClient, PrometheusError, prometheus_parts
        try:
            parts = prometheus_parts(PrometheusClient(prometheus_url, timeout), window)
        except PrometheusError as exc:
            raise fail(str(exc), EXIT_ERROR) from None
        return build_report(parts, window, keys, config, source=f"prometheus {prometheus_url}")
    from allsmi.accounting.ledger import LedgerError
    from allsmi.accounting.ledgersource import ledger_parts
    try:
        parts, users = ledger_parts(ledger, window, by_user="user" in keys)
    except LedgerError as exc:
        raise fail(str(exc), EXIT_ERROR) from None
    return build_report(parts, window, keys, config, user_parts=users, source=f"ledger {ledger}")


def _incomplete_message(report: Any, threshold: float) -> str:
    from allsmi.accounting.periods import iso
    where = f"{iso(report.window.start)} to {iso(report.window.end)}"
    if report.coverage_ratio is None:
        return (f"no device data for {where} in {report.source}: the export is empty "
                f"(exit status {EXIT_INCOMPLETE})")
    low = sorted((r for r in report.rows if r.user is None and r.coverage_ratio is not None
                  and r.coverage_ratio < threshold), key=lambda r: r.coverage_ratio)[:5]
    detail = "; ".join(
        f"{'/'.join(x for x in (r.resource_group, r.vendor, r.model, r.host) if x)} "
        f"{r.coverage_ratio:.1%}" for r in low)
    return (f"data covers {report.coverage_ratio:.2%} of the device time in {where}, below the "
            f"threshold {threshold:.2%}; the file was written, but the bill may be short"
            + (f" (lowest: {detail})" if detail else "") + f" (exit status {EXIT_INCOMPLETE})")
