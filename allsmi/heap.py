"""Keeping a long-running process's C heap small (glibc only; elsewhere every call is a no-op).

Two measured levers for the dashboard (``benchmarks/dashboard.py``, 8 fake H100s):

* :func:`limit_arenas`: glibc gives each thread that allocates its own malloc arena (up to
  eight per core), and each arena keeps its freed pages. The dashboard's threads (collector,
  one per backend, NVML readers, Textual's input and output) only hand snapshots to the UI
  under the GIL, so they gain nothing from arenas of their own: one arena saves about
  0.7 MiB of resident memory, and the GIL already serialises the allocations it would
  parallelise.
* :func:`trim`: start-up (configuration, the command line, the first frame) frees more than
  it keeps; ``malloc_trim`` hands the free pages back to the kernel once the first data is on
  screen (about 0.4 MiB), and every :data:`TRIM_SECONDS` after (each refresh's rendering frees
  what it allocated, and glibc keeps those pages: about 0.2 MiB more; a call takes about
  0.2 ms on the dashboard's heap).

Call :func:`limit_arenas` before the threads start.
"""

from __future__ import annotations

import sys

#: How often a long-running UI hands free heap pages back (:func:`trim`).
TRIM_SECONDS = 5.0
#: glibc's ``mallopt`` parameter number for the arena limit (``malloc.h``).
M_ARENA_MAX = -8


def _libc() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        libc = ctypes.CDLL(None)  # the process's own C library
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except (OSError, AttributeError):  # not glibc (musl has neither call)
        return None


def limit_arenas(count: int = 1) -> bool:
    """At most ``count`` malloc arenas for the whole process; ``True`` if glibc took it."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, count))  # type: ignore[attr-defined]


def trim() -> bool:
    """Return the heap's free pages to the kernel; ``True`` if glibc released any."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))  # type: ignore[attr-defined]
