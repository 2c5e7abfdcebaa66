"""A stand-in for ``libamd_smi.so`` so that the real ``amdsmi`` package runs in tests.

The layer replaced is the C library itself, nothing above it. amdsmi 7.x is
three Python modules over one shared object:

* ``amdsmi_wrapper`` (ctypes declarations) calls ``ctypes.CDLL("libamd_smi.so")``
  at import and binds every C entry point as an attribute of that object;
* ``amdsmi_interface`` (the public functions) allocates the real ctypes
  structs, calls those entry points, checks the status code and converts the
  structs into dicts: "N/A" for 0xFFFF, BDF formatting, hex strings, ...;
* ``amdsmi_exception`` turns status codes into exceptions.

:func:`load_amdsmi_against` imports a private copy of the installed package
while ``ctypes.CDLL`` hands out a :class:`FakeLibrary` for ``libamd_smi.so``.
The fake's entry points receive the same ctypes arguments the C library would
(``byref`` out-parameters, struct arrays, string buffers), fill them from a
fixture and return an ``amdsmi_status_t``. Everything in the Python package
(unit handling, sentinel mapping, exceptions) is the installed code.

Fixture format (``fixtures/amd/*.json``, see ``fixtures/amd/README.md``): per
device, keys are C entry point names. A value is the struct's fields (nested
structs as objects, ``char[]`` as strings, ints as numbers or ``"0x..."``
strings), a table keyed by the enum member name the call takes (clock type,
temperature sensor, memory type, fan index), or a status name such as
``"AMDSMI_STATUS_NOT_SUPPORTED"`` that the entry point returns instead.
Calls a device does not list return ``default_status`` (NOT_SUPPORTED unless
the device says otherwise).
"""

from __future__ import annotations

import copy
import ctypes
import importlib.util
import itertools
import json
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from tests.contract.scenario import FIXTURES

FIXTURE_DIR = FIXTURES / "amd"

_spec = importlib.util.find_spec("amdsmi")
assert _spec is not None and _spec.submodule_search_locations, "amdsmi is not installed"
AMDSMI_DIR = Path(list(_spec.submodule_search_locations)[0])

_copies = itertools.count()

_HANDLE_BASE = 0x1000
_SOCKET_BASE = 0x100


def _as_int(value: Any) -> Any:
    if isinstance(value, str) and value.lower().startswith("0x"):
        return int(value, 16)
    return value


def _fill(struct: ctypes.Structure, values: dict[str, Any]) -> None:
    types = dict((f[0], f[1]) for f in struct._fields_)
    for key, value in values.items():
        if key not in types:
            raise KeyError(f"{type(struct).__name__} has no field {key!r}")
        ctype = types[key]
        if isinstance(value, dict):
            _fill(getattr(struct, key), value)
        elif isinstance(value, list) and issubclass(ctype, ctypes.Array):
            # an array member (xgmi_read_data_acc[8], xcp_stats[8] of structs): entries in order
            array = getattr(struct, key)
            if len(value) > len(array):
                raise ValueError(f"{type(struct).__name__}.{key} holds {len(array)} entries")
            for position, item in enumerate(value):
                if isinstance(item, dict):
                    _fill(array[position], item)
                else:
                    array[position] = _as_int(item)
        elif isinstance(value, str) and issubclass(ctype, ctypes.Array) and ctype._type_ is ctypes.c_char:
            setattr(struct, key, value.encode())
        else:
            setattr(struct, key, _as_int(value))


def _target(arg: Any) -> Any:
    """The object behind a ``ctypes.byref`` argument."""
    return getattr(arg, "_obj", arg)


class _EntryPoint:
    """One C function of the fake library; the wrapper sets restype/argtypes on it."""

    def __init__(self, library: FakeLibrary, name: str) -> None:
        self.library = library
        self.name = name
        self.restype: Any = None
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> int:
        library = self.library
        library.calls.append(self.name)
        if self.name in library.hang:
            library.hung.set()
            library.release.wait()  # a C call that does not return (until released)
        elif library.latency_s and self.name not in _INSTANT:
            time.sleep(library.latency_s)
        return library.dispatch(self.name, args)


#: Entry points the latency leaves alone (amdsmi's import binds nothing slow; errors are text).
_INSTANT = frozenset({"amdsmi_status_code_to_string"})


