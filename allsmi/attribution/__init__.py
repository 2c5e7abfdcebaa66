"""Who holds each device: Kubernetes pods, batch jobs and their users (issue 11).

Sources, each optional and isolated like a backend (see docs/attribution.md):

* ``kubernetes``: the kubelet pod-resources gRPC API v1 (:mod:`.kubernetes`);
* ``hpc-job``: a job-mapping directory compatible with dcgm-exporter's (:mod:`.hpcjob`);
* ``cgroup``: each device process's cgroup (:mod:`.cgroup`);
* ``simulated``: pods and jobs on ``--simulate`` devices (:mod:`.simulated`).

The interface for the collector::

    attributor = build_attributor(config, simulate=bool(args.simulate))
    result = attributor.resolve(snapshot_devices, now=wall_time)   # never raises
    result.device_workloads(device.id)   # None | () | (Workload, ...)
    result.process(pid)                  # ProcessAttribution(job_id, pod_uid, container_id)
    result.statuses                      # tuple[BackendStatus, ...], one per source
    attributor.close()
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from allsmi.config import Config
    from allsmi.schema.declarations import VendorDeclaration

    from .runner import AttributionSource, Attributor
    from .settings import AttributionSettings

#: Public name -> the submodule defining it. Each is imported on first use (PEP 562), so that a
#: snapshot imports only the sources it runs (tests/test_layers.py checks it).
_EXPORTS = {
    "CgroupSource": "cgroup", "parse_cgroup": "cgroup",
    "HpcJobSource": "hpcjob",
    "DeviceIndex": "matching", "normalize_bus_id": "matching",
    "NO_ATTRIBUTION": "model", "SOURCE_NAMES": "model", "WORKLOAD_FIELDS": "model",
    "Attribution": "model", "ProcessAttribution": "model", "SourceError": "model",
    "SourceResult": "model", "SourceTimeout": "model", "SourceUnavailable": "model",
    "Workload": "model",
    "AttributionSource": "runner", "Attributor": "runner", "merge": "runner",
    "AttributionSettings": "settings", "ResourceRule": "settings",
    "attribution_settings": "settings",
    "SimulatedSource": "simulated",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def build_sources(settings: AttributionSettings, simulate: bool = False) -> list[AttributionSource]:
    """The sources to run, in merge order (kubernetes, hpc-job, cgroup, simulated).

    On real hardware: every source in ``settings.sources`` (``hpc-job`` only with a directory).
    With ``simulate``: the simulated source, plus the kubelet and the job directory only where
    they were configured explicitly (each then replaces the simulated pods or jobs), and no
    cgroup source (simulated processes are not processes of this machine).
    """
    # Each source's module is imported only when that source runs (grpc itself only when the
    # kubelet's socket exists).
    sources: list[AttributionSource] = []
    kube = "kubernetes" in settings.sources and (settings.kubelet_socket_explicit or not simulate)
    if kube:
        from .kubernetes import KubeletSource
        sources.append(KubeletSource(settings.kubelet_socket, settings, settings.timeout_seconds))
    hpc = "hpc-job" in settings.sources and settings.hpc_job_dir is not None
    if hpc:
        from .hpcjob import HpcJobSource
        sources.append(HpcJobSource(settings.hpc_job_dir))  # type: ignore[arg-type]
    if "cgroup" in settings.sources and not simulate:
        from .cgroup import CgroupSource
        sources.append(CgroupSource(settings.proc_root))
    if simulate:
        from .simulated import SimulatedSource
        sources.append(SimulatedSource(pods=not kube, jobs=not hpc))
    return sources


def build_attributor(config: Config, environ: Mapping[str, str] | None = None,
                     simulate: bool = False,
                     declarations: Sequence[VendorDeclaration] = (),
                     inline: bool = False) -> Attributor:
    """An :class:`Attributor` for ``config`` (raises ``ConfigError`` for a bad ``[attribution]``).

    ``declarations``: the installed backends' (:func:`allsmi.collection.registry.declarations`, handed in
    by the CLI: attribution imports no backend); their device plugins' resources are matched."""
    from .runner import Attributor
    from .settings import attribution_settings
    settings = attribution_settings(config, os.environ if environ is None else environ,
                                    declarations)
    return Attributor(build_sources(settings, simulate), settings.timeout_seconds, inline,
                      proc_root=str(settings.proc_root))


__all__ = [
    "Attribution", "AttributionSettings", "AttributionSource", "Attributor", "CgroupSource",
    "DeviceIndex", "HpcJobSource", "NO_ATTRIBUTION", "ProcessAttribution", "ResourceRule",
    "SOURCE_NAMES", "SimulatedSource", "SourceError", "SourceResult", "SourceTimeout",
    "SourceUnavailable", "WORKLOAD_FIELDS", "Workload", "attribution_settings", "build_attributor",
    "build_sources", "merge", "normalize_bus_id", "parse_cgroup",
]
