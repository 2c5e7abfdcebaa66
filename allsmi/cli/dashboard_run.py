"""The local dashboard without click: what bare ``allsmi`` and ``allsmi view`` run.

Bare ``allsmi`` with only the global options (``--config``, ``--simulate``, ``--interval``,
``--timeout``) is parsed by the start-up fast path (:mod:`allsmi.cli.fast`) and runs
:func:`run_default` without importing click or building the command tree (about 0.6 MiB of
the running dashboard's memory); ``allsmi view`` and every other invocation reach the same
functions through click (:mod:`allsmi.cli.view`). click is imported only to print a message
exactly as click would.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Mapping

from allsmi.cli.common import Settings, build_collector, fail, settings, simulation_speed
from allsmi.config import ConfigError


def dashboard_options_for(s: Settings, theme: str | None, sort: str | None) -> Any:
    """The dashboard's options: the configuration's, then ``--theme`` and ``--sort``."""
    from dataclasses import replace

    from allsmi.dashboard.screen.options import DashboardOptions, theme_names
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


def plain_only() -> bool:
    if _not_a_terminal():
        return True
    if _dumb_terminal():
        import click
        click.echo("allsmi: TERM=dumb: printing one plain table instead of the dashboard", err=True)
        return True
    return False


def run_app(app: Any, **run: Any) -> None:
    """Run the dashboard; an unexpected error (Textual prints its traceback once the screen is
    restored) ends the command with that exit code, never 0. The terminal going away (SIGHUP,
    a hang-up or an I/O error on it) ends the process within a second with status 129, whatever
    the UI threads are doing; SIGTERM quits like `q` (see :mod:`allsmi.dashboard.screen.terminal`)."""
    from allsmi.dashboard.screen.terminal import TERM_EXIT_CODE, TerminalGuard
    with TerminalGuard(app.quit_soon) as guard:
        app.run(**run)
    code = app.return_code or 0
    if guard.tripped:
        code = guard.clean_exit_code or code
        if guard.code != TERM_EXIT_CODE:  # SIGTERM is an ordinary stop; say why anything else ended it
            try:
                import click
                click.echo(f"allsmi: dashboard ended: {guard.reason}", err=True)
            except OSError:
                pass  # the terminal went away (the usual reason): there is nobody left to tell
    if code:
        raise SystemExit(code)


def print_table_instead(s: Settings) -> None:
    """Without a terminal (a pipe, cron) print one snapshot table, as ``allsmi snapshot`` does."""
    from allsmi.cli.snapshot import render
    from allsmi.collection.host import HostSampler
    host = HostSampler()
    host.prime()
    collector = build_collector(s)
    collector.host = host
    try:
        snap = collector.collect_once()
    finally:
        collector.close()
    import click
    click.echo(render(snap, "table"), nl=False)


#: Snapshots the local collector keeps for the dashboard (read once, when the app starts).
DASHBOARD_COLLECTOR_HISTORY = 2


def run_local(s: Settings, options: Any) -> None:
    """The dashboard over this node's collector, sampling in its own thread."""
    from allsmi.support import heap
    from allsmi.dashboard.screen.app import DashboardApp
    from allsmi.dashboard.sources import NodeSource

    heap.limit_arenas()  # before the collector's, the backends' and Textual's threads start

    # The app keeps its own packed history (sparklines, idle time) and reads the collector's
    # only once, at start: a long collector history (``collector.history_size``, for
    # embedders) would hold hundreds of whole snapshots for nothing (10 KiB each with 8 GPUs).
    # SIGTERM or SIGINT while the backends are built (seconds with a slow vendor library) quits
    # as `q` does, exit 0, and SIGHUP as the terminal going away does (129): never the signal's
    # default death; once the app runs, its TerminalGuard handles them.
    from allsmi.cli.stopsignals import StartupStopped, StopSignals
    signals, collector = StopSignals(), None
    try:
        collector = build_collector(s, history_size=DASHBOARD_COLLECTOR_HISTORY)
        collector.host.prime()
        collector.start()
    except StartupStopped as stopped:
        if collector is not None:
            _close_quietly(collector.close)
        raise SystemExit(128 + signal.SIGHUP if stopped.signum == signal.SIGHUP else 0) from None
    finally:
        signals.restore()
    try:
        run_app(DashboardApp(NodeSource(collector), config=s.config, options=options,
                             speed=simulation_speed(s.simulate is not None)))
    finally:
        _close_quietly(collector.close)


def _close_quietly(close: Any, grace: float = 0.5) -> None:
    # The screen is already restored; a backend stuck in a vendor call must not keep the
    # user waiting, so closing gets a short grace period on a daemon thread.
    closer = threading.Thread(target=close, daemon=True, name="allsmi-close")
    closer.start()
    closer.join(grace)


def run_default(parent: Mapping[str, Any]) -> None:
    """Bare ``allsmi`` with the global options in ``parent`` (what the click group's
    ``dashboard_default`` does with no ``--theme`` or ``--sort``)."""
    s = settings(None, None, None, None, parent=parent)
    options = dashboard_options_for(s, None, None)
    if plain_only():
        print_table_instead(s)
        return
    run_local(s, options)
