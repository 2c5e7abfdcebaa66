"""Intel GPUs (Arc, Data Center GPU Flex and Max) from the kernel's i915 and xe drivers (sysfs,
hwmon, DRM fdinfo) with ``xpu-smi`` where installed: the vendor's declaration and quick probe;
the backend, :class:`IntelGpuBackend`, is in :mod:`allsmi.backends.intel.backend`, imported on
first use (see :mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute
from allsmi.backends._common.toolpath import VendorTool
from allsmi.schema.declarations import BackendOption, KubernetesResource, VendorDeclaration

#: The kernel drivers of Intel GPUs.
DRIVERS = ("i915", "xe")
#: xpu-smi (Intel XPU Manager's command line), for what sysfs lacks; optional.
XPU_SMI = VendorTool(("xpu-smi",), "ALLSMI_XPU_SMI", ("/usr/bin", "/usr/local/bin", "/opt/xpum/bin"))

DECLARATION = VendorDeclaration(
    backend="intel", vendor="intel", kind="gpu", product="Intel Arc, Data Center GPU Flex and Max",
    interface="i915/xe sysfs, DRM fdinfo, xpu-smi", version_command=("xpu-smi", "--version"),
    kubernetes_resources=(
        KubernetesResource("gpu.intel.com/i915", id_kind="index", plugin=(
            "Intel GPU device plugin: `card<N>-<share>`, the DRM card of the GPU (matched by the "
            "card number, which is the device index)")),
        KubernetesResource("gpu.intel.com/xe", id_kind="index", plugin=(
            "Intel GPU device plugin for the xe driver: as `gpu.intel.com/i915`")),
    ),
    node_names=("card", "renderd"), device_nodes=("/dev/dri/card[0-9]*", "/dev/dri/renderD[0-9]*"),
    env_vars=(XPU_SMI.env_var,), tool_flags=(),
    compute_active_source="engine_time",
    options=(BackendOption("sysfs_root", "/sys", "where sysfs is mounted (a container that "
                           "mounts the host's elsewhere: `/host/sys`)"),
             BackendOption("proc_root", "/proc", "where procfs is mounted (`/host/proc`)")))


def drm_root(options: Mapping[str, Any] | None) -> str:
    """``[backends.intel] sysfs_root`` (``/sys``; ``/host/sys`` in a container) + ``class/drm``."""
    root = DECLARATION.probe_value(options, "sysfs_root")
    return os.path.join(str(root), "class", "drm")


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent when no DRM card is driven by i915 or xe (reads a few sysfs files, runs nothing)."""
    root = drm_root(options)
    try:
        names = os.listdir(root)
    except OSError:
        return ProbeResult(False, f"no DRM devices ({root} is not readable)")
    for name in names:
        if not (name.startswith("card") and name[4:].isdecimal()):
            continue
        try:
            with open(os.path.join(root, name, "device", "uevent"), encoding="ascii",
                      errors="replace") as handle:
                if any(line.strip() in (f"DRIVER={d}" for d in DRIVERS) for line in handle):
                    return None
        except OSError:
            continue
    return ProbeResult(False, f"no DRM card driven by i915 or xe under {root}")


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
