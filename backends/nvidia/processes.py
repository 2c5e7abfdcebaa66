"""Process lists: the compute and graphics lists merged per pid, their owners, the MIG
instance each process runs in, and each process's utilization (:mod:`.procutil`)."""

from __future__ import annotations

from typing import Callable

from allsmi.backends.nvidia.devices import PROCESS_CAPACITY, Gpu, Reader
from allsmi.backends.nvidia.mig import owning_mig
from allsmi.backends.nvidia.nvml import ProcessListReader, RawProcess
from allsmi.backends.nvidia.procutil import ProcessUtilizationReader, UtilizationState
from allsmi.schema import ProcessSample

#: Each list's kind (``ProcessListReader.read``) and its key in a GPU's skip set.
_LISTS = (("Compute", "compute_processes"), ("Graphics", "graphics_processes"))
#: ``pid -> (user, command)``; either is ``None`` where it cannot be read.
ProcessOwner = Callable[[int], "tuple[str | None, str | None]"]


def merge_process(old: RawProcess | None, new: RawProcess) -> RawProcess:
    """One entry per pid when a process is in both the compute and graphics lists."""
    if old is None:
        return new
    memories = [m for m in (old.memory_bytes, new.memory_bytes) if m is not None]
    return RawProcess(
        pid=old.pid,
        memory_bytes=max(memories) if memories else None,
        gpu_instance_id=old.gpu_instance_id if old.gpu_instance_id is not None
        else new.gpu_instance_id,
        compute_instance_id=old.compute_instance_id if old.compute_instance_id is not None
        else new.compute_instance_id,
    )


def read_processes(r: Reader, gpu: Gpu, lists: ProcessListReader, owner: ProcessOwner,
                   activity: ProcessUtilizationReader | None = None
                   ) -> tuple[tuple[ProcessSample, ...] | None, dict[int, tuple[ProcessSample, ...]]]:
    """The GPU's own processes, and those inside each MIG instance (by slot).

    ``None`` when no list could be read (unsupported, no permission): who uses the
    GPU is then unknown, not "nobody". With ``activity``, each process carries its
    utilization since the previous cycle (``None`` where the GPU cannot report it).
    """
    merged: dict[int, RawProcess] = {}
    listed_any = False
    for kind, key in _LISTS:
        listed = r.call(gpu.skip, key, lists.read, gpu.handle, kind, gpu.process_capacity[kind])
        if listed is None:
            continue
        listed_any = True
        gpu.process_capacity[kind] = max(PROCESS_CAPACITY, len(listed) * 2 + 5)
        for proc in listed:
            if proc.pid <= 0:
                r.warnings.append(f"{r.label}: NVML listed an invalid pid {proc.pid}")
                continue
            merged[proc.pid] = merge_process(merged.get(proc.pid), proc)
    if not listed_any:
        return None, {}
    if not merged:  # nobody (an idle GPU's every cycle)
        return (), {}
    used = None
    if activity is not None and merged:
        if gpu.process_utilization is None:
            gpu.process_utilization = UtilizationState()
        used = r.call(gpu.skip, "process_utilization", activity.read, gpu.handle,
                      gpu.process_utilization)
    own: list[ProcessSample] = []
    per_mig: dict[int, list[ProcessSample]] = {}
    for proc in sorted(merged.values(), key=lambda p: p.pid):
        user, command = owner(proc.pid)
        figures = {}
        if used is not None:  # read: a process without samples since the last cycle ran nothing
            got = used.get(proc.pid)
            figures = dict(utilization_percent=got.sm if got else 0.0,
                           memory_utilization_percent=got.memory if got else 0.0,
                           encoder_utilization_percent=got.encoder if got else 0.0,
                           decoder_utilization_percent=got.decoder if got else 0.0)
        sample = ProcessSample(pid=proc.pid, user=user, command=command,
                               memory_bytes=proc.memory_bytes, **figures)
        mig = owning_mig(gpu.migs, proc)
        if mig is None:
            own.append(sample)
        else:
            per_mig.setdefault(mig.slot, []).append(sample)
    return tuple(own), {slot: tuple(procs) for slot, procs in per_mig.items()}
