"""Cost of one NVIDIA sampling cycle: allsmi's backend against a typical Python exporter.

Both run in the same process against the same fake libnvidia-ml (from
``tests/backends/nvml_fake.py``: the real pynvml over ctypes callbacks), with
a fixed latency added to every library call. Each GPU runs one process that
appears in both the compute and the graphics list, and every reading is
supported (the worst case for call counts).

The "typical exporter" pattern is the per-GPU loop of gpustat/nvitop-style
exporters: 19 pynvml calls per GPU, one GPU after the other, handles cached:
name, uuid, utilization, memory (v1), temperature, fan, power, power limit,
clocks (graphics, SM, memory), PCIe TX and RX, encoder and decoder
utilization, compute and graphics processes, P-state and an ECC total.

Usage::

    .venv/bin/python benchmarks/nvml_cycle.py [--cycles 7] [--latency-us 200]
        [--devices 8 64] [--write docs/benchmarks/nvml.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pynvml  # noqa: E402
import pytest  # noqa: E402

from allsmi.backends.nvidia import nvml  # noqa: E402
from allsmi.backends.nvidia import NvidiaBackend  # noqa: E402
from tests.backends.nvml_fake import FakeNvml, FakeProcess, fleet  # noqa: E402


@dataclass
class Result:
    """Medians over the measured cycles for one pattern and one device count."""

    pattern: str
    devices: int
    calls_per_device: float
    cycle_ms: float


def typical_exporter_cycle(handles: list[Any]) -> list[dict[str, Any]]:
    """One serial pass of the common exporter pattern (19 pynvml calls per GPU)."""
    n = pynvml

    def q(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except n.NVMLError:
            return None

    rows = []
    for h in handles:
        rows.append({
            "name": q(n.nvmlDeviceGetName, h),
            "uuid": q(n.nvmlDeviceGetUUID, h),
            "util": q(n.nvmlDeviceGetUtilizationRates, h),
            "memory": q(n.nvmlDeviceGetMemoryInfo, h),
            "temperature": q(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            "fan": q(n.nvmlDeviceGetFanSpeed, h),
            "power": q(n.nvmlDeviceGetPowerUsage, h),
            "limit": q(n.nvmlDeviceGetPowerManagementLimit, h),
            "clock_graphics": q(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_GRAPHICS),
            "clock_sm": q(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
            "clock_memory": q(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
            "pcie_tx": q(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES),
            "pcie_rx": q(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES),
            "encoder": q(n.nvmlDeviceGetEncoderUtilization, h),
            "decoder": q(n.nvmlDeviceGetDecoderUtilization, h),
            "compute": q(n.nvmlDeviceGetComputeRunningProcesses, h),
            "graphics": q(n.nvmlDeviceGetGraphicsRunningProcesses, h),
            "pstate": q(n.nvmlDeviceGetPerformanceState, h),
            "ecc": q(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                     n.NVML_VOLATILE_ECC),
        })
    return rows


def _fake(devices: int, latency_s: float) -> FakeNvml:
    gpus = fleet(devices)
    for gpu in gpus:
        gpu.compute = [FakeProcess(20_000 + gpu.index, 3 << 30)]
        gpu.graphics = [FakeProcess(20_000 + gpu.index, 3 << 30)]
    return FakeNvml(gpus, latency_s=latency_s)


def _measure(fake: FakeNvml, cycle: Callable[[], object], devices: int, cycles: int
             ) -> tuple[float, float]:
    cycle()  # warm-up: the backend learns what is unsupported, pynvml caches pointers
    calls, times = [], []
    for _ in range(cycles):
        fake.reset_counts()
        start = time.perf_counter()
        cycle()
        times.append(time.perf_counter() - start)
        calls.append(fake.total_calls() / devices)
    return statistics.median(calls), statistics.median(times) * 1000.0


def run(devices: int, latency_s: float, cycles: int) -> list[Result]:
    """Both patterns for one device count, each behind a fresh fake."""
    results = []
    with pytest.MonkeyPatch.context() as mp:
        fake = _fake(devices, latency_s).install(mp)
        backend = NvidiaBackend(process_owner=lambda pid: (None, None))
        backend.open()
        try:
            calls, ms = _measure(fake, backend.sample, devices, cycles)
        finally:
            backend.close()
        results.append(Result("allsmi", devices, calls, ms))
    with pytest.MonkeyPatch.context() as mp:
        fake = _fake(devices, latency_s).install(mp)
        nvml.ensure_init()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(devices)]
        calls, ms = _measure(fake, lambda: typical_exporter_cycle(handles), devices, cycles)
        results.append(Result("typical exporter", devices, calls, ms))
    return results


def effective_latency_us(latency_s: float, samples: int = 200) -> float:
    """What one fake call really costs here (sleep granularity and ctypes overhead included)."""
    with pytest.MonkeyPatch.context() as mp:
        _fake(1, latency_s).install(mp)
        nvml.ensure_init()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        start = time.perf_counter()
        for _ in range(samples):
            pynvml.nvmlDeviceGetFanSpeed(handle)
        return (time.perf_counter() - start) / samples * 1e6


def machine() -> dict[str, str]:
    """nproc, CPU model and Python version of this machine."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": str(os.cpu_count()), "cpu": model,
            "python": platform.python_version(), "nvidia-ml-py": _version("nvidia-ml-py")}


