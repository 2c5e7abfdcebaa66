"""What ``allsmi export`` and ``allsmi idle`` share: the source, window and grouping options
(declared in :mod:`allsmi.cli.billing.reportoptions`), their checks, building the report (from the
ledger, Prometheus or a replayed simulation), the failure statuses and signal handling, and
writing the output.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import click

from allsmi.cli.common import fail, settings
# The options themselves (re-exported for the commands that take them).
from allsmi.cli.billing.reportoptions import SOURCE_OPTIONS, source_options  # noqa: F401

EXIT_ERROR = 1


class Failed(Exception):
    """An export that cannot complete: why (a short reason), the message and the exit status."""

    def __init__(self, reason: str, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.reason, self.message, self.code = reason, message, code


class Interrupted(BaseException):
    """A termination signal arrived: unwind (removing temporary files) and exit 128+signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT raise :class:`Interrupted` so that ``finally`` blocks run."""
    handled = [s for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT) if s is not None]

    def handler(signum: int, frame: Any) -> None:
        for sig in handled:  # one is enough: the rest of the way out is not interrupted again
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    try:
        previous = {sig: signal.signal(sig, handler) for sig in handled}
    except ValueError:  # not the main thread (embedded use): leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def no_ledger_message(path: str) -> str:
    """Why there is nothing to bill at ``path``, and how a ledger is made."""
    return (f"no ledger at {path}: a ledger is written by `allsmi record --ledger {path}` or "
            f"`allsmi serve --ledger {path}` while they run; read another with --ledger PATH, "
            "or bill from a store with --prometheus URL")


def guarded(run: "Run", command: Callable[..., None], **opts: Any) -> None:
    """Run ``command(run, **opts)``: signals unwind (temporary files removed), failures exit
    with their status and rewrite the ``--textfile`` (if any) with ``allsmi_export_success 0``."""
    try:
        with _signals_unwind():
            try:
                command(run, **opts)
            except Interrupted as exc:
                name = signal.Signals(exc.signum).name
                raise Failed("interrupted", f"interrupted by {name}; nothing was written",
                              128 + exc.signum) from None
    except Failed as exc:
        run.report_failure(exc.reason, exc.message)
        raise fail(exc.message, exc.code) from None
    except click.exceptions.Exit:
        raise
    except OSError as exc:
        from allsmi.cli.main import is_output_lost, output_lost_message
        if not is_output_lost(exc):
            run.report_failure("internal", f"internal error: {type(exc).__name__}")
            raise
        # stdout refused the document: exit 1 as every command (allsmi.cli.main.output_lost)
        run.report_failure("output", output_lost_message(exc))
        raise
    except Exception as exc:  # a bug: still tell monitoring, then show the traceback
        run.report_failure("internal", f"internal error: {type(exc).__name__}")
        raise


class Run:
    """What the status file needs to know about this run, whichever way it ends."""

    def __init__(self, started: float, textfile: str | None) -> None:
        self.started = started
        self.textfile = textfile
        self.period_end: float | None = None
        self.coverage: float | None = None

    def report_failure(self, reason: str, message: str) -> None:
        """Rewrite the status file with ``allsmi_export_success 0`` (if one is configured)."""
        if not self.textfile or reason == "textfile":  # the file itself could not be written
            return
        from allsmi.accounting.status import write_status
        try:
            write_status(self.textfile, self.started, False, self.coverage, self.period_end,
                         reason=reason, message=message)
        except OSError as exc:
            click.echo(f"allsmi: cannot write {self.textfile}: {exc.strerror or exc}", err=True)


@dataclass
class Plan:
    """A checked request for usage over a window: where from, grouped how (before any work)."""

    config: Any
    defaults: Any
    keys: tuple[str, ...]
    window: Any
    ledger: Any = None
    client: Any = None
    scenario: Any = None
    verbose: bool = False
    purpose: str = ""
    """What the report is for, when not the command's own window (its progress line says it)."""
    said: set[str] = field(default_factory=set, compare=False, repr=False)
    """The source's warnings (and lines about it: ``billed from``, ``prices``) said so far by
    this command: shared by the plans made from this one (``dataclasses.replace``), so that a
    second reading (the month to date a budget needs) does not say the same again."""


