"""Devices a backend reported before that its vendor's tool no longer lists.

A device that falls off the bus, or whose driver stops answering, drops out of ``rbln-smi``,
``npu-smi``, ``neuron-ls``, ``tt-smi`` and ``furiosa-smi`` output without a word; the contract
(:mod:`allsmi.backend_api`) says a device missing from this sample's output is ``degraded``, never
silently gone. :class:`MissingDevices` remembers the identity of every device a backend reported
since it was opened and adds, to a sample without one of them, that device ``degraded`` with no
values and its processes unknown (``None``), with a warning that names it, for as long as it is
missing; a device listed again is reported as it reads.
"""

from __future__ import annotations

from typing import Sequence

from allsmi.schema import DeviceSample

#: The fields a placeholder keeps from the device's last sample: who it is, not what it read.
IDENTITY = ("id", "vendor", "kind", "backend", "index", "uuid", "name", "bus_id",
            "driver_version", "firmware_version", "parent")


class MissingDevices:
    """The identities of the devices reported since the backend was opened (a new one per
    ``open()``, so a reopened backend starts from what it lists then)."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self._seen: dict[str, DeviceSample] = {}

    def complete(self, samples: Sequence[DeviceSample], warnings: list[str]) -> list[DeviceSample]:
        """``samples``, then a ``degraded`` placeholder for each device reported before and
        missing now (in the order first seen), each named in ``warnings``."""
        present = {s.id for s in samples}
        out = list(samples)
        for dev_id, last in self._seen.items():
            if dev_id in present:
                continue
            out.append(DeviceSample(**{name: getattr(last, name) for name in IDENTITY},
                                    health="degraded", processes=None))
            warnings.append(f"{dev_id}: reported earlier but missing from {self.tool}'s output "
                            "now; reported degraded without values")
        for sample in samples:
            self._seen[sample.id] = sample
        return out
