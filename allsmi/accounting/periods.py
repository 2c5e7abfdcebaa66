"""Billing windows: ``--period yesterday|today|last-week|this-week|last-month|this-month|YYYY-MM|
YYYY-MM-DD`` or ``--since/--until``. Weeks are ISO weeks: Monday 00:00 to Monday 00:00.

Calendar periods are taken in the given time zone (UTC by default), so a
month in ``Europe/Berlin`` starts at local midnight and a day around a DST
change lasts 23 or 25 hours. Windows are half-open, ``[start, end)``, on whole seconds (the
fraction of a ``--since``/``--until`` second is dropped).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC = dt.timezone.utc
PERIODS_HELP = ("yesterday, today, last-week, this-week, last-month, this-month, YYYY-MM or "
                "YYYY-MM-DD")


class PeriodError(ValueError):
    """A period, time or zone the user gave cannot be understood."""


@dataclass(frozen=True)
class Window:
    """A half-open time window ``[start, end)``; both ends are aware datetimes in ``tz``."""

    start: dt.datetime
    end: dt.datetime

    @property
    def start_unix(self) -> int:
        """Start as whole unix seconds."""
        return int(self.start.timestamp())

    @property
    def end_unix(self) -> int:
        """End as whole unix seconds."""
        return int(self.end.timestamp())

    @property
    def seconds(self) -> int:
        """The window's length in seconds (real elapsed time, DST included)."""
        return self.end_unix - self.start_unix


def zone(name: str | None) -> dt.tzinfo:
    """The IANA zone called ``name`` (UTC when ``None``)."""
    if name is None or name.upper() in ("UTC", "Z"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # (OSError: a name too long for a file)
        raise PeriodError(f"unknown time zone {name!r} (use an IANA name such as Europe/Berlin)") \
            from None


def _midnight(day: dt.date, tz: dt.tzinfo) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=tz)


def _month_start(year: int, month: int, tz: dt.tzinfo) -> dt.datetime:
    while month > 12:
        year, month = year + 1, month - 12
    while month < 1:
        year, month = year - 1, month + 12
    return dt.datetime(year, month, 1, tzinfo=tz)


def _normalize(start: dt.datetime, end: dt.datetime, tz: dt.tzinfo) -> Window:
    # Round-trip through UTC so that the offsets are right across DST changes. Both edges are
    # truncated to the whole second (the ledger, Prometheus and the simulated replay bill whole
    # seconds, and the period columns show them): a window is exactly what is billed.
    return Window(*(t.replace(microsecond=0).astimezone(UTC).astimezone(tz) for t in (start, end)))


def _in_range(what: str, make, *args):  # type: ignore[no-untyped-def]
    """``make(*args)``, with a date beyond what datetime holds (year 1 to 9999, in UTC and in
    the zone) said as a :class:`PeriodError` (exit 2), not a traceback."""
    try:
        return make(*args)
    except PeriodError:
        raise
    except (ValueError, OverflowError) as exc:
        raise PeriodError(f"{what} is out of range (years 1 to 9999 in UTC and in the time "
                          f"zone): {exc}") from None


def _months_around(window: Window, tz: dt.tzinfo) -> None:
    """Raise where the calendar months a bill reads around ``window`` (the month holding it, for
    the forecast to the month's end and the budgets' month to date) leave the calendar: a
    window in December 9999 ends a month whose next one is in the year 10000."""
    for when in (window.start, window.end):
        _month_start(when.year, when.month + 1, tz).astimezone(UTC)
        _month_start(when.year, when.month, tz).astimezone(UTC)


def parse_period(text: str, tz: dt.tzinfo = UTC, now: dt.datetime | None = None) -> Window:
    """The window a ``--period`` value names, in ``tz``; ``today``, ``this-week`` and
    ``this-month`` end at the current minute, and are refused (:class:`PeriodError`) in their
    first minute, when they hold no whole one yet."""
    window = _in_range(f"period {text!r}", _parse_period, text, tz, now)
    _in_range(f"period {text!r}", _months_around, window, tz)
    if window.end <= window.start:  # (today at 00:00:30: nothing to bill yet)
        raise PeriodError(
            f"--period {text.strip()}: the window is empty: it runs from {iso(window.start)} to "
            f"the current minute, which is {iso(window.end)}; it holds a whole minute from "
            f"{iso(window.start + dt.timedelta(minutes=1))} on (a finished period, such as "
            "yesterday, last-week or last-month, is there already)")
    return window


