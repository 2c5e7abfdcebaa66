"""The simulated devices and partitions of a scenario, with everything static precomputed:
their identity as the impersonated backend's would read, their job cycles and power wobble."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from allsmi.schema import DeviceSample

from .identity import mig_instance_ids, partition_share, uuid_from
from .model import LoadCycle, Wobble, unit_hash
from .scenario import DeviceSpec, Scenario


@dataclass(frozen=True)
class Unit:
    """A simulated device or partition with everything static precomputed."""

    key: str
    spec: DeviceSpec
    index: int
    id: str
    uuid: str | None
    bus_id: str | None
    name: str
    parent: str | None
    memory_total: int
    cycle: LoadCycle | None
    children: tuple["Unit", ...] = ()
    wobble: Wobble | None = None
    share: float | None = None
    """A partition's ``partition_share``."""
    details: tuple[tuple[str, int], ...] = ()
    """What never changes of a partition's ``details``: a MIG instance's ``mig_slot``,
    ``gpu_instance_id`` and ``compute_instance_id`` (the NVIDIA backend's keys), made once."""


def make_unit(scenario: Scenario, spec: DeviceSpec, index: int, vendor: str,
              name: str | None) -> Unit:
    """Unit ``index`` of ``spec`` (with its partitions): ``vendor`` names a board without a
    uuid, ``name`` is its model as the impersonated backend names it."""
    key = f"{scenario.seed}/{spec.backend}/{index}"
    # Past bus 0xff the entry's devices go on in the next PCI domain (no two share a bus id).
    domain, bus = divmod(spec.bus_base + (index - spec.first_index) * 0x10, 0x100)
    uuid: str | None
    pci = f"{domain:04x}:{bus:02x}:00.0"
    if spec.id_style == "nvidia":
        uuid, bus_id = "GPU-" + uuid_from(key), f"{domain:08X}:{bus:02X}:00.0"
    elif spec.id_style == "gaudi":
        serial = f"{int(unit_hash(key, 'sn') * 36**6):06d}"[:6]
        uuid, bus_id = f"01P4-HL3090A0-18-U4V{serial[:3]}-22-07-{index:02d}", pci
    elif spec.id_style == "board":
        uuid, bus_id = None, pci
    else:
        uuid, bus_id = uuid_from(key), pci
    dev_id = uuid or f"{vendor}:{int(unit_hash(key, 'board') * 2**63):016x}"
    instances = scenario.partitions.get(f"{spec.backend}:{index}", ())
    mig = spec.id_style == "nvidia"
    ids = mig_instance_ids([inst.get("profile") for inst in instances], name,
                           spec.memory_total_bytes) if mig else ()
    # Partitions carry their GPU's bus id and no index of their own, as NVML's MIG devices
    # and amdsmi's partitions do.
    children = tuple(
        Unit(key=f"{key}/mig{i}", spec=spec, index=i,
             id=("MIG-" + uuid_from(f"{key}/mig{i}")) if mig else f"{dev_id}/{i}",
             uuid=("MIG-" + uuid_from(f"{key}/mig{i}")) if mig else None,
             bus_id=bus_id,
             name=f"{name} MIG {inst.get('profile', f'part{i}')}" if mig else name,
             parent=dev_id, memory_total=int(inst["memory_total_bytes"]),
             cycle=LoadCycle.make(f"{key}/mig{i}", spec.duty_cycle, spec.job_seconds),
             share=partition_share(inst.get("profile") if mig else None, name, len(instances)),
             details=tuple(zip(("mig_slot", "gpu_instance_id", "compute_instance_id"), ids[i]))
             if mig else ())
        for i, inst in enumerate(instances))
    wobble = Wobble(0.02 * spec.power_idle_watts, 300.0 + 300.0 * unit_hash(key, "w"),
                    6.283 * unit_hash(key, "wph"))
    return Unit(key=key, spec=spec, index=index, id=dev_id, uuid=uuid, bus_id=bus_id,
                name=name, parent=None, memory_total=spec.memory_total_bytes,
                cycle=None if children else LoadCycle.make(key, spec.duty_cycle, spec.job_seconds),
                children=children, wobble=wobble)


def lost_samples(unit: Unit, static: dict[str, Any], backend: str, details: bool,
                 device: Callable[..., DeviceSample]) -> list[DeviceSample]:
    """A lost unit's samples (``device(**fields)`` makes each): the board and its partitions,
    health ``lost``, no measurement, and processes unknown (``None``: who used a lost device
    cannot be listed, never "nobody"); the partitions' details (their MIG ids) unless
    ``details`` is false (a bill-only replay's)."""
    spec = unit.spec
    return [device(**static, health="lost", processes=None)] + [
        device(id=c.id, vendor=static["vendor"], kind=static["kind"], backend=backend,
               uuid=c.uuid, name=c.name, bus_id=c.bus_id, parent=unit.id,
               partition_share=c.share, driver_version=spec.driver_version,
               firmware_version=spec.firmware_version, health="lost", processes=None,
               details=dict(c.details) if details else {})
        for c in unit.children]
