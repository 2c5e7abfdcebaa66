"""MIG instances: their handles and static facts, their share of the GPU, and which
instance a process runs in."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from allsmi.backends.nvidia import nvml
from allsmi.backends.nvidia.devices import DeviceFault, Gpu, Reader
from allsmi.backends.nvidia.nvml import RawProcess, error_code


@dataclass(eq=False, repr=False)  # never compared or printed: no methods compiled for it
class Mig:
    """One MIG instance: static facts from open() and its own skip set."""

    slot: int
    handle: Any
    label: str
    uuid: str | None = None
    name: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    partition_share: float | None = None
    skip: set[str] = field(default_factory=set)


def open_migs(pynvml: ModuleType, gpu: Gpu, reader: Reader) -> list[Mig]:
    """The GPU's MIG instances with their static facts; empty slots are skipped."""
    slots = reader.call(gpu.skip, "mig_count", pynvml.nvmlDeviceGetMaxMigDeviceCount,
                        gpu.handle) or 0
    migs: list[Mig] = []
    for slot in range(slots):
        try:
            handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
        except pynvml.NVMLError as exc:
            if error_code(exc) in nvml.DEVICE_FAULT_CODES:
                raise DeviceFault(error_code(exc), f"MIG slot {slot}: {exc}") from exc
            # NotFound / InvalidArgument: an empty slot; later slots may be used
            continue
        mig = Mig(slot=slot, handle=handle, label=f"{gpu.label} MIG {slot}")
        mig.uuid = nvml.text(reader.call(mig.skip, "uuid", pynvml.nvmlDeviceGetUUID, handle))
        mig.name = nvml.text(reader.call(mig.skip, "name", pynvml.nvmlDeviceGetName, handle))
        gi = reader.call(mig.skip, "gpu_instance_id", pynvml.nvmlDeviceGetGpuInstanceId, handle)
        ci = reader.call(mig.skip, "compute_instance_id",
                         pynvml.nvmlDeviceGetComputeInstanceId, handle)
        mig.gpu_instance_id = gi if isinstance(gi, int) else None
        mig.compute_instance_id = ci if isinstance(ci, int) else None
        migs.append(mig)
    total = total_slices(pynvml, gpu.handle) if migs else None
    for mig in migs:
        mig.partition_share = mig_share(pynvml, mig, total)
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
