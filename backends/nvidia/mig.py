"""MIG instances: their handles and static facts, their share of the GPU, and which
instance a process runs in; and the instances listed again while the backend runs
(:func:`list_migs`), since an administrator (or NVIDIA's MIG manager) creates and destroys them
at any time."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from allsmi.backends.nvidia import nvml
from allsmi.backends.nvidia.devices import DeviceFault, Gpu, Reader
from allsmi.backends.nvidia.nvml import RawProcess, error_code

#: What a call on a MIG device handle answers once its compute instance is destroyed (NVML: the
#: handle "would remain invalid and must be requested again"): the instance is gone.
GONE_CODES = frozenset({nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT,
                        nvml.ERROR_GPU_IS_LOST})


@dataclass(eq=False, repr=False)  # never compared or printed: no methods compiled for it
class Mig:
    """One MIG instance: static facts from when it was listed, and its own skip set."""

    slot: int
    handle: Any
    label: str
    uuid: str | None = None
    name: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    partition_share: float | None = None
    skip: set[str] = field(default_factory=set)
    #: A read found the handle stale: the instance was destroyed, or the handle must be asked
    #: for again (the next listing gives it the handle it finds).
    stale: bool = False
    #: A listing found the instance still there after that: a stale-like answer of its reads
    #: is a failure like any other from now on (its reads are not left out cycle after cycle).
    stale_and_there: bool = False


class MigReads(Reader):
    """The reads on one GPU's MIG handles in one cycle, warning through the GPU's reader: a
    stale handle (:data:`GONE_CODES`: the instance was destroyed since it was listed) is noted
    in ``gone``, not warned about, nor taken for the GPU's loss (the GPU's own calls, made
    first, said it is there)."""

    def __init__(self, reader: Reader) -> None:  # (the GPU's reader's, not a list of its own)
        self.pynvml, self.label, self.warnings = reader.pynvml, reader.label, reader.warnings
        self.gone = self._watch = False

    def on(self, mig: Mig) -> MigReads:
        """This reader for ``mig``'s reads (``gone`` cleared)."""
        self.label, self.gone, self._watch = mig.label, False, not mig.stale_and_there
        return self

    def failed(self, skip: set[str], key: str, exc: BaseException) -> None:
        if self._watch and error_code(exc) in GONE_CODES:
            self.gone = True
        else:
            super().failed(skip, key, exc)


def list_migs(pynvml: ModuleType, gpu: Gpu, reader: Reader, known: list[Mig]) -> list[Mig]:
    """The GPU's MIG instances now, slot by slot (empty slots skipped, later slots still read).

    An instance of ``known`` still there (the same uuid: a MIG uuid is never given to another
    instance) is kept as it is, handle and all, at its slot now; any other is read anew. A
    handle whose uuid answers as stale (:data:`GONE_CODES`) is an instance destroyed between
    the two calls: an empty slot. Costs one ``nvmlDeviceGetMigDeviceHandleByIndex`` per slot
    and one ``nvmlDeviceGetUUID`` per instance, plus the static facts of each new one.
    """
    if gpu.mig_slots is None:  # the most instances the GPU can hold in this mode
        count = reader.call(gpu.skip, "mig_count", pynvml.nvmlDeviceGetMaxMigDeviceCount,
                            gpu.handle)
        gpu.mig_slots = count if isinstance(count, int) else None
    by_uuid = {m.uuid: m for m in known if m.uuid}
    by_ids = {(m.gpu_instance_id, m.compute_instance_id): m for m in known if not m.uuid}
    migs: list[Mig] = []
    for slot in range(gpu.mig_slots or 0):
        try:
            handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
        except pynvml.NVMLError as exc:
            if error_code(exc) in nvml.DEVICE_FAULT_CODES:
                raise DeviceFault(error_code(exc), f"MIG slot {slot}: {exc}") from exc
            # NotFound / InvalidArgument: an empty slot; later slots may be used
            continue
        mig = Mig(slot=slot, handle=handle, label=f"{gpu.label} MIG {slot}")
        try:
            mig.uuid = nvml.text(pynvml.nvmlDeviceGetUUID(handle))
        except pynvml.NVMLError as exc:
            if error_code(exc) in GONE_CODES:
                continue  # destroyed since the handle was given
            reader.failed(mig.skip, "uuid", exc)
        kept = by_uuid.get(mig.uuid) if mig.uuid else None
        if kept is None:
            gi = reader.call(mig.skip, "gpu_instance_id", pynvml.nvmlDeviceGetGpuInstanceId,
                             handle)
            ci = reader.call(mig.skip, "compute_instance_id",
                             pynvml.nvmlDeviceGetComputeInstanceId, handle)
            mig.gpu_instance_id = gi if isinstance(gi, int) else None
            mig.compute_instance_id = ci if isinstance(ci, int) else None
            if not mig.uuid:  # (no uuid: the same instance ids, the same instance)
                kept = by_ids.get((mig.gpu_instance_id, mig.compute_instance_id))
        if kept is not None:
            kept.slot, kept.label = slot, mig.label
            if kept.stale:  # not destroyed after all: the handle found now, and no more doubt
                kept.handle, kept.stale, kept.stale_and_there = handle, False, True
            migs.append(kept)
            continue
        mig.name = nvml.text(reader.call(mig.skip, "name", pynvml.nvmlDeviceGetName, handle))
        if gpu.mig_total_slices is None:  # asked once (0: unknown)
            gpu.mig_total_slices = total_slices(pynvml, gpu.handle) or 0
        mig.partition_share = mig_share(pynvml, mig, gpu.mig_total_slices)
        migs.append(mig)
    return migs