def _version(dist: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def table(results: list[Result]) -> str:
    """A markdown table with the ratios against the typical pattern."""
    lines = ["| devices | pattern | calls/device/cycle | cycle wall time (ms) | calls vs typical "
             "| time vs typical |",
             "|---:|---|---:|---:|---:|---:|"]
    typical = {r.devices: r for r in results if r.pattern == "typical exporter"}
    for r in results:
        base = typical[r.devices]
        lines.append(f"| {r.devices} | {r.pattern} | {r.calls_per_device:.1f} | {r.cycle_ms:.1f} "
                     f"| {r.calls_per_device / base.calls_per_device:.2f} "
                     f"| {r.cycle_ms / base.cycle_ms:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--latency-us", type=float, default=200.0)
    parser.add_argument("--cycles", type=int, default=7)
    parser.add_argument("--write", type=Path, help="also write the results as a markdown page")
    args = parser.parse_args(argv)
    latency_s = args.latency_us / 1e6
    results: list[Result] = []
    for devices in args.devices:
        results.extend(run(devices, latency_s, args.cycles))
    info = machine()
    effective = effective_latency_us(latency_s)
    text = table(results)
    header = (f"Machine: {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}, "
              f"nvidia-ml-py {info['nvidia-ml-py']}.\n"
              f"Added latency {args.latency_us:g} us per call (measured cost of one fake call "
              f"here: {effective:.0f} us); medians over {args.cycles} cycles after one warm-up.")
    print(header)
    print()
    print(text)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(_page(header, text, args))
    return 0


def _page(header: str, text: str, args: argparse.Namespace) -> str:
    command = (f".venv/bin/python benchmarks/nvml_cycle.py --devices "
               f"{' '.join(map(str, args.devices))} --latency-us {args.latency_us:g} "
               f"--cycles {args.cycles} --write docs/benchmarks/nvml.md")
    return f"""# NVML sampling cycle: calls and wall time

Measured with `benchmarks/nvml_cycle.py` (not a test), which runs allsmi's
NVIDIA backend and a typical Python exporter pattern in the same process
against the same fake libnvidia-ml: the real `pynvml` module calling
ctypes callbacks (`tests/backends/nvml_fake.py`) that sleep a fixed latency
per call, so calls on different threads overlap as real NVML calls do (ctypes
releases the GIL). Every GPU is fully featured (fan, ECC, power fields all
supported) and runs one process listed in both the compute and graphics
lists, so pynvml's own process wrappers make two calls per list.

- **allsmi**: `NvidiaBackend.sample()` with default options (8 worker threads):
  utilization, memory v2, temperature, one field-value batch (power, enforced
  limit, energy, four ECC totals), SM clock, fan, P-state, clock-event
  reasons, compute and graphics processes (one call per list).
- **typical exporter**: one GPU after the other, 19 pynvml calls per GPU:
  name, uuid, utilization, memory (v1), temperature, fan, power, power limit,
  clocks (graphics, SM, memory), PCIe TX/RX, encoder/decoder utilization,
  compute/graphics processes, P-state, one ECC total. Handles are cached.

{header}

{text}

"calls/device/cycle" counts library entry points reached (the fake counts
every C-level call), so pynvml's size-then-fill process wrappers count twice.
Targets: at most 10 calls per device per cycle, about half the calls and a
quarter of the wall time of the typical pattern.

These are numbers for the fake library on this machine; the absolute times on
real GPUs depend on the driver's per-call cost (persistence mode matters,
see `docs/backends/nvidia.md`). The ratios carry over as long as calls on
different GPUs can overlap in the driver.

Reproduce:

```
{command}
```
"""


if __name__ == "__main__":
    raise SystemExit(main())
