"""``allsmi export``: the billing export, from the ledger or from Prometheus.

Exit statuses: 0 complete; 3 written, but coverage below the threshold; 1 the
source could not be read or the file not written; 2 bad options or config;
128 + N killed by signal N (SIGINT 130, SIGTERM 143), temporary files removed.
Every status but 0 rewrites the ``--textfile`` with ``allsmi_export_success 0``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import click

from allsmi.accounting.settings import FORMATS
from allsmi.cli.common import finite, stdout_is_terminal
from allsmi.cli.billing.reportcmd import Failed, build, guarded, prepare, source_options, write_output
from allsmi.cli.billing.sparing import SparingRun, spare_the_ledger
from allsmi.cli.numbertype import DecimalRange

EXIT_INCOMPLETE = 3


@click.command()
@source_options
@click.option("--format", "output_format", type=click.Choice(FORMATS), default=None,
              help="csv (default), json, focus (FinOps FOCUS 1.2 CSV), parquet (the CSV as "
                   "Parquet) or focus-parquet (FOCUS as Parquet); Parquet needs allsmi[parquet].")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write to FILE atomically (owner-only) instead of stdout.")
@click.option("--coverage-threshold", type=DecimalRange(0.0, 1.0), default=None,
              callback=finite,
              help="Exit 3 when observed/expected device time is below this (default 0.95).")
@click.option("--textfile", type=click.Path(dir_okay=False), default=None,
              help="Also write the run's status for node_exporter's textfile collector "
                   "(world-readable; rewritten with allsmi_export_success 0 on any failure).")
def export(**opts: Any) -> None:
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
      allsmi export --simulate mixed --period yesterday --group-by resource_group,namespace
    """
    guarded(SparingRun(started=time.time(), textfile=opts["textfile"]), _export, **opts)


def _export(run: SparingRun, output_format: str | None, output: str | None,
            coverage_threshold: float | None, **opts: Any) -> None:
    from allsmi.accounting.focus import focus_settings
    from allsmi.config import ConfigError

    plan = prepare(run, status=True, **opts)
    try:
        focus = focus_settings(plan.config)
    except ConfigError as exc:
        raise Failed("config", str(exc), 2) from None
    spare_the_ledger(run, plan.ledger, output)
    defaults = plan.defaults
    fmt = output_format or defaults.format
    threshold = defaults.coverage_threshold if coverage_threshold is None else coverage_threshold
    from allsmi.accounting.formats import BINARY, render
    if fmt in BINARY:
        from allsmi.accounting.parquet import ParquetUnavailable, require_pyarrow
        try:
            require_pyarrow()
        except ParquetUnavailable as exc:
            raise Failed("config", str(exc), 2) from None
        if not output and stdout_is_terminal():
            raise Failed("config", f"{fmt} is binary: give --output FILE or redirect stdout", 2)

    from allsmi.cli.billing.budgets import month_to_date
    from allsmi.cli.simulate.reuse import Replays
    with Replays() as replays:  # a simulation's month to date extends the window's replay
        report = build(plan, replays)
        # budgets: the month to date, whatever the window
        report = month_to_date(plan, report, lambda p: build(p, replays), threshold)
    overrun = budget_notes(report)
    report = replace(report, notes=tuple(dict.fromkeys(report.notes + overrun)))
    run.coverage = report.coverage_ratio
    write_output(render(report, fmt, focus), output)  # (its JSON carries every warning said)
    say_budgets(overrun)

    coverage = report.coverage_ratio
    # a partial answer (of any reading) is a gap whatever the threshold: said, exit 3
    complete = coverage is not None and coverage >= threshold and not report.warnings
    if not complete:
        raise Failed("coverage", incomplete_message(report, threshold), EXIT_INCOMPLETE)
    if run.textfile:
        from allsmi.accounting.status import write_status
        try:
            write_status(run.textfile, run.started, True, coverage, run.period_end)
        except OSError as exc:
            raise Failed("textfile", f"cannot write {run.textfile}: {exc.strerror or exc}") \
                from None


DEVICE_KEYS = ("resource_group", "vendor", "model", "host")
HOLDER_KEYS = ("user", "namespace", "pod", "job")


