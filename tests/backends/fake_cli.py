"""Run the real ``allsmi`` command with fake vendor libraries behind the real bindings.

``python -m tests.backends.fake_cli ARGS...`` is ``allsmi ARGS...`` in a process where
``import amdsmi`` gives the installed amdsmi package bound to the fake ``libamd_smi.so``
of :mod:`tests.backends.amd_fake`, and pynvml loads the fake ``libnvidia-ml`` of
:mod:`tests.backends.nvml_fake`. Each is configured by a JSON environment variable;
without it, that vendor is what the machine has (on a test machine: absent).

``FAKE_AMDSMI``::

    {"fixture": "mi300x_cpx"  |  "machine": {...fixture dict...},
     "latency_s": 1.0,              # every C entry point takes this long
     "hang": ["amdsmi_get_gpu_activity"],   # entry points that never return
     "missing": ["amdsmi_get_gpu_memory_partition"],  # absent from an older amdsmi
     "replicate": 64}                # the first device on 64 PCI buses

``FAKE_NVML``::

    {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2, "stall_s": 0, ...FakeGpu fields}],
     "driver": "current" | "r470" | "r440", "latency_s": 0, "library_missing": false,
     "init_error": null, "absent_symbols": ["nvmlDeviceGetFanSpeed"]}

Used by the subprocess tests (``tests/contract/test_library_faults.py``,
``tests/backends/test_library_stalls.py``) to test the CLI from outside.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def install_amd(spec: dict[str, Any]) -> None:
    from tests.backends.amd_fake import FakeLibrary, load_amdsmi_against

    machine = spec.get("machine")
    library = (FakeLibrary(machine) if machine is not None
               else FakeLibrary.from_fixture(spec["fixture"]))
    if "replicate" in spec:
        # the first device on as many PCI buses as asked (64 GPUs without a 64-GPU fixture)
        import copy
        first = library.devices[0]
        library.machine["devices"] = []
        for i in range(int(spec["replicate"])):
            dev = copy.deepcopy(first)
            dev["amdsmi_get_gpu_device_bdf"] = f"{i // 256:04x}:{i % 256:02x}:00.0"
            dev["amdsmi_get_gpu_device_uuid"] = f"{i:08x}-0000-1000-807c-d0b8a1e2c3f4"
            library.machine["devices"].append(dev)
    if "latency_s" in spec:
        library.latency_s = float(spec["latency_s"])
    if "hang" in spec:
        library.hang = frozenset(spec["hang"])
    module = load_amdsmi_against(library)
    for name in spec.get("missing", ()):
        if hasattr(module, name):
            delattr(module, name)
    sys.modules["amdsmi"] = module


def install_nvml(spec: dict[str, Any]) -> None:
    import pytest

    from tests.backends.nvml_fake import FakeGpu, FakeNvml

    gpus: list[FakeGpu] = []
    for group in spec.get("gpus", ()):
        overrides = {k: v for k, v in group.items() if k not in ("profile", "count")}
        for key in ("not_supported", "no_permission"):
            if key in overrides:
                overrides[key] = set(overrides[key])
        for _ in range(int(group.get("count", 1))):
            gpus.append(FakeGpu.from_profile(group["profile"], len(gpus), **overrides))
    fake = FakeNvml(gpus, driver=spec.get("driver", "current"),
                    latency_s=float(spec.get("latency_s", 0.0)),
                    library_missing=bool(spec.get("library_missing", False)),
                    init_error=spec.get("init_error"),
                    absent_symbols=set(spec.get("absent_symbols", ())))
    fake.install(pytest.MonkeyPatch())


def main() -> None:
    for variable, install in (("FAKE_AMDSMI", install_amd), ("FAKE_NVML", install_nvml)):
        raw = os.environ.get(variable)
        if raw:
            install(json.loads(raw))
    from allsmi.cli.main import main as allsmi_main

    sys.argv[0] = "allsmi"
    allsmi_main()


if __name__ == "__main__":
    main()
