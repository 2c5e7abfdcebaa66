"""Run ``allsmi`` or ``nvitop`` against the test suite's fake libnvidia-ml (benchmark helper).

Usage: python benchmarks/_fake_nvml_run.py GPUS NVITOP_SITE_PACKAGES|- -- PROGRAM ARGS...

Both programs then read the same N fake H100s through the real pynvml
module, so their CPU cost can be compared on a machine without a GPU.
PROGRAM is ``allsmi`` or ``nvitop``.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    gpus, site, sep, program, *args = sys.argv[1:]
    assert sep == "--", __doc__
    sys.path.insert(0, str(REPO))
    import pytest

    from tests.backends.nvml_fake import FakeGpu, FakeNvml

    fake = FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(int(gpus))])
    fake.install(pytest.MonkeyPatch())
    sys.argv = [program, *args]
    if program == "nvitop":
        sys.path.append(site)  # after ours: the project's pynvml (now faked) and psutil win
        from nvitop.cli import main as nvitop_main
        sys.exit(nvitop_main())
    from allsmi.cli.main import main as allsmi_main
    allsmi_main()


if __name__ == "__main__":
    main()
