"""Intel Gaudi (Gaudi 1, 2 and 3) through ``hl-smi``: the vendor's declaration and quick probe;
the backend, :class:`GaudiBackend`, is in :mod:`allsmi.backends.gaudi.backend`, imported on
first use (see :mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute, tool_absent
from allsmi.backends._common.toolpath import VendorTool
from allsmi.schema.declarations import BackendOption, KubernetesResource, VendorDeclaration

EXECUTABLE = "hl-smi"
ENV_VAR = "ALLSMI_HL_SMI"
#: Where Habana/Intel packages install hl-smi when it is not on PATH.
INSTALL_DIRS: tuple[str, ...] = ("/usr/bin", "/usr/local/bin", "/opt/habanalabs/bin",
                                 "/opt/habanalabs/qual/bin")
TOOL = VendorTool((EXECUTABLE,), ENV_VAR, INSTALL_DIRS)

DECLARATION = VendorDeclaration(
    backend="gaudi", vendor="intel", kind="gpu", product="Intel Gaudi",
    interface=EXECUTABLE,
    version_command=(EXECUTABLE, "-Q", "driver_version", "--format=csv,noheader"),
    kubernetes_resources=(
        KubernetesResource("habana.ai/*", plugin=(
            "Intel Gaudi device plugin (`habana.ai/gaudi`; closed source, not verified): matched "
            "by uuid, bus id, serial (`details.serial`) or `hl<N>`/`accel<N>`")),
    ),
    node_names=("hl", "accel", "gaudi", "intel"),
    device_nodes=("/dev/accel/accel[0-9]*", "/dev/hl[0-9]*"), env_vars=(ENV_VAR,),
    options=(
        BackendOption("mode", "loop", "`loop`: one long-running `hl-smi ... -l <interval>` child; "
                      "`oneshot`: one hl-smi run per sample", choices=("loop", "oneshot")),
        BackendOption("interval_seconds", 2.0, "hl-smi's loop interval (hl-smi takes whole "
                      "seconds: use a whole number with the real tool)", minimum=0.1,
                      maximum=3600),
        BackendOption("firmware", True, "run `hl-smi -L` once at open for firmware versions"),
        BackendOption("processes", False, "run the table view each sample for processes")))


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent when ``hl-smi`` is not found (runs nothing)."""
    return tool_absent(TOOL)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
