"""Simulated Kubernetes pods and Slurm jobs for ``--simulate``, through the same interface.

A pure function of (device, time), like the simulated devices themselves:
two processes asking about the same instant get the same answer. On the
``mixed`` scenario's devices it places a 4-GPU Slurm training job and
fine-tuning pods on the H100s, inference pods on a MIG slice, the MI300Xs and
the Gaudis, serving pods on the NPUs, smaller jobs elsewhere, and leaves some
devices free. The simulated devices run their load in cycles, so an allocated
device is regularly allocated but idle. Jobs get new ids every
:data:`JOB_HOURS` hours and pods new names every day, as in a real cluster.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Sequence

from allsmi.schema import DeviceSample

from .model import SourceResult, Workload
from .runner import AttributionSource

JOB_HOURS = 6
FIRST_JOB_ID = 4_100_000


@dataclass(frozen=True)
class _Pod:
    namespace: str
    app: str
    container: str


@dataclass(frozen=True)
class _Job:
    slot: int
    user: str


_Holder = "_Pod | _Job | None"
_TRAIN = _Job(0, "alice")
_FINETUNE = _Pod("training", "llama-finetune", "trainer")
_VLLM_8B = _Pod("inference", "vllm-llama-8b", "vllm")
_NOTEBOOK = _Pod("research", "notebook-carol", "jupyter")
_VLLM_70B = _Pod("inference", "vllm-llama-70b", "vllm")
_AMD_JOB = _Job(1, "bob")
_TGI = _Pod("inference", "tgi-gaudi-mistral", "tgi")
_GAUDI_JOB = _Job(2, "dmitri")
_EMBED = _Pod("npu-serving", "rngd-embedder", "furiosa-llm")
_OCR = _Pod("npu-serving", "atom-ocr", "rbln-serve")
_RBLN_JOB = _Job(3, "eun-ji")
_TT_JOB = _Job(4, "farah")

#: (backend, index) -> holder of a whole device; (backend, "part", index) -> of a partition.
_PLAN: dict[tuple[object, ...], object] = {
    **{("nvidia", i): _TRAIN for i in range(4)},
    ("nvidia", 4): _FINETUNE, ("nvidia", 5): _FINETUNE,
    ("nvidia", "part", 0): _VLLM_8B, ("nvidia", "part", 1): _NOTEBOOK,
    **{("amd", i): _VLLM_70B for i in range(4)},
    ("amd", 4): _AMD_JOB, ("amd", 5): _AMD_JOB,
    **{("gaudi", i): _TGI for i in range(4)},
    ("gaudi", 4): _GAUDI_JOB, ("gaudi", 5): _GAUDI_JOB,
    ("furiosa", 0): _EMBED, ("furiosa", 1): _EMBED,
    ("rebellions", 0): _OCR, ("rebellions", 1): _OCR, ("rebellions", 3): _RBLN_JOB,
    ("tenstorrent", 0): _TT_JOB,
}


#: The backends the plan names (any other gets the rotation in :func:`_holder`).
_PLAN_BACKENDS = frozenset(k[0] for k in _PLAN)


@functools.lru_cache(maxsize=256)  # a pod's name lasts a day: asked of every device, every cycle
def _short_hash(*parts: object) -> str:
    import hashlib  # here: loading OpenSSL costs every start-up, and only --simulate needs it
    return hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=4).hexdigest()[:5]


def _holder(dev: DeviceSample, slot: int | None = None) -> object:
    """``slot``: a partition's position among its parent's partitions (partitions may carry
    no index of their own, as NVML's MIG devices)."""
    if dev.parent is not None:
        position = dev.index if dev.index is not None else slot
        return None if position is None else _PLAN.get((dev.backend, "part", position))
    if dev.index is None:
        return None
    if (dev.backend, dev.index) in _PLAN or dev.backend in _PLAN_BACKENDS:
        return _PLAN.get((dev.backend, dev.index))
    # A scenario with other backends: a pod, a job or nothing, in turn.
    return (_Pod("default", f"{dev.backend}-worker", "main"), _Job(5, "user"), None)[dev.index % 3]


#: What an answer depends on of each device (each asked for every device every cycle: the
#: getter's tuples made without a Python frame each).
_ASKED = operator.attrgetter("id", "backend", "index", "parent")


class SimulatedSource(AttributionSource):
    """Pods and jobs on simulated devices; either half can be left to a real source."""

    name = "simulated"
    pure = True

    def __init__(self, pods: bool = True, jobs: bool = True) -> None:
        self.pods = pods
        self.jobs = jobs
        #: The last answer and what it was asked: the same devices within the same job block
        #: and day get the same answer (a replayed bill asks every minute of a month).
        self._last: tuple[tuple[object, ...], SourceResult] | None = None

    def collect(self, devices: Sequence[DeviceSample], now: float) -> SourceResult:
        block = int(now // (JOB_HOURS * 3600))
        day = int(now // 86400)
        asked = (block, day, *map(_ASKED, devices))
        last = self._last
        if last is not None and last[0] == asked:
            return last[1]
        result = self._answer(devices, block, day)
        self._last = (asked, result)
        return result

    def _answer(self, devices: Sequence[DeviceSample], block: int, day: int) -> SourceResult:
        out: dict[str, tuple[Workload, ...]] = {}
        seen: dict[str, int] = {}
        for dev in devices:
            slot = None
            if dev.parent is not None:
                slot = seen[dev.parent] = seen.get(dev.parent, -1) + 1
            holder = _holder(dev, slot)
            if isinstance(holder, _Pod) and self.pods:
                pod = f"{holder.app}-{_short_hash(holder.app, day)}-{_short_hash(holder.app, day, 'rs')}"
                out[dev.id] = (Workload("simulated", namespace=holder.namespace, pod=pod,
                                        container=holder.container),)
            elif isinstance(holder, _Job) and self.jobs:
                job = str(FIRST_JOB_ID + block * 10 + holder.slot)
                out[dev.id] = (Workload("simulated", job_id=job, user=holder.user),)
        return SourceResult(out, {}, "")