def _parse_period(text: str, tz: dt.tzinfo, now: dt.datetime | None) -> Window:
    now = (now or dt.datetime.now(UTC)).astimezone(tz)
    key = text.strip().lower()
    if key in ("yesterday", "today"):
        today = now.date()
        if key == "today":
            end = now.replace(second=0, microsecond=0)
            return _normalize(_midnight(today, tz), end, tz)
        day = today - dt.timedelta(days=1)
        return _normalize(_midnight(day, tz), _midnight(today, tz), tz)
    if key in ("last-week", "this-week"):
        monday = now.date() - dt.timedelta(days=now.weekday())
        if key == "this-week":
            return _normalize(_midnight(monday, tz), now.replace(second=0, microsecond=0), tz)
        return _normalize(_midnight(monday - dt.timedelta(days=7), tz), _midnight(monday, tz), tz)
    if key in ("last-month", "this-month"):
        shift = -1 if key == "last-month" else 0
        start = _month_start(now.year, now.month + shift, tz)
        end = _month_start(now.year, now.month + shift + 1, tz)
        if key == "this-month":
            end = now.replace(second=0, microsecond=0)
        return _normalize(start, end, tz)
    match = re.fullmatch(r"(\d{4})-(\d{2})", key)
    if match:
        year, month = int(match.group(1)), int(match.group(2))
        if not 1 <= month <= 12:
            raise PeriodError(f"invalid month in period {text!r}")
        return _normalize(_month_start(year, month, tz), _month_start(year, month + 1, tz), tz)
    match = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", key)
    if match:
        try:
            day = dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        except ValueError as exc:
            raise PeriodError(f"invalid date in period {text!r}: {exc}") from None
        return _normalize(_midnight(day, tz), _midnight(day + dt.timedelta(days=1), tz), tz)
    raise PeriodError(f"unknown period {text!r} (expected {PERIODS_HELP})")


def parse_time(text: str, tz: dt.tzinfo = UTC) -> dt.datetime:
    """An ISO 8601 date or date-time; without an offset it is taken in ``tz``."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        value = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise PeriodError(f"invalid time {text!r} (expected ISO 8601, e.g. 2026-03-01 or "
                          "2026-03-01T12:00:00Z)") from None
    if value.tzinfo is None:
        if len(raw) > 10:  # a time of day (a date alone: its first instant, as --period's)
            _one_instant(text, value, tz)
        value = value.replace(tzinfo=tz)
    return _in_range(f"time {text!r}", value.astimezone, tz)


def _one_instant(text: str, wall: dt.datetime, tz: dt.tzinfo) -> None:
    """Refuse a local time of day that is no instant in ``tz`` (skipped when the clocks go
    forward) or two (passed twice when they go back), naming the offsets to choose from: never
    a window an hour shorter or longer than asked, or an empty one, chosen silently."""
    first, second = wall.replace(tzinfo=tz, fold=0), wall.replace(tzinfo=tz, fold=1)
    offsets = [first.utcoffset(), second.utcoffset()]
    if offsets[0] == offsets[1]:
        return
    named = " or ".join(dict.fromkeys(f"{wall.isoformat()}{_offset(o)}" for o in offsets))
    back = _in_range(f"time {text!r}", first.astimezone, UTC).astimezone(tz)
    if back.replace(tzinfo=None) != wall:
        raise PeriodError(f"time {text!r} does not exist in {tz} (the clocks skip it, going "
                          f"forward that day): give it with an offset, such as {named}")
    raise PeriodError(f"time {text!r} happens twice in {tz} (the clocks go back that day): give "
                      f"it with its offset, {named}")


def _offset(delta: dt.timedelta | None) -> str:
    """``+02:00`` for a UTC offset."""
    minutes = int((delta or dt.timedelta()).total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def window_from(period: str | None, since: str | None, until: str | None,
                tz: dt.tzinfo = UTC, now: dt.datetime | None = None) -> Window:
    """The window the export options describe: a period, or since/until (until defaults to now)."""
    if period and (since or until):
        raise PeriodError("give either --period or --since/--until, not both")
    if period:
        return parse_period(period, tz, now)
    if not since:
        raise PeriodError(f"give --period ({PERIODS_HELP}) or --since")
    start = parse_time(since, tz)
    end = parse_time(until, tz) if until else \
        (now or dt.datetime.now(UTC)).astimezone(tz).replace(second=0, microsecond=0)
    window = _in_range("--since/--until", _normalize, start, end, tz)
    _in_range("--since/--until", _months_around, window, tz)
    if window.end <= window.start:  # (compared to the whole second, as billed)
        raise PeriodError(f"the window is empty: --until ({end.isoformat()}) is not a whole "
                          f"second after --since ({start.isoformat()})")
    return window


def iso(value: dt.datetime) -> str:
    """RFC 3339 with seconds: ``Z`` for UTC, else the numeric offset."""
    text = value.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
