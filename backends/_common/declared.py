"""What a built-in vendor package says about its vendor before its backend is imported.

Each vendor package (``allsmi.backends.<vendor>``) is small: it holds

* ``DECLARATION``: its :class:`~allsmi.schema.declarations.VendorDeclaration` (the backend class takes
  its class attributes from it: ``class XBackend(Backend, declared=DECLARATION)``);
* ``quick_probe(options)``: the backend's :meth:`~allsmi.backend_api.Backend.quick_probe`
  answer for a backend built with those ``[backends.NAME]`` options, from files and ``PATH``
  alone: a :class:`~allsmi.backend_api.ProbeResult` saying why the vendor is absent, or
  ``None`` where it may be present;
* the backend class and the rest of its names, in its ``backend`` module, imported on first
  use by the package's ``__getattr__`` (:func:`lazy_attribute`, PEP 562).

:func:`allsmi.collection.registry.instantiate` builds a :class:`~allsmi.collection.registry.DeferredBackend` for such
a package, which imports the backend only once ``quick_probe`` says the vendor may be there: a
machine without AMD, Gaudi or an NPU never imports those backends (about 1.2 MiB of resident
memory in the dashboard, and their share of start-up). A plug-in package may do the same.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from allsmi.backend_api import ProbeResult

from .toolpath import VendorTool


def lazy_attribute(package: str, name: str) -> Any:
    """A vendor package's ``__getattr__``: ``name`` from its ``backend`` module, imported now."""
    missing = AttributeError(f"module {package!r} has no attribute {name!r}")
    # Never import the backend for a look at a module's dunders, nor for a submodule that
    # ``from package import submodule`` asks about before importing it.
    if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
        raise missing
    module = importlib.import_module(f"{package}.backend")
    try:
        return getattr(module, name)
    except AttributeError:
        raise missing from None


def tool_absent(tool: VendorTool) -> ProbeResult | None:
    """A command-line vendor's quick probe: why it is absent when ``tool`` is not found (the
    override variable, ``PATH``, the vendor's directories), as its backend's probe says it;
    ``None`` when found."""
    try:
        if tool.find() is not None:
            return None
    except Exception as exc:  # noqa: BLE001 - a probe never raises; an odd environment is a reason
        return ProbeResult(False, f"cannot look for {tool.label}: {exc}")
    return ProbeResult(False, tool.missing())


#: The activity figures beyond ``compute_active_percent`` (occupancy, tensor units, memory
#: bandwidth, interconnect and PCIe rates) that a vendor without profiling counters never reports:
#: part of such a backend's ``unreported_fields``.
BEYOND_BUSY = frozenset({"sm_occupancy_percent", "tensor_active_percent", "memory_bandwidth_percent",
                         "interconnect_rx_bytes_per_second", "interconnect_tx_bytes_per_second",
                         "pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second"})
