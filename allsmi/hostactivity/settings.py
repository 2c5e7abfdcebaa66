"""``[activity]``: the thresholds of the waiting classification (docs/activity.md).

Each key has a default, a range and a documented reason; a bad value raises ``ConfigError``
naming the file, the line and the key (exit 2). The computing threshold is the accounting's
idle threshold (``[accounting] idle_threshold_percent``): one threshold for both (billing
applies it to the headline utilization, the classification to the compute activity where
reported).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from allsmi.config import Config
from allsmi.schema.numbers import setting_number
from allsmi.usage import idle_threshold_percent

SECTION = "activity"


@dataclass(frozen=True)
class ActivitySettings:
    """The validated ``[activity]`` table."""

    enabled: bool = True
    """Read the host side and classify each holder every cycle (``false``: ``waiting`` is
    ``null`` everywhere and no host file is read)."""
    idle_threshold_percent: float = 5.0
    """Compute activity at or above this is ``computing`` (``[accounting]``)."""
    input_read_bytes_per_second: float = 1e6
    input_blocked_fraction: float = 0.5
    """Share of a holder's processes in I/O wait that makes it ``input``."""
    input_delay_fraction: float = 0.1
    """Share of the interval a process spent in block-I/O wait (delay accounting) that puts it
    in I/O wait, as a thread in uninterruptible sleep does: the share of the interval that a
    CPU-throttled cgroup loses before it is host-bound, and the share of a core under which a
    process is quiet. Less is too little to matter."""
    communication_bytes_per_second: float = 1e8
    host_cpu_fraction: float = 0.9
    host_throttled_fraction: float = 0.1
    quiet_cpu_fraction: float = 0.1
    cgroup_root: str = "auto"
    """Where the host's cgroup filesystem is read (other processes' CPU throttling): ``auto``
    (``/sys/fs/cgroup`` in the host's cgroup namespace; in one of allsmi's own, the
    Kubernetes kit's ``/host/sys/fs/cgroup`` where mounted) or an absolute path
    (:mod:`allsmi.hostactivity.cgrouptree`)."""


#: Per key: (minimum, maximum, minimum excluded).
RANGES: dict[str, tuple[float, float, bool]] = {
    "input_read_bytes_per_second": (0.0, 1e12, True),
    "input_blocked_fraction": (0.0, 1.0, True),
    "input_delay_fraction": (0.0, 1.0, True),
    "communication_bytes_per_second": (0.0, 1e13, True),
    "host_cpu_fraction": (0.0, 1.0, True),
    "host_throttled_fraction": (0.0, 1.0, True),
    "quiet_cpu_fraction": (0.0, 1.0, False),
}
KEYS = tuple(f.name for f in fields(ActivitySettings) if f.name != "idle_threshold_percent")


def activity_settings(config: Config) -> ActivitySettings:
    """``[activity]`` of ``config``, validated (raises ``ConfigError``)."""
    table: Any = config.section(SECTION)
    for key in table:
        if key not in KEYS:
            raise config.error(f"unknown key (allowed: {', '.join(KEYS)})", SECTION, key)
    values: dict[str, Any] = {"idle_threshold_percent": idle_threshold_percent(config)}
    if "enabled" in table:
        if not isinstance(table["enabled"], bool):
            raise config.error(f"must be true or false, got {table['enabled']!r}", SECTION,
                               "enabled")
        values["enabled"] = table["enabled"]
    if "cgroup_root" in table:
        root = table["cgroup_root"]
        if not isinstance(root, str) or not (root == "auto" or (
                os.path.isabs(root) and "\0" not in root and ".." not in root.split("/"))):
            raise config.error(f'must be "auto" or an absolute path without "..", got {root!r}',
                               SECTION, "cgroup_root")
        values["cgroup_root"] = os.path.normpath(root) if root != "auto" else root
    for key, (low, high, open_low) in RANGES.items():
        if key not in table:
            continue
        value = table[key]
        ok = setting_number(value) is not None \
            and (low < value if open_low else low <= value) and value <= high
        if not ok:
            raise config.error(f"must be a number {'above' if open_low else 'from'} {low:g} "
                               f"{'and at most' if open_low else 'to'} {high:g}, got {value!r}",
                               SECTION, key)
        values[key] = float(value)
    quiet = values.get("quiet_cpu_fraction", ActivitySettings.quiet_cpu_fraction)
    host = values.get("host_cpu_fraction", ActivitySettings.host_cpu_fraction)
    if quiet >= host:  # the key the file sets is to blame (both: the quiet one)
        if "quiet_cpu_fraction" in table:
            raise config.error(f"must be below host_cpu_fraction ({host:g})", SECTION,
                               "quiet_cpu_fraction")
        raise config.error(f"must be above quiet_cpu_fraction ({quiet:g}, its default)", SECTION,
                           "host_cpu_fraction")
    return ActivitySettings(**values)
