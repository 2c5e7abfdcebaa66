"""Configuration: one TOML file, validated completely before anything starts.

Where the file comes from: ``--config PATH``, else ``$ALLSMI_CONFIG``, else
the user's config directory (``$XDG_CONFIG_HOME/allsmi/config.toml``), else
``/etc/allsmi/config.toml``; no file at all is fine (defaults). Precedence of
each setting: command-line flag > environment > file > default.

Every problem raises :class:`ConfigError` naming the file, the line and the
key; the CLI turns it into exit code 2. See ``docs/configuration.md``.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import sys
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from allsmi.records import Record, record

if TYPE_CHECKING:
    from allsmi.tomlkeys import KeyLocator

DEFAULT_GROUP = "default"
SYSTEM_CONFIG = Path("/etc/allsmi/config.toml")
RULE_KEYS = ("host", "vendor", "backend", "model", "uuid", "index", "bus_id")
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"  # the whole key (re.fullmatch: never "team\n")
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
        self.path, self.line, self.key, self.message = path, line, key, message
        self.key_path = key_path
        """The key as its table names (``("rules", "2", "vendor")``), where one is known."""
        from allsmi.text import escaped  # (errors are rare: not imported for every start)
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


def discover_path(flag: str | os.PathLike[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> tuple[Path | None, bool]:
    """Which file to read, and whether it was asked for explicitly (so must exist)."""
    env = os.environ if environ is None else environ
    if flag:
        return Path(flag), True
    if env.get("ALLSMI_CONFIG"):
        return Path(env["ALLSMI_CONFIG"]), True
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    user = base / "allsmi" / "config.toml"
    if user.is_file():
        return user, False
    if SYSTEM_CONFIG.is_file():
        return SYSTEM_CONFIG, False
    return None, False


def group_name_problem(name: str, what: str = "a resource group's name") -> str:
    """Why ``name`` cannot name a resource group (``""``: it can)."""
    from allsmi.text import MAX_NAME, clean_text
    if clean_text(name) != name:
        return (f"{what} must be printable text of at most {MAX_NAME} "
                "characters (no control, format or bidirectional characters): it is shown "
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
    from dataclasses import replace
    for var, what in (("ALLSMI_RESOURCE_GROUP", "a resource group's name"),
                      ("ALLSMI_HOSTNAME", "a host name")):  # blank: unset (allsmi.host too)
        name = env.get(var, "").strip()
        problem = group_name_problem(name, what)
        if problem:  # a host's name is shown, exported and matched by [[rules]] host alike
            raise ConfigError(f"{name!r}: {problem}", Path(f"${var}"))
        if name and var == "ALLSMI_RESOURCE_GROUP":
            config = replace(config, default_group=name)
    return config


def read_config_text(path: Path, explicit: bool) -> tuple[str, ConfigError | None]:
    """The text of the config file (a UTF-8 byte-order mark left out), or ``""`` and why not
    (a missing file is no problem unless it was asked for: ``explicit``)."""
    data = b""
    try:
        data = path.read_bytes()
        return data.decode("utf-8").removeprefix("\ufeff"), None
    except FileNotFoundError:
        return "", ConfigError("file not found", path) if explicit else None
    except OSError as exc:
        return "", ConfigError(f"cannot read: {exc.strerror or exc}", path)
    except UnicodeDecodeError as exc:
        from allsmi.tomlkeys import undecodable
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
    # Imported here: most runs (no config file) never parse TOML nor locate its keys.
    from allsmi.tomlkeys import KeyLocator, drop_key, toml_syntax_line
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
    locator = KeyLocator(text)
    problems: list[ConfigError] = []
    while True:
        try:
            return _Validator(data, path, locator).config(), problems
        except ConfigError as exc:
            problems.append(exc)
            if first_only or len(problems) >= MAX_PROBLEMS or not drop_key(data, exc.key_path):
                return Config(path=path, _locator=locator), problems


def parse_group_tables(data: Mapping[str, Any], path: Path | None,
                       locator: KeyLocator) -> tuple[dict[str, ResourceGroup], tuple[GroupRule, ...]]:
    """The ``[groups.NAME]`` and ``[[rules]]`` tables of another file in the config's format
    (a scenario's default groups), validated exactly like the config file's; a problem raises
    :class:`ConfigError` naming ``path``, the line and the key."""
    validator = _Validator({k: data[k] for k in ("groups", "rules") if k in data}, path, locator)
    return validator.groups(), tuple(validator.rules())


class _Validator:
    def __init__(self, data: dict[str, Any], path: Path | None, locator: KeyLocator) -> None:
        self.data, self.path, self.locator = data, path, locator

    def fail(self, message: str, *key_path: str | int) -> ConfigError:
        keys = tuple(str(k) for k in key_path)  # an int is an array's index; a str a table's key
        shown = ".".join(f"[{k + 1}]" if isinstance(k, int) else k for k in key_path)
        return ConfigError(message, self.path, self.locator.find(keys), shown.replace(".[", "["),
                           keys)

    def table(self, value: Any, *key_path: str | int) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail("must be a table", *key_path)
        return value

    def number(self, value: Any, *key_path: str | int, minimum: float = 0.0,
               allow_zero: bool = True, maximum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(f"must be a number, got {value!r}", *key_path)
        if value < minimum or (not allow_zero and value == 0):
            raise self.fail(f"must be {'>' if not allow_zero else '>='} {minimum:g}, got {value!r}",
                            *key_path)
        if maximum is not None and value > maximum:
            raise self.fail(f"must be at most {maximum:g}, got {value!r}", *key_path)
        return float(value)

    def string(self, value: Any, *key_path: str | int) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"must be a non-empty string, got {value!r}", *key_path)
        return value.strip()

    def unknown(self, table: Mapping[str, Any], allowed: tuple[str, ...], *key_path: str | int) -> None:
        for key in table:
            if key not in allowed:
                raise self.fail(f"unknown key (allowed: {', '.join(allowed)})", *key_path, key)

    def config(self) -> Config:
        top_allowed = ("node", "collector", "backends", "groups", "rules") + CONSUMER_SECTIONS
        self.unknown(self.data, top_allowed)
        node = self.table(self.data.get("node", {}), "node")
        self.unknown(node, ("resource_group",), "node")
        default_group = self.group_name(self.string(node.get("resource_group", DEFAULT_GROUP),
                                                    "node", "resource_group"),
                                        "node", "resource_group")

        coll = self.table(self.data.get("collector", {}), "collector")
        self.unknown(coll, ("interval_seconds", "backend_timeout_seconds", "history_size"), "collector")
        interval = self.number(coll.get("interval_seconds", 2.0), "collector", "interval_seconds",
                               minimum=INTERVAL_RANGE[0], maximum=INTERVAL_RANGE[1])
        timeout = self.number(coll.get("backend_timeout_seconds", 5.0), "collector",
                              "backend_timeout_seconds", minimum=TIMEOUT_RANGE[0],
                              maximum=TIMEOUT_RANGE[1])
        history = self.number(coll.get("history_size", 300), "collector", "history_size",
                              minimum=HISTORY_RANGE[0], maximum=HISTORY_RANGE[1])
        if history != int(history):
            raise self.fail(f"must be a whole number, got {history!r}", "collector", "history_size")
        history = int(history)

        backends = self.table(self.data.get("backends", {}), "backends")
        enabled: tuple[str, ...] | None = None
        options: dict[str, dict[str, Any]] = {}
        for key, value in backends.items():
            if key == "enabled":
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise self.fail("must be a list of backend names", "backends", "enabled")
                enabled = tuple(value)
            else:
                options[key] = self.table(value, "backends", key)

        groups = self.groups()
        rules = self.rules()

        sections = {}
        for name in CONSUMER_SECTIONS:
            if name in self.data:
                sections[name] = self.table(self.data[name], name)
        return Config(path=self.path, default_group=default_group, rules=tuple(rules),
                      groups=groups, interval_seconds=interval, backend_timeout_seconds=timeout,
                      history_size=history, backends_enabled=enabled, backend_options=options,
                      sections=sections, _locator=self.locator)

    def groups(self) -> dict[str, ResourceGroup]:
        """The ``[groups.NAME]`` tables."""
        groups: dict[str, ResourceGroup] = {}
        for name, raw in self.table(self.data.get("groups", {}), "groups").items():
            self.group_name(name, "groups", name)
            groups[name] = self.group(name, self.table(raw, "groups", name))
        return groups

    def group_name(self, name: str, *path: str | int) -> str:
        """``name`` when a device's group can be called so: a sample's group is cleaned text
        (:func:`allsmi.text.clean_text`), so a name with control or bidirectional characters,
        or over its length, would never be matched by its prices, labels or budget."""
        problem = group_name_problem(name)
        if problem:
            raise self.fail(problem, *path)
        return name

    def rules(self) -> list[GroupRule]:
        """The ``[[rules]]`` tables, in order."""
        rules_raw = self.data.get("rules", [])
        if not isinstance(rules_raw, list):
            raise self.fail("must be an array of tables ([[rules]])", "rules")
        rules = []
        for i, raw in enumerate(rules_raw):
            rule = self.table(raw, "rules", i)
            self.unknown(rule, ("resource_group",) + RULE_KEYS, "rules", i)
            if "resource_group" not in rule:
                raise self.fail("missing key 'resource_group'", "rules", i)
            group = self.group_name(self.string(rule["resource_group"], "rules", i,
                                                "resource_group"), "rules", i, "resource_group")
            patterns = {}
            for key in RULE_KEYS:
                if key in rule:
                    value = rule[key]
                    if isinstance(value, int) and not isinstance(value, bool) and key == "index":
                        if value < 0:
                            raise self.fail(f"must be a device index (0 or more) or a glob, got "
                                            f"{value}", "rules", i, key)
                        value = str(value)
                    patterns[key] = self.string(value, "rules", i, key)
            if not patterns:
                raise self.fail(f"a rule needs at least one of {', '.join(RULE_KEYS)}", "rules", i)
            rules.append(GroupRule(group, patterns, self.locator.find(("rules", str(i)))))
        return rules

    def group(self, name: str, raw: dict[str, Any]) -> ResourceGroup:
        self.unknown(raw, ("labels", "price_per_device_hour", "price_per_kwh", "currency",
                           "partition_billing", "bill_by", "grid_gco2e_per_kwh",
                           "budget_per_month"), "groups", name)
        labels_raw = self.table(raw.get("labels", {}), "groups", name, "labels")
        labels: dict[str, str] = {}
        for key, value in labels_raw.items():
            if not re.fullmatch(_LABEL_NAME, key) or key.startswith("__") or key in RESERVED_LABELS:
                raise self.fail("label names must match [a-zA-Z_][a-zA-Z0-9_]*, not start with '__' "
                                "and not be one of allsmi's own labels", "groups", name, "labels", key)
            if not isinstance(value, (str, int, float)) or isinstance(value, bool) \
                    or (isinstance(value, float) and not math.isfinite(value)):
                raise self.fail("label values must be strings (a finite number is taken as "
                                f"its text), got {value!r}", "groups", name, "labels", key)
            if group_name_problem(str(value)):  # shown and exported as devices' labels are
                raise self.fail("label values must be printable text of at most 256 "
                                "characters (no control, format or bidirectional characters)",
                                "groups", name, "labels", key)
            labels[key] = str(value)
        prices: dict[str, float | None] = {}
        for key in ("price_per_device_hour", "price_per_kwh"):
            prices[key] = self.number(raw[key], "groups", name, key, maximum=MAX_PRICE) \
                if key in raw else None
        billing = self.string(raw.get("partition_billing", "share"), "groups", name,
                              "partition_billing")
        if billing not in PARTITION_BILLING:
            raise self.fail(f"must be one of {', '.join(PARTITION_BILLING)}, got {billing!r}",
                            "groups", name, "partition_billing")
        bill_by = self.string(raw.get("bill_by", "allocated"), "groups", name, "bill_by")
        if bill_by not in BILL_BY:
            raise self.fail(f"must be one of {', '.join(BILL_BY)}, got {bill_by!r}",
                            "groups", name, "bill_by")
        carbon = self.number(raw["grid_gco2e_per_kwh"], "groups", name, "grid_gco2e_per_kwh",
                             maximum=MAX_GCO2E_PER_KWH) if "grid_gco2e_per_kwh" in raw else None
        currency = None
        if "currency" in raw:
            currency = self.string(raw["currency"], "groups", name, "currency").upper()
            if not re.fullmatch(r"[A-Z]{3}", currency):
                raise self.fail("must be an ISO 4217 code such as USD or EUR", "groups", name, "currency")
        if (prices["price_per_device_hour"] is not None or prices["price_per_kwh"] is not None) \
                and currency is None:
            raise self.fail("a group with prices needs a currency", "groups", name)
        budget = self.number(raw["budget_per_month"], "groups", name, "budget_per_month",
                             maximum=MAX_BUDGET) if "budget_per_month" in raw else None
        if budget is not None and currency is None:
            raise self.fail("a group with a budget needs a currency", "groups", name)
        return ResourceGroup(name, labels, prices["price_per_device_hour"], prices["price_per_kwh"],
                             currency, billing, bill_by, carbon, budget)
