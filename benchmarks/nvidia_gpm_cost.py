"""What GPM costs per GPU and cycle, in process: the two NVML calls alone and allsmi's whole read,
beside a cycle of the NVIDIA backend with and without GPM.

Run on a machine with an NVIDIA driver and a Hopper (or later) GPU, allsmi installed::

    python benchmarks/nvidia_gpm_cost.py [--samples 60] [--spacing 0.2] [--gpu 0]
    python benchmarks/nvidia_gpm_cost.py --fake 8     # the test suite's fake H100s, no GPU

Every figure is the CPU time of the calling thread (``CLOCK_THREAD_CPUTIME_ID``: user and
system time, so the driver's time in the kernel counts) and its wall time, medians over
``--samples`` calls ``--spacing`` seconds apart (GPM refreshes every 100 ms: calls closer
than that would measure something else):

* ``nvmlGpmSampleGet`` through pynvml, and ``nvmlGpmMetricsGet`` of allsmi's eight metrics
  through pynvml (a new request each call, as pynvml's examples do);
* ``GpmReader.read``: allsmi's read of one GPU (one sample, the metrics, their checks);
* ``NvidiaBackend.sample()`` with one reader on the calling thread, ``gpm`` on and off, two
  backends opened side by side and asked alternately.

It prints one Markdown table. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]


def timed(call: Callable[[], Any], samples: int, spacing: float) -> tuple[float, float]:
    """Median thread CPU and wall time of ``call`` in microseconds, ``samples`` calls apart by
    ``spacing`` seconds."""
    cpu, wall = [], []
    for _ in range(samples):
        time.sleep(spacing)
        c, w = time.thread_time_ns(), time.perf_counter_ns()
        call()
        cpu.append(time.thread_time_ns() - c)
        wall.append(time.perf_counter_ns() - w)
    return statistics.median(cpu) / 1e3, statistics.median(wall) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--spacing", type=float, default=0.2)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--fake", type=int, default=0, metavar="GPUS",
                        help="the test suite's fake H100s (answering GPM) instead of the driver")
    args = parser.parse_args()
    if args.fake:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from _fake_nvml_run import install_fake  # noqa: E402
        sys.path.append(str(REPO))
        install_fake(args.fake)
    import pynvml

    from allsmi.backends.nvidia import NvidiaBackend, gpm

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    samples = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
    pynvml.nvmlGpmSampleGet(handle, samples[0])
    state = {"newest": 0}

    def sample_get() -> None:
        state["newest"] ^= 1
        pynvml.nvmlGpmSampleGet(handle, samples[state["newest"]])

    def metrics_get() -> None:
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(gpm.METRICS)
        request.sample1, request.sample2 = samples[state["newest"] ^ 1], samples[state["newest"]]
        for i, (metric_id, _, _) in enumerate(gpm.METRICS):
            request.metrics[i].metricId = metric_id
        pynvml.nvmlGpmMetricsGet(request)

    rows = [("`nvmlGpmSampleGet` (pynvml)", timed(sample_get, args.samples, args.spacing)),
            ("`nvmlGpmMetricsGet`, 8 metrics (pynvml)", timed(metrics_get, args.samples, args.spacing))]
    for sample in samples:
        pynvml.nvmlGpmSampleFree(sample)

    on = NvidiaBackend(options={"gpm": True, "workers": 1, "processes": False})
    off = NvidiaBackend(options={"gpm": False, "workers": 1, "processes": False})
    for backend in (on, off):
        backend.open()
        backend.sample()
    try:
        gpu = on._gpus[args.gpu]  # noqa: SLF001  (a benchmark looks inside)
        reader = on._gpm  # noqa: SLF001
        if reader is None or gpu.gpm is None:
            raise SystemExit("this GPU has no GPM (Hopper or later is needed)")
        warnings: list[str] = []
        rows.append(("allsmi's read of one GPU (`GpmReader.read`)",
                     timed(lambda: reader.read(gpu.gpm, gpu.handle, warnings), args.samples, args.spacing)))
        cycles: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
        for _ in range(max(1, args.samples // 10)):
            for name, backend in (("on", on), ("off", off)):
                cycles[name].append(timed(backend.sample, 10, args.spacing))
        for name in ("on", "off"):
            rows.append((f"`NvidiaBackend.sample()`, every GPU, gpm {name}",
                         (statistics.median(c for c, _ in cycles[name]),
                          statistics.median(w for _, w in cycles[name]))))
    finally:
        for backend in (on, off):
            backend.close()
    where = f"{args.fake} fake H100 (the test suite's library)" if args.fake else \
        f"{pynvml.nvmlDeviceGetName(handle)}, driver {pynvml.nvmlSystemGetDriverVersion()}"
    print(f"{where}; medians of {args.samples} calls {args.spacing:g} s apart (cycles: medians "
          f"of {max(1, args.samples // 10)} medians of 10)\n")
    print("| what | thread CPU (user + system) | wall |\n|---|---:|---:|")
    for name, (cpu, wall) in rows:
        print(f"| {name} | {cpu:.1f} µs | {wall:.1f} µs |")


if __name__ == "__main__":
    main()
