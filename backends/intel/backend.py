"""Intel GPUs from the kernel alone (i915/xe sysfs, hwmon, DRM fdinfo), with ``xpu-smi`` where
it is installed for what sysfs lacks: names and uuids (``discovery -j``, every sample), memory in
use (one ``dump`` of metric 18 running from ``open()`` to ``close()``, its newest rows read each
sample: :mod:`allsmi.backends.intel.dumpstream`) and, where sysfs has none, the memory size
(``discovery -d <bdf> -j``, once per GPU); see :mod:`allsmi.backends.intel.xpusmi`.

Counters (GT idle residency, the hwmon energy counter, each client's engine time) become busy
shares and watts between two readings: ``open()`` takes the first, and a sample less than
:data:`MIN_INTERVAL` after the previous reading waits out the rest, so every sample has an
interval to measure (a GPU that appears later gets its values from its second sample). Options (``[backends.intel]``): ``sysfs_root`` and ``proc_root``
(``/sys`` and ``/proc``; a container that mounts the host's at ``/host/sys`` and ``/host/proc``
names those). See ``docs/backends/intel.md``.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from allsmi.backend_api import Backend, ProbeResult
from allsmi.backends.intel import DECLARATION, DRIVERS, XPU_SMI, drm_root, quick_probe
from allsmi.backends._common.declared import BEYOND_BUSY
from allsmi.schema import DeviceSample

if TYPE_CHECKING:
    from allsmi.backends.intel.dumpstream import MemoryUsedStream
    from allsmi.backends.intel.fdinfo import Client
    from allsmi.backends.intel.sysfs import Card, Reading
    from allsmi.backends.intel.xpusmi import XpuDevice

DISCOVERY_ARGS = ("discovery", "-j")


def properties_args(bus: str) -> tuple[str, ...]:
    """One GPU's properties (its memory size among them), by PCI address."""
    return ("discovery", "-d", bus, "-j")


#: The shortest interval a busy share or a power figure is measured over (seconds).
MIN_INTERVAL = 0.2

#: PCI device ids of Intel data-centre and Arc GPUs (the public PCI id lists), for a name
#: without xpu-smi.
KNOWN_IDS = {"8086:56a0": "Intel Arc A770", "8086:56a1": "Intel Arc A750",
             "8086:56c0": "Intel Data Center GPU Flex 170", "8086:56c1": "Intel Data Center GPU Flex 140",
             "8086:0bd5": "Intel Data Center GPU Max 1550", "8086:0bda": "Intel Data Center GPU Max 1100",
             "8086:e20b": "Intel Arc B580"}


def owner_of(proc: str) -> Callable[[int], str | None]:
    """The user owning ``<proc>/<pid>`` (by uid), or ``None``."""
    def lookup(pid: int) -> str | None:
        import pwd
        try:
            return pwd.getpwuid(os.stat(os.path.join(proc, str(pid))).st_uid).pw_name
        except (OSError, KeyError):
            return None
    return lookup


