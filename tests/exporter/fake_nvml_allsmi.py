"""Run ``allsmi ARGS`` against the test suite's fake libnvidia-ml with real host processes.

Usage: ``python -m tests.exporter.fake_nvml_allsmi PID[:SM][,PID[:SM]...] -- ARGS...``

Two fake H100s; the first lists the given pids in its compute process list
(1 GiB each), so the NVIDIA backend looks their owners and command lines up
through psutil exactly as on a real node. ``PID:SM`` gives the process that SM
utilization (percent) in the per-process utilization samples.
"""

from __future__ import annotations

import sys


def main() -> None:
    pids, sep, *args = sys.argv[1:]
    assert sep == "--", __doc__
    import pytest

    from tests.backends.nvml_fake import FakeGpu, FakeNvml, FakeProcess

    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(2)]
    procs = [spec.split(":") for spec in pids.split(",") if spec]
    gpus[0].compute = [FakeProcess(int(p[0]), 1 << 30, sm_util=int(p[1]) if len(p) > 1 else None)
                       for p in procs]
    if any(len(p) > 1 for p in procs):
        gpus[0].util_gpu = 100  # busy all the time its processes run
    FakeNvml(gpus).install(pytest.MonkeyPatch())
    sys.argv = ["allsmi", *args]
    from allsmi.cli.main import main as allsmi_main
    allsmi_main()


if __name__ == "__main__":
    main()