class FakeLibrary:
    """Plays ``libamd_smi.so`` for one machine described by a fixture dict.

    ``latency_s``: seconds every entry point takes (a slow library);
    ``hang``: entry points that never return until :attr:`release` is set
    (:attr:`hung` is set when one is entered). Both may also be given in the
    machine dict under ``"fake"`` (``{"latency_s": 1, "hang": ["amdsmi_get_gpu_activity"]}``).
    """

    def __init__(self, machine: dict[str, Any], *, latency_s: float | None = None,
                 hang: set[str] | frozenset[str] | None = None) -> None:
        self.machine = copy.deepcopy(machine)
        knobs = self.machine.pop("fake", {})
        self.latency_s = float(knobs.get("latency_s", 0.0) if latency_s is None else latency_s)
        self.hang = frozenset(knobs.get("hang", ()) if hang is None else hang)
        self.hung = threading.Event()
        self.release = threading.Event()
        self.calls: list[str] = []
        self.module: ModuleType | None = None
        self._keep_alive: list[Any] = []
        self._entry_points: dict[str, _EntryPoint] = {}

    @classmethod
    def from_fixture(cls, name: str) -> FakeLibrary:
        """A fake for ``fixtures/amd/<name>.json``."""
        return cls(json.loads((FIXTURE_DIR / f"{name}.json").read_text()))

    def __getattr__(self, name: str) -> _EntryPoint:
        if name.startswith("_"):
            raise AttributeError(name)
        entry = self._entry_points.get(name)
        if entry is None:
            entry = self._entry_points[name] = _EntryPoint(self, name)
        return entry

    # -- machine state ------------------------------------------------------

    @property
    def devices(self) -> list[dict[str, Any]]:
        return self.machine["devices"]

    def fail_device(self, index: int, status: str) -> None:
        """From now on every call on device ``index`` returns ``status``."""
        self.devices[index] = {"default_status": status}

    # -- dispatch -----------------------------------------------------------

    def _status(self, name: str) -> int:
        assert self.module is not None
        return int(getattr(self.module.amdsmi_wrapper, name))

    def _is_status(self, value: Any) -> bool:
        return isinstance(value, str) and value.startswith("AMDSMI_STATUS_")

    def _sockets(self) -> list[list[int]]:
        groups: dict[str, list[int]] = {}
        for index, dev in enumerate(self.devices):
            bdf = dev.get("amdsmi_get_gpu_device_bdf")
            key = bdf.rsplit(".", 1)[0] if isinstance(bdf, str) and "." in bdf else f"#{index}"
            groups.setdefault(key, []).append(index)
        return list(groups.values())

    def dispatch(self, name: str, args: tuple[Any, ...]) -> int:
        machine_level = self.machine.get(name)
        if self._is_status(machine_level):
            return self._status(machine_level)
        handler: Callable[..., int] | None = getattr(self, f"_c_{name}", None)
        if handler is not None and name in ("amdsmi_init", "amdsmi_shut_down",
                                            "amdsmi_get_socket_handles",
                                            "amdsmi_get_processor_handles",
                                            "amdsmi_get_lib_version"):
            return handler(*args)
        if not args:
            return self._status("AMDSMI_STATUS_NOT_SUPPORTED")
        handle = _target(args[0])
        value = getattr(handle, "value", None)
        index = (value - _HANDLE_BASE) if isinstance(value, int) else -1
        if not 0 <= index < len(self.devices):
            return self._status("AMDSMI_STATUS_INVAL")
        dev = self.devices[index]
        entry = dev.get(name, dev.get("default_status", "AMDSMI_STATUS_NOT_SUPPORTED"))
        if self._is_status(entry):
            return self._status(entry)
        if handler is None:
            handler = self._struct_call
        return handler(entry, *args[1:])

    # -- entry points -------------------------------------------------------

    def _c_amdsmi_init(self, flag: Any) -> int:
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _c_amdsmi_shut_down(self) -> int:
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _c_amdsmi_get_lib_version(self, version_ref: Any) -> int:
        info = self.machine.get("amdsmi_get_lib_version", {"major": 25, "minor": 5,
                                                          "release": 1, "build": "fake"})
        version = _target(version_ref)
        version.major, version.minor, version.release = info["major"], info["minor"], info["release"]
        build = ctypes.create_string_buffer(info["build"].encode())
        self._keep_alive.append(build)
        version.build = ctypes.cast(build, ctypes.POINTER(ctypes.c_char))
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _c_amdsmi_get_socket_handles(self, count_ref: Any, handles: Any) -> int:
        sockets = self._sockets()
        count = _target(count_ref)
        if handles:
            for i in range(min(count.value, len(sockets))):
                handles[i] = _SOCKET_BASE + i
        count.value = len(sockets)
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _c_amdsmi_get_processor_handles(self, socket: Any, count_ref: Any, handles: Any) -> int:
        members = self._sockets()[socket.value - _SOCKET_BASE]
        count = _target(count_ref)
        if handles:
            for i, index in enumerate(members[:count.value]):
                handles[i] = _HANDLE_BASE + index
        count.value = len(members)
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _struct_call(self, entry: dict[str, Any], *args: Any) -> int:
        # (handle, &struct) or (handle, sensor, &struct) for power cap info
        _fill(_target(args[-1]), entry)
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _c_amdsmi_get_gpu_device_bdf(self, entry: str, bdf_ref: Any) -> int:
        base, _, function = entry.rpartition(".")
        domain, bus, device = base.split(":")
        bdf = _target(bdf_ref).struct_amdsmi_bdf_t
        bdf.domain_number, bdf.bus_number = int(domain, 16), int(bus, 16)
        bdf.device_number, bdf.function_number = int(device, 16), int(function, 16)
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _c_amdsmi_get_gpu_device_uuid(self, entry: str, length_ref: Any, buffer: Any) -> int:
        buffer.value = entry.encode()
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _string_out(self, entry: str, buffer: Any, length: Any) -> int:
        buffer.value = entry.encode()
        return self._status("AMDSMI_STATUS_SUCCESS")

    _c_amdsmi_get_gpu_compute_partition = _string_out
    _c_amdsmi_get_gpu_memory_partition = _string_out

    def _keyed(self, table: dict[str, Any], enum_name: str, arg: Any) -> Any:
        assert self.module is not None
        enum = getattr(self.module.amdsmi_interface, enum_name)
        for key, value in table.items():
            if int(getattr(enum, key)) == int(arg):
                return value
        return "AMDSMI_STATUS_NOT_SUPPORTED"

    def _c_amdsmi_get_clock_info(self, table: dict[str, Any], clock: Any, info_ref: Any) -> int:
        entry = self._keyed(table, "AmdSmiClkType", clock)
        if self._is_status(entry):
            return self._status(entry)
        _fill(_target(info_ref), entry)
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _scalar(self, entry: Any, out_ref: Any) -> int:
        if self._is_status(entry):
            return self._status(entry)
        _target(out_ref).value = _as_int(entry)
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _c_amdsmi_get_temp_metric(self, table: dict[str, Any], sensor: Any, metric: Any,
                                  out_ref: Any) -> int:
        assert self.module is not None
        if int(metric) != int(self.module.amdsmi_interface.AmdSmiTemperatureMetric.CURRENT):
            return self._status("AMDSMI_STATUS_NOT_SUPPORTED")
        return self._scalar(self._keyed(table, "AmdSmiTemperatureType", sensor), out_ref)

    def _c_amdsmi_get_gpu_memory_total(self, table: dict[str, Any], kind: Any, out_ref: Any) -> int:
        return self._scalar(self._keyed(table, "AmdSmiMemoryType", kind), out_ref)

    _c_amdsmi_get_gpu_memory_usage = _c_amdsmi_get_gpu_memory_total

    def _c_amdsmi_get_gpu_fan_speed(self, table: dict[str, Any], sensor: int, out_ref: Any) -> int:
        return self._scalar(table.get(str(sensor), "AMDSMI_STATUS_NOT_SUPPORTED"), out_ref)

    _c_amdsmi_get_gpu_fan_speed_max = _c_amdsmi_get_gpu_fan_speed

    def _c_amdsmi_get_energy_count(self, entry: dict[str, Any], accumulator: Any,
                                   resolution: Any, timestamp: Any) -> int:
        _target(accumulator).value = _as_int(entry["energy_accumulator"])
        _target(resolution).value = entry["counter_resolution"]
        _target(timestamp).value = _as_int(entry["timestamp"])
        return self._status("AMDSMI_STATUS_SUCCESS")

    def _c_amdsmi_get_gpu_process_list(self, rows: list[dict[str, Any]], max_ref: Any,
                                       out: Any) -> int:
        capacity = _target(max_ref)
        for i, row in enumerate(rows[:capacity.value]):
            _fill(out[i], row)
        too_many = len(rows) > capacity.value
        capacity.value = min(len(rows), capacity.value)
        return self._status("AMDSMI_STATUS_OUT_OF_RESOURCES" if too_many else "AMDSMI_STATUS_SUCCESS")


