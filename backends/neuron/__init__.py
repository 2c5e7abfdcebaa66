"""AWS Neuron devices (Trainium, Inferentia) through ``neuron-ls --json-output`` and a running
``neuron-monitor``: the vendor's declaration and quick probe; the backend,
:class:`NeuronBackend`, is in :mod:`allsmi.backends.neuron.backend`, imported on first use
(see :mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute, tool_absent
from allsmi.backends._common.toolpath import VendorTool
from allsmi.schema.declarations import BackendOption, KubernetesResource, VendorDeclaration

#: Where the aws-neuronx-tools package installs its tools (not on PATH by default).
VENDOR_DIRS: tuple[str, ...] = ("/opt/aws/neuron/bin", "/usr/local/bin", "/usr/bin")

#: The device list, cores and processes (one run per sample).
TOOL = VendorTool(("neuron-ls",), "ALLSMI_NEURON_LS", VENDOR_DIRS)
#: The long-running reporter of per-NeuronCore utilization and memory (one child, kept running).
MONITOR = VendorTool(("neuron-monitor",), "ALLSMI_NEURON_MONITOR", VENDOR_DIRS)

DECLARATION = VendorDeclaration(
    backend="neuron", vendor="aws", kind="npu", product="AWS Trainium, Inferentia",
    interface="neuron-ls, neuron-monitor", version_command=("neuron-ls", "--version"),
    kubernetes_resources=(
        KubernetesResource("aws.amazon.com/neuroncore", id_kind="core", plugin=(
            "Neuron device plugin: a global NeuronCore number (`0`...`63`), matched to the device "
            "whose cores hold it (`details.core_first`, `details.core_count`)")),
        KubernetesResource("aws.amazon.com/neurondevice", id_kind="index", plugin=(
            "Neuron device plugin: the Neuron device number (`neuron-ls`'s `neuron_device`)")),
        KubernetesResource("aws.amazon.com/neuron", id_kind="index", plugin=(
            "Neuron device plugin, the older resource name: the Neuron device number")),
    ),
    node_names=("neuron",), device_nodes=("/dev/neuron[0-9]*",),
    env_vars=(TOOL.env_var, MONITOR.env_var),
    tool_flags=("--json-output", "--show-all-procs", "--config-file"),
    compute_active_source="core_busy",
    options=(BackendOption("monitor_period_seconds", 1.0, "`neuron-monitor`'s period",
                           minimum=0.1, maximum=3600),))


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent when ``neuron-ls`` is not found (runs nothing)."""
    return tool_absent(TOOL)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
