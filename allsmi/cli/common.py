"""Options and wiring shared by every command.

The CLI is the only layer that wires configuration, backends, the collector
and the consumers together. Errors a user can fix (a bad config file, an
unknown scenario) exit with code 2 and a message naming the file and key.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from allsmi.config import (DEFAULT_GROUP, INTERVAL_RANGE, TIMEOUT_RANGE, Config, ConfigError,
                           load_config, parse_group_tables)

if TYPE_CHECKING:
    import click

# click is imported inside the functions that use it, not here: ``allsmi snapshot``'s
# start-up fast path (allsmi/cli/fast.py) runs through this module without click, and
# imports it only to print an error exactly as click would.

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2


class Settings:
    """What the global and per-command options decided.

    A plain class, not a dataclass: nothing compares or prints settings, and ``@dataclass``
    would compile ``__init__``, ``__repr__`` and ``__eq__`` at import (about 2 million
    instructions of every command's start-up, a one-shot ``allsmi snapshot``'s included)."""

    __slots__ = ("config", "simulate", "interval", "timeout", "scenario")

    def __init__(self, config: Config, simulate: str | None, interval: float, timeout: float,
                 scenario: Any = None) -> None:
        self.config = config
        self.simulate = simulate
        self.interval = interval
        self.timeout = timeout
        self.scenario = scenario
        """The loaded scenario when simulating (parsed once, when the options are checked)."""


def fail(message: str, code: int = EXIT_USAGE) -> "click.exceptions.Exit":
    """Print ``allsmi: message`` to stderr (each value it echoes cut to a readable length:
    :func:`allsmi.schema.text.clipped`) and return an exit to raise."""
    import click

    from allsmi.schema.text import clipped
    click.echo(f"allsmi: {clipped(message)}", err=True)
    return click.exceptions.Exit(code)


def clip_message(exc: "click.ClickException") -> "click.ClickException":
    """``exc`` (a usage error click shows) with each value its message echoes cut to a
    readable length (:func:`allsmi.schema.text.clipped`)."""
    from allsmi.schema.text import clipped
    exc.message = clipped(exc.message)
    return exc


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Click callback: NaN passes every range check, so reject it (and infinities) here."""
    import math

    import click
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, got {value!r}")
    return value


def refuse_empty(command: "click.Command") -> "click.Command":
    """``command`` with each of its text and path options refusing an empty value (exit 2), which
    would otherwise read as not given: ``--web-config ''`` serving without TLS, ``-o ''``
    printing to stdout, ``--config ''`` reading another file, ``--simulate ''`` the hardware.
    The group applies it to every command it runs (and to its own options); an option taken
    several times says itself what an empty value means. ``--output -`` is stdout."""
    import click
    for param in command.params:
        if isinstance(param, click.Option) and not param.is_flag and not param.multiple \
                and isinstance(param.type, (click.types.StringParamType, click.Path)) \
                and not getattr(param.callback, "refuses_empty", False):
            param.callback = _non_empty(param.callback)
    return command


def _non_empty(callback: Callable[..., Any] | None) -> Callable[..., Any]:
    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        import click
        if isinstance(value, str) and not value.strip():
            raise click.BadParameter(f"must not be empty, got {value!r} (leave the option out "
                                     "for the default)")
        if param.name == "output" and value == "-":
            value = None  # `-o -`: stdout, as without the option, never a file called "-"
        return callback(ctx, param, value) if callback else value
    check.refuses_empty = True  # type: ignore[attr-defined]
    return check


def seconds_option(*names: str, limits: tuple[float, float], help: str) -> Callable[[F], F]:  # noqa: A002
    """A float option of seconds within ``limits`` (inclusive), finite."""
    import click

    from allsmi.cli.numbertype import DecimalRange
    return click.option(*names, type=DecimalRange(limits[0], limits[1]), default=None,
                        callback=finite, help=help)


