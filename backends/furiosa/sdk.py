"""Adapters over the two generations of Furiosa's Python SDK.

* ``furiosa_smi`` (SDK 2026.4.0 and later): no ``init()``; flat ``Device``
  methods (``uuid()``, ``memory_usage()``, ``performance_counter()``...);
  utilization comes from diffing two performance-counter samples with
  ``PePerformanceCounter.utilization_since(prev)``; errors derive from
  ``furiosa_smi.SmiError``.
* ``furiosa_smi_py`` (up to 2026.1.x): ``init()`` first; identity lives on
  ``device.device_info()``; utilization comes from an observer's
  ``get_core_utilization(device)``; errors are plain ``RuntimeError``.

Both are imported lazily, only from :func:`load_sdk`. Each adapter turns one
pass over the devices into :class:`FuriosaReading` records; a failing call
makes that one value ``None`` and adds a warning, a device whose identity
cannot be read is skipped. Integer-kind values (DRAM bytes, a PE core number)
are whole numbers or nothing: a negative or fractional one is refused with a
warning said once per device, field and value by this adapter (one per open).
"""

from __future__ import annotations

import abc
import importlib
from typing import TYPE_CHECKING, Any, Callable, Collection

from allsmi.schema import units
from allsmi.backends.furiosa import MODULE_NAMES

if TYPE_CHECKING:
    from .parse import FuriosaReading
    from allsmi.backends._common.cells import SaidOnce


def text_or_none(value: object) -> str | None:
    """:func:`.parse.text_or_none`; the parsers are imported when an SDK is read, not
    when :func:`installed_module` answers the backend's probe."""
    from .parse import text_or_none as convert
    return convert(value)


class SdkInitError(Exception):
    """The SDK imported but could not be initialised; the message says why."""


def _call(obj: object, method: str, warnings: list[str], where: str) -> Any:
    """``obj.method()``, or ``None`` when the method is absent or raises."""
    func = getattr(obj, method, None)
    if not callable(func):
        return None
    try:
        return func()
    except Exception as exc:  # vendor bindings raise RuntimeError/SmiError subclasses
        warnings.append(f"{where}: {method}() failed: {exc}")
        return None


def _attr(obj: object, name: str) -> Any:
    value = getattr(obj, name, None)
    if callable(value):
        try:
            return value()
        except Exception:
            return None
    return value


def version_text(version: object) -> str | None:
    """"1.7.0-rc1+4dfed18" from a ``VersionInfo`` (fields or getters), or the string itself."""
    if version is None:
        return None
    if isinstance(version, str):
        return text_or_none(version)
    major, minor, patch = (_attr(version, n) for n in ("major", "minor", "patch"))
    if all(isinstance(part, int) and not isinstance(part, bool) for part in (major, minor, patch)):
        text = f"{major}.{minor}.{patch}"
        prerelease = text_or_none(_attr(version, "prerelease"))
        metadata = text_or_none(_attr(version, "metadata"))
        if prerelease:
            text += f"-{prerelease}"
        if metadata:
            text += f"+{metadata}"
        return text
    text = str(version).strip()
    # A binding without __str__ prints "<VersionInfo object at 0x...>": not a version.
    return None if not text or text.startswith("<") else text


