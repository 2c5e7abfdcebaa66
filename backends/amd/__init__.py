"""AMD GPUs through the ``amdsmi`` Python package (ROCm's ``libamd_smi``): the vendor's
declaration and quick probe; the backend, :class:`AmdBackend`, is in
:mod:`allsmi.backends.amd.backend`, imported on first use (see
:mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

import sys
from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute
from allsmi.schema.declarations import KubernetesResource, VendorDeclaration

DECLARATION = VendorDeclaration(
    backend="amd", vendor="amd", kind="gpu", product="AMD Instinct", interface="amdsmi",
    version_command=("amd-smi", "version"),
    kubernetes_resources=(
        KubernetesResource("amd.com/*", plugin=(
            "ROCm k8s-device-plugin (`amd.com/gpu`, partition resources such as "
            "`amd.com/cpx_nps4`): the PCI bus id (`0000:c1:00.0`; on a partitioned board the "
            "first partition's), time-slicing replicas `<bus id>-slice-<n>`; its other "
            "partitions' `amdgpu_xcp_<n>` name no device (reported)")),
    ),
    node_names=("amd", "card", "renderd", "gpu"), device_nodes=("/dev/kfd", "/dev/dri/renderD*"),
    options=())


def absence() -> ProbeResult | None:
    """The probe's answer where the amdsmi package is not installed (as the backend's probe
    says it: :func:`allsmi.backends.amd.loader.load_amdsmi`), or where there is no AMD device
    node and no ``libamd_smi.so`` where amdsmi looks
    (:func:`allsmi.backends.amd.locate.quick_absence`); neither amdsmi, the loader nor the
    backend imported."""
    from allsmi.backends.amd.locate import installed, not_installed_reason, package_version, quick_absence
    if "amdsmi" not in sys.modules and not installed("amdsmi"):
        version = package_version()  # a distribution whose module is gone: as probe() says it
        return ProbeResult(False, not_installed_reason(), {"amdsmi_package": version} if version else {})
    absent = quick_absence(DECLARATION.device_nodes)
    if absent is None:
        return None
    version = package_version()
    return ProbeResult(False, absent[0], {**({"amdsmi_package": version} if version else {}), **absent[1]})


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent without importing amdsmi: see :func:`absence`."""
    return absence()


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
