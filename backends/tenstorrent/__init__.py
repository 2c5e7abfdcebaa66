"""Tenstorrent boards through ``tt-smi -s --snapshot_no_tty``: the vendor's declaration and
quick probe; the backend, :class:`TenstorrentBackend`, is in
:mod:`allsmi.backends.tenstorrent.backend`, imported on first use (see
:mod:`allsmi.backends._common.declared`).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from allsmi.backend_api import ProbeResult
from allsmi.backends._common.declared import lazy_attribute, tool_absent
from allsmi.backends._common.toolpath import VendorTool
from allsmi.schema.declarations import KubernetesResource, VendorDeclaration

ENV_VAR = "ALLSMI_TT_SMI"
EXECUTABLE = "tt-smi"
#: pip installs into ~/.local/bin or a venv; packages into /usr/bin or /opt/tenstorrent.
INSTALL_DIRS: tuple[str, ...] = (os.path.expanduser("~/.local/bin"), "/usr/local/bin", "/usr/bin",
                                 "/opt/tenstorrent/bin")
TOOL = VendorTool((EXECUTABLE,), ENV_VAR, INSTALL_DIRS)
DECLARATION = VendorDeclaration(
    backend="tenstorrent", vendor="tenstorrent", kind="npu", product="Tenstorrent",
    interface=EXECUTABLE, version_command=(EXECUTABLE, "--version"),
    kubernetes_resources=(
        KubernetesResource("tenstorrent.com/*", plugin=(
            "not verified (`tenstorrent.com/n150`, `p150`...): matched by index, "
            "`/dev/tenstorrent/<N>`, or bus id")),
    ),
    node_names=("", "tenstorrent", "tt"), device_nodes=("/dev/tenstorrent/[0-9]*",),
    env_vars=(ENV_VAR,), options=())


def quick_probe(options: Mapping[str, Any] | None = None) -> ProbeResult | None:
    """Absent when ``tt-smi`` is not found (runs nothing)."""
    return tool_absent(TOOL)


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, name)
