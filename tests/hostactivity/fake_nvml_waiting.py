"""Run ``allsmi ARGS`` against the test suite's fake libnvidia-ml, one fake H100 per holder.

Usage: ``python -m tests.hostactivity.fake_nvml_waiting PID:ACTIVE:LINK[,...] -- ARGS...``

GPU ``i`` lists process ``PID`` (1 GiB; the NVIDIA backend looks its owner up through psutil
as on a real node) and looks busy: 100 % headline utilization, with only ``ACTIVE`` percent of
its SMs active (GPM). Where ``LINK`` is above 0, GPM reports that many bytes per second of
NVLink traffic each way (``NVML_GPM_METRIC_NVLINK_TOTAL_{RX,TX}_PER_SEC``), else none.
"""

from __future__ import annotations

import sys

_MIB = 1024 * 1024


def main() -> None:
    spec, sep, *args = sys.argv[1:]
    assert sep == "--", __doc__
    import pytest

    from tests.backends.nvml_fake import FakeGpu, FakeNvml, FakeProcess, busy_looking

    holders = [tuple(part.split(":")) for part in spec.split(",") if part]
    gpus = []
    for i, (pid, active, link) in enumerate(holders):
        gpu = busy_looking(FakeGpu.from_profile("h100-sxm5-80gb", i), float(active))
        assert gpu.gpm is not None
        gpu.gpm[60] = gpu.gpm[61] = float(link) / _MIB
        gpu.compute = [FakeProcess(int(pid), 1 << 30)]
        gpus.append(gpu)
    FakeNvml(gpus).install(pytest.MonkeyPatch())
    sys.argv = ["allsmi", *args]
    from allsmi.cli.main import main as allsmi_main
    allsmi_main()


if __name__ == "__main__":
    main()
