"""The intervals a simulated bill's worker process sends back (:mod:`allsmi.cli.simulate.bill`), as
plain tuples of their values, and the records the command writes made of them.

A worker pickled each chunk's :class:`~allsmi.accounting.ledger.schema.IntervalRecord` objects
(a day: 3,936 of them and 7,275 holders' shares, each with a dictionary of some thirty
attributes), and the command unpickled them, building each object's dictionary again: 0.14 s
of a day's 2.5 s of replay, and most of the command's own time while the workers replay. As
tuples they pickle and unpickle in C, and the command gets named tuples with the same
attributes, which is all the ledger reads of a record (0.06 s a day in all; the same values).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
from typing import Any, Iterable


@functools.cache
def _shapes() -> tuple[Any, Any, Any, Any]:
    """(a record's values, a share's values, the record, the share): the getters and the named
    tuples, made on first use (the ledger's schema is imported by the replay, not by the CLI)."""
    from allsmi.accounting.ledger.schema import IntervalRecord, Share
    record = [f.name for f in dataclasses.fields(IntervalRecord) if f.name != "holders"]
    share = [f.name for f in dataclasses.fields(Share)]
    return (operator.attrgetter(*record), operator.attrgetter(*share),
            collections.namedtuple("IntervalRow", [*record, "holders"]),
            collections.namedtuple("ShareRow", share))


def packed(records: Iterable[Any]) -> list[tuple[Any, ...]]:
    """``records`` (interval records) as tuples: each record's values in its fields' order but
    its holders, and its holders as (holder, the share's values) pairs, in their order."""
    values, shared, _, _ = _shapes()
    # Each holder as one object per chunk (the first of those equal to it), which pickle then
    # sends once: the recorder's buckets each hold their own equal copies (half a day: 3,600
    # shares of 145 holders, 2,971 objects), each sent whole and made again by the command
    # through the named tuple's Python __new__. Once each, half a day's chunk pickles in 2.6 ms
    # instead of 6.2 and unpickles in 2.9 instead of 5.3 (the cyclic collector off, as there).
    same: dict[Any, Any] = {}
    one = same.setdefault
    return [(values(rec), tuple([(one(holder, holder), shared(share))
                                 for holder, share in rec.holders.items()]))
            for rec in records]


def unpacked(rows: Iterable[tuple[Any, ...]]) -> list[Any]:
    """What :func:`packed` packed: a named tuple per record, with each of an interval record's
    attributes (its holders a dictionary of named tuples, as ordered as the record's was)."""
    _, _, record, share = _shapes()
    make = tuple.__new__
    return [record(*values, {holder: make(share, part) for holder, part in holders})
            for values, holders in rows]