def _label(value: object) -> str | None:
    """A display string for an enum member, bitmask or string; ``None`` when missing."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    name = getattr(value, "name", None)
    if isinstance(name, str) and name:
        return name
    return text_or_none(str(value))


def _max_frequency(freq: object, warnings: list[str], where: str) -> float | None:
    pes = _call(freq, "pe_frequency", warnings, where) if freq is not None else None
    if not isinstance(pes, (list, tuple)):
        return None
    values = [units.to_float(_attr(pe, "frequency")) for pe in pes]
    known = [v for v in values if v is not None and v > 0]
    # PE clocks move together under the governor; the highest is the device clock.
    return max(known) if known else None


def _memory(block: object, warnings: list[str], where: str, said: SaidOnce) -> tuple[int | None, int | None]:
    """DRAM bytes in use and in total: whole numbers of 0 or more, in use no more than the total."""
    if block is None:
        return None, None
    from allsmi.backends._common.cells import whole_cell
    total = whole_cell(_attr(block, "total_bytes"), where, "total_bytes()", warnings, said)
    used = whole_cell(_attr(block, "in_use_bytes"), where, "in_use_bytes()", warnings, said)
    if total is not None and used is not None and (total <= 0 or used > total):
        return None, None
    return used, total


def _ordered(cores: Collection[Any], warnings: list[str], where: str, said: SaidOnce) -> list[object]:
    """Each ``CoreUtilization``'s ``pe_usage_percentage()`` in ``core()`` order; a core whose
    number is no whole number of 0 or more goes first (with a warning), never rounded in."""
    from allsmi.backends._common.cells import whole_cell
    indexed = [(whole_cell(_attr(c, "core"), where, "core()", warnings, said),
                _attr(c, "pe_usage_percentage")) for c in cores]
    return [value for _, value in sorted(indexed, key=lambda item: -1 if item[0] is None else item[0])]


def _percent_tuple(values: list[object], warnings: list[str], where: str) -> tuple[float | None, ...]:
    out: list[float | None] = []
    for n, raw in enumerate(values):
        value = units.parse_percent(raw)
        if value is None and raw is not None:
            warnings.append(f"{where}: PE {n} utilization {raw!r} is not a percentage")
        out.append(value)
    return tuple(out)


class SdkAdapter(abc.ABC):
    """Common surface of both generations."""

    generation: str = ""
    module_name: str = ""
    #: Where each generation keeps what the shared pass reads: the name method on the identity
    #: object, the product name method on the device (``None``: not offered), and the calls that
    #: lead from the device to the memory block (``total_bytes``, ``in_use_bytes``).
    name_method: str = ""
    product_name_method: str | None = None
    memory_path: tuple[str, ...] = ()

    def __init__(self, module: Any) -> None:
        self.module = module
        from allsmi.backends._common.cells import SaidOnce
        #: Refused values already warned about (an adapter lives from one open() to close()).
        self.said = SaidOnce()

    @property
    def version(self) -> str | None:
        """The binding's own version string, when it exposes one."""
        return text_or_none(getattr(self.module, "__version__", None))

    def driver_version(self, warnings: list[str]) -> str | None:
        """The kernel driver version, or ``None`` (no device, or not reported)."""
        func = getattr(self.module, "driver_info", None)
        if not callable(func):
            return None
        try:
            return version_text(func())
        except Exception:
            # Both generations raise "device not found" here when no NPU exists.
            return None

    def list_devices(self) -> list[Any]:
        """The SDK's device handles; raises :class:`SdkInitError` on failure."""
        try:
            devices = self.module.list_devices()
        except Exception as exc:
            raise SdkInitError(f"{self.module_name}.list_devices() failed: {exc}") from exc
        return list(devices or [])

    def _identity(self, device: Any, warnings: list[str], where: str) -> Any:
        """What answers ``uuid()``, ``serial()``, ``bdf()``, the name, ``arch()`` and
        ``firmware_version()``; ``None`` skips the device (with a warning)."""
        return device

    @abc.abstractmethod
    def _utilization(self, device: Any, key: str, warnings: list[str],
                     where: str) -> tuple[float | None, ...] | None:
        """Each PE's utilization in percent; ``key`` names the device across passes."""

    def read(self, warnings: list[str]) -> list[FuriosaReading]:
        """One pass over all devices."""
        from .parse import FuriosaReading
        readings: list[FuriosaReading] = []
        for position, device in enumerate(self.list_devices()):
            where = f"device {position}"
            info = self._identity(device, warnings, where)
            if info is None:
                continue
            uuid, serial, bdf = (text_or_none(_call(info, method, warnings, where))
                                 for method in ("uuid", "serial", "bdf"))
            if not (uuid or serial or bdf):
                warnings.append(f"{where}: no uuid, serial or bdf readable; skipped")
                continue
            name = text_or_none(_call(info, self.name_method, warnings, where))
            where = name or where
            temp = _call(device, "device_temperature", warnings, where)
            memory = device
            for method in self.memory_path:
                memory = _call(memory, method, warnings, where) if memory is not None else None
            used, total = _memory(memory, warnings, where, self.said)
            alive = _call(device, "liveness", warnings, where)
            product = (_call(device, self.product_name_method, warnings, where)
                       if self.product_name_method else None)
            readings.append(FuriosaReading(
                dev_name=name, uuid=uuid, serial=serial, bus_id=bdf,
                arch=_label(_call(info, "arch", warnings, where)),
                product_name=text_or_none(product),
                firmware=version_text(_call(info, "firmware_version", warnings, where)),
                governor=_label(_call(device, "governor_profile", warnings, where)),
                temperature_celsius=units.to_float(_attr(temp, "soc_peak")) if temp is not None else None,
                ambient_celsius=units.to_float(_attr(temp, "ambient")) if temp is not None else None,
                power_watts=units.to_float(_call(device, "power_consumption", warnings, where)),
                clock_mhz=_max_frequency(_call(device, "core_frequency", warnings, where), warnings, where),
                alive=alive if isinstance(alive, bool) else None,
                core_utilization=self._utilization(device, uuid or serial or bdf or "", warnings, where),
                memory_used_bytes=used, memory_total_bytes=total,
                throttle_reason=_label(_call(device, "throttle_reason", warnings, where)),
            ))
        return readings


