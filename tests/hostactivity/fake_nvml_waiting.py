"""Run ``allsmi ARGS`` against the test suite's fake libnvidia-ml, one fake H100 per holder.

Usage: ``python -m tests.hostactivity.fake_nvml_waiting PID:UTIL:LINK[,...] -- ARGS...``

GPU ``i`` lists process ``PID`` (1 GiB; the NVIDIA backend looks its owner up through psutil
as on a real node), reports ``UTIL`` percent utilization and, where ``LINK`` is above 0, that
many bytes per second of NVLink traffic each way. The NVLink figures are put on the NVIDIA
backend's samples here: the fake NVML has no NVLink or GPM counters yet.
"""

from __future__ import annotations

import sys
from dataclasses import replace


def main() -> None:
    spec, sep, *args = sys.argv[1:]
    assert sep == "--", __doc__
    import pytest

    from tests.backends.nvml_fake import FakeGpu, FakeNvml, FakeProcess

    holders = [tuple(part.split(":")) for part in spec.split(",") if part]
    gpus = [FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(len(holders))]
    links: dict[int, float] = {}
    for i, (pid, util, link) in enumerate(holders):
        gpus[i] = replace(gpus[i], util_gpu=int(util))
        gpus[i].compute = [FakeProcess(int(pid), 1 << 30)]
        if float(link) > 0:
            links[i] = float(link)
    monkeypatch = pytest.MonkeyPatch()
    FakeNvml(gpus).install(monkeypatch)

    from allsmi.backends.nvidia.backend import NvidiaBackend
    from allsmi.schema import derive
    real_sample = NvidiaBackend.sample

    def with_links(self: NvidiaBackend):  # type: ignore[no-untyped-def]
        return [derive(d, interconnect_rx_bytes_per_second=links[d.index],
                       interconnect_tx_bytes_per_second=links[d.index])
                if d.index in links else d for d in real_sample(self)]
    monkeypatch.setattr(NvidiaBackend, "sample", with_links)
    sys.argv = ["allsmi", *args]
    from allsmi.cli.main import main as allsmi_main
    allsmi_main()


if __name__ == "__main__":
    main()