def prepare(run: Run, ledger_path: str | None, prometheus_url: str | None,
            prometheus_user: str | None, prometheus_password_file: str | None,
            prometheus_bearer_token_file: str | None, prometheus_ca_file: str | None,
            period: str | None, since: str | None, until: str | None, tz_name: str | None,
            group_by: str | None, config_path: str | None, timeout: float | None,
            simulate: str | None, allow_partial: bool = False, no_rollups: bool = False,
            textfile: str | None = None, status: bool = False,
            default_group_by: Any = None, verbose: bool = False) -> Plan:
    """Resolve and check the options shared by ``export`` and ``idle``; raises :class:`Failed`.

    ``default_group_by(source_is_prometheus)`` gives the command's default keys (else
    ``[export] group_by``). ``status``: the command writes the export's status file (its
    ``--textfile``, else ``[export] textfile``): ``allsmi export`` alone; ``report``, ``idle``
    and ``waste`` never touch it (a failure of theirs is not the export's)."""
    from allsmi.accounting.periods import PeriodError, window_from, zone
    from allsmi.accounting.settings import export_defaults, ledger_settings, parse_group_by
    from allsmi.config import ConfigError

    try:
        s = settings(config_path, simulate, None, None)
    except click.exceptions.Exit:  # the message is already on stderr
        run.report_failure("config", "bad configuration or scenario (see the command's stderr)")
        raise
    config = s.config
    try:
        defaults = export_defaults(config)
        run.textfile = (textfile or defaults.textfile) if status else None
        if sum(x is not None for x in (prometheus_url, ledger_path, s.simulate)) > 1:
            raise Failed("config", "give one of --ledger, --prometheus and --simulate", 2)
        use_prometheus = None if s.simulate else (
            prometheus_url or (None if ledger_path else defaults.prometheus))
        ledger = None if (use_prometheus or s.simulate) else \
            ledger_settings(config, path_flag=ledger_path).path
        client = _client(config, use_prometheus, timeout or defaults.timeout_seconds,
                         prometheus_user, prometheus_password_file,
                         prometheus_bearer_token_file, prometheus_ca_file, allow_partial)
    except ConfigError as exc:
        raise Failed("config", str(exc), 2) from None
    try:
        if group_by:
            keys = parse_group_by(group_by)
        elif default_group_by is not None:
            keys = default_group_by(client is not None)
        else:
            keys = defaults.group_by
    except ValueError as exc:
        raise Failed("config", f"--group-by: {exc}", 2) from None
    try:
        tz = zone(tz_name or defaults.tz)
        window = window_from(period, since, until, tz)
    except PeriodError as exc:
        raise Failed("config", str(exc), 2) from None
    run.period_end = window.end.timestamp()
    if no_rollups and client is None:
        raise Failed("config", "--no-rollups needs --prometheus URL", 2)
    if client is not None:
        client.use_rollups = not no_rollups
    return Plan(config, defaults, keys, window, ledger, client,
                s.scenario if s.simulate else None, verbose)


def build(plan: Plan, replays: Any = None) -> Any:
    """The report the plan asks for (a simulation is replayed into a temporary ledger, or by
    ``replays``, :class:`allsmi.cli.simulate.reuse.Replays`, which keeps it for the next report)."""
    from allsmi.cli.progress import Progress, counting
    why = f" ({plan.purpose})" if plan.purpose else ""
    try:
        with source(plan, replays) as (ledger, client, name):
            if client is not None:  # each answered query is a step
                with Progress(f"querying {client.url}{why}", unit="queries",
                              verbose=plan.verbose) as progress:
                    client.query = counting(client.query, progress)
                    client.query_range_vector = counting(client.query_range_vector, progress)
                    return usage_report(plan.window, plan.keys, plan.config, ledger, client,
                                        source=name, said=plan.said, purpose=plan.purpose)
            with Progress(("billing" if name else f"reading {plan.ledger}") + why,
                          verbose=plan.verbose):
                return usage_report(plan.window, plan.keys, plan.config, ledger, client,
                                    source=name, said=plan.said, purpose=plan.purpose)
    except Failed as exc:  # a second reading's failure says which reading failed
        if not plan.purpose:
            raise
        raise Failed(exc.reason, f"reading the {plan.purpose}: {exc.message}", exc.code) \
            from None


