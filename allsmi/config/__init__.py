"""Configuration: one TOML file, validated completely before anything starts.

Where the file comes from: ``--config PATH``, else ``$ALLSMI_CONFIG``, else
the user's config directory (``$XDG_CONFIG_HOME/allsmi/config.toml``; a relative
``$XDG_CONFIG_HOME`` is ignored, as the XDG spec says), else
``/etc/allsmi/config.toml``; no file at all is fine (defaults). Precedence of
each setting: command-line flag > environment > file > default.

Every problem raises :class:`ConfigError` naming the file, the line and the
key; the CLI turns it into exit code 2. See ``docs/configuration.md``. The core tables are
validated by :mod:`allsmi.config.tables`.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from allsmi.schema.records import Record, record

if TYPE_CHECKING:
    from allsmi.support.tomlkeys import KeyLocator

DEFAULT_GROUP = "default"
SYSTEM_CONFIG = Path("/etc/allsmi/config.toml")
RULE_KEYS = ("host", "vendor", "backend", "model", "uuid", "index", "bus_id")
#: Label names the exporter already uses; a group label may not shadow them.
RESERVED_LABELS = frozenset({"resource_group", "uuid", "index", "vendor", "model", "kind",
                             "backend", "bus_id", "pid", "user", "command", "version",
                             "instance", "job", "le", "quantile"})
#: Tables owned by consumers (and by allsmi.attribution); each validates its own keys through
#: :meth:`Config.section`.
CONSUMER_SECTIONS = ("serve", "dashboard", "ledger", "export", "attribution", "accounting",
                     "activity")


class ConfigError(Exception):
    """A configuration problem, located as precisely as possible."""

    def __init__(self, message: str, path: Path | None = None, line: int | None = None,
                 key: str | None = None, key_path: tuple[str, ...] = ()) -> None:
        from allsmi.schema.text import clipped, escaped  # (errors are rare: not imported for every start)
        message = clipped(message)  # (a value it echoes, cut to a readable length)
        self.path, self.line, self.key, self.message = path, line, key, message
        self.key_path = key_path
        """The key as its table names (``("rules", "2", "vendor")``), where one is known."""
        where = escaped(str(path)) if path else "<config>"
        if line:
            where += f", line {line}"
        if key:
            shown = key if key.isprintable() else key.encode("unicode_escape").decode("ascii")
            where += f", key '{shown}'"  # (a key with a newline in it stays on its line)
        super().__init__(f"{where}: {message}")


@record
class ResourceGroup(Record):
    """A pool of devices for accounting: extra labels and prices for billing."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    price_per_device_hour: float | None = None
    price_per_kwh: float | None = None
    currency: str | None = None
    partition_billing: str = "share"
    """``share``: a partition (MIG instance, compute partition, die) is billed at its share of
    the physical device, its parent at the rest; ``whole``: each device of the group is billed
    as a whole device (for prices set per partition profile)."""
    bill_by: str = "allocated"
    """What ``price_per_device_hour`` prices: ``allocated`` device-hours (held, by declared
    share), or ``used`` (busy) device-hours, each at the billing share."""
    grid_gco2e_per_kwh: float | None = None
    """Carbon intensity of the group's electricity, grams CO2e per kWh; ``None``: the
    ``[accounting]`` one (if any)."""
    budget_per_month: float | None = None
    """The group's budget for a calendar month, in its currency (``None``: no budget)."""


#: Values of ``[groups.NAME] partition_billing``.
PARTITION_BILLING = ("share", "whole")
#: Values of ``[groups.NAME] bill_by``.
BILL_BY = ("allocated", "used")
#: Grid carbon intensity is at most this (g CO2e per kWh; coal is about 1,000).
MAX_GCO2E_PER_KWH = 5000.0
#: Prices are at most this (per device-hour or per kWh): a larger one is a typo.
MAX_PRICE = 1e9
#: A monthly budget is at most this: a larger one is a typo.
MAX_BUDGET = 1e15


