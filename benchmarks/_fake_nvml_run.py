"""Run ``allsmi`` or ``nvitop`` against the test suite's fake libnvidia-ml (benchmark helper).

Usage: python benchmarks/_fake_nvml_run.py GPUS NVITOP_SITE_PACKAGES|- -- PROGRAM ARGS...

Both programs then read the same N fake H100s through the real pynvml
module, so their CPU cost can be compared on a machine without a GPU.
PROGRAM is ``allsmi``, ``nvitop`` or ``none`` (the harness alone, to subtract).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class _Patch:
    """What FakeNvml.install needs of pytest's MonkeyPatch (nothing is undone: the process ends)."""

    @staticmethod
    def setattr(target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def main() -> None:
    gpus, site, sep, program, *args = sys.argv[1:]
    assert sep == "--", __doc__
    # After the installed packages: the fake comes from the checkout's tests/, allsmi from
    # wherever it is installed (a regular install measures what users run).
    sys.path.append(str(REPO))
    # nvml_fake imports pytest for a type annotation only; a stand-in keeps pytest's import
    # time (the same for both programs) out of the measurement.
    sys.modules.setdefault("pytest", types.ModuleType("pytest"))

    from tests.backends.nvml_fake import FakeGpu, FakeNvml

    fake = FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(int(gpus))])
    fake.install(_Patch())  # type: ignore[arg-type]
    sys.argv = [program, *args]
    if program == "none":  # the harness alone: what both programs' figures include
        return
    if program == "nvitop":
        sys.path.append(site)  # after ours: the project's pynvml (now faked) and psutil win
        from nvitop.cli import main as nvitop_main
        sys.exit(nvitop_main())
    from allsmi.cli.main import main as allsmi_main
    allsmi_main()


if __name__ == "__main__":
    main()
