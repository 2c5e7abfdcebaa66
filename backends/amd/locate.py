"""Where ``amdsmi`` and ``libamd_smi.so`` would be, from the file system alone: the quick probe's
part of :mod:`allsmi.backends.amd.loader`, kept apart so that a machine without AMD answers it
without importing the loader (its stdout capture, ctypes and locks).
"""

from __future__ import annotations

import os
import sys

from allsmi.support import distinfo

LIBRARY_MISSING_REASON = (
    "libamd_smi.so not found: install ROCm (the amd-smi-lib package) "
    "or set ROCM_PATH to the ROCm install prefix")


def package_version() -> str | None:
    """The installed ``amdsmi`` distribution's version, without importing it."""
    return distinfo.version("amdsmi")


LIBRARY = "libamd_smi.so"


def not_installed_reason() -> str:
    """What to say when the amdsmi package is missing (with the pip of this Python)."""
    return f"the amdsmi Python package is not installed ({sys.executable} -m pip install 'allsmi[amd]')"


def installed(module: str) -> bool:
    """Whether ``import module`` would find something (True where unsure)."""
    import importlib.util
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return True


def library_paths() -> list[str]:
    """The explicit places amdsmi (``amdsmi_wrapper.find_smi_library``) loads the library
    from, besides the loader's search for its bare name."""
    import importlib.util
    paths = []
    rocm = os.getenv("ROCM_HOME", os.getenv("ROCM_PATH"))
    if rocm:
        paths.append(os.path.join(rocm, "lib", LIBRARY))
    try:
        spec = importlib.util.find_spec("amdsmi")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        paths.append(os.path.join(folder, LIBRARY))
    paths.append(os.path.join(os.getenv("ROCM_PATH", "/opt/rocm"), "lib", LIBRARY))
    return paths


def quick_absence(device_nodes: tuple[str, ...]) -> tuple[str, dict[str, str]] | None:
    """Why amdsmi cannot work here, from the file system alone, without importing it (its
    import loads the library); ``None`` when it may (then import it and ask).

    Absent means no AMD device node and no ``libamd_smi.so`` where amdsmi looks: its
    import would fail with the same reason. Returns the reason and what was searched.
    """
    from allsmi.backends._common.presence import maybe_present
    paths = library_paths()
    if maybe_present("amdsmi", device_nodes, LIBRARY, paths):
        return None
    return LIBRARY_MISSING_REASON, {
        "searched": f"{', '.join(device_nodes)}; {LIBRARY} in {', '.join(paths)} and the loader's paths"}
