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
from typing import Mapping

from allsmi.config import Config

from .cgroup import CgroupSource, parse_cgroup
from .hpcjob import HpcJobSource
from .matching import DeviceIndex, normalize_bus_id
from .model import (NO_ATTRIBUTION, SOURCE_NAMES, WORKLOAD_FIELDS, Attribution,
                    ProcessAttribution, SourceError, SourceResult, SourceTimeout,
                    SourceUnavailable, Workload)
from .runner import AttributionSource, Attributor, merge
from .settings import AttributionSettings, ResourceRule, attribution_settings
from .simulated import SimulatedSource


def build_sources(settings: AttributionSettings, simulate: bool = False) -> list[AttributionSource]:
    """The sources to run, in merge order (kubernetes, hpc-job, cgroup, simulated).

    On real hardware: every source in ``settings.sources`` (``hpc-job`` only with a directory).
    With ``simulate``: the simulated source, plus the kubelet and the job directory only where
    they were configured explicitly (each then replaces the simulated pods or jobs), and no
    cgroup source (simulated processes are not processes of this machine).
    """
    from .kubernetes import KubeletSource  # grpc itself is imported only when a socket exists

    sources: list[AttributionSource] = []
    kube = "kubernetes" in settings.sources and (settings.kubelet_socket_explicit or not simulate)
    if kube:
        sources.append(KubeletSource(settings.kubelet_socket, settings, settings.timeout_seconds))
    hpc = "hpc-job" in settings.sources and settings.hpc_job_dir is not None
    if hpc:
        sources.append(HpcJobSource(settings.hpc_job_dir))  # type: ignore[arg-type]
    if "cgroup" in settings.sources and not simulate:
        sources.append(CgroupSource(settings.proc_root))
    if simulate:
        sources.append(SimulatedSource(pods=not kube, jobs=not hpc))
    return sources


def build_attributor(config: Config, environ: Mapping[str, str] | None = None,
                     simulate: bool = False) -> Attributor:
    """An :class:`Attributor` for ``config`` (raises ``ConfigError`` for a bad ``[attribution]``)."""
    settings = attribution_settings(config, os.environ if environ is None else environ)
    return Attributor(build_sources(settings, simulate), settings.timeout_seconds)


__all__ = [
    "Attribution", "AttributionSettings", "AttributionSource", "Attributor", "CgroupSource",
    "DeviceIndex", "HpcJobSource", "NO_ATTRIBUTION", "ProcessAttribution", "ResourceRule",
    "SOURCE_NAMES", "SimulatedSource", "SourceError", "SourceResult", "SourceTimeout",
    "SourceUnavailable", "WORKLOAD_FIELDS", "Workload", "attribution_settings", "build_attributor",
    "build_sources", "merge", "normalize_bus_id", "parse_cgroup",
]
