"""The whole config file, checked the same by every command (issue 32, item 12).

:mod:`allsmi.config` validates the core tables (``[node]``, ``[collector]``, ``[backends]``,
``[groups]``, ``[[rules]]``); each consumer's table is validated by its consumer (``[serve]``
by the exporter's options, ``[ledger]`` and ``[export]`` by the accounting, ``[attribution]``
by the attribution, ``[activity]`` by the waiting classification, ``[dashboard]`` by the
dashboard). Here every command runs each of those
checks for the tables the file has, so a typo in ``[serve]`` stops ``allsmi snapshot`` too
(exit 2, naming the file, the line and the key) rather than the service at its next restart.
``allsmi doctor`` collects every problem instead of stopping at the first
(:func:`problems_in`): each problem's key is left out and the checks run again.

Only the file is judged here: environment variables are the command's own business. A
``[dashboard] theme`` is checked against the installed themes only by the dashboard
(``allsmi``, ``allsmi view``) and ``allsmi doctor`` (``thorough``): knowing them means
importing Textual, which a snapshot must not pay for. The rest of ``[dashboard]`` is checked
by every command. The files the config names (``[serve] web_config``, ``[export]``'s password,
bearer token and CA files) are read only by the command that uses each, and by ``allsmi
doctor``, as that command reads them: doctor passes no file the command would refuse. The gaps bridged (``[serve] energy_max_gap_seconds``, ``[ledger]
max_gap_seconds``) are judged against ``config.interval_seconds``, which
:func:`allsmi.cli.common.settings` sets to the command's ``--interval`` for the check (that
flag also samples ``allsmi serve``, above ``[serve] interval_seconds``: each check is given it).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Callable

from allsmi.config import MAX_PROBLEMS, Config, ConfigError
from allsmi.support.tomlkeys import drop_key


def _serve(config: Config, interval: float | None = None) -> None:
    from allsmi.cli.serveoptions import resolve_options
    try:
        resolve_options({}, config, {}, interval)  # (the command's --interval wins, as in serve)
    except ValueError as exc:  # a ConfigError where a key is to blame; this is the rest
        raise config.error(str(exc), "serve") from None


def _ledger(config: Config, interval: float | None = None) -> None:
    from allsmi.accounting.settings import ledger_settings
    check_ledger_gap(config, ledger_settings(config, environ={}).max_gap_seconds,
                     config.interval_seconds)


def check_ledger_gap(config: Config, max_gap_seconds: float | None, interval: float) -> None:
    """``[ledger] max_gap_seconds`` is at least the sampling interval ``interval``: a shorter gap
    bridges nothing, and every interval would be lost."""
    if max_gap_seconds is not None and max_gap_seconds < interval:
        raise config.error(f"must be at least the sampling interval ({interval:g} s), "
                           f"got {max_gap_seconds:g}", "ledger", "max_gap_seconds")


def _serve_files(config: Config, interval: float | None = None) -> None:
    """``[serve] web_config`` loaded as ``allsmi serve`` loads it: the file, its YAML, the
    certificates, keys and hashes it names."""
    from allsmi.cli.serveoptions import load_web, resolve_options
    try:
        options = resolve_options({}, config, {}, interval)
    except (ConfigError, ValueError):  # (said by _serve, which runs first)
        return
    load_web(options, {}, config, {})


def _export_files(config: Config, interval: float | None = None) -> None:
    """``[export]``'s password, bearer token and CA files read as ``allsmi export --prometheus``
    reads them (each message names the file, never what it holds), and its user with them."""
    from allsmi.accounting.prometheus.access import access_settings
    try:
        access_settings(config)
    except ValueError as exc:  # (every value is the file's: located, but for safety)
        raise config.error(str(exc), "export") from None


def _export(config: Config, interval: float | None = None) -> None:
    from allsmi.accounting.focus import focus_settings
    from allsmi.accounting.settings import export_defaults
    export_defaults(config)
    focus_settings(config)


def _attribution(config: Config, interval: float | None = None) -> None:
    from allsmi.collection import registry
    from allsmi.attribution import attribution_settings
    attribution_settings(config, {}, registry.declarations())


def _accounting(config: Config, interval: float | None = None) -> None:
    from allsmi.usage import grid_gco2e_per_kwh
    grid_gco2e_per_kwh(config)  # and idle_threshold_percent, and the table's keys


def _activity(config: Config, interval: float | None = None) -> None:
    from allsmi.hostactivity.settings import activity_settings
    activity_settings(config)


def _dashboard(config: Config, interval: float | None = None) -> None:
    from allsmi.dashboard.screen.options import DashboardOptions
    DashboardOptions.from_config(config, themes=False)


def _dashboard_theme(config: Config, interval: float | None = None) -> None:
    from allsmi.dashboard.screen.options import DashboardOptions
    DashboardOptions.from_config(config)


def _backends(config: Config, interval: float | None = None) -> None:
    """``[backends] enabled`` names installed backends; each ``[backends.NAME]`` table is an
    installed backend's, with the keys it declares and values in their ranges
    (:class:`~allsmi.schema.declarations.BackendOption`; a plug-in that declares none is not checked)."""
    from allsmi.collection import registry  # checked here: allsmi.config must not reach the backends
    known = registry.names()
    for name in config.backends_enabled or ():
        if name not in known:
            raise config.error(f"unknown backend {name!r} (installed: {', '.join(known)})",
                               "backends", "enabled")
    if not config.backend_options:
        return
    declared = {d.backend: d.options for d in registry.declarations()}
    declared.update((name, ()) for name in registry.SIMULATION_BACKENDS)  # they take none
    for name, table in config.backend_options.items():
        if name not in known:
            raise config.error(f"no backend is called {name!r} (installed: {', '.join(known)}; "
                               "the table is [backends.NAME])", "backends", name)
        options = declared.get(name)
        if options is None:
            continue
        by_name = {o.name: o for o in options}
        for key, value in table.items():
            option = by_name.get(key)
            if option is None:
                allowed = ", ".join(by_name) or "none"
                raise config.error(f"unknown option of the {name} backend (allowed: {allowed})",
                                   "backends", name, key)
            problem = option.problem(value)
            if problem is not None:
                raise config.error(problem, "backends", name, key)


#: (table, check); a check runs when the file has the table.
CHECKS: tuple[tuple[str, Callable[[Config, float | None], None]], ...] = (
    ("backends", _backends), ("accounting", _accounting), ("serve", _serve), ("ledger", _ledger),
    ("export", _export), ("attribution", _attribution), ("activity", _activity),
    ("dashboard", _dashboard))
#: Run as well by ``thorough`` checks (``allsmi doctor``): the theme among Textual's, and the
#: files the config names, which only the command that uses one reads (a token file readable
#: by the billing job's user alone stops no other command).
THOROUGH: tuple[tuple[str, Callable[[Config, float | None], None]], ...] = (
    ("dashboard", _dashboard_theme), ("serve", _serve_files), ("export", _export_files))


def _has(config: Config, table: str) -> bool:
    if table == "backends":
        return config.backends_enabled is not None or bool(config.backend_options)
    return table in config.sections


def _without(config: Config, key_path: tuple[str, ...]) -> Config | None:
    """``config`` less the key at ``key_path`` (``None`` when it cannot be left out)."""
    if key_path[:2] == ("backends", "enabled"):
        return replace(config, backends_enabled=None)
    if key_path[:1] == ("backends",) and len(key_path) in (2, 3):
        options = {name: dict(table) for name, table in config.backend_options.items()}
        if len(key_path) == 2:
            options.pop(key_path[1], None)
        else:
            options.get(key_path[1], {}).pop(key_path[2], None)
        return replace(config, backend_options=options)
    sections: dict[str, Any] = copy.deepcopy(dict(config.sections))
    if not drop_key(sections, key_path):
        return None
    return replace(config, sections=sections)


def problems_in(config: Config, *, thorough: bool = False, first_only: bool = False,
                interval: float | None = None) -> tuple[Config, list[ConfigError]]:
    """Every problem in the consumers' tables of ``config``, and the config less the keys to
    blame (what the valid keys say). ``interval``: the command's ``--interval``, which samples
    ``allsmi serve`` too (above ``[serve] interval_seconds``)."""
    problems: list[ConfigError] = []
    for table, check in CHECKS + (THOROUGH if thorough else ()):
        while _has(config, table) and len(problems) < MAX_PROBLEMS:
            try:
                check(config, interval)
                break
            except ConfigError as exc:
                problems.append(exc)
                if first_only:
                    return config, problems
                smaller = _without(config, exc.key_path) if exc.key_path else None
                if smaller is None or exc.key_path == (table,):
                    config = replace(config, sections={k: v for k, v in config.sections.items()
                                                       if k != table})
                    if table == "backends":
                        config = replace(config, backends_enabled=None, backend_options={})
                else:
                    config = smaller
    return config, problems


def check_config(config: Config, *, thorough: bool = False, interval: float | None = None) -> None:
    """Raise the first problem in the consumers' tables of ``config`` (see the module)."""
    _, problems = problems_in(config, thorough=thorough, first_only=True, interval=interval)
    if problems:
        raise problems[0]
