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

Of what is still generated, the frozen ``__setattr__`` and ``__delattr__`` cost more than the
``__init__`` (two of the three compilations: about 1.7 of 3.1 million instructions for a class of
eight fields, Python 3.11). Up to Python 3.12, :func:`record` has ``dataclass`` take them from
:func:`frozen_attribute_methods` instead: the same two methods, as closures over the class and
its field names, nothing compiled. Python 3.13 compiles a class's methods in one go, and there
``dataclass`` makes them itself.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
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


def frozen_attribute_methods(cls: type, fields: list[dataclasses.Field[Any]], globals: Any
                             ) -> tuple[Callable[..., None], Callable[..., None]]:
    """``__setattr__`` and ``__delattr__`` of a frozen dataclass ``cls``, as
    ``dataclasses._frozen_get_del_attr`` (Python 3.10 to 3.12) writes them: a field, or any name
    on an instance of ``cls`` itself, raises ``FrozenInstanceError`` with the same message;
    other names go to the next class. Closures instead of compiled text (see the module)."""
    names = tuple(f.name for f in fields)
    frozen = dataclasses.FrozenInstanceError

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise frozen(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise frozen(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


#: Whether ``dataclass`` takes its frozen methods from a module-level helper with
#: :func:`frozen_attribute_methods`' signature (Python 3.10 to 3.12, checked by the tests).
SHARED_FROZEN_METHODS = sys.version_info < (3, 13) and hasattr(dataclasses, "_frozen_get_del_attr")
_SWAPPING = threading.Lock()


def _frozen_dataclass(cls: _C, slots: bool) -> Any:
    """``dataclass(cls, frozen=True, eq=False, repr=False, slots=slots)``, with the frozen methods
    of :func:`frozen_attribute_methods` where that helps (see the module)."""
    if not SHARED_FROZEN_METHODS:
        return dataclasses.dataclass(cls, frozen=True, eq=False, repr=False, slots=slots)
    # dataclass looks its helper up by name at each call: it is swapped only for this call, under
    # a lock. A frozen dataclass that another thread makes meanwhile gets the same methods too.
    with _SWAPPING:
        generated = dataclasses._frozen_get_del_attr  # type: ignore[attr-defined]
        dataclasses._frozen_get_del_attr = frozen_attribute_methods  # type: ignore[attr-defined]
        try:
            return dataclasses.dataclass(cls, frozen=True, eq=False, repr=False, slots=slots)
        finally:
            dataclasses._frozen_get_del_attr = generated  # type: ignore[attr-defined]


def record(cls: _C | None = None, /, *, slots: bool = False) -> Any:
    """``@dataclass(frozen=True[, slots=True])`` for a subclass of :class:`Record`."""
    def wrap(cls: _C) -> _C:
        if not issubclass(cls, Record):
            raise TypeError(f"{cls.__name__} must subclass allsmi.schema.records.Record")
        if not cls.__doc__:
            raise TypeError(f"{cls.__name__} needs a docstring (dataclass would compute one)")
        made: Any = _frozen_dataclass(cls, slots)
        fields = dataclasses.fields(made)
        made._compared = staticmethod(_getter([f.name for f in fields if f.compare]))
        made._hashed = staticmethod(_getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)]))
        made._shown = tuple(f.name for f in fields if f.repr)
        return made  # type: ignore[no-any-return]
    return wrap if cls is None else wrap(cls)
