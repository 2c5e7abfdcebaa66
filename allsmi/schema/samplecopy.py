"""Copies of samples with some fields changed: :func:`derive` (a new sample) and :func:`fill`
(a sample made this cycle, completed in place), each cleaning only the changed fields with the
rules of the classes' ``__post_init__``. Imported through :mod:`allsmi.schema`, which re-exports
both (this module needs the schema's classes, defined before that import).
"""

from __future__ import annotations

from typing import Any, TypeVar

from allsmi.schema.numbers import bytes_or_none, index_or_none, percent_or_none, ranged, share_or_none
from allsmi.schema import (COMPUTE_ACTIVE_SOURCES, DEVICE_BYTES, DEVICE_RANGES, HEALTH_STATES,
                           PROCESS_ACTIVITY, PROCESS_ATTRIBUTION, DEVICE_OPTIONAL_TEXT, DEVICE_TEXT,
                           DeviceSample, ProcessSample, clean_mapping)
from allsmi.schema.text import MAX_COMMAND, clean_optional, clean_required, clean_text

_S = TypeVar("_S", "DeviceSample", "ProcessSample")


def _cleaners() -> dict[type, dict[str, Any]]:
    """Per class, each field's cleaning as its ``__post_init__`` does it (``None``: none)."""
    def mapping(value: Any) -> Any:
        return clean_mapping(value) if value else value

    def opt(clean: Any) -> Any:
        return lambda value: None if value is None else clean(value)
    device: dict[str, Any] = {name: None for name in DeviceSample.__dataclass_fields__}
    device.update({name: clean_required for name in DEVICE_TEXT})
    device.update({name: clean_optional for name in DEVICE_OPTIONAL_TEXT})
    device.update(labels=remembered_mapping(), details=mapping,
                  resource_group=remembered_text(clean_optional))
    device.update({name: ranged(low, high) for name, (low, high) in DEVICE_RANGES.items()})
    device.update({name: bytes_or_none for name in DEVICE_BYTES})
    device.update(compute_active_source=lambda v: v if v in COMPUTE_ACTIVE_SOURCES else None)
    device.update(index=index_or_none, partition_share=share_or_none,
                  health=lambda v: v if v in HEALTH_STATES else "unknown")
    process: dict[str, Any] = {name: None for name in ProcessSample.__dataclass_fields__}
    process.update(user=opt(clean_text), command=opt(lambda v: clean_text(v, MAX_COMMAND)))
    process.update({name: opt(clean_optional) for name in PROCESS_ATTRIBUTION})
    process.update({name: percent_or_none for name in PROCESS_ACTIVITY}, memory_bytes=bytes_or_none)
    return {DeviceSample: device, ProcessSample: process}


#: Entries a remembering cleaner keeps (beyond it, it starts afresh).
REMEMBERED = 1024


def remembered_text(clean: Any) -> Any:
    """``clean`` for a text field whose few values come back cycle after cycle (a device's
    resource group, which the collector sets on every device every cycle): each string's
    cleaning remembered (a string's is a function of the string alone; anything else is
    cleaned each time)."""
    memo: dict[str, Any] = {}

    def cleaned(value: Any) -> Any:
        if type(value) is not str:
            return clean(value)
        out = memo.get(value)
        if out is None:
            if len(memo) >= REMEMBERED:
                memo.clear()
            out = memo[value] = clean(value)
        return out
    return cleaned


def remembered_mapping() -> Any:
    """The cleaning of a mapping whose few contents come back cycle after cycle (a device's
    labels, its group's, which the collector sets on every device every cycle): a mapping of
    strings to strings (what a group's labels are) cleaned once per content, each time a new
    dict of the cleaned items, as :func:`clean_mapping` makes (anything else is cleaned each
    time; a string equals only a string, so equal items are the same strings)."""
    memo: dict[tuple[tuple[Any, Any], ...], dict[Any, Any]] = {}

    def cleaned(value: Any) -> Any:
        if not value:
            return value
        items = tuple(value.items())
        try:
            out = memo.get(items)
        except TypeError:  # (an unhashable value)
            return clean_mapping(value)
        if out is not None:
            return dict(out)
        out = clean_mapping(value)
        if all(type(k) is str and type(v) is str for k, v in items):
            if len(memo) >= REMEMBERED:
                memo.clear()
            memo[items] = out
            return dict(out)
        return out
    return cleaned


_CLEANERS = _cleaners()


def derive(sample: _S, **changes: Any) -> _S:
    """``dataclasses.replace(sample, **changes)`` for a :class:`DeviceSample` or
    :class:`ProcessSample`, cleaning only the changed fields (with their ``__post_init__``
    rules): the rest was cleaned when ``sample`` was built. The collector derives every
    device of every cycle (its resource group, labels and holders), so this is on the hot path.
    """
    cls = type(sample)
    make = _DERIVERS.get((cls, *changes))
    if make is None:
        make = deriver(cls, tuple(changes))
    return make(sample, changes)


