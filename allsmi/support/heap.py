"""Keeping a long-running process's heap small (the C heap's calls need glibc, and are no-ops elsewhere).

Four measured levers for the dashboard (``benchmarks/dashboard.py``, 8 fake H100s):

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
* :func:`release`: the garbage cycles made since the last pass are collected before the trim.
  Python's collector runs when the container objects made outnumber those freed by its
  threshold; a dashboard frees about as many as it makes each refresh, so its garbage cycles
  (2,400-2,800 objects in 5 s of the first half-minute, a few hundred after, on 8 GPUs) wait
  for the rare full passes and keep Python's memory pools filled meanwhile. Collected every
  :data:`TRIM_SECONDS`: 0.6-0.7 MiB less resident at a minute (two pairs side by side, 40.7
  and 40.6 MiB against 41.4 and 41.2), 0.4 MiB over ``benchmarks/dashboard.py --together``'s
  six minutes (40.8 against 41.2), for 1-2 ms of CPU a pass (everything built at start-up is
  frozen, out of the collector's reach: see the app's ``on_mount``). Tried: every 2 s, no
  less resident over the six minutes; every second, 0.2 MiB less at a minute for 0.1 % of a
  core more (a fifth of the dashboard's CPU).

* :func:`settle`: once start-up is over, the caches only it needed are emptied before the
  first :func:`release`: the import system's finder per ``sys.path`` entry (each holding its
  directory's listing) and ``typing``'s caches of the annotations evaluated while the modules
  loaded, and :mod:`allsmi.support.distinfo`'s scan of the installed distributions (the registry
  has loaded). The first two: 0.3 MiB less resident (``--together 3 --seconds 40``, 40.5
  against 40.8 MiB); the scan, less than that benchmark resolves. A view loaded later lists
  its directories again (a few ``stat`` and ``listdir`` calls: three of the dashboard's
  modules imported after it cost the same CPU as with the cache, 49-54 ms).

Call :func:`limit_arenas` before the threads start.
"""

from __future__ import annotations

import gc
import sys
import typing

from allsmi.support import distinfo

#: How often a long-running UI collects its garbage cycles and hands free heap pages back
#: (:func:`release`).
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


def release() -> bool:
    """Collect the garbage cycles, then :func:`trim`; ``True`` if glibc released pages."""
    gc.collect()
    return trim()


def settle() -> bool:
    """Start-up is over: empty the caches only it needed (see the module's text), then
    :func:`release`; ``True`` if glibc released pages."""
    sys.path_importer_cache.clear()
    distinfo.forget()
    # typing's own list of its caches' clear functions (what its tests use between runs).
    for clear in getattr(typing, "_cleanups", ()):
        clear()
    return release()
