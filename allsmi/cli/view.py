"""``allsmi view`` and bare ``allsmi``: the live dashboard.

Wiring only: the local collector (started in its own thread) or a cluster
source (other nodes' ``allsmi serve``, or a Prometheus server) is handed to
:class:`allsmi.dashboard.app.DashboardApp`. See ``docs/dashboard.md``.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import click

from allsmi.cli.common import (Settings, build_collector, common_options,
                               dashboard_options, fail, settings)
from allsmi.config import ConfigError

#: The options of ``allsmi view`` that choose a cluster source; every other option of ``view`` is
#: a dashboard option that plain ``allsmi`` takes too (tests/test_docs.py checks it).
SOURCE_OPTIONS = ("--hosts", "--hostfile", "--prometheus", "--max-concurrency", "--ca-file")


def _options(s: Settings, theme: str | None, sort: str | None) -> Any:
    from dataclasses import replace
    parent = click.get_current_context().find_root().params
    theme = theme if theme is not None else parent.get("theme")
    sort = sort if sort is not None else parent.get("sort")

    from allsmi.dashboard.options import DashboardOptions, theme_names
    try:
        options = DashboardOptions.from_config(s.config)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    if theme is not None:
        if theme not in theme_names():
            raise fail(f"unknown theme {theme!r} (known: {', '.join(theme_names())})")
        options = replace(options, theme=theme)
    if sort is not None:
        options = replace(options, sort=sort)
    return options


def _not_a_terminal() -> bool:
    return not (sys.stdout.isatty() and sys.stdin.isatty())


def _dumb_terminal() -> bool:
    """``TERM=dumb`` (Emacs shells, some CI consoles): no cursor movement, no colours."""
    return os.environ.get("TERM", "") == "dumb"


def _plain_only() -> bool:
    if _not_a_terminal():
        return True
    if _dumb_terminal():
        click.echo("allsmi: TERM=dumb: printing one plain table instead of the dashboard", err=True)
        return True
    return False


def run_app(app: Any, **run: Any) -> None:
    """Run the dashboard; an unexpected error (Textual prints its traceback once the screen is
    restored) ends the command with that exit code, never 0. The terminal going away (SIGHUP,
    a hang-up or an I/O error on it) ends the process within a second with status 129, whatever
    the UI threads are doing; SIGTERM quits like `q` (see :mod:`allsmi.dashboard.terminal`)."""
    from allsmi.dashboard.terminal import TERM_EXIT_CODE, TerminalGuard
    with TerminalGuard(app.quit_soon) as guard:
        app.run(**run)
    code = app.return_code or 0
    if guard.tripped:
        code = guard.clean_exit_code or code
        if guard.code != TERM_EXIT_CODE:  # SIGTERM is an ordinary stop; say why anything else ended it
            try:
                click.echo(f"allsmi: dashboard ended: {guard.reason}", err=True)
            except OSError:
                pass  # the terminal went away (the usual reason): there is nobody left to tell
    if code:
        raise SystemExit(code)


def _print_table_instead(s: Settings) -> None:
    """Without a terminal (a pipe, cron) print one snapshot table, as ``allsmi snapshot`` does."""
    from allsmi.cli.snapshot import render
    from allsmi.host import HostSampler
    host = HostSampler()
    host.prime()
    collector = build_collector(s)
    collector.host = host
    try:
        snap = collector.collect_once()
    finally:
        collector.close()
    click.echo(render(snap, "table"), nl=False)


#: Snapshots the local collector keeps for the dashboard (read once, when the app starts).
DASHBOARD_COLLECTOR_HISTORY = 2


def run_local(s: Settings, options: Any) -> None:
    """The dashboard over this node's collector, sampling in its own thread."""
    from allsmi import heap
    from allsmi.dashboard.app import DashboardApp
    from allsmi.dashboard.sources import NodeSource

    heap.limit_arenas()  # before the collector's, the backends' and Textual's threads start

    # The app keeps its own packed history (sparklines, idle time) and reads the collector's
    # only once, at start: a long collector history (``collector.history_size``, for
    # embedders) would hold hundreds of whole snapshots for nothing (10 KiB each with 8 GPUs).
    collector = build_collector(s, history_size=DASHBOARD_COLLECTOR_HISTORY)
    collector.host.prime()
    collector.start()
    try:
        run_app(DashboardApp(NodeSource(collector), config=s.config, options=options))
    finally:
        _close_quietly(collector.close)


