"""The cost of the host readers and the waiting classification per collection cycle.

Usage: python benchmarks/hostactivity.py [--others 1000] [--holders 8,64] [--cycles 200]

Starts OTHERS sleeping processes (a busy node's process table: the readers must not walk it)
and HOLDERS processes with 8 threads each (the processes that hold devices), then times
``HostActivitySampler.sample`` over the holders and ``WaitingClassifier.apply`` over one
simulated device per holder, median and p95 per cycle, in milliseconds of wall and CPU time.
The figures are in docs/activity.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from allsmi.hostactivity.sampler import HostActivitySampler  # noqa: E402
from allsmi.hostactivity.settings import ActivitySettings  # noqa: E402
from allsmi.schema import DeviceSample, ProcessSample  # noqa: E402
from allsmi.collection.waiting import WaitingClassifier  # noqa: E402

THREADED = ("import threading, time\n"
            "for _ in range(7): threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
            "time.sleep(3600)\n")


def _timed(fn, cycles: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    wall, cpu = [], []
    for _ in range(cycles):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return wall, cpu


def _p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--others", type=int, default=1000)
    parser.add_argument("--holders", default="8,64")
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()
    counts = [int(n) for n in args.holders.split(",")]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(args.others):
            procs.append(subprocess.Popen(["sleep", "3600"]))
        holders = [subprocess.Popen([sys.executable, "-c", THREADED]) for _ in range(max(counts))]
        procs.extend(holders)
        time.sleep(1.0)  # let the threads start
        print(f"{args.others} other processes, {os.cpu_count()} CPUs, Python "
              f"{sys.version.split()[0]}; per cycle, ms (median / p95)")
        for count in counts:
            pids = [p.pid for p in holders[:count]]
            sampler = HostActivitySampler()
            sampler.sample(pids)
            rows = [("readers, every thread's state", *_timed(lambda: sampler.sample(pids), args.cycles)),
                    ("readers, no thread states", *_timed(lambda: sampler.sample(pids, ()), args.cycles))]
            for label, active in (("devices computing", 60.0), ("devices idle", 2.0)):
                devices = [DeviceSample(id=f"GPU-{i}", vendor="nvidia", kind="gpu",
                                        backend="nvidia", utilization_percent=100.0,
                                        compute_active_percent=active,
                                        compute_active_source="sm_active",
                                        processes=(ProcessSample(pid, f"user{i}"),))
                           for i, pid in enumerate(pids)]
                step = WaitingClassifier(ActivitySettings(), HostActivitySampler())
                step.apply(devices)
                rows.append((f"whole step, {label}",
                             *_timed(lambda: step.apply(devices), args.cycles)))
            print(f"  {count} holder processes (8 threads each):")
            for label, wall, cpu in rows:
                print(f"    {label:<34} wall {statistics.median(wall):6.2f} / {_p95(wall):6.2f}"
                      f"   CPU {statistics.median(cpu):6.2f} / {_p95(cpu):6.2f}")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


if __name__ == "__main__":
    main()
