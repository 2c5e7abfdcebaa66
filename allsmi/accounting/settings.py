"""The ``[ledger]`` and ``[export]`` configuration tables, validated.

Precedence for every setting: command-line flag > environment > file >
default. The ledger path's environment variable is ``ALLSMI_LEDGER``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from allsmi.config import INTERVAL_RANGE, Config, ConfigError, xdg_base
from allsmi.schema.numbers import range_text, setting_number, whole_setting

#: Quarter hours: every UTC offset in use is a multiple of 15 minutes, so the
#: roll-ups line up with the day and month boundaries of any time zone.
ROLLUP_SECONDS = 900
DEFAULT_INTERVAL_SECONDS = 60
DEFAULT_RETENTION_DAYS = 2.0
DEFAULT_COVERAGE_THRESHOLD = 0.95
LEDGER_KEYS = ("path", "retention_days", "rollup_retention_days", "interval_seconds",
               "max_gap_seconds", "checkpoint_seconds")
DEFAULT_CHECKPOINT_SECONDS = 5.0
MAX_CHECKPOINT_SECONDS = 3_600.0
EXPORT_KEYS = ("prometheus", "format", "group_by", "coverage_threshold", "tz",
               "timeout_seconds", "textfile",
               "prometheus_user", "prometheus_password_file", "prometheus_bearer_token_file",
               "prometheus_ca_file", "focus")
#: ``[export]`` keys read where Prometheus is queried (:func:`allsmi.accounting.prometheus.client.access_settings`),
#: checked here as text by every command.
ACCESS_KEYS = ("prometheus_user", "prometheus_password_file", "prometheus_bearer_token_file",
               "prometheus_ca_file")
FORMATS = ("csv", "json", "focus", "parquet", "focus-parquet")
GROUP_BY_KEYS = ("resource_group", "vendor", "model", "host", "user", "namespace", "pod", "job")
DEFAULT_GROUP_BY = ("resource_group", "vendor", "model", "host")


def default_ledger_path(environ: Mapping[str, str] | None = None) -> Path:
    """``/var/lib/allsmi/ledger.db`` for root, else ``$XDG_STATE_HOME/allsmi/ledger.db`` (a
    relative ``$XDG_STATE_HOME`` is ignored: ``~/.local/state``)."""
    env = os.environ if environ is None else environ
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/allsmi/ledger.db")
    return xdg_base("XDG_STATE_HOME", ".local/state", env) / "allsmi" / "ledger.db"


@dataclass(frozen=True)
class LedgerSettings:
    """Where the ledger lives and how it counts."""

    path: Path
    interval_seconds: int = DEFAULT_INTERVAL_SECONDS
    """Length of one raw interval (one minute by default; must divide 900)."""
    retention_days: float = DEFAULT_RETENTION_DAYS
    """How long raw intervals are kept; the roll-ups outlive them."""
    rollup_retention_days: float | None = None
    """How long quarter-hour roll-ups are kept (``None``: forever); daily ones are kept for good."""
    max_gap_seconds: float | None = None
    """Samples further apart than this are not bridged; ``None``: derived from the sampling
    interval (:func:`allsmi.usage.bridged_gap_seconds`)."""
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS
    """How often the interval in progress is made durable (written so far), in the snapshots'
    seconds; 0: only when it completes (a crash then loses it)."""


#: Upper bounds of the ``[ledger]`` and ``[export]`` numbers (docs/configuration.md): a larger
#: value is a typo, and would overflow the arithmetic it feeds (dates, SQLite integers).
MAX_RETENTION_DAYS = 36_500.0
MAX_GAP_SECONDS = 7 * 86_400.0
#: Seconds ``allsmi export``/``idle`` wait for each Prometheus query, inclusive: the one range of
#: both ``--timeout`` and ``[export] timeout_seconds`` (generated into the docs by
#: ``python -m allsmi.cli.docranges``).
EXPORT_TIMEOUT_RANGE = (0.1, 3_600.0)


def _number(config: Config, table: Mapping[str, Any], section: str, key: str,
            minimum: float, allow_zero: bool = True, maximum: float | None = None) -> float | None:
    if key not in table:
        return None
    value = table[key]
    number = setting_number(value)  # (a huge integer: out of range below)
    if number is None:
        raise config.error(f"must be a number {range_text(minimum, maximum, allow_zero)}, "
                           f"got {value!r}", section, key)
    if value < minimum or (value == 0 and not allow_zero) \
            or (maximum is not None and value > maximum):
        raise config.error(f"must be a number {range_text(minimum, maximum, allow_zero)}, "
                           f"got {value!r}", section, key)
    return number


def _unknown(config: Config, table: Mapping[str, Any], section: str, allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise config.error(f"unknown key (allowed: {', '.join(allowed)})", section, key)


def ledger_settings(config: Config, path_flag: str | os.PathLike[str] | None = None,
                    environ: Mapping[str, str] | None = None) -> LedgerSettings:
    """Validate ``[ledger]`` and resolve the path (flag > ``$ALLSMI_LEDGER`` > file > default)."""
    env = os.environ if environ is None else environ
    table = config.section("ledger")
    _unknown(config, table, "ledger", LEDGER_KEYS)
    file_path = table.get("path")
    if file_path is not None and (not isinstance(file_path, str) or not file_path.strip()):
        raise config.error(f"must be a non-empty string, got {file_path!r}", "ledger", "path")
    # '~' is expanded wherever the path comes from: a systemd unit's ExecStart= or
    # Environment= and a crontab's variables pass it on as it is, where it would name a
    # directory called '~' below the working directory ('/' for a service, $HOME for cron).
    if path_flag:
        path = Path(os.path.expanduser(os.fspath(path_flag)))
    elif env.get("ALLSMI_LEDGER", "").strip():  # (an empty or blank variable is unset)
        path = Path(os.path.expanduser(env["ALLSMI_LEDGER"]))
    elif file_path:
        path = Path(os.path.expanduser(file_path))
        if not path.is_absolute() and config.path is not None:
            path = config.path.parent / path  # relative to the config file, as serve.ledger is
    else:
        path = default_ledger_path(env)
    interval = _number(config, table, "ledger", "interval_seconds", 1, maximum=ROLLUP_SECONDS)
    if interval is not None and (whole_setting(table["interval_seconds"]) is None
                                 or ROLLUP_SECONDS % int(interval)):
        raise config.error(f"must be a whole number of seconds dividing {ROLLUP_SECONDS} "
                           f"(e.g. 60, 30, 5), got {table['interval_seconds']!r}",
                           "ledger", "interval_seconds")
    retention = _number(config, table, "ledger", "retention_days", 0, allow_zero=False,
                        maximum=MAX_RETENTION_DAYS)
    rollup = _number(config, table, "ledger", "rollup_retention_days", 0, allow_zero=False,
                     maximum=MAX_RETENTION_DAYS)
    max_gap = ledger_max_gap(config)
    checkpoint = _number(config, table, "ledger", "checkpoint_seconds", 0,
                         maximum=MAX_CHECKPOINT_SECONDS)
    return LedgerSettings(
        path=path,
        checkpoint_seconds=checkpoint if checkpoint is not None else DEFAULT_CHECKPOINT_SECONDS,
        interval_seconds=int(interval) if interval is not None else DEFAULT_INTERVAL_SECONDS,
        retention_days=retention if retention is not None else DEFAULT_RETENTION_DAYS,
        rollup_retention_days=rollup,
        max_gap_seconds=max_gap)


def ledger_max_gap(config: Config) -> float | None:
    """``[ledger] max_gap_seconds`` (``None``: not set), from the least sampling interval to a
    week: checked wherever the file is read, whatever the interval (which
    :func:`allsmi.cli.configcheck.check_ledger_gap` and ``allsmi serve`` add as its lower end)."""
    return _number(config, config.section("ledger"), "ledger", "max_gap_seconds",
                   INTERVAL_RANGE[0], maximum=MAX_GAP_SECONDS)


@dataclass(frozen=True)
class ExportDefaults:
    """``[export]``: defaults for ``allsmi export`` options (flags override them)."""

    prometheus: str | None = None
    format: str = "csv"
    group_by: tuple[str, ...] = DEFAULT_GROUP_BY
    coverage_threshold: float = DEFAULT_COVERAGE_THRESHOLD
    tz: str | None = None
    timeout_seconds: float = 30.0
    textfile: str | None = None


def parse_group_by(text: str | list[Any] | tuple[Any, ...]) -> tuple[str, ...]:
    """``"resource_group,vendor"`` into a tuple of known keys; ValueError names a bad one."""
    if not isinstance(text, (str, list, tuple)):
        raise ValueError(f"must be a comma-separated string or a list of group-by keys, got {text!r}")
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in items:
        if not isinstance(raw, str):
            raise ValueError(f"group-by keys are strings, got {raw!r}")
        key = raw.strip()
        if not key:
            continue
        if key not in GROUP_BY_KEYS:
            raise ValueError(f"unknown group-by key {key!r} (allowed: {', '.join(GROUP_BY_KEYS)})")
        if key not in out:
            out.append(key)
    if "resource_group" not in out:
        out.insert(0, "resource_group")  # prices are per group: rows never mix groups
    return tuple(out)


def export_defaults(config: Config) -> ExportDefaults:
    """Validate ``[export]``."""
    table = config.section("export")
    _unknown(config, table, "export", EXPORT_KEYS)
    values: dict[str, Any] = {}
    for key in ("prometheus", "tz", "textfile") + ACCESS_KEYS:
        if key in table:
            value = table[key]
            if not isinstance(value, str) or not value.strip():
                raise config.error(f"must be a non-empty string, got {value!r}", "export", key)
            if key not in ACCESS_KEYS:  # (those are read by allsmi.accounting.prometheus.client)
                values[key] = value.strip()
    _check_where_it_is_used(config, values)
    if "format" in table:
        if table["format"] not in FORMATS:
            raise config.error(f"must be one of {', '.join(FORMATS)}, got {table['format']!r}",
                               "export", "format")
        values["format"] = table["format"]
    if "group_by" in table:
        try:
            values["group_by"] = parse_group_by(table["group_by"])
        except ValueError as exc:
            raise config.error(str(exc), "export", "group_by") from None
    threshold = _number(config, table, "export", "coverage_threshold", 0, maximum=1)
    if threshold is not None:
        values["coverage_threshold"] = threshold
    timeout = _number(config, table, "export", "timeout_seconds", EXPORT_TIMEOUT_RANGE[0],
                      maximum=EXPORT_TIMEOUT_RANGE[1])
    if timeout is not None:
        values["timeout_seconds"] = timeout
    return ExportDefaults(**values)


def _check_where_it_is_used(config: Config, values: dict[str, Any]) -> None:
    """``[export] prometheus`` and ``tz`` judged by the code that uses them, so that a bad one
    is named with its file, line and key by every command (imported only when set: the URL's
    check lives beside the HTTP client, the zone's beside the periods)."""
    if "prometheus" in values:
        from allsmi.accounting.prometheus.client import PrometheusError, split_url
        try:
            split_url(values["prometheus"])
        except PrometheusError as exc:
            raise config.error(str(exc), "export", "prometheus") from None
    if "tz" in values:
        from allsmi.accounting.periods import PeriodError, zone
        try:
            zone(values["tz"])
        except PeriodError as exc:
            raise config.error(str(exc), "export", "tz") from None


__all__ = ["ConfigError", "LedgerSettings", "ExportDefaults", "ledger_settings", "export_defaults",
           "default_ledger_path", "parse_group_by", "ROLLUP_SECONDS", "FORMATS", "GROUP_BY_KEYS",
           "DEFAULT_GROUP_BY"]
