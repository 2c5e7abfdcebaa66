"""Turning numbers into colored text: gauges, per-core strips, sparklines.

Colors come from the active Textual theme (its success/warning/error
colors), so they stay readable on dark and light themes. Color is never the
only signal: a gauge's length, the number beside it and the health word
carry the same information, which keeps the screen usable under
``NO_COLOR`` (where Textual renders everything monochrome).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

from rich.text import Text

from allsmi.schema.formatting import NA
from allsmi.schema.text import clean_text

_EIGHTHS = " ▏▎▍▌▋▊▉"
_LEVELS = " ▁▂▃▄▅▆▇█"

#: Utilization/memory thresholds (percent) for the warning and critical colors.
LOAD_WARN, LOAD_HOT = 60.0, 85.0
#: Temperature thresholds in degrees Celsius.
TEMP_WARN, TEMP_HOT = 75.0, 85.0


@dataclass(frozen=True, eq=False, repr=False)  # nothing compares or prints one
class Palette:
    """The styles cells are drawn with; built from the current theme."""

    ok: str = "green"
    warn: str = "yellow"
    hot: str = "red"
    accent: str = "cyan"
    dim: str = "dim"
    mono: bool = False

    @classmethod
    def from_theme(cls, theme: object | None, no_color: bool = False) -> "Palette":
        """Colors of a :class:`textual.theme.Theme` (duck-typed); plain styles under NO_COLOR."""
        if no_color:
            return cls(ok="", warn="bold", hot="bold reverse", accent="bold", dim="dim", mono=True)
        if theme is None:
            return cls()

        light = getattr(theme, "dark", True) is False

        def pick(name: str, default: str) -> str:
            value = getattr(theme, name, None)
            if not value:
                return default
            if light:
                # Theme accents are tuned for dark backgrounds; bars and numbers drawn in them
                # need more contrast on a light one.
                from textual.color import Color
                try:
                    return Color.parse(str(value)).darken(0.18).hex
                except Exception:  # a theme color Textual itself cannot parse: use it as given
                    return str(value)
            return str(value)

        return cls(ok=pick("success", "green"), warn=pick("warning", "yellow"),
                   hot=pick("error", "red"), accent=pick("accent", "cyan"))

    def load(self, percent: float | None) -> str:
        """Style for a utilization or memory share."""
        if percent is None:
            return self.dim
        if percent >= LOAD_HOT:
            return self.hot
        if percent >= LOAD_WARN:
            return self.warn
        return self.ok

    def temperature(self, celsius: float | None) -> str:
        """Style for a temperature."""
        if celsius is None:
            return self.dim
        if celsius >= TEMP_HOT:
            return self.hot
        if celsius >= TEMP_WARN:
            return self.warn
        return ""

    def health(self, health: str) -> str:
        """Style for a health word (``ok``, ``degraded``, ``lost``, ``unknown``, ``stale``)."""
        return {"ok": self.ok, "degraded": self.warn, "lost": f"bold {self.hot}".strip(),
                "stale": self.warn}.get(health, self.dim)


def clamp_percent(value: float) -> float:
    """``value`` limited to 0..100."""
    return 0.0 if value < 0 else 100.0 if value > 100 else value


def gauge(percent: float | None, width: int, style: str, palette: Palette) -> Text:
    """A horizontal bar ``width`` cells wide filled to ``percent`` (eighth-cell steps)."""
    if width <= 0:
        return Text()
    if percent is None:
        return Text("·" * width, style=palette.dim)
    cells = clamp_percent(percent) / 100.0 * width
    full = int(cells)
    part = int((cells - full) * 8)
    filled = "█" * full + (_EIGHTHS[part] if full < width and part else "")
    text = Text(filled, style=style)
    text.append("·" * (width - len(filled)), style=palette.dim)
    return text


def level(value: float | None, low: float = 0.0, high: float = 100.0) -> str:
    """One block character for ``value`` between ``low`` and ``high`` (space when unknown)."""
    if value is None or high <= low:
        return " "
    ratio = (value - low) / (high - low)
    ratio = 0.0 if ratio < 0 else 1.0 if ratio > 1 else ratio
    return _LEVELS[1 + int(round(ratio * 7))]


def core_strip(cores: Sequence[float], width: int, palette: Palette) -> Text:
    """Per-core activity: one block per core (cores averaged into ``width`` cells when more)."""
    if not cores or width <= 0:
        return Text()
    if len(cores) > width:
        size = len(cores) / width
        cores = [sum(cores[int(i * size):max(int((i + 1) * size), int(i * size) + 1)])
                 / max(1, int((i + 1) * size) - int(i * size)) for i in range(width)]
    text = Text()
    for value in cores:
        text.append(level(value), style=palette.load(value))
    if len(cores) < width:
        text.append("·" * (width - len(cores)), style=palette.dim)
    return text


def spark(values: Sequence[float | None], width: int, low: float = 0.0, high: float = 100.0) -> str:
    """The last ``width`` values as a block sparkline, right-aligned, gaps as spaces."""
    return spark_text(spark_levels(values, width, low, high), width)


def spark_text(levels: Sequence[int], width: int) -> str:
    """A sparkline from :func:`spark_levels` output, right-aligned in ``width`` cells."""
    return " " * (width - len(levels)) + "".join(" " if v < 0 else _LEVELS[1 + v] for v in levels)


def spark_levels(values: Sequence[float | None], width: int, low: float = 0.0,
                 high: float = 100.0) -> tuple[int, ...]:
    """The sparkline's levels (a cheap key to tell whether it changed)."""
    count = len(values)
    # Index from the end: O(width) on a long deque, not a copy of the whole history.
    tail = [values[i] for i in range(max(0, count - width), count)] if width > 0 else []
    out = []
    for value in tail:
        if value is None or high <= low:
            out.append(-1)
        else:
            ratio = min(1.0, max(0.0, (value - low) / (high - low)))
            out.append(int(round(ratio * 7)))
    return tuple(out)


def na_text(style: str = "dim") -> Text:
    """"N/A" in the dim style (the formatting module's spelling)."""
    return Text(NA, style=style)


# -- the one gate between data and the terminal -----------------------------------------

def safe(value: Any) -> str:
    """``value`` as text fit for the terminal: every control character (C0, DEL, C1, ESC)
    replaced, one character for one, by :func:`allsmi.schema.text.clean_text`. Schema objects are
    already clean; this covers everything else shown (host keys, problems, messages)."""
    text = value if isinstance(value, str) else str(value)
    return text if text.isprintable() else clean_text(text, sys.maxsize)


def safe_text(value: Any) -> Text:
    """A cell or line as a :class:`Text`, never parsed as markup, with control characters
    replaced. A ``Text`` keeps its styles (the replacement keeps every offset) and its line
    breaks: the text in it was made safe where it was read, and the breaks are the layout's
    (a wrapped problem, :func:`allsmi.dashboard.views.hosts.wrapped`)."""
    if isinstance(value, Text):
        if not value.plain.isprintable():
            value.plain = "\n".join(safe(line) for line in value.plain.split("\n"))
        return value
    return Text(safe(value))
