"""Whether a vendor library could be on this machine, from a look at the file system.

Importing a vendor's Python binding (pynvml, amdsmi) only to hear that its C
library is missing costs start-up time on every machine without that vendor.
The library backends first ask :func:`maybe_present`: any of the vendor's
device nodes, or a file the dynamic loader would find under the library's
name. Only when there is neither is the vendor reported absent without
importing the binding, with the same reason the binding would have given.

The check is conservative: every answer it is unsure about is "maybe present",
and the backend then imports the binding and asks it. It mirrors what
``dlopen(name)`` searches on Linux: ``LD_LIBRARY_PATH``, the loader cache
``/etc/ld.so.cache`` (the name as a key), the default and multiarch library
directories; plus the explicit paths the binding itself tries.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from typing import Iterable

#: The loader's cache of library names (glibc).
LD_SO_CACHE = "/etc/ld.so.cache"
#: Searched by the loader after its cache (glibc's trusted directories).
DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64")


def _library_dirs() -> list[str]:
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    arch = getattr(sys.implementation, "_multiarch", None)  # e.g. x86_64-linux-gnu (Debian)
    if arch:
        dirs += [f"/lib/{arch}", f"/usr/lib/{arch}"]
    dirs += DEFAULT_DIRS
    try:  # musl: /etc/ld-musl-ARCH.path lists the directories
        for path in matching("/etc/ld-musl-*.path"):
            with open(path, encoding="utf-8", errors="replace") as handle:
                dirs += handle.read().replace(":", "\n").split()
    except OSError:
        pass
    return dirs


def _in_loader_cache(name: str) -> bool:
    try:
        with open(LD_SO_CACHE, "rb") as handle:
            cache = handle.read()
    except OSError:
        return False
    key = name.encode() + b"\0"
    return b"\0" + key in cache or b"/" + key in cache


def library_findable(name: str, paths: Iterable[str] = ()) -> bool:
    """Whether ``dlopen(name)`` (or one of the explicit ``paths``) could find the library.

    True where unsure: on systems other than Linux.
    """
    if not sys.platform.startswith("linux"):
        return True
    if any(os.path.exists(path) for path in paths):
        return True
    if any(os.path.exists(os.path.join(d, name)) for d in _library_dirs()):
        return True
    return _in_loader_cache(name)


def matching(pattern: str) -> list[str]:
    """The paths ``glob.glob(pattern)`` finds, in some order.

    A pattern whose wildcards are all in its last part (every device-node pattern) is matched
    here, with one directory listing and :mod:`fnmatch`, as glob matches it: names starting
    with a dot only for a pattern that does, an unreadable directory matching nothing. Other
    patterns go to glob, whose import (about 1.6 million instructions, two regular expressions)
    a one-shot snapshot otherwise pays for the AMD quick probe alone."""
    head, tail = os.path.split(pattern)
    if not tail or any(c in head for c in "*?["):
        import glob
        return glob.glob(pattern)
    if not any(c in tail for c in "*?["):
        return [pattern] if tail and os.path.lexists(pattern) else []
    try:
        with os.scandir(head or os.curdir) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return []
    if not tail.startswith("."):
        names = [name for name in names if not name.startswith(".")]
    return [os.path.join(head, name) for name in fnmatch.filter(names, tail)]


def any_node(patterns: Iterable[str]) -> bool:
    """Whether any path matches one of the glob ``patterns`` (device nodes, driver folders)."""
    return any(matching(pattern) for pattern in patterns)


def maybe_present(module: str, device_nodes: Iterable[str], library: str,
                  paths: Iterable[str] = ()) -> bool:
    """Whether the binding ``module`` must be imported to tell if the vendor is here.

    Yes when it is already imported (a test's stand-in included), when it is not
    installed (importing it fails at once, with the binding's own message), when a
    device node exists, or when the library could be loaded.
    """
    if module in sys.modules:
        return True
    import importlib.util
    try:
        if importlib.util.find_spec(module) is None:
            return True
    except (ImportError, ValueError):
        return True
    if not sys.platform.startswith("linux"):
        return True
    return any_node(device_nodes) or library_findable(library, paths)
