"""Run ``allsmi ARGS`` against the test suite's fake libnvidia-ml with GPM (Hopper activity).

Usage: ``python -m tests.backends.fake_gpm_allsmi [PID[,PID...]] -- ARGS...``

Three fake GPUs: GPU 0 an H100 pinned at 100 % utilization with 20 % of its SMs active
(:func:`tests.backends.nvml_fake.busy_looking`); GPU 1 an H100 in MIG mode whose three GPU
instances report their own SM activity (75, 0 and 12.5 %); GPU 2 an A100 without GPM (its
activity unknown, the status saying why). The given pids are compute processes on GPU 0 and on
the first MIG instance (1 GiB each), looked up through psutil as on a real node. For end-to-end
checks of the activity figures (snapshot, doctor, serve, record) without a GPU.
"""

from __future__ import annotations

import sys


def gpus(pids: list[int]) -> list:
    """The three fake GPUs described above."""
    from tests.backends.nvml_fake import FakeGpu, FakeProcess, busy_looking

    busy = busy_looking(FakeGpu.from_profile("h100-sxm5-80gb", 0), 20.0)
    busy.compute = [FakeProcess(pid, 1 << 30) for pid in pids]
    mig = busy_looking(FakeGpu.from_profile("a100-sxm4-40gb-mig", 1, name="NVIDIA H100 80GB HBM3"))
    for instance, active in zip(mig.migs, (75.0, 0.0, 12.5)):
        instance.gpm = {2: active}
        instance.name = instance.name.replace("A100-SXM4-40GB", "H100 80GB HBM3")
    first = mig.migs[0]
    mig.compute = [FakeProcess(pid, 1 << 30, gpu_instance_id=first.gpu_instance_id,
                               compute_instance_id=first.compute_instance_id) for pid in pids]
    ampere = FakeGpu.from_profile("a100-sxm4-40gb-mig", 2, mig_mode=0, migs=[], util_gpu=55,
                                    util_memory=20)
    return [busy, mig, ampere]


def main() -> None:
    argv = sys.argv[1:]
    sep = argv.index("--")
    pids = [int(p) for spec in argv[:sep] for p in spec.split(",") if p]
    import pytest

    from tests.backends.nvml_fake import FakeNvml

    FakeNvml(gpus(pids)).install(pytest.MonkeyPatch())
    sys.argv = ["allsmi", *argv[sep + 1:]]
    from allsmi.cli.main import main as allsmi_main
    allsmi_main()


if __name__ == "__main__":
    main()
