"""The ``[dashboard]`` table of the configuration file, validated.

.. code-block:: toml

    [dashboard]
    theme = "textual-light"     # any Textual theme name; default textual-dark
    sort = "utilization"        # index, utilization, memory, power or temperature
    processes = "all"           # processes panel: "selected" device or "all" devices

The idle marker and the idle view use ``[accounting] idle_threshold_percent`` (default 5),
as the exporter and the ledger do.
"""

from __future__ import annotations

from dataclasses import dataclass

from allsmi.config import Config
from allsmi.usage import DEFAULT_IDLE_THRESHOLD_PERCENT, idle_threshold_percent

from allsmi.dashboard.state.model import SORT_KEYS

PROCESS_SCOPES = ("selected", "all")
DEFAULT_THEME = "textual-dark"
LIGHT_THEME = "textual-light"


@dataclass(frozen=True)
class DashboardOptions:
    """Settings of the dashboard (config file values, overridden by command-line flags)."""

    theme: str = DEFAULT_THEME
    sort: str = "index"
    processes: str = "selected"
    idle_threshold_percent: float = DEFAULT_IDLE_THRESHOLD_PERCENT
    """``[accounting] idle_threshold_percent``: below it a held device is allocated but idle."""

    @classmethod
    def from_config(cls, config: Config, *, themes: bool = True) -> "DashboardOptions":
        """Read ``[dashboard]``; raise :class:`allsmi.config.ConfigError` naming the bad key.
        ``themes=False``: the theme is not looked up among Textual's (which imports Textual: a
        command other than the dashboard checks the rest of the table without it)."""
        section = config.section("dashboard")
        allowed = ("theme", "sort", "processes")
        for key in section:
            if key not in allowed:
                raise config.error(f"unknown key (allowed: {', '.join(allowed)})", "dashboard", key)
        theme = section.get("theme", DEFAULT_THEME)
        if not isinstance(theme, str) or (themes and theme not in theme_names()):
            raise config.error(f"unknown theme {theme!r} (known: {', '.join(theme_names())})",
                               "dashboard", "theme")
        sort = section.get("sort", "index")
        if sort not in SORT_KEYS:
            raise config.error(f"must be one of {', '.join(SORT_KEYS)}, got {sort!r}", "dashboard", "sort")
        processes = section.get("processes", "selected")
        if processes not in PROCESS_SCOPES:
            raise config.error(f"must be one of {', '.join(PROCESS_SCOPES)}, got {processes!r}",
                               "dashboard", "processes")
        return cls(theme=theme, sort=sort, processes=processes,
                   idle_threshold_percent=idle_threshold_percent(config))


def theme_names() -> list[str]:
    """Themes accepted by ``--theme`` and ``[dashboard] theme``."""
    from textual.theme import BUILTIN_THEMES
    return sorted(BUILTIN_THEMES)
