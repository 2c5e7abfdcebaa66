"""A thin, lazily-initialised layer over ``pynvml`` (package nvidia-ml-py).

What lives here and not in :mod:`allsmi.backends.nvidia`:

* importing ``pynvml`` lazily and calling ``nvmlInit`` once per process,
  thread-safely (``nvmlInit`` is expensive and reference-counted; one init
  serves every backend instance and is shut down at interpreter exit);
* classifying NVML errors (absent vendor, device-level fault, per-metric
  "no value");
* reading running-process lists in one library call per list. pynvml's own
  wrappers always ask for the size first and then fill, which is two calls
  per list whenever something runs; here the array is sized from the last
  answer and only re-asked when the driver says it is too small. The
  versioned entry points are tried newest first (``_v3``, ``_v2``, then the
  unversioned symbol with the original ``nvmlProcessInfo_t`` layout), and the
  version that worked is remembered for the process;
* asking a GPU's field-value batch into a buffer made once per GPU
  (:class:`FieldValueBatch`): pynvml's wrapper builds a new array of its
  attribute-converting structures and fills in the field ids on every call.

Everything still goes through pynvml's ctypes layer: its function-pointer
lookup, its structs and its exception classes.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

from allsmi.schema.records import Record, record

if TYPE_CHECKING:
    from allsmi.backend_api import ProbeResult

#: NVML return codes used below (from ``nvml.h``; pynvml defines the same).
SUCCESS = 0
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_UNKNOWN = 999

#: The driver or the device does not provide this value: ``None``, and stop asking.
NO_VALUE_CODES = frozenset({ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})
#: The device itself is gone or broken: mark it ``lost``.
DEVICE_FAULT_CODES = frozenset({ERROR_GPU_IS_LOST, ERROR_UNKNOWN})
#: The vendor is absent from this machine.
ABSENT_CODES = frozenset({ERROR_LIBRARY_NOT_FOUND, ERROR_DRIVER_NOT_LOADED})

#: ``usedGpuMemory`` when NVML cannot tell (e.g. Windows WDDM, some containers).
VALUE_NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF
#: ``gpuInstanceId``/``computeInstanceId`` of a process outside any MIG instance.
NO_INSTANCE_ID = 0xFFFFFFFF


#: The library pynvml loads on Linux, and what is said when there is none.
LIBRARY = "libnvidia-ml.so.1"
LIBRARY_MISSING = f"{LIBRARY} not found (no NVIDIA driver installed)"
#: Signs of the NVIDIA driver besides its device nodes (NVML creates missing nodes itself),
#: and where WSL keeps the library.
DRIVER_PATHS = ("/proc/driver/nvidia",)
LIBRARY_PATHS = ("/usr/lib/wsl/lib/libnvidia-ml.so.1",)


class NvmlAbsent(Exception):
    """NVML cannot be used on this machine; the message says why in user terms."""


class NvmlBroken(Exception):
    """NVML is present but refuses to start; the message says why and what to do."""


def import_pynvml() -> ModuleType:
    """The ``pynvml`` module, imported on first use.

    Raises :class:`NvmlAbsent` when nvidia-ml-py is not installed.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlAbsent(
            f"the pynvml module (package nvidia-ml-py) is not installed: {exc}") from exc
    return pynvml


def quick_absence(device_nodes: tuple[str, ...]) -> str | None:
    """Why NVML cannot be here, from the file system alone, without importing pynvml;
    ``None`` when it may be (then import pynvml and ask NVML).

    Absent means no device node, no driver in ``/proc`` and no ``libnvidia-ml.so.1`` the
    loader would find: ``nvmlInit`` would fail with "library not found" (the same reason).
    """
    from allsmi.backends._common.presence import maybe_present
    if maybe_present("pynvml", (*device_nodes, *DRIVER_PATHS), LIBRARY, LIBRARY_PATHS):
        return None
    return LIBRARY_MISSING


def binding_details() -> dict[str, str]:
    """The installed nvidia-ml-py's version, for ``allsmi doctor``."""
    from allsmi.support import distinfo
    version = distinfo.version("nvidia-ml-py")
    return {"nvidia-ml-py": version} if version else {}


def quick_probe(device_nodes: tuple[str, ...]) -> ProbeResult | None:
    """:class:`NvidiaBackend`'s ``quick_probe``: its probe's answer where :func:`quick_absence`
    finds no device node, driver or library (no NVML call), else ``None``."""
    from allsmi.backend_api import ProbeResult
    absent = quick_absence(device_nodes)
    return ProbeResult(False, absent, binding_details()) if absent else None