def common_options(func: F) -> F:
    """``--config``, ``--simulate``, ``--interval`` and ``--timeout`` for a command.

    Given on the group (``allsmi --simulate mixed serve``) or on the command
    (``allsmi serve --simulate mixed``); the command's own value wins.
    """
    import click
    options = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                     help="Config file (default: $ALLSMI_CONFIG, ~/.config/allsmi/config.toml, "
                          "/etc/allsmi/config.toml)."),
        click.option("--simulate", metavar="SCENARIO", default=None,
                     help="Simulate a node instead of reading hardware: 'mixed', 'mixed-faults' "
                          "or a scenario file path."),
        seconds_option("--interval", limits=INTERVAL_RANGE,
                       help="Seconds between collection cycles (config: collector.interval_seconds)."),
        seconds_option("--timeout", "backend_timeout", limits=TIMEOUT_RANGE,
                       help="Per-backend timeout in seconds (config: collector.backend_timeout_seconds)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


#: The dashboard's initial sort orders (``--sort``, ``[dashboard] sort``).
SORT_CHOICES = ("index", "utilization", "memory", "power", "temperature")


def dashboard_options(func: F) -> F:
    """``--theme`` and ``--sort``: the dashboard's options, taken by plain ``allsmi`` and by
    ``allsmi view`` alike (given on both, the command's own value wins)."""
    import click
    options = [
        click.option("--theme", default=None, metavar="NAME",
                     help="Textual theme, e.g. textual-dark, textual-light (config: dashboard.theme)."),
        click.option("--sort", type=click.Choice(SORT_CHOICES), default=None,
                     help="Initial sort order (config: dashboard.sort)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def settings(config_path: str | None, simulate: str | None, interval: float | None,
             backend_timeout: float | None, *, parent: Mapping[str, Any] | None = None,
             problems: list[ConfigError] | None = None) -> Settings:
    """Resolve flags > environment > file > defaults; exit 2 on a bad config.

    The whole file is checked, every consumer's table included (:mod:`allsmi.cli.configcheck`).
    ``parent`` holds the options given before the command (``allsmi --simulate mixed
    snapshot``); ``None`` reads them from the current click context. With ``problems`` (``allsmi
    doctor``), every problem of the file is added to it instead of exiting, and the settings
    are what its valid keys say.
    """
    if parent is None:
        import click
        parent = click.get_current_context().find_root().params
    config_path = config_path or parent.get("config_path")
    simulate = simulate or parent.get("simulate")
    interval = interval or parent.get("interval")
    backend_timeout = backend_timeout or parent.get("backend_timeout")
    try:
        config = load_config(config_path, problems=problems)
        if config.path is not None or problems:  # without a file, there is nothing to check
            from dataclasses import replace
            from allsmi.cli.configcheck import check_config, problems_in
            # the gaps bridged are judged against the interval this command samples at
            sampled = replace(config, interval_seconds=interval) if interval else config
            if problems is None:
                check_config(sampled, interval=interval)
            else:
                sampled, found = problems_in(sampled, thorough=True, interval=interval)
                config = replace(sampled, interval_seconds=config.interval_seconds)
                problems.extend(found)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    config = backends_from_environment(config)
    scenario = None
    if simulate is not None:
        from allsmi.backends.simulated import ScenarioError, load_scenario
        try:
            scenario = load_scenario(simulate)
            config = with_scenario_groups(config, scenario)
        except (ScenarioError, ConfigError) as exc:
            raise fail(str(exc)) from None
    return Settings(config=config, simulate=simulate, scenario=scenario,
                    interval=interval or config.interval_seconds,
                    timeout=backend_timeout or config.backend_timeout_seconds)


#: Backend names, comma-separated, run instead of ``[backends] enabled`` (one config file for
#: every vendor's pod, each pod running only its own vendor).
BACKENDS_VAR = "ALLSMI_BACKENDS"


def backends_from_environment(config: Config, environ: "Mapping[str, str] | None" = None) -> Config:
    """``config`` with ``$ALLSMI_BACKENDS`` in place of ``[backends] enabled`` (environment over
    file); an unknown or empty list exits 2 naming the variable."""
    import os
    value = (os.environ if environ is None else environ).get(BACKENDS_VAR)
    if value is None or not value.strip():
        return config
    from dataclasses import replace
    from allsmi.collection import registry
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    known = registry.names()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        what = f"unknown backend(s) {', '.join(map(repr, unknown))}" if unknown else "no backend named"
        raise fail(f"${BACKENDS_VAR}={value!r}: {what} (installed: {', '.join(known)}; separate "
                   "names with commas)")
    return replace(config, backends_enabled=names)


def exit_code_of(exc: BaseException) -> int | None:
    """The status of click's ``Exit`` (what :func:`fail` returns), else ``None``.

    Never imports click: if click is not loaded, ``exc`` cannot be one of its exceptions.
    """
    exceptions = sys.modules.get("click.exceptions")
    if exceptions is not None and isinstance(exc, exceptions.Exit):
        return int(exc.exit_code)
    return None


def with_scenario_groups(config: Config, scenario: Any,
                         environ: "Mapping[str, str] | None" = None) -> Config:
    """``config`` with the scenario's default resource groups under it.

    The user's rules come first, then the scenario's; the user's groups replace scenario
    groups of the same name. A node group chosen by the user (``$ALLSMI_RESOURCE_GROUP`` or
    ``[node] resource_group``) drops the scenario's rules, so that every device no user rule
    matches goes to it, as on real hardware. Raises ``ConfigError`` (naming the scenario
    file, line and key) for a bad table.
    """
    import os
    from dataclasses import replace
    env = os.environ if environ is None else environ
    groups: dict[str, Any] = {}
    rules: list[Any] = []
    for tables in getattr(scenario, "group_tables", ()):  # this file first, then its includes
        own_groups, own_rules = parse_group_tables(
            {"groups": tables.groups, "rules": tables.rules}, tables.path, tables.locator)
        groups = {**own_groups, **groups}
        rules.extend(own_rules)
    if not groups and not rules:
        return config
    node_group_chosen = bool(env.get("ALLSMI_RESOURCE_GROUP", "").strip()) or \
        config.default_group != DEFAULT_GROUP
    return replace(config, groups={**groups, **config.groups},
                   rules=config.rules + (() if node_group_chosen else tuple(rules)))


def build_attributor(s: Settings) -> Any:
    """The attribution sources of ``[attribution]`` (and the simulated one with ``--simulate``);
    exit 2 on a bad table."""
    from allsmi.collection import registry
    from allsmi.attribution import build_attributor as build
    try:
        return build(s.config, simulate=s.simulate is not None,
                     declarations=registry.declarations())
    except ConfigError as exc:
        raise fail(str(exc)) from None


def log_to_stderr() -> None:
    """For the daemons (``serve``, ``record``): warnings and errors (a failed ledger write, a
    failed cycle, a backend's bug) as ``allsmi: LEVEL: ...`` lines on stderr, each saying what
    it is, rather than logging's bare last-resort lines."""
    import logging
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("allsmi: %(levelname)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.WARNING)


#: Open files a collecting command needs at least: vendor libraries hold a few per device,
#: each vendor tool call three pipes, the ledger five files, ``allsmi serve`` 64 connections
#: (``allsmi.exporter.bounds``: the limit less 64 kept for everything else). Below it,
#: collection cycles would fail with EMFILE one by one; a command refuses to start instead.
DESCRIPTOR_FLOOR = 128


def ensure_descriptors(floor: int = DESCRIPTOR_FLOOR) -> None:
    """Raise the soft open-file limit to ``floor`` when it is below (the hard limit allows it
    for any user); exit 2 with a message when the hard limit itself is below ``floor``."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= floor:
        return
    if hard == resource.RLIM_INFINITY or hard >= floor:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (floor, hard))
            return
        except (ValueError, OSError):
            pass
    shown = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    raise fail(f"the open-file limit is {soft} (hard limit {shown}); allsmi needs at least {floor} "
               f"open files to collect without failing: raise it (ulimit -n {floor}, systemd "
               f"LimitNOFILE=, docker run --ulimit nofile={floor})")


def build_collector(s: Settings, *, history_size: int | None = None):  # type: ignore[no-untyped-def]
    """A collector over the configured (or simulated) backends and the attribution sources,
    not yet started; first makes sure of :data:`DESCRIPTOR_FLOOR` open files."""
    ensure_descriptors()
    from allsmi.collection import registry
    from allsmi.collection.collector import Collector
    clock = simulation_clock() if s.simulate else None
    activity_settings(s)  # a bad [activity] exits 2 before anything starts
    attributor = build_attributor(s)
    try:
        backends = registry.instantiate(s.config.backends_enabled, timeout_seconds=s.timeout,
                                        options={k: dict(v) for k, v in s.config.backend_options.items()},
                                        simulate=s.scenario, clock=clock)
    except registry.UnknownBackend as exc:
        attributor.close()
        raise fail(str(exc)) from None
    collector = Collector(backends, s.config, interval_seconds=s.interval,
                          timeout_seconds=s.timeout, history_size=history_size,
                          attributor=attributor, **({"clock": clock} if clock else {}))
    # The waiting step ([activity], validated above) is made on the first cycle with a holder.
    return collector


def activity_settings(s: Settings) -> Any:
    """``[activity]``, validated (exit 2 naming the file, line and key), before anything starts;
    ``None`` where neither ``[activity]`` nor ``[accounting]`` (its idle threshold) is written:
    the defaults are valid, and a snapshot that finds no holder never imports the module."""
    if not s.config.section("activity") and not s.config.section("accounting"):
        return None
    from allsmi.hostactivity.settings import activity_settings as validate
    try:
        return validate(s.config)
    except ConfigError as exc:
        raise fail(str(exc)) from None


MAX_SIMULATE_SPEED = 1_000_000.0


def simulation_speed(simulate: bool = True, environ: "Mapping[str, str] | None" = None) -> float:
    """``$ALLSMI_SIMULATE_SPEED`` (1 when unset or not simulating); a bad value exits 2."""
    import os

    from allsmi.schema.numbers import number_in_text
    raw = (os.environ if environ is None else environ).get("ALLSMI_SIMULATE_SPEED")
    if not simulate or not raw or not raw.strip():  # (an empty or blank variable is unset)
        return 1.0
    try:
        return number_in_text(raw, 0.0, MAX_SIMULATE_SPEED, low_open=True)
    except ValueError as exc:
        raise fail(f"$ALLSMI_SIMULATE_SPEED: {exc}") from None


def simulation_clock() -> "Callable[[], float] | None":
    """An accelerated clock when ``$ALLSMI_SIMULATE_SPEED`` is set (simulation only).

    Simulated time then runs SPEED times faster than wall time from the moment
    the process started, for demos and day-long accounting tests in minutes.
    """
    import os
    import time
    if not os.environ.get("ALLSMI_SIMULATE_SPEED", "").strip():
        return None
    speed = simulation_speed()
    # Anchored on the monotonic clock: simulated time never steps with the wall clock, so the
    # collector can measure durations on it too.
    origin, steady = time.time(), time.monotonic()
    return lambda: origin + (time.monotonic() - steady) * speed


def stdout_is_terminal() -> bool:
    """Whether stdout is an interactive terminal."""
    return sys.stdout.isatty()
