#!/usr/bin/env python3
"""How much of an idle exporter's cycle any leaner NVIDIA read could save: the floor.

``allsmi serve``'s collector and exposition run in this process on 8 fake H100s (the test
suite's fake libnvidia-ml under the real pynvml, as ``exporter_idle.py --itemise`` runs them),
one cycle a second, as ``serve`` runs them (idle in between: each cycle runs cold). Rounds
alternate two ways of reading each GPU:

* **as built**: ``NvidiaBackend``'s own read, with every check it makes (each call's return
  code, old drivers' entry points, sentinels, ranges, NotSupported and lost GPUs);
* **bare**: the same nine NVML calls per GPU (utilization, memory, temperature, the field
  batch, clock, P-state, clock-event reasons, compute and graphics processes) into buffers
  made once, through function pointers looked up once, and the same sample built from the
  answers taken as they come: no return code read, no fallback, no check of any value. It
  gives the same sample on a healthy fake GPU (checked before the rounds); it would report
  garbage on a failing one, so it is a measuring stick, not a candidate.

The fake H100s answer GPM as Hopper GPUs do: both ways read it through allsmi's own reader
(``GpmReader.read``, timed alone by ``nvidia_gpm_cost.py``), so what differs is the nine calls;
the library's calls alone are the nine, without GPM's.

What the bare rounds save is the most that any change to the reads' own Python (fewer calls,
fewer checks, another structure) could save of the cycle; the rest (the library's calls, the
collector's cycle, the thread hand-offs) no read can touch. ``--ratio R`` (the last measured
ratio to nvitop-exporter) prints what that floor would make of it.

Usage::

    .venv/bin/python benchmarks/exporter_floor.py [--rounds 8] [--cycles 8] [--ratio 0.47]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from _fake_nvml_run import install_fake  # noqa: E402
from _machine import describe  # noqa: E402

#: The per-cycle calls answering one number into a buffer of their own, with their arguments
#: after the handle (``nvmlDeviceGetClockInfo``'s: the SM clock).
SCALARS = (("nvmlDeviceGetUtilizationRates", "c_nvmlUtilization_t", ()),
           ("nvmlDeviceGetMemoryInfo_v2", "c_nvmlMemory_v2_t", ()),
           ("nvmlDeviceGetTemperatureV", "c_nvmlTemperature_v1_t", ()),
           ("nvmlDeviceGetClockInfo", "c_uint", (1,)),
           ("nvmlDeviceGetPerformanceState", "c_uint", ()),
           ("nvmlDeviceGetCurrentClocksEventReasons", "c_ulonglong", ()))
LISTS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3")


def bare_read(pynvml: Any) -> tuple[Any, Any]:
    """A stand-in for ``NvidiaBackend._read_gpu_values`` making the same calls bare, and the
    calls alone (for every GPU that stand-in has read), with nothing around them."""
    from allsmi.backends.nvidia.calls import plain
    from allsmi.backends.nvidia.devices import ECC_FIELDS, reason_names
    from allsmi.schema import derive
    lib = pynvml.nvmlLib
    kept: dict[int, tuple[Any, ...]] = {}
    seen: list[Any] = []  # the GPUs read so far, in order

    def buffers() -> tuple[Any, ...]:
        out = []
        for name, kind, args in SCALARS:
            buffer = getattr(ctypes, kind)() if hasattr(ctypes, kind) else \
                plain(getattr(pynvml, kind))()  # as the built read's buffers are
            out.append((getattr(lib, name), args, buffer, ctypes.byref(buffer)))
        count = ctypes.c_uint()
        listed = (pynvml.c_nvmlProcessInfo_v3_t * 16)()
        out[1][2].version = pynvml.nvmlMemory_v2
        out[2][2].version = pynvml.nvmlTemperature_v1
        return (tuple(out), count, ctypes.byref(count), listed,
                tuple(getattr(lib, name) for name in LISTS))

    def calls(gpu: Any) -> tuple[tuple[Any, ...], dict[int, Any]]:
        """The nine calls: the scalar buffers and the fields' values."""
        made = kept.get(id(gpu))
        if made is None:
            made = kept[id(gpu)] = buffers()
            seen.append(gpu)
        scalars, count, count_ref, listed, lists = made
        handle = gpu.handle
        for fn, args, _, ref in scalars:
            fn(handle, *args, ref)
        fields = dict(zip(gpu.field_batch.ids, (value for _, value in gpu.field_batch.read(handle))))
        for fn in lists:
            count.value = 16
            fn(handle, count_ref, listed)
        return scalars, fields

    def read(self: Any, gpu: Any, reader: Any) -> list[Any]:
        scalars, fields = calls(gpu)
        # GPM (the fake H100s answer it as Hopper GPUs do) is read by allsmi's own reader both
        # ways: ``nvidia_gpm_cost.py`` measures that read; the floor is the nine calls'.
        activity = self._gpm.read(gpu.gpm, gpu.handle, []) if self._gpm else {}
        util, memory, temperature, clock, pstate, reasons = (s[2] for s in scalars)
        details = {"mig_mode": gpu.mig_enabled, "memory_activity_percent": float(util.memory),
                   "memory_reserved_bytes": memory.reserved, "memory_info_version": 2,
                   **{key: int(fields[fid]) for fid, key in ECC_FIELDS.items() if fid in fields},
                   "pstate": f"P{pstate.value}", "clocks_event_reasons_mask": reasons.value,
                   "clocks_event_reasons": reason_names(reasons.value)}
        return [derive(gpu.template, health="ok", details=details,
                       utilization_percent=float(util.gpu), memory_used_bytes=memory.used,
                       memory_total_bytes=memory.total,
                       temperature_celsius=float(temperature.temperature),
                       power_watts=fields[185] / 1000, power_limit_watts=fields[190] / 1000,
                       energy_joules=fields[83] / 1000, clock_mhz=float(clock.value),
                       fan_percent=None, processes=(), **activity)]

    def library_alone() -> None:
        """The nine calls of every GPU read so far, and nothing else."""
        for gpu in seen:
            calls(gpu)
    return read, library_alone