def error_code(exc: BaseException) -> int | None:
    """The NVML return code carried by a pynvml exception, else ``None``."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def describe_init_failure(exc: BaseException) -> tuple[bool, str]:
    """``(absent, message)`` for an exception raised by ``nvmlInit``.

    ``absent`` is true when the vendor is simply not there (no library, no
    kernel driver); otherwise NVML is present but broken and the message
    says what the administrator can do.
    """
    code = error_code(exc)
    if code == ERROR_LIBRARY_NOT_FOUND:
        return True, LIBRARY_MISSING
    if code == ERROR_DRIVER_NOT_LOADED:
        return True, "the NVIDIA kernel driver is not loaded"
    if code == ERROR_NO_PERMISSION:
        return False, ("NVML denied access (NoPermission): this user cannot open the "
                       "/dev/nvidia* device files; run as a member of the group owning "
                       "them or as root")
    if code == ERROR_LIB_RM_VERSION_MISMATCH:
        return False, ("NVML and the NVIDIA kernel module are different versions "
                       "(driver upgraded without reloading it); reload the nvidia "
                       "module or reboot")
    return False, f"nvmlInit failed: {exc} (NVML error {code})"


_init_lock = threading.Lock()
#: The library object NVML was initialised with (pynvml.nvmlLib), or None.
_initialised_lib: object | None = None
_atexit_registered = False


def ensure_init() -> ModuleType:
    """Import pynvml and call ``nvmlInit`` once per process; return the module.

    Thread-safe. A failed init is not remembered, so a later call retries
    (the driver may have been loaded since). If the loaded library object
    changes (it does only when tests install a fake), NVML is initialised
    again for the new one.

    Raises :class:`NvmlAbsent` or :class:`NvmlBroken`.
    """
    global _initialised_lib, _atexit_registered
    pynvml = import_pynvml()
    if _initialised_lib is not None and pynvml.nvmlLib is _initialised_lib:
        return pynvml
    with _init_lock:
        if _initialised_lib is not None and pynvml.nvmlLib is _initialised_lib:
            return pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            absent, message = describe_init_failure(exc)
            raise (NvmlAbsent if absent else NvmlBroken)(message) from exc
        _initialised_lib = pynvml.nvmlLib
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
    return pynvml


def _shutdown_at_exit() -> None:
    global _initialised_lib
    try:
        import pynvml
    except ImportError:  # pragma: no cover - it was importable at init
        return
    if _initialised_lib is None or pynvml.nvmlLib is not _initialised_lib:
        return
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        pass
    _initialised_lib = None


def text(value: object) -> str | None:
    """A stripped ``str`` from NVML text (``bytes`` in some pynvml versions); ``None`` if empty."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).split(b"\0", 1)[0].decode("utf-8", errors="replace")
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


@record
class RawProcess(Record):
    """One entry of a running-process list, with the sentinels already decoded."""

    pid: int
    memory_bytes: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


class ProcessInfoV1(ctypes.Structure):
    """``nvmlProcessInfo_v1_t``: what the unversioned symbol fills (drivers before 450)."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcessInfoV2(ctypes.Structure):
    """``nvmlProcessInfo_v2_t``, the layout ``_v3`` also uses."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


#: Entry points per list, newest first, with the struct each one fills.
_PROCESS_ENTRY_POINTS: dict[str, tuple[tuple[str, str, type[ctypes.Structure]], ...]] = {
    kind: (
        (f"nvmlDeviceGet{kind}RunningProcesses_v3", "c_nvmlProcessInfo_v3_t", ProcessInfoV2),
        (f"nvmlDeviceGet{kind}RunningProcesses_v2", "c_nvmlProcessInfo_v2_t", ProcessInfoV2),
        (f"nvmlDeviceGet{kind}RunningProcesses", "", ProcessInfoV1),
    )
    for kind in ("Compute", "Graphics")
}


