"""``allsmi serve``'s settings: flags, then ``ALLSMI_SERVE_*`` environment variables, then the
``[serve]`` table of the config file, then defaults (``docs/exporter.md``).

Apart from the command (no click here) so that every command can check a ``[serve]`` table
(:mod:`allsmi.cli.configcheck`) without loading the exporter's command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from allsmi.cli.common import simulation_speed
from allsmi.config import INTERVAL_RANGE, Config
from allsmi.schema.numbers import number_in_text, range_text, setting_number, whole_setting
from allsmi.schema.text import unresolvable_host
from allsmi.usage import bridged_gap_seconds

DEFAULT_PORT = 9477
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
SERVE_KEYS = ("listen", "interval_seconds", "processes", "web_config", "energy_max_gap_seconds",
              "ledger", "max_holder_series")
#: The keys whose values are numbers (in the file, TOML numbers, not text).
NUMBER_KEYS = ("interval_seconds", "energy_max_gap_seconds", "max_holder_series")
#: ``max_holder_series`` accepts 0 (no per-holder series: all holder time in the overflow
#: holders) to this.
MAX_HOLDER_SERIES_LIMIT = 1_000_000
ENV = {"listen": "ALLSMI_SERVE_LISTEN", "interval_seconds": "ALLSMI_SERVE_INTERVAL",
       "processes": "ALLSMI_SERVE_PROCESSES", "web_config": "ALLSMI_SERVE_WEB_CONFIG",
       "energy_max_gap_seconds": "ALLSMI_SERVE_ENERGY_MAX_GAP", "ledger": "ALLSMI_SERVE_LEDGER",
       "max_holder_series": "ALLSMI_SERVE_MAX_HOLDER_SERIES"}


@dataclass(frozen=True)
class ServeOptions:
    """What ``allsmi serve`` resolved from flags, environment, file and defaults."""

    host: str
    port: int
    interval: float
    processes: bool
    web_config: Path | None
    energy_max_gap: float
    ledger: Path | None
    max_holder_series: int


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` as (host, port); ``:PORT`` gives the host
    ``""``: every interface, IPv4 and IPv6 (``0.0.0.0`` is IPv4's only)."""
    text = value.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or len(port.lstrip("0")) > 5 \
            or not 0 <= int(port) <= 65535 \
            or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in host) \
            or unresolvable_host(host):
        shown = repr(value) if len(value) <= 100 else repr(value[:99]) + "…"
        raise ValueError(f"expected HOST:PORT with a port from 0 to 65535 (e.g. {DEFAULT_LISTEN}, "
                         f"[::1]:{DEFAULT_PORT} or :{DEFAULT_PORT} for all interfaces), got {shown}")
    return host, int(port)


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _positive(value: Any, minimum: float, maximum: float) -> float:
    """A finite number from ``minimum`` to ``maximum`` (``minimum`` itself left out when it is
    0): an environment variable's text (:func:`~allsmi.schema.numbers.number_in_text`, as the flags
    parse theirs) or the file's TOML number."""
    if isinstance(value, str):
        return number_in_text(value, minimum, maximum, low_open=minimum == 0)
    number = setting_number(value)  # (a huge integer: out of range below)
    if number is None or number > maximum or number < minimum or (minimum == 0 and number == 0):
        words = range_text(minimum, maximum, minimum != 0)
        raise ValueError(f"expected a number {words}, got {value!r}")
    return number


def _count(value: Any) -> int:
    """A whole number from 0 to :data:`MAX_HOLDER_SERIES_LIMIT`: an environment variable's text
    (:func:`~allsmi.schema.numbers.number_in_text`) or the file's number
    (:func:`~allsmi.schema.numbers.whole_setting`: ``10.0`` is whole, as everywhere)."""
    if isinstance(value, str):
        return int(number_in_text(value, 0, MAX_HOLDER_SERIES_LIMIT, whole=True))
    number = whole_setting(value)
    if number is None or not 0 <= number <= MAX_HOLDER_SERIES_LIMIT:
        raise ValueError(f"expected a whole number from 0 to {MAX_HOLDER_SERIES_LIMIT}, "
                         f"got {value!r}")
    return number


