"""What is read once per GPU when the backend opens: identity, firmware, ECC and MIG modes,
the MIG instances (listed again while the backend runs: :mod:`.layout`), and the field ids
asked in each cycle's batch."""

from __future__ import annotations

from types import ModuleType

from allsmi.backends.nvidia import nvml
from allsmi.backends.nvidia.devices import (
    ECC_FIELDS,
    FI_POWER_AVERAGE,
    FI_POWER_CURRENT_LIMIT,
    FI_POWER_INSTANT,
    FI_TOTAL_ENERGY_CONSUMPTION,
    NVML_DEVICE_MIG_ENABLE,
    NVML_FEATURE_ENABLED,
    DeviceFault,
    Gpu,
    Reader,
    mark_lost,
)
from allsmi.backends.nvidia.mig import list_migs


def open_gpu(pynvml: ModuleType, index: int) -> tuple[Gpu, list[str]]:
    """GPU ``index`` with its static facts, and the warnings reading them gave."""
    gpu = Gpu(index=index, label=f"GPU {index}")
    reader = Reader(pynvml, gpu.label)
    try:
        try:
            gpu.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            gpu.lost_reason = f"no handle: {exc}"
            return gpu, [f"{gpu.label}: cannot open ({exc})"]
        handle, skip = gpu.handle, gpu.skip
        gpu.uuid = nvml.text(reader.call(skip, "uuid", pynvml.nvmlDeviceGetUUID, handle))
        gpu.name = nvml.text(reader.call(skip, "name", pynvml.nvmlDeviceGetName, handle))
        pci = reader.call(skip, "pci_info", pynvml.nvmlDeviceGetPciInfo, handle)
        gpu.bus_id = nvml.text(getattr(pci, "busId", None)) if pci is not None else None
        nvml_index = reader.call(skip, "index", pynvml.nvmlDeviceGetIndex, handle)
        if isinstance(nvml_index, int) and nvml_index >= 0:
            gpu.index = nvml_index
        gpu.vbios = nvml.text(
            reader.call(skip, "vbios", pynvml.nvmlDeviceGetVbiosVersion, handle))
        # ECC mode changes only across a GPU reset, so it is static here.
        ecc = reader.call(skip, "ecc_mode", pynvml.nvmlDeviceGetEccMode, handle)
        gpu.ecc_enabled = None if ecc is None else ecc[0] == NVML_FEATURE_ENABLED
        mig = reader.call(skip, "mig_mode", pynvml.nvmlDeviceGetMigMode, handle)
        gpu.mig_enabled = None if mig is None else mig[0] == NVML_DEVICE_MIG_ENABLE
        if gpu.mig_enabled:
            gpu.migs = list_migs(pynvml, gpu, reader, [])
    except DeviceFault as fault:
        mark_lost(gpu, fault)
    gpu.fields = batch_fields(gpu)
    return gpu, reader.warnings


def batch_fields(gpu: Gpu) -> list[int]:
    """The field ids a cycle asks for in the GPU's batch (those the driver lacks leave it)."""
    fields = [FI_POWER_AVERAGE, FI_POWER_INSTANT, FI_POWER_CURRENT_LIMIT,
              FI_TOTAL_ENERGY_CONSUMPTION]
    if gpu.ecc_enabled:
        fields.extend(ECC_FIELDS)
    return fields
