"""Huawei Ascend NPUs (Atlas 300I/800/900, Ascend 310, 310P, 910, 910B) through ``npu-smi info``:
the vendor's declaration and quick probe; the backend, :class:`AscendBackend`, is in
:mod:`allsmi.backends.ascend.backend`, imported on first use (see
:mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute, tool_absent
from allsmi.backends._common.toolpath import VendorTool
from allsmi.schema.declarations import KubernetesResource, VendorDeclaration

#: Where the Ascend driver package installs npu-smi, and where the device plugin's containers
#: mount it.
VENDOR_DIRS: tuple[str, ...] = ("/usr/local/sbin", "/usr/local/bin", "/usr/local/Ascend/driver/tools",
                                "/usr/bin")

TOOL = VendorTool(("npu-smi",), "ALLSMI_NPU_SMI", VENDOR_DIRS)

DECLARATION = VendorDeclaration(
    backend="ascend", vendor="huawei", kind="npu", product="Huawei Ascend",
    interface=TOOL.executable, version_command=("npu-smi", "-v"),
    kubernetes_resources=(
        KubernetesResource("huawei.com/Ascend*", id_kind="index", plugin=(
            "Ascend device plugin (`huawei.com/Ascend910`, `huawei.com/Ascend910B`, "
            "`huawei.com/Ascend310`, `huawei.com/Ascend310P`): `Ascend910-<N>`, the device number "
            "of `/dev/davinci<N>` (matched by index)")),
    ),
    node_names=("davinci", "ascend910", "ascend910b", "ascend310", "ascend310p", "npu"),
    device_nodes=("/dev/davinci[0-9]*", "/dev/davinci_manager"),
    env_vars=(TOOL.env_var,),
    compute_active_source="core_busy", options=())


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent when ``npu-smi`` is not found (runs nothing)."""
    return tool_absent(TOOL)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