class IntelGpuBackend(Backend, declared=DECLARATION):
    """Intel GPUs via the i915/xe drivers' sysfs and DRM fdinfo (and xpu-smi where installed)."""

    #: No fan reading in either driver's hwmon on the data-centre parts.
    unreported_fields = frozenset({"fan_percent"}) | BEYOND_BUSY

    def __init__(self, *, timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None,
                 search_dirs: Sequence[str] | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 lookup_user: Callable[[int], str | None] | None = None) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self.search_dirs = None if search_dirs is None else tuple(search_dirs)
        self.drm = drm_root(self.options)
        self.proc = str(DECLARATION.probe_value(self.options, "proc_root"))  # checked at open
        self._clock = clock
        self._sleep = sleep
        self._last_read: float | None = None
        self._lookup_user = lookup_user or owner_of(self.proc)
        self._opened = False
        self._known: dict[str, int] = {}
        self._readings: dict[str, Reading] = {}
        self._clients: dict[tuple[int, str, str], tuple[float, Client]] = {}
        self._xpu_sizes: dict[str, int | None] = {}
        self._dump: MemoryUsedStream | None = None

    @property
    def dump(self) -> MemoryUsedStream | None:
        """xpu-smi's running dump of memory in use, while one runs."""
        return self._dump

    @classmethod
    def model_name(cls, raw: str | None) -> str | None:
        """``8086:56c0`` (a PCI id) -> the GPU's name; xpu-smi's ``Intel(R) ... (TM)`` cleaned."""
        text = " ".join((raw or "").replace("(R)", "").replace("(TM)", "").split())
        if not text:
            return None
        if text.lower() in KNOWN_IDS:
            return KNOWN_IDS[text.lower()]
        if len(text) == 9 and text[4] == ":":
            return f"Intel GPU [{text.lower()}]"
        return text

    def quick_probe(self) -> ProbeResult | None:
        return quick_probe(self.options)

    def probe(self) -> ProbeResult:
        """Available when a DRM card is driven by i915 or xe; ``xpu-smi`` found or not."""
        absent = quick_probe(self.options)
        if absent is not None:
            return absent
        try:
            tool = XPU_SMI.find(self.search_dirs)
        except Exception as exc:  # noqa: BLE001 - a probe never raises
            tool, why = None, f"cannot look for xpu-smi: {exc}"
        else:
            why = "" if tool else XPU_SMI.missing(self.search_dirs)
        return ProbeResult(True, "", {"drm": self.drm, f"tool:{XPU_SMI.executable}": tool or f"missing: {why}"})

    def open(self) -> None:
        """List the GPUs, take the first reading of their counters, start xpu-smi's dump."""
        from allsmi.backends.intel.sysfs import find_cards, read_card
        self.check_options()
        self.close()
        now = self._clock()
        cards = find_cards(self.drm, DRIVERS)
        self._known = {c.bus_id or c.path: c.index for c in cards}
        self._readings = {c.bus_id or c.path: read_card(c, now) for c in cards}
        try:
            self._processes(now)
        except OSError:  # the next read says so
            pass
        self._last_read = now
        self._opened = True
        tool_path = XPU_SMI.find(self.search_dirs)
        if tool_path is not None:
            self._dump_stream(tool_path)

    def close(self) -> None:
        """Forget the readings; stop xpu-smi's dump (killed and reaped). Idempotent."""
        self._stop_dump()
        self._opened = False
        self._known, self._readings, self._clients = {}, {}, {}
        self._xpu_sizes = {}
        self._last_read = None

    def sample(self) -> Sequence[DeviceSample]:
        from allsmi.backends.intel.sysfs import find_cards, read_card
        self.warnings = []
        deadline = time.monotonic() + self.timeout_seconds
        if not self._opened:
            self.open()
        if self._last_read is not None:
            wait = MIN_INTERVAL - (self._clock() - self._last_read)
            if wait > 0:
                self._sleep(min(wait, self.timeout_seconds / 4))
        now = self._last_read = self._clock()
        cards = find_cards(self.drm, DRIVERS)
        readings = {card.bus_id or card.path: read_card(card, now) for card in cards}
        try:
            shares, memory, pids = self._processes(now)
            listed = True
        except OSError as exc:
            shares, memory, pids, listed = {}, {}, {}, False
            self.warnings.append(f"cannot list the processes under {self.proc} ({exc.strerror or exc}); "
                                 f"the GPUs' processes are unknown")
        xpu, used = self._xpu_smi([c.bus_id for c in cards if c.bus_id and
                                   readings[c.bus_id].memory_total_bytes is None], deadline)
        out = []
        seen = set()
        for card in cards:
            key = card.bus_id or card.path
            seen.add(key)
            self._known.setdefault(key, card.index)  # one that appears later is missed if it goes
            bus = card.bus_id or ""
            reading = readings[key]
            out.append(self._device(card, reading, self._readings.get(key), xpu.get(bus),
                                    self._xpu_sizes.get(bus), used.get(bus),
                                    pids.get(bus, ()) if listed else None, shares, memory))
            self._readings[key] = reading
        for key, index in self._known.items():
            if key not in seen:  # listed when opened, gone now
                out.append(DeviceSample(id=f"intel:{key}", vendor=self.vendor, kind=self.kind,
                                        backend=self.display_name, index=index, bus_id=key,
                                        health="lost", processes=None))
                self.warnings.append(f"GPU {key} (card{index}) is no longer listed by the driver")
        return out

    # -- parts -----------------------------------------------------------------------------
    def _device(self, card: Card, reading: Reading, before: Reading | None, xpu: XpuDevice | None,
                xpu_size: int | None, used: int | None,
                pids: Sequence[int] | None, shares: Mapping[tuple[int, str], float | None],
                memory: Mapping[tuple[int, str], int | None]) -> DeviceSample:
        from allsmi.backends.intel.sysfs import busy_percent, power_watts, went_backwards
        from allsmi.schema import ProcessSample
        bus = card.bus_id or ""
        busy = busy_percent(before, reading)
        backwards = went_backwards(before, reading)
        if backwards:
            self.warnings.append(f"GPU {bus or card.index}: the {' and '.join(backwards)} "
                                 "counter went backwards (a driver reload?): unknown this sample")
        total = reading.memory_total_bytes or xpu_size
        if used is not None and total is not None and used > total:  # never more in use than there is
            self.warnings.append(f"GPU {bus or card.index}: xpu-smi's memory in use ({used} B) exceeds "
                                 f"the memory size ({total} B); memory in use unknown")
            used = None
        name = self.model_name(card.pci_id) if (card.pci_id or "").lower() in KNOWN_IDS or xpu is None \
            or not xpu.name else self.model_name(xpu.name)
        limit = reading.power_limit_uw / 1e6 if reading.power_limit_uw else None
        processes = tuple(ProcessSample(pid=pid, user=self._lookup_user(pid),
                                        memory_bytes=memory.get((pid, bus)),
                                        utilization_percent=shares.get((pid, bus)))
                          for pid in sorted(pids)) if pids is not None else None
        return DeviceSample(
            id=f"intel:{bus}" if bus else f"intel:card{card.index}", vendor=self.vendor, kind=self.kind,
            backend=self.display_name, index=card.index, uuid=xpu.uuid if xpu else None, name=name,
            bus_id=card.bus_id, health="ok", utilization_percent=busy, compute_active_percent=busy,
            compute_active_source=self.compute_active_source if busy is not None else None,
            memory_used_bytes=used, memory_total_bytes=total,
            temperature_celsius=reading.temperature_mc / 1000.0 if reading.temperature_mc is not None else None,
            power_watts=power_watts(before, reading), power_limit_watts=limit,
            energy_joules=reading.energy_uj / 1e6 if reading.energy_uj is not None else None,
            clock_mhz=float(reading.clock_mhz) if reading.clock_mhz is not None else None,
            processes=processes, details={"driver": card.driver, "pci_id": card.pci_id or ""})

    def _processes(self, now: float) -> tuple[dict[tuple[int, str], float | None],
                                              dict[tuple[int, str], int | None], dict[str, set[int]]]:
        """Per (pid, GPU): engine share since the last sample and local memory; pids per GPU."""
        from allsmi.backends.intel.fdinfo import engine_share, scan
        shares: dict[tuple[int, str], float | None] = {}
        memory: dict[tuple[int, str], int | None] = {}
        pids: dict[str, set[int]] = {}
        current: dict[tuple[int, str, str], tuple[float, Client]] = {}
        for client in scan(self.proc, DRIVERS):
            key = (client.pid, client.pdev, client.client_id)
            current[key] = (now, client)
            earlier = self._clients.get(key)
            share = engine_share(earlier[1] if earlier else None, client,
                                 now - earlier[0] if earlier else 0.0)
            slot = (client.pid, client.pdev)
            pids.setdefault(client.pdev, set()).add(client.pid)
            prior = shares.get(slot, 0.0) if slot in shares else 0.0
            shares[slot] = None if share is None or (slot in shares and shares[slot] is None) \
                else min(100.0, (prior or 0.0) + share)
            held = memory.get(slot, 0) if slot in memory else 0
            memory[slot] = None if client.local_bytes is None or (slot in memory and memory[slot] is None) \
                else (held or 0) + client.local_bytes
        self._clients = current
        return shares, memory, pids

    def _xpu_smi(self, unsized: Sequence[str], deadline: float
                 ) -> tuple[dict[str, XpuDevice], dict[str, int | None]]:
        """xpu-smi's devices and memory in use (bytes), by PCI address; the memory size of the GPUs
        in ``unsized`` (sysfs has none) into ``_xpu_sizes``, once each. ``{}`` without xpu-smi;
        a call that fails is a warning (the sysfs values stand; what only it gives is unknown).
        Every call ends by ``deadline``: the list, the dump's newest rows, then the sizes."""
        tool_path = XPU_SMI.find(self.search_dirs)
        if tool_path is None:
            self._stop_dump()
            if os.environ.get(XPU_SMI.env_var):
                self.warnings.append(f"{XPU_SMI.missing(self.search_dirs)}; names, memory sizes and "
                                     f"memory in use from xpu-smi not reported")
            return {}, {}
        from allsmi.backends._common.runner import Tool, ToolError, run_concurrently
        from allsmi.backends.intel.xpusmi import parse_discovery, parse_properties
        tool = Tool(tool_path, self.timeout_seconds)
        dump = self._dump_stream(tool_path)
        try:
            devices = self._ask(tool, DISCOVERY_ARGS, deadline,
                                lambda text, name: parse_discovery(text, name, self.warnings))
        except ToolError as exc:
            self.warnings.append(f"{exc}; the sysfs values stand; names, memory sizes and memory in "
                                 f"use from xpu-smi unknown")
            devices = {}
        rows = dump.read(self.warnings, wait_until=deadline)
        listed = dump.devices
        by_id = {dev.device_id: bus for bus, dev in devices.items() if dev.device_id is not None}
        used = {by_id[device]: size for device, size in rows.items() if device in by_id}
        if listed:
            for bus in sorted(bus for bus, dev in devices.items() if dev.device_id not in listed):
                self.warnings.append(f"{dump.command} printed no row for GPU {bus} "
                                     f"(device {devices[bus].device_id}); its memory in use unknown")
        asked = [bus for bus in unsized if bus in devices and bus not in self._xpu_sizes]
        sizes = run_concurrently({bus: partial(self._ask, tool, properties_args(bus), deadline,
                                               parse_properties) for bus in asked})
        for bus, size in sizes.items():
            if isinstance(size, Exception):
                self._answer(size, f"GPU {bus}'s memory size unknown")
                continue
            self._xpu_sizes[bus] = size  # a size: asked once
            if size is None:
                self.warnings.append(f"{tool.command(properties_args(bus))} printed no "
                                     f"memory_physical_size_byte; GPU {bus}'s memory size unknown")
        return devices, used

    def _dump_stream(self, tool_path: str) -> MemoryUsedStream:
        """The running ``xpu-smi dump`` of ``tool_path``, started now where none runs."""
        from allsmi.backends.intel.dumpstream import MemoryUsedStream
        if self._dump is not None and self._dump.path != tool_path:
            self._stop_dump()
        if self._dump is None:
            self._dump = MemoryUsedStream(tool_path, timeout=self.timeout_seconds, clock=self._clock)
            self._dump.start()
        return self._dump

    def _stop_dump(self) -> None:
        dump, self._dump = self._dump, None
        if dump is not None:
            dump.close()

    @staticmethod
    def _ask(tool: Any, args: Sequence[str], deadline: float, parser: Callable[[str, str], Any]) -> Any:
        """``tool args`` within what is left before ``deadline``, its output parsed."""
        result = tool.run(*args, timeout=deadline - time.monotonic())
        return tool.parse(result, lambda text: parser(text, tool.command(args)))

    def _answer(self, answer: Any, unknown: str) -> Any:
        """``answer``, or ``None`` with a warning naming the failed call and what is unknown."""
        from allsmi.backends._common.runner import ToolError
        if isinstance(answer, ToolError):
            self.warnings.append(f"{answer}; {unknown}")
            return None
        if isinstance(answer, Exception):
            raise answer
        return answer