def resolve_options(flags: Mapping[str, Any], config: Config, environ: Mapping[str, str],
                    common_interval: float | None, simulate: bool = False) -> ServeOptions:
    """Merge flag > environment > ``[serve]`` > default; raise ConfigError or ValueError."""
    section = config.section("serve")
    for key in section:
        if key not in SERVE_KEYS:
            raise config.error(f"unknown key (allowed: {', '.join(SERVE_KEYS)})", "serve", key)
    if "processes" in section and not isinstance(section["processes"], bool):  # TOML's own
        raise config.error(f"expected true or false, got {section['processes']!r}",
                           "serve", "processes")
    for key in NUMBER_KEYS:  # TOML's own numbers: text is the environment's, never the file's
        if key in section and (isinstance(section[key], bool)
                               or not isinstance(section[key], (int, float))):
            raise config.error(f"expected a number, got {section[key]!r}", "serve", key)
    base = config.path.parent if config.path else Path(".")

    def pick(key: str, convert: Any) -> Any:
        if flags.get(key) is not None:
            return flags[key]
        env = environ.get(ENV[key])
        if env and env.strip():  # (an empty or blank variable is unset: docs/configuration.md)
            try:
                return convert(env)
            except ValueError as exc:
                raise ValueError(f"${ENV[key]}: {exc}") from None
        if key in section:
            try:
                value = convert(section[key])
            except (ValueError, TypeError) as exc:
                raise config.error(str(exc), "serve", key) from None
            if key in ("web_config", "ledger"):
                value = str(base / Path(value).expanduser())  # file paths: relative to the config file
            return value
        return None

    def text(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected a non-empty string, got {value!r}")
        return value.strip()

    def flag(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return _bool(value)  # the environment's text (the file's is checked above)
        raise ValueError(f"expected true or false, got {value!r}")

    listen = pick("listen", text) or DEFAULT_LISTEN
    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        if flags.get("listen") is not None:
            raise ValueError(f"--listen: {exc}") from None
        if (environ.get(ENV["listen"]) or "").strip():
            raise ValueError(f"${ENV['listen']}: {exc}") from None
        if "listen" in section:
            raise config.error(str(exc), "serve", "listen") from None
        raise
    interval = common_interval or pick("interval_seconds", lambda v: _positive(v, *INTERVAL_RANGE)) \
        or config.interval_seconds
    gap = pick("energy_max_gap_seconds", lambda v: _positive(v, 0.0, 7 * 86400.0))
    if gap is None and "max_gap_seconds" in config.section("ledger"):
        from allsmi.accounting.settings import ledger_max_gap  # (its type and range)
        gap = ledger_max_gap(config)
    if gap is not None and gap < interval:
        # A gap shorter than the sampling interval would bridge nothing: every second lost.
        # The message names where the gap was given: the flag, the environment, else the file.
        problem = f"must be at least the sampling interval ({interval:g} s), got {gap!r}"
        if flags.get("energy_max_gap_seconds") is not None:
            raise ValueError(f"--energy-max-gap: {problem}")
        if (environ.get(ENV["energy_max_gap_seconds"]) or "").strip():
            raise ValueError(f"${ENV['energy_max_gap_seconds']}: {problem}")
        raise config.error(problem, *(("serve", "energy_max_gap_seconds")
                                      if "energy_max_gap_seconds" in section
                                      else ("ledger", "max_gap_seconds")))
    web = pick("web_config", text)
    ledger = pick("ledger", text)
    return ServeOptions(host=host, port=port, interval=interval,
                        processes=bool(pick("processes", flag)),
                        web_config=Path(web) if web else None,
                        energy_max_gap=bridged_gap_seconds(interval, gap, simulation_speed(simulate, environ)),
                        ledger=Path(ledger) if ledger else None,
                        max_holder_series=_series_cap(pick("max_holder_series", _count)))


def load_web(options: ServeOptions, flags: Mapping[str, Any], config: Config,
             environ: Mapping[str, str]) -> Any:
    """The web configuration ``options`` names, loaded and checked whole
    (:func:`allsmi.exporter.webconfig.load_web_config`: its YAML, certificates, keys and
    hashes), or ``None`` without one. A problem raises ``ValueError`` naming the flag or the
    variable that gave the path, or :class:`~allsmi.config.ConfigError` naming the config
    file's line and key ``serve.web_config`` (``allsmi doctor`` checks the file's so)."""
    if options.web_config is None:
        return None
    from allsmi.exporter.webconfig import WebConfigError, load_web_config
    try:
        return load_web_config(options.web_config)
    except WebConfigError as exc:
        if flags.get("web_config") is not None:
            raise ValueError(f"--web-config: {exc}") from None
        if (environ.get(ENV["web_config"]) or "").strip():
            raise ValueError(f"${ENV['web_config']}: {exc}") from None
        raise config.error(str(exc), "serve", "web_config") from None


def _series_cap(value: int | None) -> int:
    from allsmi.exporter.holders import DEFAULT_MAX_HOLDER_SERIES
    return DEFAULT_MAX_HOLDER_SERIES if value is None else value