def same_sample(built: Any, bare: Any) -> list[str]:
    """The fields in which the two samples of one GPU differ (the energy counter moves)."""
    from dataclasses import fields
    return [f.name for f in fields(built) if f.name != "energy_joules"
            and getattr(built, f.name) != getattr(bare, f.name)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=8, help="cycles 1 s apart per round")
    parser.add_argument("--ratio", type=float, help="the last measured ratio to nvitop-exporter")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    install_fake(8)
    import pynvml
    from allsmi.backends.nvidia.backend import NvidiaBackend
    from allsmi.cli.common import build_collector, settings
    from allsmi.exporter.exposition import Exposition
    built = NvidiaBackend._read_gpu_values
    bare, library_alone = bare_read(pynvml)
    collector = build_collector(settings(None, None, 1.0, None, parent={}))
    exposition = Exposition()
    steps = timed_steps(collector, exposition)
    ways = {"as built": lambda: set_read(built), "bare": lambda: set_read(bare),
            "the library's calls alone (no collector, one thread)": None}

    def set_read(read: Any) -> None:
        NvidiaBackend._read_gpu_values = read  # type: ignore[method-assign]

    spent: dict[str, list[float]] = {name: [] for name in ways}
    kept_steps: dict[str, list[float]] = {}  # each step's CPU (ms) in the rounds as built
    try:
        for _ in range(5):
            first = collector.collect_once()
        set_read(bare)
        second = collector.collect_once()
        differ = [diff for a, b in zip(first.devices, second.devices) for diff in same_sample(a, b)]
        if differ or len(first.devices) != 8 or len(second.devices) != 8:
            raise SystemExit(f"exporter_floor: the bare read gives other samples: {differ}")
        for _ in range(args.rounds):
            for name, chosen in ways.items():
                cycle = collector.collect_once if chosen else library_alone
                if chosen:
                    chosen()
                cycle()
                time.sleep(1.0)
                for took in steps.values():
                    took.clear()
                started = time.process_time()
                for _ in range(args.cycles):
                    time.sleep(1.0)
                    cycle()
                spent[name].append((time.process_time() - started) * 1000 / args.cycles)
                if name == "as built":
                    for step, took in steps.items():
                        kept_steps.setdefault(step, []).extend(took)
    finally:
        set_read(built)
        collector.close()
    report(args, spent, {step: statistics.median(took) for step, took in kept_steps.items()})


def timed_steps(collector: Any, exposition: Any) -> dict[str, list[float]]:
    """Wrap the collector's steps (on this thread, the collector's) to time each one."""
    took: dict[str, list[float]] = {}

    def timed(name: str, fn: Any) -> Any:
        kept = took.setdefault(name, [])

        def step(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                kept.append((time.thread_time_ns() - started) / 1e6)
        return step

    collector.sampled = timed("the backends (this thread's part of the reads)",
                              collector.sampled)
    collector.host.sample = timed("the host sample", collector.host.sample)
    collector._groups = timed("resource groups", collector._groups)
    collector._attribute = timed("attribution", collector._attribute)
    collector.subscribe(timed("the exposition's counters", exposition.on_snapshot))
    whole = timed("the whole cycle on the collector's thread", collector.collect_once)
    collector.collect_once = whole
    return took


def report(args: argparse.Namespace, spent: dict[str, list[float]],
           steps: dict[str, float]) -> None:
    medians = {name: statistics.median(values) for name, values in spent.items()}
    saving = 1 - medians["bare"] / medians["as built"]
    print(f"Machine: {describe()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load "
          f"average {' / '.join(f'{x:.2f}' for x in os.getloadavg())}\n8 fake H100, serve's "
          f"collector and exposition, cycles 1 s apart; medians of {args.rounds} rounds of "
          f"{args.cycles} cycles each way, alternated (process CPU, every thread)\n")
    print("| the NVIDIA reads | ms of CPU per cycle | rounds |")
    print("|---|---:|---|")
    for name, value in medians.items():
        print(f"| {name} | {value:.3f} | {' '.join(f'{v:.2f}' for v in spent[name])} |")
    print("\nThe collector's thread, step by step, in the rounds as built (medians, thread CPU)\n")
    print("| step | ms of CPU per cycle |")
    print("|---|---:|")
    for name, value in steps.items():
        print(f"| {name} | {value:.3f} |")
    print(f"\nThe most a leaner read could save: {100 * saving:.0f} % of the cycle")
    if args.ratio:
        print(f"A ratio of {args.ratio:.2f}x nvitop-exporter would become at best "
              f"{args.ratio * (1 - saving):.2f}x")

if __name__ == "__main__":
    main()
