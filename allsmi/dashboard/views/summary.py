"""The two summary lines at the top of the dashboard (pure: built from the app's state)."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text

from allsmi.schema.formatting import NA, human_bytes, percent

from allsmi.dashboard.state.filtering import Filter
from allsmi.dashboard.state.model import DeviceRef, duplicate_ids
from allsmi.dashboard.state.naming import host_labels
from allsmi.dashboard.state.totals import Totals
from allsmi.dashboard.views.amounts import power_totals
from allsmi.dashboard.views.panels import age_text
from allsmi.dashboard.views.render import Palette, safe
from allsmi.dashboard.sources import HostState


#: How the data line gives way on a narrow terminal, step by step: the pieces of a rank left out
#: (host CPU and RAM, then power, utilization, the device count) and, once CPU and RAM are out,
#: the short forms (``38+3p devices``). Rank 0 (host, age) and 1 (what is failing) stay.
SHRINK_STEPS: tuple[int | None, ...] = (5, None, 4, 3, 2)


def fitted(pieces: Sequence[tuple[int, Text]], width: int | None,
           short: dict[int, Text] | None = None) -> Text:
    """The pieces in their order within ``width`` cells, following :data:`SHRINK_STEPS` (``short``:
    the short form of the piece at that position) until they fit; what is still too wide is cut
    with an ellipsis when drawn."""
    kept = list(enumerate(pieces))
    for step in SHRINK_STEPS if width is not None else ():
        if sum(t.cell_len for _, (_, t) in kept) <= width:  # type: ignore[operator]
            break
        if step is None:
            kept = [(i, (r, (short or {}).get(i, t))) for i, (r, t) in kept]
        else:
            kept = [(i, (r, t)) for i, (r, t) in kept if r != step]
    line = Text()
    for _, (_, text) in kept:
        line.append_text(text)
    return line


def summary_lines(*, hosts: Sequence[HostState], cluster: bool, total: Totals, palette: Palette,
                  now: float, interval: float, view: str, sort_key: str, descending: bool,
                  flt: Filter, shown: Sequence[DeviceRef], process_scope: str, paused: bool,
                  refresh_error: str | None, note: str | None = None,
                  hidden: Sequence[str] = (), count: str | None = None,
                  width: int | None = None) -> tuple[Text, Text]:
    """(the data line, the view-state line); every piece of data passes :func:`safe`.
    ``count``: what a filter leaves shown where it is not devices (``3 holders``); ``width``:
    the cells the lines have (the data line leaves out whole pieces to fit, see :func:`fitted`)."""
    pal = palette
    # The first line is built of pieces, each whole or left out: on a narrow terminal the least
    # needed go first (host CPU and RAM, then power, utilization, the device count), so that a
    # failing backend is said at 80 columns and no number is cut in the middle ("(27 o…").
    pieces: list[tuple[int, Text]] = []  # (the order it is dropped in: higher first, the piece)

    def add(rank: int, *parts: tuple[str, str]) -> None:
        pieces.append((rank, Text.assemble(*parts)))

    if cluster:
        # A host is up when it answers: with its devices, or (above the device budget of a
        # Prometheus fleet) with its totals only.
        up = sum(1 for h in hosts if h.error is None and (h.snapshot is not None or h.summary is not None))
        add(0, ("allsmi cluster", "bold"))
        add(0, (f"  hosts {up}/{len(hosts)} up", pal.hot if up < len(hosts) else ""))
        ages = [a for a in (h.age(now) for h in hosts) if a is not None]
        age = max(ages) if ages else None
    else:
        host = hosts[0] if hosts else None
        add(0, (safe(host.name) if host else "allsmi", "bold"))
        age = host.age(now) if host else None
    stale = age is None or age > 3 * interval
    add(0, ("  age ", ""), (age_text(age) if age is not None else "waiting", pal.warn if stale else pal.ok))
    noun = "device" if total.devices == 1 else "devices"
    devices = Text(f"  {total.devices} {noun}")
    if total.partitions:  # partitions are rows of the table too; counted apart, never as devices
        devices.append(f" + {total.partitions} partition" + ("s" if total.partitions != 1 else ""))
    if total.lost:
        devices.append(f" ({total.lost} lost)", style=pal.hot)
    short = {len(pieces): Text(f"  {total.devices}" + (f"+{total.partitions}p" if total.partitions else "")
                               + (" devices" if total.partitions else f" {noun}"))}  # "38+3p devices"
    if total.lost:
        short[len(pieces)].append(f" ({total.lost} lost)", style=pal.hot)
    # A host never heard from (no snapshot, no totals yet: down since the start, or waiting) has
    # devices nobody counted: unknown, never 0, and a fleet's count leaves it out, so it says so.
    unheard = sum(1 for h in hosts if h.snapshot is None and h.summary is None)
    if unheard and unheard == len(hosts):
        devices = short[len(pieces)] = Text(f"  devices {NA}")
    elif unheard:
        devices.append(f" (+{NA} on {unheard} host{'s' if unheard != 1 else ''})", style=pal.warn)
        short[len(pieces)].append(f" +{NA}", style=pal.warn)
    pieces.append((2, devices))
    add(3, (f"  util {percent(total.utilization_percent)}", ""))
    add(4, (f"  power {power_totals(total)}", ""))
    if not cluster and hosts and hosts[0].snapshot is not None:
        snap = hosts[0].snapshot
        used, whole = snap.host.memory_used_bytes, snap.host.memory_total_bytes
        ram = NA if used is None and whole is None else f"{human_bytes(used)}/{human_bytes(whole)}"
        add(5, (f"  CPU {percent(snap.host.cpu_utilization_percent)}  RAM {ram}", ""))
    # A failing or hung vendor must not just vanish from the screen. An absent one
    # ("unavailable") is normal on a node without that vendor and is not shown.
    # Attribution sources (who holds each device) fail the same way, and say so the same way.
    # In a cluster, on which node (the first two; the hosts table has every one).
    labels: dict[str, str] = {}  # (made once a fault is found: a shared hostname with its address)
    for label, kind in (("backends", "backends"), ("attribution", "attribution")):
        faults: dict[str, list[str]] = {}
        for h in hosts:
            if h.snapshot is None:
                continue
            for status in getattr(h.snapshot, kind):
                if status.status in ("error", "timeout"):
                    labels = labels or host_labels((x.key, x.name) for x in hosts)
                    faults.setdefault(f"{status.name} {status.status}", []).append(labels[h.key])
        if faults:
            said = [fault + (f" on {', '.join(names[:2])}" + (f" +{len(names) - 2}" if len(names) > 2 else "")
                             if cluster else "") for fault, names in sorted(faults.items())]
            add(1, (f"  {label}: " + safe(", ".join(said)), f"bold {pal.hot}"))
    twice = sum(1 for h in hosts if h.shared)
    if twice:
        add(1, (f"  same devices from {twice} instances: counted twice", f"bold {pal.warn}"))
    dups = sorted({i for h in hosts for i in duplicate_ids(h.snapshot)})
    if dups:
        add(1, (f"  duplicate device id: {safe(dups[0])}" + (f" (+{len(dups) - 1})" if len(dups) > 1 else ""),
                f"bold {pal.warn}"))
    line = fitted(pieces, width, short)
    state = Text()
    arrow = "▼" if descending else "▲"
    state.append(view, style=f"bold {pal.accent}")
    state.append(f"  sort {sort_key} {arrow}")
    state.append("  filter ")
    state.append(safe(flt.describe()) or "none", style=pal.warn if flt.active else "dim")
    if flt.active:
        state.append(f" ({count or len([r for r in shown if r.device.parent is None])} shown)")
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
