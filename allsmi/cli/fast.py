"""The start-up fast path: plain ``allsmi snapshot`` invocations and bare ``allsmi`` without click.

Importing click and building the command tree costs more than the rest of a
one-shot snapshot's start-up. The invocations scripts and cron jobs run
(``allsmi [GLOBAL OPTIONS] snapshot [--format F] [-o FILE] [GLOBAL OPTIONS]``,
global options being ``--config``, ``--simulate``, ``--interval`` and
``--timeout``) are parsed here and run through the same function the click
command calls (:func:`allsmi.cli.snapshot_run.run`); so is bare ``allsmi [GLOBAL OPTIONS]``,
the local dashboard (:func:`allsmi.cli.dashboard_run.run_default`), which then holds neither
click nor the command tree in memory for as long as it runs.

The rule is: identical output, exit status and messages, or no fast path. Any
argument this parser is not sure about (help, ``--version``, an unknown option,
a value click would reject or that looks like an option, an existing path
click would check, ``--``, shell completion) makes :func:`run_fast` return
``None``, and the click group handles the whole command line. Errors found
while running (a bad config file, an unwritable output) import click at that
moment and are printed and turned into exit statuses exactly as click's
standalone mode does.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any, Sequence

#: Options accepted before and after ``snapshot``: flag -> parameter name.
COMMON = {"--config": "config_path", "--simulate": "simulate", "--interval": "interval",
          "--timeout": "backend_timeout"}
#: Options of ``snapshot`` itself.
SNAPSHOT = {**COMMON, "--format": "output_format", "--output": "output", "-o": "output"}
#: click's shell-completion switch for ``prog_name="allsmi"``.
COMPLETE_VAR = "_ALLSMI_COMPLETE"


def parse(argv: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """``(group options, snapshot options)`` with click's values (``None`` for the snapshot's:
    bare ``allsmi``, the dashboard), or ``None`` to use click."""
    if os.environ.get(COMPLETE_VAR):
        return None
    group: dict[str, Any] = {}
    command: dict[str, Any] | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        known = COMMON if command is None else SNAPSHOT
        if command is None and token == "snapshot":
            command = {}
            i += 1
            continue
        flag, eq, value = token.partition("=")
        if not token.startswith("--"):
            flag, eq = token, ""  # "-oFILE" and "-o=FILE" are left to click
        if flag not in known:
            return None
        if not eq:
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            i += 1
        i += 1
        converted = _convert(known[flag], value)
        if converted is None:
            return None
        (group if command is None else command)[known[flag]] = converted
    if command is None:
        # Bare ``allsmi`` (the local dashboard) with global options only; ``--theme``,
        # ``--sort`` and an install without the dashboard go to click.
        return (group, None) if _dashboard_installed() else None  # type: ignore[return-value]
    return group, command


def _dashboard_installed() -> bool:
    """What the click group asks before opening the dashboard (``allsmi.cli.view`` is there)."""
    import importlib.util
    try:
        return importlib.util.find_spec("allsmi.cli.view") is not None
    except ModuleNotFoundError:
        return False


def _convert(param: str, value: str) -> Any:
    """``value`` as click would convert it, or ``None`` if click might reject it."""
    if not value or value.startswith("-"):
        return None
    if param == "output_format":
        from allsmi.cli.snapshot_run import FORMATS
        return value if value in FORMATS else None
    if param in ("interval", "backend_timeout"):
        from allsmi.config import INTERVAL_RANGE, TIMEOUT_RANGE
        from allsmi.schema.numbers import number_in_text  # (as the flags' click type parses it)
        low, high = INTERVAL_RANGE if param == "interval" else TIMEOUT_RANGE
        try:
            return number_in_text(value, low, high)
        except ValueError:
            return None
    if param in ("config_path", "output"):
        # click.Path(dir_okay=False[, writable=True]) checks only paths that exist.
        try:
            st = os.stat(value)
        except OSError:
            return value
        if stat.S_ISDIR(st.st_mode) or not os.access(value, os.R_OK):
            return None
        if param == "output" and not os.access(value, os.W_OK):
            return None
        return value
    return value  # --simulate: any text


def run_fast(argv: Sequence[str]) -> int | None:
    """Run a plain ``allsmi snapshot`` or bare ``allsmi`` and return its exit status;
    ``None``: not handled."""
    parsed = parse(argv)
    if parsed is None:
        return None
    group, command = parsed
    parent = {name: group.get(name) for name in COMMON.values()}
    try:
        try:
            if command is None:
                from allsmi.cli.dashboard_run import run_default
                run_default(parent)
                return 0
            from allsmi.cli.snapshot_run import run
            opts = {name: command.get(name) for name in COMMON.values()}
            run(command.get("output_format"), command.get("output"), opts, parent=parent)
            return 0
        except BaseException as exc:  # noqa: BLE001 - handled as click's main() would
            return _standalone_exit(exc)
    except (EOFError, KeyboardInterrupt):
        return 1


def _standalone_exit(exc: BaseException) -> int:
    """What click's ``Command.main`` (standalone mode) does with an exception from a command."""
    import errno

    import click

    from allsmi.cli.common import exit_code_of
    code = exit_code_of(exc)
    if code is not None:
        return code
    if isinstance(exc, click.exceptions.Abort):
        click.echo("Aborted!", file=sys.stderr)
        return 1
    if isinstance(exc, (EOFError, KeyboardInterrupt)):
        click.echo(file=sys.stderr)
        click.echo("Aborted!", file=sys.stderr)
        return 1
    if isinstance(exc, click.ClickException):
        from allsmi.cli.common import clip_message
        clip_message(exc).show()
        return exc.exit_code
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        # A closed pipe (``allsmi snapshot | head -c1``): silence the final flush, exit 1.
        import click.utils
        # private since click 8.2, public before
        wrapper = getattr(click.utils, "_PacifyFlushWrapper", None) or click.utils.PacifyFlushWrapper
        sys.stdout = wrapper(sys.stdout)
        sys.stderr = wrapper(sys.stderr)
        return 1
    raise exc
