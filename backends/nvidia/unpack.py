"""The NVML field-value buffer read in one pass: each entry's ``(valueType, nvmlReturn, value)``
unpacked with :mod:`struct` from the structure's own offsets (:class:`.nvml.FieldValueBatch`),
the same numbers ctypes reads member by member."""

from __future__ import annotations

import ctypes
import struct
from typing import Any, Mapping

#: The native ``struct`` format of each member of ``c_nvmlValue_t`` by its value type (the
#: members ``names`` gives by value type: double, uint, ulong, ulonglong, longlong, int, ushort).
_MEMBER_FORMATS = {0: "d", 1: "I", 2: "L", 3: "Q", 4: "q", 5: "i", 6: "H"}
_LAYOUTS: dict[type, tuple[struct.Struct, dict[int, struct.Struct]] | None] = {}


def field_layout(entry: type, names: Mapping[int, str]
                 ) -> tuple[struct.Struct, dict[int, struct.Struct]] | None:
    """For a plain field-value structure: one ``struct`` row per entry giving ``(valueType,
    nvmlReturn, the value's bytes)``, and each value type's member format; ``None`` when the
    structure is not laid out as ``nvml.h`` has it (then ctypes reads it)."""
    if entry not in _LAYOUTS:
        _LAYOUTS[entry] = None
        try:
            kind, code, value = (getattr(entry, name) for name in
                                 ("valueType", "nvmlReturn", "value"))
            size = ctypes.sizeof(entry)
            if kind.size == code.size == 4 and value.size == 8 and code.offset == kind.offset + 4 \
                    and value.offset >= code.offset + 4 and value.offset + 8 <= size:
                row = struct.Struct(f"={kind.offset}xII{value.offset - code.offset - 4}x8s"
                                    f"{size - value.offset - 8}x")
                members = {k: struct.Struct(f"@{f}") for k, f in _MEMBER_FORMATS.items()}
                if all(m.size == getattr(_value_type(entry), names[k]).size
                       for k, m in members.items()):
                    _LAYOUTS[entry] = (row, members)
        except (AttributeError, KeyError, TypeError, struct.error):
            pass
    return _LAYOUTS[entry]


def _value_type(entry: type) -> Any:
    """The ctypes type of ``entry``'s ``value`` member (``c_nvmlValue_t``)."""
    return dict(entry._fields_)["value"]  # type: ignore[attr-defined]


_GPM_LAYOUTS: dict[tuple[type, int], struct.Struct | None] = {}


def gpm_layout(request: type, count: int) -> struct.Struct | None:
    """For a GPM metrics request (``c_nvmlGpmMetricsGet_t``): one ``struct`` pass giving the
    ``(nvmlReturn, value)`` of the first ``count`` entries of its ``metrics`` array, from the
    structures' own offsets (pynvml's structures read each member through a Python
    ``__getattribute__``: two a metric, every cycle, for every GPU); ``None`` when they are not
    laid out as ``nvml.h`` has them (then ctypes reads them)."""
    key = (request, count)
    if key not in _GPM_LAYOUTS:
        _GPM_LAYOUTS[key] = None
        try:
            array = dict(request._fields_)["metrics"]  # type: ignore[attr-defined]
            entry = array._type_
            code, value, size = entry.nvmlReturn, entry.value, ctypes.sizeof(entry)
            if code.size == 4 and value.size == 8 and value.offset >= code.offset + 4 \
                    and value.offset + 8 <= size and 0 < count <= array._length_ \
                    and dict(entry._fields_)["value"] is ctypes.c_double:
                one = f"I{value.offset - code.offset - 4}xd"
                gap = f"{size - value.offset - 8 + code.offset}x"
                _GPM_LAYOUTS[key] = struct.Struct(
                    f"={request.metrics.offset + code.offset}x" + gap.join([one] * count))  # type: ignore[attr-defined]
        except (AttributeError, KeyError, TypeError, struct.error):
            pass
    return _GPM_LAYOUTS[key]