@contextlib.contextmanager
def source(plan: Plan, replays: Any = None) -> Iterator[tuple[Any, Any, str | None]]:
    """``(ledger, client, name)`` to read the plan's usage from, for as long as the ``with``
    lasts: a simulation is replayed into a temporary ledger, removed when the block ends (or
    when ``replays`` ends)."""
    if plan.scenario is None:
        yield plan.ledger, plan.client, None
        return
    from allsmi.cli.progress import Progress
    from allsmi.cli.simulate.bill import simulated_ledger
    with tempfile.TemporaryDirectory(prefix="allsmi-export-") if replays is None \
            else contextlib.nullcontext("") as scratch:
        why = f" ({plan.purpose})" if plan.purpose else ""
        with Progress(f"replaying {plan.scenario.name}{why}", 0, unit="chunks",
                      verbose=plan.verbose) as progress:
            ledger = simulated_ledger(plan.scenario, plan.window, plan.config, scratch,
                                      progress=progress) if replays is None else \
                replays.ledger(plan.scenario, plan.window, plan.config, progress=progress)
        # the temporary ledger is gone when the command ends: name what was billed
        yield ledger, None, f"simulation {plan.scenario.name}"


def write_output(data: str | bytes, output: str | None) -> None:
    """``data`` to ``output`` atomically (owner-only), or to stdout."""
    if output:
        from allsmi.support.atomic import write_atomic
        try:
            write_atomic(output, data)
        except OSError as exc:
            raise Failed("output", f"cannot write {output}: {exc.strerror or exc}") from None
    else:  # (stdout refusing it raises on, to :func:`guarded` and ``allsmi.cli.main``)
        from allsmi.cli.snapshot_run import write_all
        sys.stdout.flush()
        write_all(sys.stdout.fileno(), data if isinstance(data, bytes) else data.encode("utf-8"))


def _client(config: Any, url: str | None, timeout: float, user: str | None,
            password_file: str | None, token_file: str | None, ca_file: str | None,
            allow_partial: bool = False) -> Any:
    """The Prometheus client, or ``None`` for the ledger; credentials checked before any work."""
    if not url:
        if any((user, password_file, token_file, ca_file)):
            raise Failed("config", "the --prometheus-* options need --prometheus URL", 2)
        if allow_partial:
            raise Failed("config", "--allow-partial needs --prometheus URL", 2)
        return None
    # (the HTTP client and TLS: 20 ms of imports a bill from the ledger does without)
    from allsmi.accounting.prometheus.client import PrometheusClient, PrometheusError, access_settings
    try:
        credentials, ca = access_settings(config, user, password_file, token_file, ca_file)
        return PrometheusClient(url, timeout, credentials, ca, allow_partial=allow_partial)
    except (ValueError, PrometheusError) as exc:
        raise Failed("config", str(exc), 2) from None


def usage_report(window: Any, keys: tuple[str, ...], config: Any, ledger: Any, client: Any,
                 source: str | None = None, said: set[str] | None = None,
                 purpose: str = "") -> Any:
    """The usage report over ``window`` grouped by ``keys``: from Prometheus when ``client`` is
    given, else from the ledger file ``ledger`` (``source`` names it in the report; ``said``:
    warnings already said, not said again; ``purpose``: see :func:`usage_reports`)."""
    return usage_reports(window, (keys,), config, ledger, client, source, said=said,
                         purpose=purpose)[0]