def owning_mig(migs: list[Mig], proc: RawProcess) -> Mig | None:
    if proc.gpu_instance_id is None:
        return None
    for mig in migs:
        if mig.gpu_instance_id == proc.gpu_instance_id and (
                proc.compute_instance_id is None
                or mig.compute_instance_id == proc.compute_instance_id):
            return mig
    return None


#: "3g.40gb", "1c.3g.40gb": GPU instance slices, and compute slices where the CI is smaller.
_MIG_PROFILE = re.compile(r"(?:([0-9]+)c\.)?([0-9]+)g\.")  # not \d: it takes other scripts' digits


def total_slices(pynvml: ModuleType, handle: Any) -> int | None:
    """The GPU's compute slices in MIG mode: the largest ``sliceCount`` of its GPU instance
    profiles (7 on A100/H100, 4 on A30), from ``nvmlDeviceGetGpuInstanceProfileInfo``."""
    best: int | None = None
    versions = [2, 1]
    for profile in range(int(getattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0x12))):
        for version in list(versions):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile, version=version)
            except pynvml.NVMLError as exc:
                if error_code(exc) in (nvml.ERROR_FUNCTION_NOT_FOUND,
                                       nvml.ERROR_ARGUMENT_VERSION_MISMATCH) and version == 2:
                    versions.remove(2)  # an older driver: the v1 struct from now on
                    continue
                break  # this profile does not exist on this GPU
            slices = int(getattr(info, "sliceCount", 0) or 0)
            if 0 < slices < 0xFFFFFFFF:
                best = max(best or 0, slices)
            break
    return best


def mig_share(pynvml: ModuleType, mig: Mig, total: int | None) -> float | None:
    """The MIG device's compute slices over the GPU's (3g.40gb on an H100: 3/7), else ``None``.

    The slices come from ``nvmlDeviceGetAttributes`` of the MIG handle (compute
    instance slices, which equal the GPU instance's unless the CI is smaller),
    else from the profile in the MIG device's name.
    """
    if not total:
        return None
    slices = 0
    try:
        attrs = pynvml.nvmlDeviceGetAttributes(mig.handle)
        slices = int(attrs.computeInstanceSliceCount or attrs.gpuInstanceSliceCount or 0)
    except (pynvml.NVMLError, AttributeError):
        pass
    if not 0 < slices <= total and mig.name:
        found = _MIG_PROFILE.search(mig.name)
        if found is not None:
            slices = int(found.group(1) or found.group(2))
    if not 0 < slices <= total:
        return None
    return slices / total
