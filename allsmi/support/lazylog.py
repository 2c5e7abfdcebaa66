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


#: Distinct failures a :func:`failed_once` set remembers: past it, each is at debug level only.
MAX_SAID = 64


def failed_once(logger: Any, said: set[str], what: str, exc: BaseException) -> None:
    """``what`` raised ``exc`` where it never should (a plug-in's bug, or allsmi's): one line
    the first time, naming the exception and where it was raised, so that stderr is not a
    traceback each collection cycle (the status says the failure every cycle); the traceback,
    and the same failure again, at debug level. ``said``: the caller's memory of what it said."""
    from allsmi.schema.text import MAX_MESSAGE, clean_text
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:  # the innermost frame (no source read)
        tb = tb.tb_next
    code = tb.tb_frame.f_code if tb is not None else None
    where = f" (raised at {code.co_filename}:{tb.tb_lineno} in {code.co_name})" \
        if tb is not None and code is not None else ""
    key = f"{what}|{type(exc).__name__}|{where}"
    line = clean_text(f"{what}: {type(exc).__name__}: {exc}{where}", MAX_MESSAGE)
    if key in said or len(said) >= MAX_SAID:
        logger.debug("%s", line, exc_info=exc)
        return
    said.add(key)
    logger.error("%s", line)
    logger.debug("%s: the traceback", what, exc_info=exc)