def fill(sample: _S, **changes: Any) -> _S:
    """``sample`` itself with ``changes`` set, each cleaned as :func:`derive` cleans it: only
    for a sample made this cycle that nobody else holds yet (the collector completing what
    the simulation returns), so that filling it in is building it, not changing it."""
    cls = type(sample)
    make = _FILLERS.get((cls, (), (), *changes))
    if make is None:
        make = filler(cls, tuple(changes))
    return make(sample, changes, None)


#: Per class, restored fields and changed fields, a function filling a sample in (see
#: :func:`filler`).
_FILLERS: dict[tuple[Any, ...], Any] = {}


def filler(cls: type, names: tuple[str, ...], restored: tuple[str, ...] = (),
           cleaned: tuple[str, ...] = ()) -> Any:
    """A function ``make(sample, changes, source)`` doing :func:`fill`'s work on a ``cls``
    sample for the fields ``names`` (the keys of ``changes``, in that order), after setting
    each of ``restored`` not among them to ``source``'s value (as it is: ``source`` is clean):
    written out field by field like :func:`derive`'s makers (a loop over the changes looks up
    each field's cleaning every time; a replay fills 1.8 million samples a month). The values
    of ``cleaned`` (some of ``names``) are set as given: the caller cleaned them with
    :func:`field_cleaning` (the collector, each group's name and labels once per group)."""
    key = (cls, restored, cleaned, *names)
    make = _FILLERS.get(key)
    if make is not None:
        return make
    cleaners = _CLEANERS[cls]
    for name in (*names, *restored):
        if name not in cleaners:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
    scope: dict[str, Any] = {}
    lines = [f"    {_setter(cls, name, scope)}(sample, source.{name})\n"
             for name in restored if name not in names]
    lines += [_changed(cls, "sample", name, None if name in cleaned else cleaners[name], scope)
              for name in names]
    return _compiled(_FILLERS, key, scope, "def make(sample, changes, source):\n"
                     f"{''.join(lines)}    return sample\n")


def field_cleaning(cls: type, name: str) -> Any:
    """The cleaning that :func:`derive` and :func:`fill` give a ``cls`` sample's field ``name``
    (``value -> clean value``; the value itself where the field has none)."""
    clean = _CLEANERS[cls][name]
    return clean if clean is not None else _as_is


def _as_is(value: Any) -> Any:
    return value


def _setter(cls: type, name: str, scope: dict[str, Any]) -> str:
    """The name, in ``scope``, of a function ``(sample, value)`` setting a ``cls`` sample's field
    ``name`` as ``object.__setattr__`` does past the frozen check: the field's slot's own
    ``__set__``, which is what ``object.__setattr__`` finds on ``cls`` and calls, in half its
    time (a month's bill sets tens of millions of fields). Both classes are slotted records
    (``tests/test_schema_derive.py`` checks it: a class without slots has no such setter)."""
    scope[f"set_{name}"] = getattr(cls, name).__set__
    return f"set_{name}"


def _changed(cls: type, target: str, name: str, clean: Any, scope: dict[str, Any]) -> str:
    """The line of a maker setting ``target``'s field ``name`` to ``changes[name]`` through its
    cleaning ``clean`` (put in ``scope``; ``None``: none)."""
    setter = _setter(cls, name, scope)
    if clean is None:
        return f"    {setter}({target}, changes[{name!r}])\n"
    scope[f"clean_{name}"] = clean
    return f"    {setter}({target}, clean_{name}(changes[{name!r}]))\n"


def _compiled(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...], scope: dict[str, Any],
              source: str) -> Any:
    """The function ``make`` that ``source`` defines in ``scope``, kept in ``cache`` by
    ``key`` (callers use a handful of field sets: the cache's bound is never reached)."""
    exec(source, scope)  # noqa: S102 - the text is made of this module's own field names
    if len(cache) >= 256:
        cache.clear()
    cache[key] = make = scope["make"]
    return make


#: Per class and changed fields (in the order given), a function making the derived sample
#: (see :func:`deriver`); callers change a handful of field sets, cycle after cycle.
_DERIVERS: dict[tuple[Any, ...], Any] = {}


def deriver(cls: type, names: tuple[str, ...]) -> Any:
    """A function ``make(sample, changes)`` building a new ``cls`` sample field by field: the
    fields in ``names`` from ``changes``, each through its cleaning, the others copied from
    ``sample``. Written out as dataclasses writes ``__init__`` (a third of the time of a copy
    followed by a loop over the changes); made on first use of each set of names. What
    :func:`derive` calls; a caller deriving one set of fields cycle after cycle may keep it."""
    make = _DERIVERS.get((cls, *names))
    if make is not None:
        return make
    cleaners = _CLEANERS[cls]
    for name in names:
        if name not in cleaners:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
    scope: dict[str, Any] = {"cls": cls}
    lines = []
    for name, clean in cleaners.items():
        lines.append(f"    {_setter(cls, name, scope)}(new, sample.{name})\n" if name not in names
                     else _changed(cls, "new", name, clean, scope))
    return _compiled(_DERIVERS, (cls, *names), scope,
                     "def make(sample, changes, _new=object.__new__):\n"
                     f"    new = _new(cls)\n{''.join(lines)}    return new\n")
