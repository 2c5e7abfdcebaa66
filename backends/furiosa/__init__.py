"""FuriosaAI RNGD NPUs through the furiosa-smi SDK or the ``furiosa-smi`` tool: the vendor's
declaration and quick probe; the backend, :class:`FuriosaBackend`, is in
:mod:`allsmi.backends.furiosa.backend`, imported on first use (see
:mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute
from allsmi.backends._common.toolpath import VendorTool
from allsmi.schema.declarations import BackendOption, KubernetesResource, VendorDeclaration

ENV_VAR = "ALLSMI_FURIOSA_SMI"
EXECUTABLE = "furiosa-smi"
#: Where the vendor's apt packages and manual installs put the tool.
INSTALL_DIRS: tuple[str, ...] = ("/usr/bin", "/usr/local/bin", "/opt/furiosa/bin")
TOOL = VendorTool((EXECUTABLE,), ENV_VAR, INSTALL_DIRS)
#: The SDK's import names in the order they are tried: the current generation first.
MODULE_NAMES: tuple[str, ...] = ("furiosa_smi", "furiosa_smi_py")

DECLARATION = VendorDeclaration(
    backend="furiosa", vendor="furiosa", kind="npu", product="Furiosa RNGD",
    interface=EXECUTABLE, version_command=(EXECUTABLE, "--version"),
    kubernetes_resources=(
        KubernetesResource("furiosa.ai/*", plugin=(
            "furiosa-device-plugin (`furiosa.ai/rngd`, `furiosa.ai/warboy`): the device uuid; a "
            "partition's id starts with it")),
        KubernetesResource("beta.furiosa.ai/*", plugin="furiosa-device-plugin, beta resources: "
                           "as `furiosa.ai/*`"),
    ),
    node_names=("npu", "rngd", "furiosa"), device_nodes=("/dev/rngd/npu[0-9]*", "/dev/npu[0-9]*"),
    env_vars=(ENV_VAR,),
    options=(
        BackendOption("method", "auto", "`auto`: the SDK, else the tool; `sdk` or `cli`: only "
                      "that", choices=("auto", "sdk", "cli")),
        BackendOption("processes", True, "run `furiosa-smi ps` each sample for processes")))


def method_of(options: Mapping[str, Any] | None) -> str:
    """``[backends.furiosa] method``: ``auto`` (the SDK, else the tool), ``sdk`` or ``cli``; a
    value it does not take is ``auto`` here (a probe never raises; ``open()`` refuses it)."""
    return str(DECLARATION.probe_value(options, "method"))


def installed_module() -> str | None:
    """The first SDK module that looks importable, without importing it."""
    import importlib.util
    for name in MODULE_NAMES:
        if name in sys.modules:
            if sys.modules[name] is not None:
                return name
            continue  # a None entry blocks the import on purpose
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except (ImportError, ValueError):
            continue
    return None


def look(method: str, locate: Callable[[], str | None]) -> ProbeResult:
    """The backend's probe: available when an SDK is importable or ``locate`` finds
    furiosa-smi (as ``method`` allows); imports nothing of the SDK, runs nothing."""
    try:
        module = installed_module() if method != "cli" else None
        tool = locate()
    except Exception as exc:  # noqa: BLE001 - probe never raises
        return ProbeResult(False, f"cannot look for the Furiosa SDK or {EXECUTABLE}: {exc}")
    details: dict[str, str] = {}
    if module:
        details["sdk_module"] = module
    if tool:
        details["tool"] = tool
    if (module and method != "cli") or (tool and method != "sdk"):
        return ProbeResult(True, "", details)
    reasons = []
    if method != "cli":
        reasons.append("neither furiosa_smi nor furiosa_smi_py is importable")
    if method != "sdk":
        reasons.append(TOOL.missing())
    return ProbeResult(False, "; ".join(reasons), details)


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """The probe itself where it says absent: it only looks (files, ``PATH``, the SDK's spec)."""
    result = look(method_of(options), TOOL.find)
    return None if result.available else result


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
