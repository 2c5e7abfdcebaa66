"""The simulation's honest activity and its holders' host evidence: pure functions of (unit,
job, seconds into the job), like every other simulated value.

Each job draws once what it stalls on, if anything: about half compute throughout; the others
stall for the first :data:`STALL_SECONDS` of every :data:`STALL_PERIOD` seconds on their input
(a data loader reading), on the host (pre-processing at a full core), on communication (a
collective: the device's links busy) or on nothing (the process sleeps). While stalled the
headline utilization keeps its value (as NVIDIA's does while a kernel spins) and the compute
activity drops to a few percent, except where the activity is the headline under another
name (``allsmi.schema.HEADLINE_SOURCES``), which it then equals. The ``busy_looking`` devices
of an entry are pinned at 100 % utilization and 20 % compute activity while their job runs (a
single block spinning).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from allsmi.schema import HEADLINE_SOURCES

from .model import in_window, unit_hash

#: Each draw is hashed once (a job spans many samples): the simulation's sample is on the
#: hot path of every simulated bill and benchmark.
_hash = functools.lru_cache(maxsize=8192)(unit_hash)

#: What each impersonated backend's ``compute_active_percent`` measures (the others have none).
COMPUTE_SOURCES = {"nvidia": "sm_active", "amd": "gfx_busy", "furiosa": "pe_busy",
                   "rebellions": "engine_time", "gaudi": "engine_time"}
#: Backends whose devices report interconnect traffic (NVLink, xGMI, Gaudi scale-out ports).
LINKED = ("nvidia", "amd", "gaudi")
#: The stalls a job may draw, with their chances (the rest of the jobs never stall).
STALLS = (("input", 0.12), ("host", 0.12), ("communication", 0.12), ("idle", 0.1))
STALL_PERIOD, STALL_SECONDS = 600.0, 240.0
BUSY_LOOKING_UTILIZATION, BUSY_LOOKING_ACTIVE = 100.0, 20.0


@functools.lru_cache(maxsize=8192)  # (asked of every busy unit every sample; a job's for its run)
def stall_kind(backend: str, key: str, job: int, partition: bool = False) -> str | None:
    """What job ``job`` of unit ``key`` stalls on (``None``: it never does). Only whole devices
    with links (:data:`LINKED`) stall on communication."""
    draw = _hash(key, job, "stall")
    linked = backend in LINKED and not partition
    for kind, chance in STALLS:
        if draw < chance:
            return kind if kind != "communication" or linked else None
        draw -= chance
    return None


def stalled(backend: str, key: str, job: int, r: float, partition: bool = False) -> str | None:
    """What the job is stalled on ``r`` seconds into its cycle (``None``: computing)."""
    return stalling(stall_kind(backend, key, job, partition), r)


def stalling(kind: str | None, r: float) -> str | None:
    """What a job that stalls on ``kind`` (:func:`stall_kind`) is stalled on ``r`` seconds into
    its cycle (``None``: computing)."""
    return kind if kind is not None and in_window(r, STALL_PERIOD, STALL_SECONDS) else None


@functools.lru_cache(maxsize=8192)  # (asked of every busy unit every sample; a job's for its run)
def job_draws(backend: str, key: str, job: int, partition: bool = False
              ) -> tuple[str | None, float, float, float]:
    """What job ``job`` of unit ``key`` draws once for its whole run: what it stalls on
    (:func:`stall_kind`), and the draws of :func:`device_activity` (its unit's wave's phase,
    its efficiency, its link's share), asked once a sample instead of one by one (a replayed
    month asks them of a busy unit a million times)."""
    return (stall_kind(backend, key, job, partition), _hash(key, "wave"), _hash(key, job, "eff"),
            _hash(key, job, "link"))


_ASK = object()


def device_activity(backend: str, key: str, job: int, r: float, util: float, busy: bool,
                    busy_looking: bool = False, partition: bool = False,
                    source: str | None = None, stall: Any = _ASK,
                    billed_only: bool = False,
                    draws: tuple[Any, ...] | None = None) -> dict[str, Any]:
    """The device's activity fields ``r`` seconds into job ``job`` (``busy``: a job runs). A
    ``partition`` (a MIG instance) has its own compute figures but no link or PCIe traffic:
    those belong to the board, as NVML's GPM per instance has them. ``source``: what the
    impersonated backend's activity measures (else :data:`COMPUTE_SOURCES`'). ``stall``: what
    :func:`stalled` says of the job now, when the caller knows it already. ``billed_only``:
    only what a bill reads (compute activity and interconnect traffic; not the occupancy,
    tensor, memory bandwidth and PCIe figures). ``draws``: the job's :func:`job_draws`, when
    the caller keeps them."""
    source = source or COMPUTE_SOURCES.get(backend)
    out: dict[str, Any] = {}
    if busy:  # (the wave moves only what a running job does)
        if draws is None:
            draws = job_draws(backend, key, job, partition)
        wave = 0.5 + 0.5 * math.sin(r / 37.0 + 6.283 * draws[1])
        if stall is _ASK:
            stall = stalled(backend, key, job, r, partition)
    else:
        wave, stall = 0.0, None
    # (each field set by subscript, not by update(**fields): a replayed month asks this of
    # a busy unit a million times)
    if source is not None:
        if not busy:
            active = 0.0
        elif source in HEADLINE_SOURCES:
            active = BUSY_LOOKING_UTILIZATION if busy_looking else util
        elif busy_looking:
            active = BUSY_LOOKING_ACTIVE
        elif stall is not None:
            active = 1.0 + 2.0 * wave
        else:
            active = util * (0.55 + 0.3 * draws[2])  # type: ignore[index]
        out["compute_active_percent"] = round(active, 2)
        out["compute_active_source"] = source
        if not partition and not billed_only:  # a partition: its SM activity only, as the
            # real backends give it
            if backend == "nvidia":
                out["sm_occupancy_percent"] = round(active * 0.45, 2)
                out["tensor_active_percent"] = round(active * 0.6, 2)
            out["memory_bandwidth_percent"] = round(active * 0.7, 2)
    if not partition and backend in LINKED:
        if not busy:
            link = 0.0
        elif stall == "communication":
            link = 40e9 + 10e9 * wave
        elif stall is not None:
            link = 1e6 * wave
        else:
            link = 2e9 * wave * draws[3]  # type: ignore[index]
        # (whole bytes, as floats: what the sample keeps)
        out["interconnect_rx_bytes_per_second"] = float(round(link))
        out["interconnect_tx_bytes_per_second"] = float(round(link * 0.97))
        if not billed_only:
            pcie = 5e8 * wave if busy and stall != "idle" else 1e5
            out["pcie_rx_bytes_per_second"] = float(round(pcie))
            out["pcie_tx_bytes_per_second"] = float(round(pcie * 0.1))
    return out


def busy_looking_utilization(util: float, busy: bool) -> float:
    """A busy-looking device's headline utilization: 100 % while its job runs."""
    return BUSY_LOOKING_UTILIZATION if busy else util