@record
class GroupRule(Record):
    """Assigns matching devices to ``resource_group``; every given glob must match."""

    resource_group: str
    patterns: Mapping[str, str]
    line: int | None = None

    def matches(self, facts: Mapping[str, str | None]) -> bool:
        """True when every pattern matches the fact of the same name (case-insensitive globs)."""
        for key, pattern in self.patterns.items():
            value = facts.get(key)
            if value is None or not fnmatch.fnmatchcase(value.lower(), pattern.lower()):
                return False
        return True


#: Documented ranges of the collector settings (docs/configuration.md), shared with the CLI flags.
INTERVAL_RANGE = (0.05, 3600.0)
TIMEOUT_RANGE = (0.05, 600.0)
HISTORY_RANGE = (1, 100_000)


@record
class Config(Record):
    """The whole validated configuration."""

    path: Path | None = None
    default_group: str = DEFAULT_GROUP
    rules: tuple[GroupRule, ...] = ()
    groups: Mapping[str, ResourceGroup] = field(default_factory=dict)
    interval_seconds: float = 2.0
    backend_timeout_seconds: float = 5.0
    history_size: int = 300
    backends_enabled: tuple[str, ...] | None = None
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    _locator: "KeyLocator | None" = field(default=None, repr=False, compare=False)

    def group(self, name: str) -> ResourceGroup:
        """The group called ``name`` (an undeclared group has no labels or prices)."""
        return self.groups.get(name) or ResourceGroup(name)

    def section(self, name: str) -> Mapping[str, Any]:
        """A consumer's table (``serve``, ``dashboard``, ``ledger``, ``export``), possibly empty."""
        return self.sections.get(name, {})

    def error(self, message: str, *key_path: str) -> ConfigError:
        """A :class:`ConfigError` pointing at ``key_path`` (e.g. ``"ledger", "path"``)."""
        line = self._locator.find(key_path) if self._locator else None
        return ConfigError(message, self.path, line, ".".join(key_path) or None, tuple(key_path))