def usage_reports(window: Any, key_sets: Any, config: Any, ledger: Any, client: Any,
                  source: str | None = None, quiet: bool = False,
                  notes: list[str] | None = None, said: set[str] | None = None,
                  purpose: str = "") -> list[Any]:
    """One usage report over ``window`` per grouping in ``key_sets``, from one reading of the
    source (see :func:`usage_report`); ``quiet``: say nothing on stderr about the source;
    ``notes``: gathers the source's warnings (conflicting ledger rows, series left out);
    ``purpose``: what a second reading is for, said with its lines that differ from the first's
    (the same lines are said once, through ``said``). The reports' ``warnings`` are the
    partial answers of this reading alone (:func:`allsmi.cli.billing.budgets.with_partial` adds
    another reading's)."""
    from allsmi.accounting.report import build_report
    key_sets = [tuple(keys) for keys in key_sets]
    # The holders' shares are read whatever the grouping: what each row's cost was spent on
    # (per waiting reason, on activity) is summed from them, so that rows add up.
    by_holder = True
    if client is not None:
        from allsmi.accounting.prometheus.rollup import prometheus_usage
        from allsmi.accounting.prometheus.source import PrometheusError
        client.warnings = []  # this reading's partial answers, not an earlier reading's
        try:
            usage = prometheus_usage(client, window, by_holder=by_holder,
                                     rollups=getattr(client, "use_rollups", True))
        except PrometheusError as exc:
            raise Failed("source", str(exc)) from None
        wants_user = any("user" in keys for keys in key_sets)
        if wants_user and not usage.holders:
            observed = sum(p.observed_s for p in usage.parts)
            raise Failed("source", f"--group-by user: not enough data in the window yet in "
                         f"prometheus {client.url}: "
                         + (f"{observed:.0f} device-seconds observed and " if observed else "")
                         + "no holder's counters have two samples in it (counters need a "
                         "few scrapes); try again later or widen the window (--since)")
        if wants_user and not any(p.user for p in usage.holders or ()):
            raise Failed("config", "--group-by user: no holder in the window has a user in "
                         f"prometheus {client.url}: the exporters publish users (the user label "
                         "of allsmi_holder_* and allsmi_device_workload_info) only when run with "
                         "--processes; group by namespace, pod or job, or bill from the ledger", 2)
        from allsmi.accounting.prometheus.conflicts import prometheus_conflicts
        from allsmi.accounting.prometheus.prices import currency_conflicts, describe, published_prices
        try:
            published = published_prices(client, window, rollups=usage.rollup_seconds > 0)
            conflicts = prometheus_conflicts(client, window) + currency_conflicts(published, config)
        except PrometheusError as exc:
            raise Failed("source", str(exc)) from None
        reports = [build_report(usage.parts, window, keys, config, holder_parts=usage.holders,
                                source=f"prometheus {client.url}", source_data=usage.detail,
                                published=published) for keys in key_sets]
        if not quiet:
            _tell(f"billed from {usage.detail} of prometheus {client.url}", purpose, said)
        reports = _noted(reports, usage.notes + tuple(conflicts), notes, quiet, said)
        if not quiet:
            prices = describe(dict(reports[0].price_sources))
            if prices:
                _tell(f"prices: {prices}", purpose, said)
        if client.warnings:
            # Data may be missing that nothing here can measure: the rows vouch for none of
            # the window, so the coverage is lowered to 0 (the export exits 3 and says why).
            from dataclasses import replace
            reports = [replace(report, coverage_ratio=0.0, warnings=tuple(client.warnings))
                       for report in reports]
        return reports
    from allsmi.accounting.ledger.store import LedgerError
    from allsmi.accounting.ledger.source import ledger_conflicts, ledger_parts, ledger_unheld
    if not os.path.isfile(ledger):
        raise Failed("source", no_ledger_message(ledger))
    try:
        parts, holders = ledger_parts(ledger, window, by_holder=by_holder)
        conflicts = ledger_conflicts(ledger, window) + ledger_unheld(ledger, window)
    except LedgerError as exc:
        raise Failed("source", str(exc)) from None
    reports = [build_report(parts, window, keys, config, holder_parts=holders,
                            source=source or f"ledger {ledger}") for keys in key_sets]
    return _noted(reports, conflicts, notes, quiet, said)


def _tell(line: str, purpose: str, said: set[str] | None) -> None:
    """``line`` about the source on stderr, once per command (through ``said``); a second
    reading's (``purpose``) that differs from the first's says what it is for."""
    if said is not None and line in said:
        return
    click.echo(f"allsmi: {line}" + (f" ({purpose})" if purpose else ""), err=True)
    if said is not None:
        said.add(line)


def _noted(reports: list[Any], found: Any, notes: list[str] | None, quiet: bool,
           said: set[str] | None) -> list[Any]:
    """``reports`` each carrying, as its ``notes``, the source's warnings ``found`` then the
    report's own (groups not declared), once each: the one list that is said (:func:`say`) and
    that the documents carry (their ``warnings``)."""
    from dataclasses import replace
    found = tuple(dict.fromkeys(tuple(found or ()) + (reports[0].notes if reports else ())))
    say(found, notes, quiet, said)
    return [replace(report, notes=found) for report in reports]


def say(found: Any, notes: list[str] | None = None, quiet: bool = False,
        said: set[str] | None = None) -> None:
    """Warnings about the document: on stderr (unless ``quiet``, or already in ``said``), and
    into ``notes`` when given."""
    for note in found or ():
        if not quiet and (said is None or note not in said):
            click.echo(f"allsmi: warning: {note}", err=True)
            if said is not None:
                said.add(note)
        if notes is not None and note not in notes:
            notes.append(note)
