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
    read by ctypes alone), made once per struct; ``struct`` itself where the copy would not
    have its size (a packed or otherwise special layout)."""
    made = _PLAIN.get(struct)
    if made is None:
        made = type(struct.__name__.strip("_") + "Plain", (ctypes.Structure,),
                    {"_fields_": struct._fields_})
        made = _PLAIN[struct] = made if ctypes.sizeof(made) == ctypes.sizeof(struct) else struct
    return made


#: The calls answering one ``unsigned int`` (after the handle and any arguments), each with a
#: buffer of its own per handle.
UINT_CALLS = ("nvmlDeviceGetClockInfo", "nvmlDeviceGetPerformanceState", "nvmlDeviceGetFanSpeed")


class Buffers:
    """One handle's out-buffers, each as ``(buffer, byref(buffer))``, made together on the
    handle's first read (a handle is read by one thread at a time: its GPU's reader)."""

    __slots__ = ("utilization", "memory_v2", "temperature_v", "reasons", "uints")

    def __init__(self, calls: Calls) -> None:
        self.utilization = _made(calls.utilization_struct)
        self.memory_v2 = _made(calls.memory_v2_struct) if calls.memory_v2_struct else None
        self.temperature_v = _made(calls.temperature_v1_struct) if calls.temperature_v1_struct \
            else None
        self.reasons = _made(ctypes.c_ulonglong)
        self.uints = {name: _made(ctypes.c_uint) for name in UINT_CALLS}

    def all(self) -> list[Any]:
        """Every buffer (what a test compares from cycle to cycle)."""
        made = [self.utilization, self.memory_v2, self.temperature_v, self.reasons]
        return [buffer for buffer, _ in filter(None, made)] + [
            buffer for buffer, _ in self.uints.values()]


def _made(kind: type) -> tuple[Any, Any]:
    buffer = kind()
    return buffer, ctypes.byref(buffer)


class Calls:
    """The calls, each answering ``(ret, buffer)``; ``ret`` is NVML's return code (``SUCCESS``:
    the buffer holds the answer). A missing entry point raises ``NVMLError`` as pynvml does."""

    def __init__(self, pynvml: ModuleType) -> None:
        self.pynvml = pynvml
        self._fn = pynvml._nvmlGetFunctionPointer  # pynvml's lookup, through its cache
        self._buffers: dict[int, tuple[Any, Buffers]] = {}
        self.utilization_struct = plain(pynvml.c_nvmlUtilization_t)
        self.memory_v2_struct = plain(pynvml.c_nvmlMemory_v2_t) if hasattr(
            pynvml, "c_nvmlMemory_v2_t") else None
        self.temperature_v1_struct = plain(pynvml.c_nvmlTemperature_v1_t) if hasattr(
            pynvml, "c_nvmlTemperature_v1_t") else None

    def buffers(self, handle: Any) -> Buffers:
        """``handle``'s buffers (kept with the handle object, which the GPU keeps)."""
        kept = self._buffers.get(id(handle))
        if kept is None or kept[0] is not handle:
            kept = self._buffers[id(handle)] = (handle, Buffers(self))
        return kept[1]

    def forget(self, handle: Any) -> None:
        """Drop ``handle``'s buffers (a MIG instance gone, or its handle replaced)."""
        kept = self._buffers.get(id(handle))
        if kept is not None and kept[0] is handle:
            del self._buffers[id(handle)]

    def error(self, ret: int) -> BaseException:
        """The exception pynvml's wrapper raises for ``ret``."""
        return self.pynvml.NVMLError(ret)

    def utilization(self, handle: Any) -> tuple[int, Any]:
        """``nvmlDeviceGetUtilizationRates``: ``.gpu``, ``.memory``."""
        buffer, ref = self.buffers(handle).utilization
        return self._fn("nvmlDeviceGetUtilizationRates")(handle, ref), buffer

    def memory_v2(self, handle: Any) -> tuple[int, Any]:
        """``nvmlDeviceGetMemoryInfo_v2`` with pynvml's ``nvmlMemory_v2`` version tag."""
        buffer, ref = self.buffers(handle).memory_v2
        buffer.version = self.pynvml.nvmlMemory_v2
        return self._fn("nvmlDeviceGetMemoryInfo_v2")(handle, ref), buffer

    def temperature_v(self, handle: Any, sensor: int) -> tuple[int, Any]:
        """``nvmlDeviceGetTemperatureV`` (v1 struct, as pynvml's default): ``.temperature``."""
        buffer, ref = self.buffers(handle).temperature_v
        buffer.version = self.pynvml.nvmlTemperature_v1
        buffer.sensorType = sensor
        return self._fn("nvmlDeviceGetTemperatureV")(handle, ref), buffer

    def uint(self, name: str, handle: Any, *args: int) -> tuple[int, Any]:
        """One of :data:`UINT_CALLS` (clock, P-state, fan) after ``args``: ``.value``."""
        buffer, ref = self.buffers(handle).uints[name]
        return self._fn(name)(handle, *args, ref), buffer

    def clock_event_reasons(self, handle: Any) -> tuple[int, Any]:
        """``nvmlDeviceGetCurrentClocksEventReasons`` (an ``unsigned long long``): ``.value``."""
        buffer, ref = self.buffers(handle).reasons
        return self._fn("nvmlDeviceGetCurrentClocksEventReasons")(handle, ref), buffer
