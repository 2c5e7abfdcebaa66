"""The click type of every numeric flag: the text parsed as the environment variables' is
(:func:`allsmi.schema.numbers.number_in_text`: ASCII decimal forms only, never ``1_0``, ``５`` or
``nan``), within a range that names both ends; a bad value exits 2 naming the flag, the value
cut to a readable length (the group's :func:`allsmi.cli.common.clip_message`)."""

from __future__ import annotations

from typing import Any

import click

from allsmi.schema.numbers import number_in_text


class _Decimal:
    """What the two types share: :meth:`convert` through :func:`number_in_text`."""

    low: float
    high: float
    whole = False
    low_open = False

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)  # (a default, or a value given in Python: checked the same)
        try:
            return number_in_text(value, self.low, self.high, whole=self.whole,
                                  low_open=self.low_open)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)  # type: ignore[attr-defined]


class DecimalRange(_Decimal, click.FloatRange):
    """A number from ``low`` to ``high`` (``low`` left out with ``low_open``); click's help shows
    the range as for :class:`click.FloatRange`."""

    def __init__(self, low: float, high: float, low_open: bool = False) -> None:
        super().__init__(min=low, max=high, min_open=low_open)
        self.low, self.high, self.low_open = low, high, low_open


class WholeRange(_Decimal, click.IntRange):
    """A whole number from ``low`` to ``high`` (``10.0`` is one, as in the config file)."""

    whole = True

    def __init__(self, low: int, high: int) -> None:
        super().__init__(min=low, max=high)
        self.low, self.high = low, high
