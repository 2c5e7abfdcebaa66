"""``allsmi view`` and bare ``allsmi``: the live dashboard.

Wiring only: the local collector (started in its own thread) or a cluster
source (other nodes' ``allsmi serve``, or a Prometheus server) is handed to
:class:`allsmi.dashboard.screen.app.DashboardApp`. See ``docs/dashboard.md``.
"""

from __future__ import annotations

from typing import Any

import click

from allsmi.cli.common import Settings, common_options, dashboard_options, fail, settings
from allsmi.cli.numbertype import WholeRange
from allsmi.cli.dashboard_run import (plain_only, print_table_instead, dashboard_options_for,
                                      run_app, run_local)

__all__ = ["SOURCE_OPTIONS", "dashboard_default", "run_app", "run_local", "view"]

#: The options of ``allsmi view`` that choose a cluster source; every other option of ``view`` is
#: a dashboard option that plain ``allsmi`` takes too (tests/test_docs.py checks it).
SOURCE_OPTIONS = ("--hosts", "--hostfile", "--prometheus", "--max-concurrency", "--ca-file")


def _options(s: Settings, theme: str | None, sort: str | None) -> Any:
    parent = click.get_current_context().find_root().params
    theme = theme if theme is not None else parent.get("theme")
    sort = sort if sort is not None else parent.get("sort")
    return dashboard_options_for(s, theme, sort)


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
@click.option("--max-concurrency", type=WholeRange(1, 256), default=16, show_default=True,
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
    if hosts and not urls:  # `--hosts "$HOSTS"` with nothing in it: never the local node instead
        raise fail(f"--hosts names no host (got {', '.join(repr(h) for h in hosts)})")
    if hostfile:
        from allsmi.dashboard.sources.cluster import HostfileError, read_hostfile
        try:
            urls.extend(read_hostfile(hostfile))
        except HostfileError as exc:
            raise fail(str(exc)) from None
    if urls and prometheus:
        raise fail("give either --hosts/--hostfile or --prometheus, not both")
    if not urls and not prometheus:
        if ca_file is not None:
            raise fail("--ca-file applies to --hosts/--hostfile or --prometheus")
        if plain_only():
            print_table_instead(s)
            return
        run_local(s, options)
        return
    source: Any
    if prometheus:
        from allsmi.dashboard.sources.prometheus import PrometheusSource
        try:
            source = PrometheusSource(prometheus, interval=max(s.interval, 1.0), timeout=s.timeout,
                                      ca_file=ca_file)
        except ValueError as exc:
            raise fail(str(exc)) from None
    else:
        from allsmi.dashboard.sources.cluster import ClusterSource
        try:
            source = ClusterSource(urls, interval=s.interval, timeout=s.timeout,
                                   max_concurrency=max_concurrency, ca_file=ca_file)
        except ValueError as exc:
            raise fail(str(exc)) from None
    try:
        if plain_only():
            _print_hosts_instead(source)
            return
        from allsmi.dashboard.screen.app import DashboardApp
        run_app(DashboardApp(source, config=s.config, options=options))
    finally:
        source.close()


def _print_hosts_instead(source: Any) -> None:
    """One round of fetches printed as a plain hosts table; exit 1 when a host is down."""
    import time

    from allsmi.dashboard.views.hosts import plain_hosts
    source.refresh(lambda: False)
    hosts = source.hosts()
    click.echo(plain_hosts(hosts, time.monotonic()), nl=False)
    note = getattr(source, "note", None)
    if note:  # what the source left out or could not vouch for (a partial Prometheus answer)
        from allsmi.dashboard.views.render import safe
        click.echo(f"note: {safe(note)}", err=True)
    if any(h.error is not None or (h.snapshot is None and h.summary is None) for h in hosts):
        raise SystemExit(1)


@click.command(hidden=True)
@dashboard_options
@common_options
def dashboard_default(theme: str | None, sort: str | None, **opts: Any) -> None:
    """The local dashboard, as plain ``allsmi`` opens it (group options apply)."""
    s = settings(**opts)
    options = _options(s, theme, sort)
    if plain_only():
        print_table_instead(s)
        return
    run_local(s, options)