def xdg_base(variable: str, default: str, environ: Mapping[str, str] | None = None) -> Path:
    """An XDG base directory: ``$variable`` when it is an absolute path, else ``~/default``
    (the XDG Base Directory spec: a relative path in the variable is invalid and ignored, as is an
    empty one)."""
    env = os.environ if environ is None else environ
    value = env.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def discover_path(flag: str | os.PathLike[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> tuple[Path | None, bool]:
    """Which file to read, and whether it was asked for explicitly (so must exist)."""
    env = os.environ if environ is None else environ
    if flag:
        return Path(flag), True
    if env.get("ALLSMI_CONFIG", "").strip():  # (an empty or blank variable is unset)
        return Path(env["ALLSMI_CONFIG"]), True
    user = xdg_base("XDG_CONFIG_HOME", ".config", env) / "allsmi" / "config.toml"
    if os.path.isfile(user):  # (os.path: a name too long is no file, where Path.is_file raises)
        return user, False
    if os.path.isfile(SYSTEM_CONFIG):
        return SYSTEM_CONFIG, False
    return None, False


def group_name_problem(name: str, what: str = "a resource group's name") -> str:
    """Why ``name`` cannot name a resource group (``""``: it can)."""
    from allsmi.schema.text import MAX_NAME, clean_text
    if clean_text(name) != name:
        return (f"{what} must be printable text of at most {MAX_NAME} "
                "characters (no control, bidirectional or format characters but the "
                "zero-width joiner and non-joiner): it is shown "
                "and matched so")
    return ""


def load_config(flag: str | os.PathLike[str] | None = None,
                environ: Mapping[str, str] | None = None,
                problems: list[ConfigError] | None = None) -> Config:
    """Find, read and validate the configuration; apply environment overrides.

    The first problem is raised, unless ``problems`` is given: then every problem of the core
    tables is added to it and the config is what the valid keys say."""
    env = os.environ if environ is None else environ
    path, explicit = discover_path(flag, env)
    config = Config()
    if path is not None:
        text, error = read_config_text(path, explicit)
        if error is not None and problems is None:
            raise error
        if error is not None:
            problems.append(error)  # type: ignore[union-attr]
        if problems is None:
            config = parse_config(text, path)
        else:
            config, found = config_problems(text, path)
            problems.extend(found)
    for var, what in (("ALLSMI_RESOURCE_GROUP", "a resource group's name"),
                      ("ALLSMI_HOSTNAME", "a host name")):  # blank: unset (allsmi.collection.host too)
        name = env.get(var, "").strip()
        problem = group_name_problem(name, what)
        if problem:  # a host's name is shown, exported and matched by [[rules]] host alike
            raise ConfigError(f"{name!r}: {problem}", Path(f"${var}"))
        if name and var == "ALLSMI_RESOURCE_GROUP":
            config = replace(config, default_group=name)
    return config


#: The largest configuration file read (a file beyond it, such as ``/dev/zero``, is refused).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def read_config_text(path: Path, explicit: bool) -> tuple[str, ConfigError | None]:
    """The text of the config file (a UTF-8 byte-order mark left out), or ``""`` and why not
    (a missing file is no problem unless it was asked for: ``explicit``)."""
    from allsmi.support.boundedread import TooLarge, read_bounded
    data = b""
    try:
        data = read_bounded(path, MAX_CONFIG_BYTES)
        return data.decode("utf-8").removeprefix("\ufeff"), None
    except FileNotFoundError:
        return "", ConfigError("file not found", path) if explicit else None
    except OSError as exc:
        return "", ConfigError(f"cannot read: {exc.strerror or exc}", path)
    except TooLarge:
        return "", ConfigError(f"too large: a configuration file may be from 0 to "
                               f"{MAX_CONFIG_BYTES} bytes", path)
    except UnicodeDecodeError as exc:
        from allsmi.support.tomlkeys import undecodable
        reason, line, key = undecodable(data, exc)
        return "", ConfigError(reason, path, line, key)


def parse_config(text: str, path: Path | None = None) -> Config:
    """Validate TOML text into a :class:`Config`; raise :class:`ConfigError` on any problem."""
    config, problems = config_problems(text, path, first_only=True)
    if problems:
        raise problems[0]
    return config


#: More problems than this in one file are not looked for (the list would help nobody).
MAX_PROBLEMS = 100


def config_problems(text: str, path: Path | None = None, *,
                    first_only: bool = False) -> tuple[Config, list[ConfigError]]:
    """The :class:`Config` of TOML text and every problem in its core tables: each problem's key
    is left out and the rest validated again, so one bad key does not hide the next. With
    problems, the config returned is what the valid keys say (``allsmi doctor`` diagnoses with
    it)."""
    # Imported here: most runs (no config file) never parse TOML, locate its keys nor validate.
    from allsmi.config.tables import TableValidator
    from allsmi.support.tomlkeys import KeyLocator, drop_key, too_long_integer, toml_syntax_line
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        reason, line = toml_syntax_line(exc)  # and the key written there (one written twice)
        key = KeyLocator(text).shown.get(line) if line else None
        return Config(path=path), [ConfigError(f"invalid TOML: {reason}", path, line, key)]
    except ValueError:  # (tomllib's int() of an integer of more than 4300 digits)
        reason, line, key = too_long_integer(text)
        return Config(path=path), [ConfigError(f"invalid TOML: {reason}", path, line, key)]
    locator = KeyLocator(text)
    problems: list[ConfigError] = []
    while True:
        try:
            return replace(TableValidator(data, path, locator).config(), _locator=locator), problems
        except ConfigError as exc:
            problems.append(exc)
            if first_only or len(problems) >= MAX_PROBLEMS or not drop_key(data, exc.key_path):
                return Config(path=path, _locator=locator), problems


def parse_group_tables(data: Mapping[str, Any], path: Path | None,
                       locator: KeyLocator) -> tuple[dict[str, ResourceGroup], tuple[GroupRule, ...]]:
    """The ``[groups.NAME]`` and ``[[rules]]`` tables of another file in the config's format
    (a scenario's default groups), validated exactly like the config file's; a problem raises
    :class:`ConfigError` naming ``path``, the line and the key."""
    from allsmi.config.tables import TableValidator  # (only where there is a file to validate)
    tables = {k: data[k] for k in ("groups", "rules") if k in data}
    validator = TableValidator(tables, path, locator)
    return validator.groups(), tuple(validator.rules())
