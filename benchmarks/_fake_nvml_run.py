"""Run ``allsmi`` or ``nvitop`` against the test suite's fake libnvidia-ml (benchmark helper).

Usage: python benchmarks/_fake_nvml_run.py GPUS NVITOP_SITE_PACKAGES|- -- PROGRAM ARGS...

Both programs then read the same N fake H100s through the real pynvml
module, so their CPU cost can be compared on a machine without a GPU.
PROGRAM is ``allsmi``, ``nvitop``, ``nvitop-exporter`` or ``none`` (the harness
alone, to subtract). The nvitop site is also where a plain allsmi install
(without the ``nvidia`` extra) finds ``pynvml``: it is appended after the
installed packages, so an install's own ``pynvml`` and ``psutil`` win.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: GPM metric id -> value of an idle Hopper GPU, as a real H200 reported them (every GPU the
#: harness fakes answers GPM, as real H100s do: its activity reader runs in every figure)
IDLE_GPM = {2: 0.0, 3: 0.0, 5: 0.0, 10: 0.0, 20: 0.33, 21: 0.09, 60: 0.0, 61: 0.0}


class _Patch:
    """What FakeNvml.install needs of pytest's MonkeyPatch (nothing is undone: the process ends)."""

    @staticmethod
    def setattr(target: object, name: str, value: object) -> None:
        setattr(target, name, value)


def install_fake(gpus: int) -> object:
    """Put ``gpus`` fake H100s behind pynvml in this process, for good (the checkout must be
    on ``sys.path``: the fake is the test suite's ``tests/backends/nvml_fake.py``)."""
    # nvml_fake imports pytest for a type annotation only; a stand-in keeps pytest's import
    # time (the same for every program measured) out of the measurement.
    sys.modules.setdefault("pytest", types.ModuleType("pytest"))
    from tests.backends.nvml_fake import FakeGpu, FakeNvml

    fake = FakeNvml([FakeGpu.from_profile("h100-sxm5-80gb", i) for i in range(gpus)])
    for gpu in fake.gpus:  # Hopper has GPM: an idle H200's figures (docs/hardware-validation.md)
        gpu.gpm = dict(IDLE_GPM)
    return fake.install(_Patch())  # type: ignore[arg-type]


def main() -> None:
    gpus, site, sep, program, *args = sys.argv[1:]
    assert sep == "--", __doc__
    # After the installed packages: the fake comes from the checkout's tests/, allsmi from
    # wherever it is installed (a regular install measures what users run).
    sys.path.append(str(REPO))
    if site != "-":
        sys.path.append(site)
    install_fake(int(gpus))
    sys.argv = [program, *args]
    if program == "none":  # the harness alone: what both programs' figures include
        return
    if program == "nvitop":
        from nvitop.cli import main as nvitop_main
        sys.exit(nvitop_main())
    if program == "nvitop-exporter":
        from nvitop_exporter.cli import main as exporter_main
        sys.exit(exporter_main())
    from allsmi.cli.main import main as allsmi_main
    allsmi_main()


if __name__ == "__main__":
    main()