def load_amdsmi_against(library: FakeLibrary) -> ModuleType:
    """A private copy of the installed ``amdsmi`` package bound to ``library``."""
    alias = f"_allsmi_fake_amdsmi_{next(_copies)}"
    spec = importlib.util.spec_from_file_location(
        alias, AMDSMI_DIR / "__init__.py", submodule_search_locations=[str(AMDSMI_DIR)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    real_cdll = ctypes.CDLL

    def cdll(name: Any, *args: Any, **kwargs: Any) -> Any:
        if "libamd_smi" in str(name):
            return library
        return real_cdll(name, *args, **kwargs)

    sys.modules[alias] = module
    ctypes.CDLL = cdll  # type: ignore[misc,assignment]
    try:
        spec.loader.exec_module(module)
    finally:
        ctypes.CDLL = real_cdll  # type: ignore[misc]
        for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
            del sys.modules[name]
    library.module = module
    return module


def fake_backend(library: FakeLibrary, **kwargs: Any) -> Any:
    """An :class:`AmdBackend` reading ``library`` through the real amdsmi package.

    Host process owners come from the fixture's ``host_processes`` table, so
    tests never depend on which pids exist on the test machine.
    """
    from allsmi.backends.amd import AmdBackend

    module = load_amdsmi_against(library)
    host = library.machine.get("host_processes", {})

    def lookup(pid: int) -> tuple[str | None, str | None]:
        entry = host.get(str(pid), {})
        return entry.get("user"), entry.get("name")

    kwargs.setdefault("process_lookup", lookup)
    return AmdBackend(loader=lambda: module, **kwargs)
