"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py): the vendor's declaration
and quick probe; the backend, :class:`NvidiaBackend`, is in
:mod:`allsmi.backends.nvidia.backend`, imported on first use (see
:mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute
from allsmi.schema.declarations import BackendOption, KubernetesResource, VendorDeclaration

DECLARATION = VendorDeclaration(
    backend="nvidia", vendor="nvidia", kind="gpu", product="NVIDIA", interface="NVML",
    version_command=("nvidia-smi", "--version"),
    kubernetes_resources=(  # the NVIDIA k8s-device-plugin's
        KubernetesResource("nvidia.com/gpu", plugin="NVIDIA k8s-device-plugin: the uuid (`GPU-...`, "
                           "default), or with `DEVICE_ID_STRATEGY=index` the index (`3`); time-slicing "
                           "and MPS replicas add `::<n>` (ignored)"),
        KubernetesResource("nvidia.com/mig-*", plugin="MIG devices: the `MIG-...` uuid, or with `index` "
                           "`<gpu>:<slot>`"),
        KubernetesResource("nvidia.com/*", plugin="renamed shared resources (`nvidia.com/gpu.shared`)")),
    node_names=("nvidia", "gpu"), device_nodes=("/dev/nvidiactl", "/dev/nvidia[0-9]*"),
    options=(
        BackendOption("workers", 8, "threads that may read GPUs at once (one a cycle while NVML "
                      "answers fast)", minimum=1, maximum=256),
        BackendOption("processes", True, "read process lists and their utilization"),
        BackendOption("gpm", True, "read GPM activity on GPUs that have it"),
        BackendOption("pcie_throughput", False, "also read PCIe TX and RX (each call samples a "
                      "20 ms window)")))


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent without an NVML call: see :func:`allsmi.backends.nvidia.nvml.quick_probe`."""
    from allsmi.backends.nvidia import nvml
    return nvml.quick_probe(DECLARATION.device_nodes)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
