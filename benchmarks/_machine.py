"""The machine a benchmark ran on, for the README's performance tables."""

from __future__ import annotations

import os
import platform


def describe() -> str:
    """``"2 cores, Intel(R) Xeon(R) ..., 23.5 GiB, Linux 6.x, Python 3.11.7"``."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            kib = int(handle.readline().split()[1])
            mem = f", {kib / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{os.cpu_count()} cores, {model}{mem}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")
