"""``allsmi serve``: the Prometheus endpoint, wired to the shared collector.

Settings come from flags, then ``ALLSMI_SERVE_*`` environment variables,
then the ``[serve]`` table of the config file, then defaults. See
``docs/exporter.md``.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import click

from allsmi.cli.common import (build_collector, common_options, ensure_descriptors, exit_code_of,
                               fail, finite, log_to_stderr, settings)
from allsmi.cli.numbertype import DecimalRange, WholeRange
from allsmi.cli.serveoptions import (DEFAULT_LISTEN, DEFAULT_PORT, ENV, MAX_HOLDER_SERIES_LIMIT,
                                     SERVE_KEYS, ServeOptions, load_web, parse_listen,
                                     resolve_options)
from allsmi.cli.snapshot_run import leave_now
from allsmi.cli.stopsignals import StartupStopped, StopSignals
from allsmi.config import Config, ConfigError

__all__ = ["DEFAULT_LISTEN", "DEFAULT_PORT", "ENV", "SERVE_KEYS", "ServeOptions", "parse_listen",
           "resolve_options", "serve"]

SWITCH_INTERVAL_SECONDS = 0.0005


def _open_recorder(path: Path, config: Config, max_gap_seconds: float) -> Any:
    try:
        from allsmi.accounting.recorder import LedgerRecorder
    except ImportError as exc:
        raise fail(f"--ledger needs the accounting recorder (allsmi.accounting.recorder), which "
                   f"this installation lacks: {exc}") from None
    try:
        return LedgerRecorder(path, config, max_gap_seconds=max_gap_seconds)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        # LedgerError (an OSError) already names the path and the reason.
        from allsmi.accounting.ledger.store import LedgerError
        raise fail(str(exc) if isinstance(exc, LedgerError) else f"cannot open the ledger {path}: {exc}",
                   1) from None
    except ValueError as exc:
        raise fail(f"cannot open the ledger {path}: {exc}") from None


def warn_once_without_devices() -> Any:
    """A snapshot subscriber that says once, on standard error, when the first snapshot has no
    device: an exporter serving nothing is otherwise silent (its /metrics has only statuses)."""
    seen = threading.Event()

    def check(snapshot: Any) -> None:
        if seen.is_set():
            return
        seen.set()
        if snapshot.devices:
            return
        # every vendor named, each reason cut whole-word short (the full ones: doctor)
        why = "; ".join(f"{b.name}: {b.status}" + (f" ({_short(b.message)})" if b.message else "")
                        for b in snapshot.backends if b.status != "ok")
        click.echo("allsmi: warning: no device found, serving 0 devices"
                   + (f" ({why})" if why else "")
                   + "; `allsmi doctor` says which vendors were looked for and why none was found",
                   err=True)

    return check


def _short(text: str, limit: int = 60) -> str:
    """``text`` on one line, cut at a word to at most ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit - 1].rsplit(" ", 1)[0] if " " in flat[:limit - 1] else flat[:limit - 1]
    return cut.rstrip(" ,;:") + "…"


@click.command()
@click.option("--listen", metavar="HOST:PORT", default=None,
              help=f"Address to serve on (default {DEFAULT_LISTEN}: loopback only; "
                   f"use :{DEFAULT_PORT} for all interfaces). Config: serve.listen.")
@click.option("--processes/--no-processes", default=None,
              help="Export per-process device memory (allsmi_process_memory_bytes) and activity "
                   "(allsmi_process_utilization_ratio and the like) with users "
                   "and command lines, also in /api/v1/snapshot (without it: pids and memory only). "
                   "Config: serve.processes.")
@click.option("--web-config", type=click.Path(dir_okay=False), default=None,
              help="Exporter-toolkit web configuration (TLS, basic auth). Config: serve.web_config.")
@click.option("--energy-max-gap", "energy_max_gap",
              type=DecimalRange(0, 7 * 86400.0, low_open=True), callback=finite,
              default=None, metavar="SECONDS",
              help="Longest gap between two samples that energy and time counters bridge "
                   "(default: the larger of 30 s and 3 intervals). "
                   "Config: serve.energy_max_gap_seconds.")
@click.option("--ledger", type=click.Path(dir_okay=False), default=None,
              help="Also record usage into this accounting ledger. Config: serve.ledger.")
@click.option("--max-holder-series", "max_holder_series",
              type=WholeRange(0, MAX_HOLDER_SERIES_LIMIT), default=None, metavar="N",
              help="Most per-holder series (device x holder x method) at once; holders beyond "
                   "it are counted in their device's overflow holder (default 1000). "
                   "Config: serve.max_holder_series.")
@common_options
def serve(listen: str | None, processes: bool | None, web_config: str | None,
          energy_max_gap: float | None, ledger: str | None, max_holder_series: int | None,
          **opts: Any) -> None:
    """Serve Prometheus metrics of every device.

    A scrape only reads the exposition rendered after the latest collection
    cycle: it never waits for hardware.

    \b
    Endpoints: /metrics, /healthz, /ready, /api/v1/snapshot
    Examples:
      allsmi serve                                 http://127.0.0.1:9477/metrics
      allsmi serve --listen :9477 --web-config web.yml
      allsmi serve --simulate mixed --interval 1 --processes
    """
    # first of all: SIGTERM while the backends are built is a clean stop too (stopsignals)
    signals = StopSignals()
    try:
        _serve(signals, listen, processes, web_config, energy_max_gap, ledger, max_holder_series,
               **opts)
    except StartupStopped:
        click.echo(f"allsmi: {signals.name} while starting: stopped", err=True)
    finally:
        signals.restore()