class ProcessListReader:
    """Reads compute or graphics process lists in one library call each.

    The version that the driver accepted is remembered for the process (it
    is a property of the installed driver), as is a size hint per handle.
    """

    _MAX_ATTEMPTS = 4

    def __init__(self, pynvml: ModuleType) -> None:
        self._pynvml = pynvml
        self._version: dict[str, int] = {"Compute": 0, "Graphics": 0}
        self._lock = threading.Lock()
        #: Per kind, the entry point and struct of the version last found (by its position):
        #: looked up once, not every call (they are properties of the installed driver).
        self._found: dict[str, tuple[int, Any, type[ctypes.Structure]]] = {}

    def read(self, handle: Any, kind: str, capacity_hint: int = 16) -> list[RawProcess]:
        """The processes on ``handle``; ``kind`` is ``"Compute"`` or ``"Graphics"``.

        Raises pynvml's ``NVMLError`` subclasses like any pynvml call;
        ``FunctionNotFound`` only when no version of the entry point exists.
        """
        found = self._found.get(kind)
        if found is not None and found[0] == self._version[kind]:
            return self._call(found[1], handle, found[2], max(capacity_hint, 1))
        pynvml = self._pynvml
        entries = _PROCESS_ENTRY_POINTS[kind]
        while True:
            position = self._version[kind]
            symbol, pynvml_struct, own_struct = entries[position]
            try:
                fn = pynvml._nvmlGetFunctionPointer(symbol)
            except pynvml.NVMLError as exc:
                if error_code(exc) == ERROR_FUNCTION_NOT_FOUND and position + 1 < len(entries):
                    with self._lock:
                        self._version[kind] = max(self._version[kind], position + 1)
                    continue
                raise
            struct = getattr(pynvml, pynvml_struct, None) if pynvml_struct else None
            if struct is None or ctypes.sizeof(struct) != ctypes.sizeof(own_struct):
                struct = own_struct
            self._found[kind] = (position, fn, struct)
            return self._call(fn, handle, struct, max(capacity_hint, 1))

    def _call(self, fn: Any, handle: Any, struct: type[ctypes.Structure],
              capacity: int) -> list[RawProcess]:
        pynvml = self._pynvml
        for _ in range(self._MAX_ATTEMPTS):
            array = (struct * capacity)()
            count = ctypes.c_uint(capacity)
            ret = fn(handle, ctypes.byref(count), array)
            if ret == ERROR_INSUFFICIENT_SIZE:
                # processes started between calls: leave room for a few more
                capacity = max(count.value * 2 + 5, capacity * 2)
                continue
            if ret != SUCCESS:
                raise pynvml.NVMLError(ret)
            return [_raw_process(array[i]) for i in range(min(count.value, capacity))]
        raise pynvml.NVMLError(ERROR_INSUFFICIENT_SIZE)


def _raw_process(entry: ctypes.Structure) -> RawProcess:
    memory = int(entry.usedGpuMemory)
    gi = getattr(entry, "gpuInstanceId", None)
    ci = getattr(entry, "computeInstanceId", None)
    return RawProcess(
        pid=int(entry.pid),
        memory_bytes=None if memory == VALUE_NOT_AVAILABLE_ULL else memory,
        gpu_instance_id=None if gi is None or gi == NO_INSTANCE_ID else int(gi),
        compute_instance_id=None if ci is None or ci == NO_INSTANCE_ID else int(ci),
    )


_FIELD_MEMBERS: dict[int, str] = {
    0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(entry: Any) -> int | float | None:
    """The number in one ``c_nvmlFieldValue_t``, chosen by its ``valueType``.

    ``None`` for an unknown value type. The caller checks ``entry.nvmlReturn``.
    """
    member = _FIELD_MEMBERS.get(int(entry.valueType))
    if member is None:
        return None
    return getattr(entry.value, member)


class FieldValueBatch:
    """One GPU's ``nvmlDeviceGetFieldValues`` batch of ``ids``, into a buffer made once.

    The buffer has pynvml's ``c_nvmlFieldValue_t`` layout as a plain ctypes structure (no
    per-attribute conversion: every member is a number), and is reset to the asked ids before
    each call; a batch is read by one thread at a time (the GPU's reader). Raises pynvml's
    ``NVMLError`` like ``pynvml.nvmlDeviceGetFieldValues``.
    """

    def __init__(self, pynvml: ModuleType, ids: list[int]) -> None:
        self.ids = list(ids)
        self._pynvml = pynvml
        from allsmi.backends.nvidia.calls import plain  # where GPUs are read
        from allsmi.backends.nvidia.unpack import field_layout
        entry = plain(pynvml.c_nvmlFieldValue_t)
        self._entries = (entry * len(ids))()
        self._layout = field_layout(entry, _FIELD_MEMBERS)
        for entry, fid in zip(self._entries, ids):
            entry.fieldId = fid
        self._asked = bytes(self._entries)  # the ids with every answer cleared
        self._count = ctypes.c_int32(len(ids))

    def read(self, handle: Any) -> list[tuple[int, int | float | None]]:
        """Each asked field's ``(nvmlReturn, value)``, in the order asked; the value as
        :func:`field_value` reads it (``None``: a value type it does not know; meaningful only
        where ``nvmlReturn`` is ``SUCCESS``)."""
        pynvml = self._pynvml
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
        ctypes.memmove(self._entries, self._asked, len(self._asked))
        ret = fn(handle, self._count, ctypes.byref(self._entries))
        if ret != SUCCESS:
            raise pynvml.NVMLError(ret)
        return self.answers()

    def answers(self) -> list[tuple[int, int | float | None]]:
        """What the buffer holds (see :meth:`read`): unpacked with ``struct`` in one pass,
        the same numbers ctypes reads member by member."""
        layout = self._layout
        if layout is None:  # an unexpected layout: member by member, through ctypes
            return [(int(entry.nvmlReturn), field_value(entry)) for entry in self._entries]
        rows, members = layout
        return [(code, None if (member := members.get(kind)) is None
                 else member.unpack_from(raw)[0])
                for kind, code, raw in rows.iter_unpack(bytes(self._entries))]

