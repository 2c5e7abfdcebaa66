"""The two summary lines at the top of the dashboard (pure: built from the app's state)."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text

from allsmi.formatting import human_bytes, percent

from allsmi.dashboard.state.model import DeviceRef, Filter, duplicate_ids
from allsmi.dashboard.state.totals import Totals
from allsmi.dashboard.views.panels import age_text, power_totals
from allsmi.dashboard.views.render import Palette, safe
from allsmi.dashboard.sources import HostState


def summary_lines(*, hosts: Sequence[HostState], cluster: bool, total: Totals, palette: Palette,
                  now: float, interval: float, view: str, sort_key: str, descending: bool,
                  flt: Filter, shown: Sequence[DeviceRef], process_scope: str, paused: bool,
                  refresh_error: str | None, note: str | None = None,
                  hidden: Sequence[str] = ()) -> tuple[Text, Text]:
    """(the data line, the view-state line); every piece of data passes :func:`safe`."""
    pal = palette
    line = Text()
    if cluster:
        # A host is up when it answers: with its devices, or (above the device budget of a
        # Prometheus fleet) with its totals only.
        up = sum(1 for h in hosts if h.error is None and (h.snapshot is not None or h.summary is not None))
        line.append("allsmi cluster", style="bold")
        line.append(f"  hosts {up}/{len(hosts)} up", style=pal.hot if up < len(hosts) else "")
        ages = [a for a in (h.age(now) for h in hosts) if a is not None]
        age = max(ages) if ages else None
    else:
        host = hosts[0] if hosts else None
        line.append(safe(host.name) if host else "allsmi", style="bold")
        age = host.age(now) if host else None
    stale = age is None or age > 3 * interval
    line.append("  age ")
    line.append(age_text(age) if age is not None else "waiting", style=pal.warn if stale else pal.ok)
    line.append(f"  {total.devices} devices")
    if total.partitions:  # partitions are rows of the table too; counted apart, never as devices
        line.append(f" + {total.partitions} partition" + ("s" if total.partitions != 1 else ""))
    if total.lost:
        line.append(f" ({total.lost} lost)", style=pal.hot)
    line.append(f"  util {percent(total.utilization_percent)}"
                f"  power {power_totals(total)}")
    if not cluster and hosts and hosts[0].snapshot is not None:
        snap = hosts[0].snapshot
        line.append(f"  CPU {percent(snap.host.cpu_utilization_percent)}"
                    f"  RAM {human_bytes(snap.host.memory_used_bytes)}"
                    f"/{human_bytes(snap.host.memory_total_bytes)}")
    # A failing or hung vendor must not just vanish from the screen. An absent one
    # ("unavailable") is normal on a node without that vendor and is not shown.
    faults = sorted({f"{b.name} {b.status}" for h in hosts if h.snapshot is not None
                     for b in h.snapshot.backends if b.status in ("error", "timeout")})
    if faults:
        line.append("  backends: " + safe(", ".join(faults)), style=f"bold {pal.hot}")
    # Attribution sources (who holds each device) fail the same way, and say so the same way.
    held = sorted({f"{a.name} {a.status}" for h in hosts if h.snapshot is not None
                   for a in h.snapshot.attribution if a.status in ("error", "timeout")})
    if held:
        line.append("  attribution: " + safe(", ".join(held)), style=f"bold {pal.hot}")
    twice = sum(1 for h in hosts if h.shared)
    if twice:
        line.append(f"  same devices from {twice} instances: counted twice", style=f"bold {pal.warn}")
    dups = sorted({i for h in hosts for i in duplicate_ids(h.snapshot)})
    if dups:
        line.append(f"  duplicate device id: {safe(dups[0])}" + (f" (+{len(dups) - 1})" if len(dups) > 1 else ""),
                    style=f"bold {pal.warn}")
    state = Text()
    arrow = "▼" if descending else "▲"
    state.append(view, style=f"bold {pal.accent}")
    state.append(f"  sort {sort_key} {arrow}")
    state.append("  filter ")
    state.append(safe(flt.describe()) or "none", style=pal.warn if flt.active else "dim")
    if flt.active:
        state.append(f" ({len([r for r in shown if r.device.parent is None])} shown)")
    state.append(f"  procs {process_scope}")
    if paused:
        state.append("  PAUSED", style=f"bold {pal.warn}")
    if refresh_error:
        state.append(f"  {safe(refresh_error)}", style=pal.hot)
    if note:  # what the source left out (an answer too large)
        state.append(f"  {safe(note)}", style=f"bold {pal.warn}")
    # The footer names the keys too: on a narrow screen the hidden columns need the room more.
    if hidden:  # the device table leaves columns out at this width: say which
        state.append(f"  hidden: {', '.join(hidden)}", style=pal.warn)
    state.append("  q quit" if hidden else "  ? help  q quit", style="dim")
    line.no_wrap = state.no_wrap = True
    line.overflow = state.overflow = "ellipsis"
    return line, state