def _low_coverage(report: Any, threshold: float, most: int = 5) -> list[str]:
    """The rows below ``threshold``, lowest first, each named by all its grouping keys.

    With holder keys in ``--group-by`` a row's coverage is its devices' (the same for every
    holder of them), so the holders of one set of devices are named together, once:
    ``training/nvidia (user alice, bob, -) 0.4%`` (``-``: time no holder was seen)."""
    device_keys = [k for k in report.group_by if k in DEVICE_KEYS] or ["resource_group"]
    holder_keys = [k for k in report.group_by if k in HOLDER_KEYS]
    sets: dict[tuple[Any, ...], tuple[float, list[str]]] = {}
    for row in report.rows:
        if row.coverage_ratio is None or row.coverage_ratio >= threshold:
            continue
        key = tuple(getattr(row, k) for k in device_keys)
        ratio, holders = sets.setdefault(key, (row.coverage_ratio, []))
        if holder_keys:
            holders.append("/".join(getattr(row, k) or "-" for k in holder_keys))
    out = []
    for key, (ratio, holders) in sorted(sets.items(), key=lambda item: (item[1][0], item[0]))[:most]:
        name = "/".join(str(x) if x is not None else "-" for x in key)
        if holders:
            names = sorted(set(holders))
            shown = ", ".join(names[:4]) + (f" +{len(names) - 4}" if len(names) > 4 else "")
            name += f" ({'/'.join(holder_keys)} {shown})"
        out.append(f"{name} {ratio:.1%}")
    return out


def say_budgets(notes: Any) -> None:
    """Name on stderr each group whose cost (or forecast to the month's end) is above its
    budget (:func:`budget_notes`); the CSV's budget columns say the same per row."""
    for note in notes:
        click.echo(f"allsmi: {note}", err=True)


def budget_notes(report: Any) -> tuple[str, ...]:
    """Per group whose cost (or forecast to the month's end) is above its budget, a warning
    (said on stderr, and in the JSON's ``warnings``): every budgeted group of the month to
    date, also one the window did not see (it spent before the window began)."""
    from allsmi.accounting.columns import price_text
    from allsmi.cli.billing.budgets import group_totals
    out = []
    # The month to date's own totals where a shorter window was billed (its rows hold only the
    # groups and holders it saw), else this report's rows (holder rows add up to their group's).
    totals = report.budget_totals if report.budget_totals is not None \
        else group_totals(report.rows)
    for group, budget, currency, cost, forecast, partial in totals:
        limit = price_text(budget)  # as the budget column prints it (never 1e+06)
        least = "at least " if partial else ""  # (rows of unknown cost left out)
        if cost is not None and cost > budget:
            out.append(f"group {group} cost {least}{_above(cost, budget)} {currency} this "
                       f"month to date, above its monthly budget of {limit} {currency}")
        elif forecast is not None and forecast > budget:
            out.append(f"group {group} is forecast to cost {least}{_above(forecast, budget)} "
                       f"{currency} this month, above its budget of {limit} {currency}")
    return tuple(out)


def _above(amount: float, budget: float) -> str:
    """``amount`` (above ``budget``) with 2 decimals, or as many as show it above the budget
    (never "0.00 EUR, above its budget of 0.001 EUR")."""
    from allsmi.accounting.columns import price_text
    text = f"{amount:.2f}"
    return text if float(text) > budget else price_text(amount)


def incomplete_message(report: Any, threshold: float) -> str:
    from allsmi.accounting.periods import iso
    where = f"{iso(report.window.start)} to {iso(report.window.end)}"
    if report.warnings:
        from allsmi.cli.billing.budgets import ANOTHER_READING
        # (another reading's, the month to date's, names its own span)
        own = any(not w.startswith(ANOTHER_READING) for w in report.warnings)
        return (f"{report.source} gave a partial answer" + (f" for {where}" if own else "")
                + f" (--allow-partial): {'; '.join(report.warnings)}; the file was written with "
                f"its coverage lowered to 0, the bill may be short (exit status {EXIT_INCOMPLETE})")
    if report.coverage_ratio is None:
        return (f"no device data for {where} in {report.source}: the export is empty "
                f"(exit status {EXIT_INCOMPLETE})")
    detail = "; ".join(_low_coverage(report, threshold))
    return (f"data covers {report.coverage_ratio:.2%} of the device time in {where}, below the "
            f"threshold {threshold:.2%}; the file was written, but the bill may be short"
            + (f" (lowest: {detail})" if detail else "") + f" (exit status {EXIT_INCOMPLETE})")