class ModernSdk(SdkAdapter):
    """``furiosa_smi`` (2026.4.0+): flat device methods, counter-diff utilization."""

    generation = "furiosa_smi"
    module_name = "furiosa_smi"
    name_method = "device_name"
    product_name_method = "product_name"
    memory_path = ("memory_usage",)

    def __init__(self, module: Any) -> None:
        super().__init__(module)
        self._previous: dict[str, list[Any]] = {}

    def _utilization(self, device: Any, key: str, warnings: list[str],
                     where: str) -> tuple[float | None, ...] | None:
        counter = _call(device, "performance_counter", warnings, where)
        pes = _call(counter, "pe_performance_counters", warnings, where) if counter is not None else None
        if not isinstance(pes, (list, tuple)):
            return None
        previous = self._previous.get(key)
        self._previous[key] = list(pes)
        if previous is None or len(previous) != len(pes):
            return None  # the first sample has nothing to diff against
        raw: list[object] = []
        for now, before in zip(pes, previous):
            try:
                raw.append(now.utilization_since(before))
            except Exception as exc:
                warnings.append(f"{where}: utilization_since() failed: {exc}")
                raw.append(None)
        return _percent_tuple(raw, warnings, where)


class LegacySdk(SdkAdapter):
    """``furiosa_smi_py`` (up to 2026.1.x): ``init()``, ``device_info()``, an observer."""

    generation = "furiosa_smi_py"
    module_name = "furiosa_smi_py"
    name_method = "name"
    memory_path = ("memory_utilization", "dram")

    def __init__(self, module: Any) -> None:
        super().__init__(module)
        try:
            module.init()
        except Exception as exc:
            raise SdkInitError(f"furiosa_smi_py.init() failed: {exc}") from exc
        self._observer: Any = None
        self._observer_error: str | None = None
        try:
            self._observer = module.create_default_observer()
        except Exception as exc:
            self._observer_error = f"create_default_observer() failed: {exc}"

    def _identity(self, device: Any, warnings: list[str], where: str) -> Any:
        info = _call(device, "device_info", warnings, where)
        if info is None:
            warnings.append(f"{where}: device_info() unreadable; skipped")
        return info

    def _utilization(self, device: Any, key: str, warnings: list[str],
                     where: str) -> tuple[float | None, ...] | None:
        if self._observer is None:
            if self._observer_error:
                warnings.append(f"{where}: {self._observer_error}")
            return None
        try:
            cores = list(self._observer.get_core_utilization(device))
        except Exception as exc:
            warnings.append(f"{where}: get_core_utilization() failed: {exc}")
            return None
        return _percent_tuple(_ordered(cores, warnings, where, self.said), warnings, where)


_ADAPTERS: dict[str, Callable[[Any], SdkAdapter]] = {
    "furiosa_smi": ModernSdk,
    "furiosa_smi_py": LegacySdk,
}


def load_sdk() -> tuple[SdkAdapter | None, list[str]]:
    """Import the newest available generation and wrap it.

    Returns ``(None, reasons)`` when neither imports. An import that succeeds
    but fails to initialise raises :class:`SdkInitError`.
    """
    reasons: list[str] = []
    for name in MODULE_NAMES:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # ImportError, or OSError from a missing native library
            reasons.append(f"{name}: {exc.__class__.__name__}: {exc}")
            continue
        if module is None:
            continue
        return _ADAPTERS[name](module), reasons
    return None, reasons
