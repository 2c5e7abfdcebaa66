"""Per-process utilization: ``nvmlDeviceGetProcessesUtilizationInfo`` (v1 struct), falling back
to ``nvmlDeviceGetProcessUtilization`` on drivers without it.

NVML keeps a buffer of per-process samples (each: pid, CPU timestamp in microseconds, SM,
memory-controller, encoder and decoder utilization in percent) and returns those newer than the
``lastSeenTimeStamp`` given. The bookkeeping, per GPU: the first read asks for the samples of
the last second (as nvitop does); every later read passes the newest timestamp received so far,
so each sample is taken exactly once (no double counting) and nothing older than the previous
cycle comes back (no stale samples). A process's figures for a cycle are the mean of its
samples since the previous read. NVML answers NotFound when no process had a sample since
then: every listed process then used 0% (NVML records a process's sample only while it runs
work). One library call per GPU per cycle (a retry only when more samples than the last time's
capacity arrived); NotSupported (MIG mode, vGPU, old GPUs) is remembered and never asked again.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from allsmi.backends.nvidia.nvml import (ERROR_ARGUMENT_VERSION_MISMATCH, ERROR_FUNCTION_NOT_FOUND,
                                         ERROR_INSUFFICIENT_SIZE, ERROR_NOT_FOUND, SUCCESS,
                                         error_code)
from allsmi.schema.records import Record, record

#: Samples asked for on a GPU's first read: those of the last second.
FIRST_READ_SECONDS = 1.0
SAMPLE_CAPACITY = 32


class UtilizationSampleV0(ctypes.Structure):
    """``nvmlProcessUtilizationSample_t`` (nvmlDeviceGetProcessUtilization)."""

    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class UtilizationInfoV1(ctypes.Structure):
    """``nvmlProcessUtilizationInfo_v1_t``: adds JPEG and optical-flow engines."""

    _fields_ = [("timeStamp", ctypes.c_ulonglong), ("pid", ctypes.c_uint),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint),
                ("jpgUtil", ctypes.c_uint), ("ofaUtil", ctypes.c_uint)]


class ProcessesUtilizationInfoV1(ctypes.Structure):
    """``nvmlProcessesUtilizationInfo_v1_t``."""

    _fields_ = [("version", ctypes.c_uint), ("processSamplesCount", ctypes.c_uint),
                ("lastSeenTimeStamp", ctypes.c_ulonglong),
                ("procUtilArray", ctypes.POINTER(UtilizationInfoV1))]


#: NVML_STRUCT_VERSION(ProcessesUtilizationInfo, 1): the struct size, version 1 above it.
PROCESSES_UTILIZATION_INFO_V1 = ctypes.sizeof(ProcessesUtilizationInfoV1) | 1 << 24
_ENTRY_POINTS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")


@record
class ProcessActivity(Record):
    """One process's mean utilization over the samples since the previous read, in percent
    (``None``: no sample had a value for that engine)."""

    sm: float | None
    memory: float | None
    encoder: float | None
    decoder: float | None


@dataclass(eq=False, repr=False)  # never compared or printed: no methods compiled for it
class UtilizationState:
    """Per GPU: the newest sample timestamp taken (microseconds) and the array size to offer."""

    last_seen_us: int | None = None
    capacity: int = SAMPLE_CAPACITY


class ProcessUtilizationReader:
    """Reads per-process utilization samples; the entry point the driver has is remembered."""

    _MAX_ATTEMPTS = 4

    def __init__(self, pynvml: ModuleType, clock: Any = time.time) -> None:
        self._pynvml = pynvml
        self._clock = clock
        self._version = 0
        self._lock = threading.Lock()

    def read(self, handle: Any, state: UtilizationState) -> dict[int, ProcessActivity]:
        """Each process's activity since the previous read of this GPU (``{}``: none ran).

        Raises pynvml's ``NVMLError`` (NotSupported, FunctionNotFound when neither entry point
        exists, ...) like any pynvml call."""
        pynvml = self._pynvml
        since = state.last_seen_us
        if since is None:
            since = max(0, int((self._clock() - FIRST_READ_SECONDS) * 1e6))
        while True:
            position = self._version
            try:
                fn = pynvml._nvmlGetFunctionPointer(_ENTRY_POINTS[position])
            except pynvml.NVMLError as exc:
                if error_code(exc) == ERROR_FUNCTION_NOT_FOUND and position + 1 < len(_ENTRY_POINTS):
                    with self._lock:
                        self._version = max(self._version, position + 1)
                    continue
                raise
            try:
                samples = (self._info_v1 if position == 0 else self._legacy)(fn, handle, since, state)
            except pynvml.NVMLError as exc:
                if position == 0 and error_code(exc) == ERROR_ARGUMENT_VERSION_MISMATCH:
                    with self._lock:  # a driver that knows the call but not struct v1
                        self._version = max(self._version, 1)
                    continue
                raise
            break
        per_pid: dict[int, list[tuple[int, int, int, int]]] = {}
        newest = state.last_seen_us or since
        for pid, stamp, sm, mem, enc, dec in samples:
            if stamp <= since:
                continue  # never a sample taken before (some drivers return the boundary one)
            newest = max(newest, stamp)
            per_pid.setdefault(pid, []).append((sm, mem, enc, dec))
        state.last_seen_us = newest
        return {pid: ProcessActivity(*(_mean(col) for col in zip(*rows)))
                for pid, rows in per_pid.items()}

    def _info_v1(self, fn: Any, handle: Any, since: int,
                 state: UtilizationState) -> list[tuple[int, int, int, int, int, int]]:
        def call(capacity: int) -> tuple[int, Any, int]:
            array = (UtilizationInfoV1 * capacity)()
            info = ProcessesUtilizationInfoV1(
                version=PROCESSES_UTILIZATION_INFO_V1, processSamplesCount=capacity,
                lastSeenTimeStamp=since, procUtilArray=array)
            ret = fn(handle, ctypes.byref(info))
            return ret, array, int(info.processSamplesCount)
        return self._samples(call, state)

    def _legacy(self, fn: Any, handle: Any, since: int,
                state: UtilizationState) -> list[tuple[int, int, int, int, int, int]]:
        def call(capacity: int) -> tuple[int, Any, int]:
            array = (UtilizationSampleV0 * capacity)()
            count = ctypes.c_uint(capacity)
            ret = fn(handle, array, ctypes.byref(count), ctypes.c_ulonglong(since))
            return ret, array, int(count.value)
        return self._samples(call, state)

    def _samples(self, call: Callable[[int], tuple[int, Any, int]],
                 state: UtilizationState) -> list[tuple[int, int, int, int, int, int]]:
        """``call(capacity)`` offers an array of ``capacity`` entries to one entry point and
        returns ``(return code, the array, the sample count NVML wrote back)``; the array grows
        (and the GPU's state remembers the size) while NVML answers InsufficientSize."""
        capacity = max(1, state.capacity)
        for _ in range(self._MAX_ATTEMPTS):
            ret, array, count = call(capacity)
            if ret == ERROR_INSUFFICIENT_SIZE:
                capacity = state.capacity = max(count * 2 + 5, capacity * 2)
                continue
            if ret == ERROR_NOT_FOUND:
                return []
            if ret != SUCCESS:
                raise self._pynvml.NVMLError(ret)
            return [(int(e.pid), int(e.timeStamp), int(e.smUtil), int(e.memUtil), int(e.encUtil),
                     int(e.decUtil)) for e in array[:min(count, capacity)]]
        raise self._pynvml.NVMLError(ERROR_INSUFFICIENT_SIZE)


def _mean(values: tuple[int, ...]) -> float | None:
    """The mean of one engine's percentages over a process's samples, leaving out those
    outside 0 to 100 (NVML's all-ones "no value", garbage: never counted as 100 %); ``None``
    when no sample had a value."""
    known = [value for value in values if 0 <= value <= 100]
    return sum(known) / len(known) if known else None
