"""Frozen records: dataclasses whose equality, hash and repr are shared methods.

``@dataclass(frozen=True)`` compiles five or six methods for each class at import
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``);
for the twenty-odd records a one-shot ``allsmi snapshot`` imports, that compiling was a
good share of its start-up. :func:`record` lets :func:`dataclasses.dataclass` make the
frozen ``__init__``, ``__setattr__`` and ``__delattr__`` as before, and the class takes
``__eq__``, ``__hash__`` and ``__repr__`` from :class:`Record`, which read the class's field
tables (made once per class, from :func:`dataclasses.fields`: each field is still declared
once, in the class). They answer exactly as the generated ones do: equal when the other is
of the same class and the compared fields' tuples are equal, the hash of the hashed fields'
tuple, ``Name(field=value, ...)`` of the shown fields. ``tests/test_records.py`` checks it
against plain dataclasses. Give each record a docstring: without one, ``dataclass`` computes
the class's signature (``inspect.signature``) to write one, at import.
"""

from __future__ import annotations

import dataclasses
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any, Callable, TypeVar

_C = TypeVar("_C", bound=type)


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of ``names`` of an object, as a tuple (also for one name, or none)."""
    if len(names) > 1:
        return attrgetter(*names)  # type: ignore[return-value]
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


class Record:
    """Base of the classes made by :func:`record` (their shared ``==``, ``hash`` and ``repr``)."""

    __slots__ = ()
    _compared: Callable[[Any], tuple[Any, ...]]
    _hashed: Callable[[Any], tuple[Any, ...]]
    _shown: tuple[str, ...]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._compared(self) == self._compared(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._hashed(self))

    @recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{self.__class__.__qualname__}({shown})"


def record(cls: _C | None = None, /, *, slots: bool = False) -> Any:
    """``@dataclass(frozen=True[, slots=True])`` for a subclass of :class:`Record`."""
    def wrap(cls: _C) -> _C:
        if not issubclass(cls, Record):
            raise TypeError(f"{cls.__name__} must subclass allsmi.records.Record")
        if not cls.__doc__:
            raise TypeError(f"{cls.__name__} needs a docstring (dataclass would compute one)")
        made: Any = dataclasses.dataclass(cls, frozen=True, eq=False, repr=False, slots=slots)
        fields = dataclasses.fields(made)
        made._compared = staticmethod(_getter([f.name for f in fields if f.compare]))
        made._hashed = staticmethod(_getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)]))
        made._shown = tuple(f.name for f in fields if f.repr)
        return made  # type: ignore[no-any-return]
    return wrap if cls is None else wrap(cls)