def _close_quietly(close: Any, grace: float = 0.5) -> None:
    # The screen is already restored; a backend stuck in a vendor call must not keep the
    # user waiting, so closing gets a short grace period on a daemon thread.
    closer = threading.Thread(target=close, daemon=True, name="allsmi-close")
    closer.start()
    closer.join(grace)


def _split_hosts(values: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for value in values:
        out.extend(part for part in value.replace(",", " ").split() if part)
    return out


@click.command()
@click.option("--hosts", "hosts", multiple=True, metavar="URL",
              help="Another node's 'allsmi serve' (http://host:9477); repeat the flag or separate "
                   "with commas.")
@click.option("--hostfile", type=click.Path(dir_okay=False), default=None,
              help="File with one URL per line ('#' starts a comment).")
@click.option("--prometheus", metavar="URL", default=None,
              help="Read the whole fleet from this Prometheus server (http://host:9090).")
@click.option("--max-concurrency", type=click.IntRange(min=1, max=256), default=16, show_default=True,
              help="Hosts fetched at the same time (with --hosts/--hostfile).")
@click.option("--ca-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="PEM file of the CA(s) that signed the https:// hosts' or Prometheus' TLS "
                   "certificates, trusted instead of the system's CAs (default: the system's; "
                   "SSL_CERT_FILE also works).")
@dashboard_options
@common_options
def view(hosts: tuple[str, ...], hostfile: str | None, prometheus: str | None, max_concurrency: int,
         ca_file: str | None, theme: str | None, sort: str | None, **opts: Any) -> None:
    """Open the live dashboard: this node, or a cluster of nodes.

    \b
    Keys: ? help, q quit, g groups, c cluster, s sort, / filter, p processes.
    \b
    Examples:
      allsmi view                                      this node (same as plain 'allsmi')
      allsmi --simulate mixed                          a simulated mixed node, no hardware needed
      allsmi view --hosts http://gpu1:9477,http://gpu2:9477
      allsmi view --hostfile /etc/allsmi/hosts.txt
      allsmi view --prometheus http://prometheus:9090
      allsmi view --prometheus https://prometheus:9090 --ca-file /etc/allsmi/ca.pem
    """
    s = settings(**opts)
    options = _options(s, theme, sort)
    urls = _split_hosts(hosts)
    if hostfile:
        from allsmi.dashboard.cluster import HostfileError, read_hostfile
        try:
            urls.extend(read_hostfile(hostfile))
        except HostfileError as exc:
            raise fail(str(exc)) from None
    if urls and prometheus:
        raise fail("give either --hosts/--hostfile or --prometheus, not both")
    if not urls and not prometheus:
        if ca_file is not None:
            raise fail("--ca-file applies to --hosts/--hostfile or --prometheus")
        if _plain_only():
            _print_table_instead(s)
            return
        run_local(s, options)
        return
    source: Any
    if prometheus:
        from allsmi.dashboard.prometheus import PrometheusSource
        try:
            source = PrometheusSource(prometheus, interval=max(s.interval, 1.0), timeout=s.timeout,
                                      ca_file=ca_file)
        except ValueError as exc:
            raise fail(str(exc)) from None
    else:
        from allsmi.dashboard.cluster import ClusterSource
        try:
            source = ClusterSource(urls, interval=s.interval, timeout=s.timeout,
                                   max_concurrency=max_concurrency, ca_file=ca_file)
        except ValueError as exc:
            raise fail(str(exc)) from None
    try:
        if _plain_only():
            _print_hosts_instead(source)
            return
        from allsmi.dashboard.app import DashboardApp
        run_app(DashboardApp(source, config=s.config, options=options))
    finally:
        source.close()


def _print_hosts_instead(source: Any) -> None:
    """One round of fetches printed as a plain hosts table; exit 1 when a host is down."""
    import time

    from allsmi.dashboard.hosts import plain_hosts
    source.refresh(lambda: False)
    hosts = source.hosts()
    click.echo(plain_hosts(hosts, time.monotonic()), nl=False)
    if any(h.error is not None or (h.snapshot is None and h.summary is None) for h in hosts):
        raise SystemExit(1)


@click.command(hidden=True)
@dashboard_options
@common_options
def dashboard_default(theme: str | None, sort: str | None, **opts: Any) -> None:
    """The local dashboard, as plain ``allsmi`` opens it (group options apply)."""
    s = settings(**opts)
    options = _options(s, theme, sort)
    if _plain_only():
        _print_table_instead(s)
        return
    run_local(s, options)