def process_evidence(stall: str | None, main: bool, r: float) -> dict[str, Any]:
    """The host evidence of a job's process (``main``: the one doing the work, else a helper),
    as :class:`allsmi.hostactivity.sampler.ProcessActivity`'s fields."""
    wave = 0.5 + 0.5 * math.sin(r / 23.0)
    quiet = dict(cpu_cores=0.01, threads=4, blocked_threads=0, read_bytes_per_second=0.0,
                 write_bytes_per_second=0.0, throttled_fraction=0.0)
    if not main:
        return quiet
    if stall is None:  # feeding a computing device: some CPU, some reading
        return dict(quiet, cpu_cores=round(0.4 + 0.3 * wave, 3), threads=24,
                    read_bytes_per_second=round(2e7 * wave))
    if stall == "input":
        return dict(quiet, cpu_cores=0.12, threads=24, blocked_threads=3,
                    read_bytes_per_second=round(4.5e8 + 6e7 * wave))
    if stall == "host":
        return dict(quiet, cpu_cores=round(0.97 + 0.03 * wave, 3), threads=24,
                    read_bytes_per_second=2e5)
    if stall == "communication":  # a collective waiting: NCCL's proxy thread spins a core
        return dict(quiet, cpu_cores=1.0, threads=32)
    return quiet  # idle: asleep
