"""Rebellions ATOM, ATOM+ and ATOM Max NPUs through ``rbln-smi -j`` (or ``rbln-stat -j``): the
vendor's declaration and quick probe; the backend, :class:`RebellionsBackend`, is in
:mod:`allsmi.backends.rebellions.backend`, imported on first use (see
:mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute, tool_absent
from allsmi.backends._common.toolpath import VendorTool
from allsmi.schema.declarations import KubernetesResource, VendorDeclaration

#: Environment override: the full path of ``rbln-smi`` or ``rbln-stat``.
ENV_VAR = "ALLSMI_RBLN_SMI"

#: Executables in order of preference (``rbln-stat`` is the deprecated name).
TOOLS: tuple[str, ...] = ("rbln-smi", "rbln-stat")

#: Where the RBLN driver package installs its tools, including the paths the
#: Kubernetes NPU operator mounts into containers.
VENDOR_DIRS: tuple[str, ...] = ("/usr/bin", "/usr/local/bin", "/run/rbln/driver/usr/bin", "/host/usr/bin")

TOOL = VendorTool(TOOLS, ENV_VAR, VENDOR_DIRS)

DECLARATION = VendorDeclaration(
    backend="rebellions", vendor="rebellions", kind="npu", product="Rebellions ATOM",
    interface=TOOL.executable, version_command=("rbln-smi", "--version"),
    kubernetes_resources=(
        KubernetesResource("rebellions.ai/*", plugin=(
            "RBLN k8s-device-plugin (`rebellions.ai/ATOM`, `rebellions.ai/REBEL`, "
            "`rebellions.ai/npu`, `rebellions.ai/npu-vf<N>`): the device name `rbln<N>` (matched "
            "by index)")),
    ),
    node_names=("rbln", "npu", "rebellions"), device_nodes=("/dev/rbln[0-9]*",),
    env_vars=(ENV_VAR,), options=())


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent when neither ``rbln-smi`` nor ``rbln-stat`` is found (runs nothing)."""
    return tool_absent(TOOL)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
