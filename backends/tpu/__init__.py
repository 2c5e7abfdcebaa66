"""Google Cloud TPUs (v2 to 7x) through libtpu's runtime metrics gRPC service, with the chips found
in sysfs (PCI vendor ``0x1ae0``): the vendor's declaration and quick probe; the backend,
:class:`TpuBackend`, is in :mod:`allsmi.backends.tpu.backend`, imported on first use (see
:mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute
from allsmi.schema.declarations import BackendOption, KubernetesResource, VendorDeclaration

#: Google's PCI vendor id.
GOOGLE_VENDOR = "0x1ae0"
#: Where libtpu serves its runtime metrics while a workload runs (tpu-info's default).
DEFAULT_ADDRESS = "localhost:8431"

DECLARATION = VendorDeclaration(
    backend="tpu", vendor="google", kind="npu", product="Google Cloud TPU",
    interface="libtpu runtime metrics (gRPC)", version_command=("tpu-info", "--version"),
    kubernetes_resources=(
        KubernetesResource("google.com/tpu", plugin=(
            "GKE TPU device plugin (not verified): matched by index, `/dev/accel<N>` or "
            "`/dev/vfio/<N>`")),
    ),
    node_names=("accel", ""), device_nodes=("/dev/accel[0-9]*", "/dev/vfio/[0-9]*"),
    env_vars=(), tool_flags=("--streaming", "--version"),
    compute_active_source="engine_time",
    options=(BackendOption("metrics_address", DEFAULT_ADDRESS, "where libtpu serves its runtime "
                           "metrics"),
             BackendOption("sysfs_root", "/sys", "where sysfs is mounted (`/host/sys`)")))


def pci_root(options: Mapping[str, Any] | None) -> str:
    """``[backends.tpu] sysfs_root`` (``/sys``) + ``bus/pci/devices``."""
    root = DECLARATION.probe_value(options, "sysfs_root")
    return os.path.join(str(root), "bus", "pci", "devices")


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent when no PCI device has Google's vendor id (reads sysfs, runs and loads nothing)."""
    root = pci_root(options)
    try:
        names = os.listdir(root)
    except OSError:
        return ProbeResult(False, f"no PCI devices listed ({root} is not readable)")
    for name in names:
        try:
            with open(os.path.join(root, name, "vendor"), encoding="ascii") as handle:
                if handle.read(16).strip().lower() == GOOGLE_VENDOR:
                    return None
        except (OSError, UnicodeDecodeError):
            continue
    return ProbeResult(False, f"no TPU chip (no PCI device of vendor {GOOGLE_VENDOR} under {root})")


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
