"""Run ``allsmi ARGS`` against the test suite's fake libnvidia-ml with real host processes.

Usage: ``python -m tests.exporter.fake_nvml_allsmi PID[,PID...] -- ARGS...``

Two fake H100s; the first lists the given pids in its compute process list
(1 GiB each), so the NVIDIA backend looks their owners and command lines up
through psutil exactly as on a real node.
"""

from __future__ import annotations

import sys


def main() -> None:
    pids, sep, *args = sys.argv[1:]
    assert sep == "--", __doc__
    import pytest

    from tests.backends.nvml_fake import FakeGpu, FakeNvml, FakeProcess

    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(2)]
    gpus[0].compute = [FakeProcess(int(pid), 1 << 30) for pid in pids.split(",") if pid]
    FakeNvml(gpus).install(pytest.MonkeyPatch())
    sys.argv = ["allsmi", *args]
    from allsmi.cli.main import main as allsmi_main
    allsmi_main()


if __name__ == "__main__":
    main()