def _serve(signals: StopSignals, listen: str | None, processes: bool | None,
           web_config: str | None, energy_max_gap: float | None, ledger: str | None,
           max_holder_series: int | None, **opts: Any) -> None:
    root = click.get_current_context().find_root().params
    common_interval = opts.get("interval") or root.get("interval")
    s = settings(**opts)
    flags = {"listen": listen, "processes": processes, "web_config": web_config,
             "energy_max_gap_seconds": energy_max_gap, "ledger": ledger,
             "max_holder_series": max_holder_series}
    try:
        o = resolve_options(flags, s.config, os.environ, common_interval,
                            simulate=s.simulate is not None)
        web = load_web(o, flags, s.config, os.environ)
    except (ConfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    s.interval = o.interval
    ensure_descriptors()  # before the connection bound is derived from the limit
    log_to_stderr()

    from allsmi.exporter.exposition import STALE_PERIODS, Exposition
    from allsmi.exporter.builder import GroupPrice
    from allsmi.usage import idle_threshold_percent
    from allsmi.exporter.http import MetricsServer
    exposition = Exposition(processes=o.processes, max_gap_seconds=o.energy_max_gap,
                            declared_groups={n: g.labels for n, g in s.config.groups.items()},
                            group_prices={n: GroupPrice(g.price_per_device_hour, g.price_per_kwh,
                                                        g.currency, g.budget_per_month)
                                          for n, g in s.config.groups.items()},
                            stale_after_seconds=STALE_PERIODS * (o.interval + s.timeout),
                            idle_threshold_percent=idle_threshold_percent(s.config),
                            max_holder_series=o.max_holder_series)
    try:
        server = MetricsServer(o.host, o.port, exposition, web=web)
    except OSError as exc:
        reason = "address already in use (another exporter on this port? choose one with --listen)" \
            if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise fail(f"cannot listen on {o.host}:{o.port}: {reason}", 1) from None

    exposition.web_config = server.web_watcher  # its reloads are published and logged
    recorder = collector = thread = None
    stop = signals.event
    try:
        if o.ledger is not None:
            recorder = _open_recorder(o.ledger, s.config, o.energy_max_gap)
            exposition.ledger = recorder  # its write errors are published and gate /ready
        collector = build_collector(s)
        collector.subscribe(exposition.on_snapshot)
        collector.subscribe(warn_once_without_devices())
        if recorder is not None:
            collector.subscribe(recorder.on_snapshot)
        # A collection cycle holds the GIL for tens of ms with hundreds of devices; a
        # shorter switch interval lets scrape threads in between, keeping latency flat.
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        # SIGHUP too (its terminal closed, an ssh session ended): a clean stop, as `allsmi
        # record` makes, never SIGHUP's default death that loses the ledger's interval in
        # progress. From here on a signal sets `stop` (start-up is no longer cut short).
        signals.started()
        http_failed: list[BaseException] = []

        def serve_http() -> None:
            # The connection loop survives a failing request (logged, that connection closed);
            # if it stops anyway, the process must exit non-zero for its supervisor to restart
            # it, never keep running with nobody answering /metrics, /ready and /healthz.
            try:
                server.serve_forever()
            except BaseException as exc:  # noqa: BLE001 - reported, then the process exits 1
                logging.getLogger("allsmi.exporter").critical(
                    "the HTTP server stopped: %s: %s", type(exc).__name__, exc, exc_info=True)
                http_failed.append(exc)
            finally:
                stop.set()

        thread = threading.Thread(target=serve_http, name="allsmi-http", daemon=True)
        # What start-up made (modules, config, the backends' handles: ~33,000 objects) stays
        # for the process's life: out of the collector's generations, a full collection
        # traverses only what the cycles made (the young collections of an idle minute: 2.3 ms
        # before, 0.5 ms after; 8 fake GPUs).
        gc.collect()
        gc.freeze()
        thread.start()
        collector.start()
        click.echo(f"allsmi: serving metrics on {server.url}metrics (interval {o.interval:g} s)",
                   err=True)
        # Set by SIGTERM/SIGINT/SIGHUP (whose handlers run here) or the HTTP thread's end.
        # Waited for a second at a time (a loaded CI saw a SIGTERM go unanswered for 15 s):
        # see allsmi.cli.stopsignals.
        signals.wait()
        if http_failed:
            exc = http_failed[0]
            raise fail(f"the HTTP server stopped ({type(exc).__name__}: {exc}); exiting", 1)
        click.echo("allsmi: shutting down", err=True)
    finally:
        if thread is not None:
            server.shutdown()  # returns once serve_forever has stopped
        workers_ended = server.server_close()  # waits for the password checks under way
        stuck: list[str] = []
        if collector is not None:
            collector.close()
            stuck = collector.stuck
        lost = 0
        if recorder is not None:
            recorder.close()
            # what the ledger could not take by the end is lost: said, with exit 1, as by record
            lost = recorder.unwritten + recorder.dropped_intervals
        ending = sys.exc_info()[1]
        code = (1 if lost else 0) if ending is None else exit_code_of(ending)
        if (not workers_ended or stuck) and code is not None:
            # A worker still inside bcrypt would abort the interpreter's shutdown (SIGABRT), a
            # backend stuck in a vendor call can hang it for ever (the library's exit handlers
            # wait for that call): everything is closed, so leave without them, with the
            # documented exit code.
            if lost and ending is None:
                click.echo(f"allsmi: {_lost_message(lost, o.ledger, recorder.last_error)}", err=True)
            if stuck:
                leave_now(code, stuck)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        if lost and sys.exc_info()[0] is None:
            raise fail(_lost_message(lost, o.ledger, recorder.last_error), 1)


def _lost_message(lost: int, ledger: Path | None, error: str | None) -> str:
    return f"{lost} completed interval(s) could not be written to {ledger}: {error}"
