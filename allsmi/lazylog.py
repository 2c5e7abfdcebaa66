"""Loggers for the modules a one-shot ``allsmi snapshot`` imports: ``logging`` on first use.

Importing ``logging`` costs about 18 million instructions (3 to 4 ms of a 100 ms snapshot),
and the collector, the backend runners, the registry and the attribution runners log only when
something fails. :func:`get_logger` gives what ``logging.getLogger(name)`` gives, the same
logger (same name, handlers, levels and records), its module imported when it is first used.
"""

from __future__ import annotations

from typing import Any


class LazyLogger:
    """``logging.getLogger(name)``, looked up on the first attribute asked of it."""

    __slots__ = ("name", "_logger")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        logger = self._logger
        if logger is None:
            import logging
            logger = self._logger = logging.getLogger(self.name)
        return getattr(logger, attr)


def get_logger(name: str) -> Any:
    """A logger named ``name`` whose ``logging`` is imported when first used."""
    return LazyLogger(name)
