"""``allsmi report``: the month at a glance, one self-contained HTML file (charts as inline SVG,
styles inline, nothing fetched when it is opened), built from the same rows as ``allsmi export``
with the same source, window, grouping and price options.

Exit statuses (the export's): 0 complete; 3 written, but the data covers less than the
threshold of the window (or none of it, or the source's answer was partial); 1 the source
could not be read or the file not written; 2 bad options or configuration, or the
``allsmi[report]`` extra missing; 128 + N killed by signal N.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import click

from allsmi.cli.common import finite, stdout_is_terminal
from allsmi.cli.numbertype import DecimalRange
from allsmi.cli.billing.sparing import spare_the_ledger
from allsmi.cli.billing.reportcmd import (
    Failed, Run, build, guarded, prepare, source, source_options, usage_reports, write_output)

#: ``--group-by`` of the holders' ranking when none is given: the holders (without the user
#: from Prometheus, which knows users only from exporters run with --processes).
DEFAULT_KEYS = ("resource_group", "user", "namespace", "pod", "job")
GROUP_KEYS = ("resource_group",)
POOL_KEYS = ("resource_group", "vendor", "model")


def _default_keys(prometheus: bool) -> tuple[str, ...]:
    return tuple(k for k in DEFAULT_KEYS if not (prometheus and k == "user"))


@click.command()
@source_options
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the HTML to FILE atomically (owner-only) instead of stdout "
                   "(- for stdout).")
@click.option("--coverage-threshold", type=DecimalRange(0.0, 1.0), default=None,
              callback=finite,
              help="Warn in the report and exit 3 when observed/expected device time is below "
                   "this (default 0.95, as the export).")
def report(**opts: Any) -> None:
    """Write a self-contained HTML report: cost against budget, device-hours, holders,
    efficiency per vendor and model, and a daily trend.

    Its figures are those of `allsmi export` with the same options (--group-by chooses
    how the holders are ranked; default resource_group,user,namespace,pod,job). Opening
    it fetches nothing: the charts are inline SVG. Needs the allsmi[report] extra.

    \b
    Examples:
      allsmi report --period last-month -o report.html
      allsmi report --simulate mixed --period yesterday -o report.html
      allsmi report --prometheus http://prometheus:9090 --period 2026-03 -o march.html
    """
    guarded(Run(started=time.time(), textfile=None), _report, **opts)


def _report(run: Run, output: str | None, coverage_threshold: float | None,
            **opts: Any) -> None:
    from allsmi.accounting.htmlreport.charts import ChartsUnavailable, require_libraries
    from allsmi.cli.billing.export import EXIT_INCOMPLETE, budget_notes, incomplete_message, say_budgets
    try:
        require_libraries()
    except ChartsUnavailable as exc:
        raise Failed("config", str(exc), 2) from None
    if output == "-":  # stdout, as the option's help says, never a file called "-"
        output = None
    if not output and stdout_is_terminal():
        raise Failed("config", "the report is an HTML file: give --output FILE or redirect "
                               "stdout", 2)
    plan = prepare(run, default_group_by=_default_keys, **opts)
    spare_the_ledger(run, plan.ledger, output)
    threshold = plan.defaults.coverage_threshold if coverage_threshold is None \
        else coverage_threshold
    views = _views(plan, threshold)
    groups = views.groups
    run.coverage = groups.coverage_ratio
    overrun = budget_notes(groups)  # on the page as on stderr
    from dataclasses import replace
    from allsmi.accounting.htmlreport.page import render_html
    write_output(render_html(replace(views, overruns=overrun)), output)
    say_budgets(overrun)
    coverage = groups.coverage_ratio
    if coverage is None or coverage < threshold or groups.warnings:  # (partial: as the export)
        raise Failed("coverage", incomplete_message(groups, threshold), EXIT_INCOMPLETE)


def _views(plan: Any, threshold: float) -> Any:
    """The rows of the report: the window grouped three ways from one reading of the source,
    and the trend, one reading per day (per month over long windows)."""
    from dataclasses import replace
    from allsmi.accounting.htmlreport.data import MAX_DAYS, Views
    from allsmi.accounting.periods import iso
    from allsmi.cli.billing.budgets import month_to_date, with_partial
    from allsmi.cli.simulate.reuse import Replays
    notes: list[str] = []
    with Replays() as replays:  # a simulation's month to date extends the window's replay
        with source(plan, replays) as (ledger, client, name):
            groups, holders, pools = usage_reports(plan.window, (GROUP_KEYS, plan.keys, POOL_KEYS),
                                                   plan.config, ledger, client, name, notes=notes,
                                                   said=plan.said)  # (the month to date's too)
            steps, unit = _steps(plan.window, MAX_DAYS)
            trend = []
            for label, window in steps:  # the window's warnings already cover its days'
                [day] = usage_reports(window, (GROUP_KEYS,), plan.config, ledger, client, name,
                                      quiet=True)
                trend.append((label, day))
        # (not their partial answers: each reading has its own, the page's as the window's)
        if steps:
            groups = with_partial(groups, [w for _, day in trend for w in day.warnings],
                                  f"the {unit}s ({iso(steps[0][1].start)} to "
                                  f"{iso(steps[-1][1].end)}) for the trend")
        # budgets: the month to date, whatever the window (as the export's); read only with a
        # budget (a simulation's costs a replay), kept for every group's month-to-date columns
        read: list[Any] = []
        groups = month_to_date(replace(plan, keys=GROUP_KEYS), groups,
                               lambda p: read.append(build(p, replays)) or read[-1], threshold)
    # the page warns of what stderr said: the month to date's warnings too
    return Views(groups, holders, pools, tuple(trend), threshold, unit,
                 tuple(dict.fromkeys(tuple(notes) + tuple(groups.notes))),
                 month=read[0] if read else None)


def _steps(window: Any, max_days: int) -> tuple[list[tuple[str, Any]], str]:
    """The window cut at midnights (at month starts when it is longer than ``max_days``) in its
    time zone, up to now: ``[(label, window)]`` and the unit (``day`` or ``month``)."""
    from allsmi.accounting.periods import Window
    tz = window.start.tzinfo
    end = min(window.end, dt.datetime.now(tz))
    by_month = (window.end - window.start).total_seconds() > max_days * 86400
    out = []
    at = window.start
    while at < end:
        day = at.date()
        if by_month:
            nxt = (day.replace(year=day.year + 1, month=1, day=1) if day.month == 12
                   else day.replace(month=day.month + 1, day=1))
            name = day.strftime("%Y-%m")
        else:
            nxt, name = day + dt.timedelta(days=1), day.isoformat()
        stop = min(dt.datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz), window.end)
        out.append((name, Window(at, stop)))
        at = stop
    return out, "month" if by_month else "day"
