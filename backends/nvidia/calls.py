"""A GPU's per-cycle NVML calls through ctypes, into out-buffers made once per handle.

pynvml's wrapper of each call makes a new out-structure (its ``_PrintableStructure``s read and
write every member through Python-level ``__getattribute__``/``__setattr__``), looks the
function pointer up and checks the return code by raising. Here each handle's buffers are made
on its first read and kept, with ``byref`` made once, as plain ``ctypes`` structures of pynvml's
own layouts (``_fields_``): 48 calls a cycle at 8 GPUs cost 0.20 ms of CPU through pynvml and
0.17 ms this way on the fake library, measured warm (the library's own time included in both).

The calls are pynvml's: the same entry points, found through ``pynvml._nvmlGetFunctionPointer``
(its cache: a FunctionNotFound raises there, as in the wrapper), with the same arguments and
struct versions (read from pynvml at each call, as its wrappers read their defaults), and a
failure is the ``pynvml.NVMLError`` the wrapper would have raised, made only on failure.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Any

_PLAIN: dict[type, type[ctypes.Structure]] = {}


def plain(struct: type[ctypes.Structure]) -> type[ctypes.Structure]:
    """pynvml's ``struct`` members as a plain ``ctypes.Structure`` (the same layout, members
    read by ctypes alone), made once per struct."""
    made = _PLAIN.get(struct)
    if made is None:
        made = _PLAIN[struct] = type(struct.__name__.strip("_") + "Plain", (ctypes.Structure,),
                                     {"_fields_": struct._fields_})
    return made


class Buffers:
    """One handle's out-buffers, each with its ``byref``, made on first use (a handle is read by
    one thread at a time: its GPU's reader)."""

    __slots__ = ("refs",)

    def __init__(self) -> None:
        self.refs: dict[str, tuple[Any, Any]] = {}

    def get(self, key: str, kind: type) -> tuple[Any, Any]:
        """``(buffer, byref(buffer))`` of ``kind`` for ``key``."""
        made = self.refs.get(key)
        if made is None:
            buffer = kind()
            made = self.refs[key] = (buffer, ctypes.byref(buffer))
        return made


class Calls:
    """The calls, each answering ``(ret, buffer)``; ``ret`` is NVML's return code (``SUCCESS``:
    the buffer holds the answer). A missing entry point raises ``NVMLError`` as pynvml does."""

    def __init__(self, pynvml: ModuleType) -> None:
        self.pynvml = pynvml
        self._buffers: dict[int, tuple[Any, Buffers]] = {}
        self._utilization = plain(pynvml.c_nvmlUtilization_t)
        self._memory_v2 = plain(pynvml.c_nvmlMemory_v2_t) if hasattr(
            pynvml, "c_nvmlMemory_v2_t") else None
        self._temperature_v1 = plain(pynvml.c_nvmlTemperature_v1_t) if hasattr(
            pynvml, "c_nvmlTemperature_v1_t") else None

    def buffers(self, handle: Any) -> Buffers:
        """``handle``'s buffers (kept with the handle object, which the GPU keeps)."""
        kept = self._buffers.get(id(handle))
        if kept is None or kept[0] is not handle:
            kept = self._buffers[id(handle)] = (handle, Buffers())
        return kept[1]

    def error(self, ret: int) -> BaseException:
        """The exception pynvml's wrapper raises for ``ret``."""
        return self.pynvml.NVMLError(ret)

    def _out(self, name: str, handle: Any, kind: type, *args: Any) -> tuple[int, Any]:
        buffer, ref = self.buffers(handle).get(name, kind)
        return self.pynvml._nvmlGetFunctionPointer(name)(handle, *args, ref), buffer

    def utilization(self, handle: Any) -> tuple[int, Any]:
        """``nvmlDeviceGetUtilizationRates``: ``.gpu``, ``.memory``."""
        return self._out("nvmlDeviceGetUtilizationRates", handle, self._utilization)

    def memory_v2(self, handle: Any) -> tuple[int, Any]:
        """``nvmlDeviceGetMemoryInfo_v2`` with pynvml's ``nvmlMemory_v2`` version tag."""
        buffer, ref = self.buffers(handle).get("nvmlDeviceGetMemoryInfo_v2", self._memory_v2)
        buffer.version = self.pynvml.nvmlMemory_v2
        return self.pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")(handle, ref), buffer

    def temperature_v(self, handle: Any, sensor: int) -> tuple[int, Any]:
        """``nvmlDeviceGetTemperatureV`` (v1 struct, as pynvml's default): ``.temperature``."""
        buffer, ref = self.buffers(handle).get("nvmlDeviceGetTemperatureV", self._temperature_v1)
        buffer.version = self.pynvml.nvmlTemperature_v1
        buffer.sensorType = sensor
        return self.pynvml._nvmlGetFunctionPointer("nvmlDeviceGetTemperatureV")(handle, ref), buffer

    def uint(self, name: str, handle: Any, *args: int) -> tuple[int, Any]:
        """A call answering one ``unsigned int`` after ``args`` (clock, P-state, fan): ``.value``."""
        return self._out(name, handle, ctypes.c_uint, *args)

    def ulonglong(self, name: str, handle: Any) -> tuple[int, Any]:
        """A call answering one ``unsigned long long`` (clock-event reasons): ``.value``."""
        return self._out(name, handle, ctypes.c_ulonglong)

