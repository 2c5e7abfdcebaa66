"""What ``allsmi snapshot`` does, without click.

Both the click command (:mod:`allsmi.cli.snapshot`) and the start-up fast path
(:mod:`allsmi.cli.fast`) call :func:`run`, so the two cannot drift apart. Nothing
here imports click on the way to a document: click is imported only where a
message is printed or an exit status raised (:func:`allsmi.cli.common.fail`), so
every error looks exactly as it does under click.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

FORMATS = ("json", "csv", "processes-csv", "table", "prometheus")

#: How long closing waits for each backend (twice: before and after aborting its call).
CLOSE_GRACE_SECONDS = 1.0


def render(snapshot: Any, output_format: str, config: Any = None) -> str:
    """The snapshot in ``output_format``; imports only what that format needs. ``config``
    gives the Prometheus text its groups' prices and budgets (as ``allsmi serve`` has them)."""
    if output_format == "json":
        from allsmi.output import to_json
        return to_json(snapshot)
    if output_format == "csv":
        from allsmi.output import to_csv
        return to_csv(snapshot)
    if output_format == "processes-csv":
        from allsmi.output import to_processes_csv
        return to_processes_csv(snapshot)
    if output_format == "prometheus":
        from allsmi.exporter.exposition import render_snapshot
        if config is None:
            return render_snapshot(snapshot)
        from allsmi.exporter.builder import GroupPrice
        groups = config.groups.items()
        return render_snapshot(snapshot, declared_groups={n: g.labels for n, g in groups},
                               group_prices={n: GroupPrice(g.price_per_device_hour, g.price_per_kwh,
                                                           g.currency, g.budget_per_month)
                                             for n, g in groups})
    from allsmi.cli.table import render_table
    return render_table(snapshot)


def output_mode(output_format: str) -> int:
    """Permissions of ``-o FILE``: the Prometheus text is for node_exporter's textfile
    collector, which runs as another user, and holds no process details, so it is
    world-readable (0644); JSON, CSV and table may list processes' users and command
    lines, so they are owner-only (0600)."""
    return 0o644 if output_format == "prometheus" else 0o600


def run(output_format: str | None, output: str | None, opts: Mapping[str, Any],
        parent: Mapping[str, Any] | None = None) -> None:
    """Take one snapshot and print it (or write it to ``output``).

    ``opts`` are the common options (``config_path``, ``simulate``, ``interval``,
    ``backend_timeout``); ``parent`` the same options given before the command
    (``None``: read them from the current click context). Errors a user can fix
    raise click's ``Exit`` through :func:`allsmi.cli.common.fail`. Interrupted (SIGINT,
    Ctrl-C) before the document is written, it writes nothing and exits 130 with one line;
    once the document is being written, it is written whole (docs/snapshot.md).
    """
    written: list[bool] = []
    try:
        _run(output_format, output, opts, parent, written)
    except KeyboardInterrupt:
        if written:  # the document is whole: what is left is closing the backends
            return
        from allsmi.cli.common import fail
        raise fail("interrupted by SIGINT; nothing was written", 130) from None


def _run(output_format: str | None, output: str | None, opts: Mapping[str, Any],
         parent: Mapping[str, Any] | None, written: list[bool]) -> None:
    # Taken before any backend runs: a vendor library that redirects or scribbles on fd 1
    # (amdsmi's import and init run with fd 1 pointed at a capture file, and a call that
    # never returns would leave it there) cannot swallow the document.
    out = OriginalStdout()
    from allsmi.collection.host import HostSampler
    host = HostSampler()
    host.prime()
    from allsmi.cli.common import build_collector, exit_code_of, fail, settings, stdout_is_terminal
    s = settings(**opts, parent=parent)
    if output:  # (before any backend runs: a mistyped --output never costs a ledger)
        from allsmi.support.atomic import holds_database
        if holds_database(output):
            raise fail(f"--output {output} is an SQLite database (a ledger?): writing the snapshot "
                       "would replace it; write it elsewhere")
    if output_format is None:
        output_format = "table" if (output is None and stdout_is_terminal()) else "json"
    collector = build_collector(s)
    collector.host = host
    code = 0
    try:
        # collect_once() returns within the backend timeout whatever a backend does
        # (a hung one is reported as ``timeout``); the document is written before the
        # backends are closed, so closing a stuck one can never delay or lose it.
        snap = collector.collect_once()
        text = render(snap, output_format, s.config)
        with sigint_held():  # never a part of the document: SIGINT waits until it is out
            if output:
                from allsmi.support.atomic import write_atomic
                try:
                    write_atomic(output, text, mode=output_mode(output_format))
                except OSError as exc:
                    raise fail(f"cannot write {output}: {exc.strerror or exc}", 1) from None
            else:
                out.write(text)
            written.append(True)
    except BaseException as exc:
        exit_code = exit_code_of(exc)
        if exit_code is not None:
            code = exit_code
            raise
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1  # never "exit 0 with nothing"
        if code == 1:
            say_unexpected(exc)
        raise
    finally:
        clean = collector.close_within(CLOSE_GRACE_SECONDS)
        if not clean:
            leave_now(code, collector.stuck)


@contextmanager
def sigint_held() -> Iterator[None]:
    """SIGINT (Ctrl-C) ignored while the block runs (it writes the document, which is then
    whole or, written to a file, absent); only the main thread can set a handler, and a
    handler Python did not set is left alone."""
    import signal
    import threading
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def say_unexpected(exc: BaseException) -> None:
    """The traceback of what is a bug; nothing for a standard output that could not take the
    document (a full disk, a reader that left): :func:`allsmi.cli.main.main` says that in one
    line."""
    from allsmi.cli.main import is_output_lost
    if is_output_lost(exc):
        return
    import traceback
    traceback.print_exc()


def leave_now(code: int, stuck: list[str]) -> None:
    """Exit at once, without waiting for threads stuck in a vendor library.

    A ctypes call into a C library (amdsmi, NVML) cannot be interrupted. A daemon thread
    stuck in one would not stop Python from exiting by itself, but the exit path would
    still call into the same library (NVML's ``nvmlShutdown`` at exit, ``atexit``
    handlers, the import lock, stdio flushing with fd 1 redirected by that thread) and
    can hang behind the stuck call for ever. The document is already written, so flush
    what we own and leave with ``os._exit``.
    """
    import os
    import click
    click.echo(f"allsmi: backend(s) {', '.join(stuck)} stuck in a vendor call; "
               "exiting without waiting for them", err=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: the message above is all that can be said
            pass
    os._exit(code)


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd``, or an ``OSError``: never a part of it in silence (a
    buffered stream that a reader left takes part of a document and says nothing)."""
    import os
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class OriginalStdout:
    """The process's stdout as it was when the command started (a private dup of fd 1)."""

    def __init__(self) -> None:
        import os
        try:
            self._fd: int | None = os.dup(1)
        except OSError:
            self._fd = None

    def write(self, text: str) -> None:
        if self._fd is None:
            import click
            click.echo(text, nl=False)
            return
        sys.stdout.flush()
        write_all(self._fd, text.encode("utf-8"))
