"""The smaller widgets: summary bar, device details, processes, totals tables."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.strip import Strip

from allsmi.formatting import NA, celsius, human_bytes, na, percent, watts
from allsmi.fairshare import Holder, claim_units, split
from allsmi.schema import DeviceSample, ProcessSample, Workload

from allsmi.dashboard.views.activity import activity_lines, holder_words, waiting_lines
from allsmi.dashboard.tables.device_table import RowContext, describe_device
from allsmi.dashboard.state.model import DeviceRef, memory_percent
from allsmi.dashboard.state.totals import Totals
from allsmi.dashboard.tables.lines import TextLines
from allsmi.dashboard.tables.process_table import MAX_PROCESS_ROWS, ProcessTable, holder_id  # noqa: F401  (the panels)
from allsmi.dashboard.views.render import Palette, core_strip, safe, safe_text, spark


def energy_text(joules: float | None) -> str:
    """Energy in the unit people read bills in: J, Wh or kWh."""
    if joules is None:
        return NA
    if joules < 3600.0:
        return f"{joules:.0f} J"
    if joules < 3.6e6:
        return f"{joules / 3600.0:.1f} Wh"
    return f"{joules / 3.6e6:.2f} kWh"


#: Energy units: name and joules in one.
ENERGY_UNITS = (("J", 1.0), ("Wh", 3600.0), ("kWh", 3.6e6))


def energy_unit(largest: float | None) -> tuple[str, float]:
    """The unit :func:`energy_text` would choose for ``largest``: one column, one unit."""
    joules = largest or 0.0
    return ENERGY_UNITS[0] if joules < 3600.0 else ENERGY_UNITS[1] if joules < 3.6e6 else ENERGY_UNITS[2]


def energy_in(joules: float | None, unit: tuple[str, float]) -> str:
    """``joules`` in ``unit`` (:func:`energy_unit` of the column's largest value)."""
    if joules is None:
        return NA
    name, scale = unit
    value = joules / scale
    return f"{value:.0f} {name}" if name == "J" else f"{value:.2f} {name}" if name == "kWh" \
        else f"{value:.1f} {name}"


def age_text(age: float | None) -> str:
    """"0 s" / "12 s" / "3 min" / "never" (whole units: the line is redrawn at most once a second)."""
    if age is None:
        return "never"
    if age < 120:
        return f"{age:.0f} s"
    if age < 7200:
        return f"{age / 60:.0f} min"
    return f"{age / 3600:.0f} h"


def labels_text(labels: dict[str, str] | Any) -> str:
    """``team=ml project=llm`` (sorted), or empty."""
    return " ".join(f"{k}={v}" for k, v in sorted(dict(labels).items()))


class SummaryBar(TextLines):
    """Two lines at the top: the host (or fleet) and the state of the view."""

    DEFAULT_CSS = """
    SummaryBar { height: 2; padding: 0 1; }
    """


class DetailPanel(TextLines):
    """Everything about the selected device, with its history as sparklines (line-based: a
    refresh repaints the sparkline lines, not the device's name, ids and clocks)."""

    # As tall as the panel whatever the device: a new text needs no layout pass.
    DEFAULT_CSS = """
    DetailPanel { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.top = 0
        """The first line shown: the mouse wheel scrolls a panel longer than its height."""

    def render_line(self, y: int) -> Strip:
        return super().render_line(y + self.top)

    def _scroll(self, lines: int) -> None:
        top = max(0, min(self.top + lines, len(self._lines) - self.size.height))
        if top != self.top:
            self.top = top
            self.refresh()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._scroll(2)
        event.stop()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._scroll(-2)
        event.stop()

    def set_lines(self, lines: Any) -> None:
        if self.top and len(lines) != len(self._lines):  # another device: from its first line
            self.top = 0
            super().set_lines(lines)
            self.refresh()
            return
        super().set_lines(lines)
        if self.top:
            self.refresh()

    def show(self, ref: DeviceRef | None, ctx: RowContext, energy: float | None) -> None:
        """Draw ``ref`` (or a hint when nothing is selected)."""
        if ref is None:
            self.set_lines([Text("No device selected.", style="dim")])
            return
        self.set_lines(self.render_device(ref, ctx, energy, max(20, self.size.width - 2)))

    @staticmethod
    def render_device(ref: DeviceRef, ctx: RowContext, energy: float | None, width: int) -> list[Text]:
        """The panel's lines for ``ref`` at ``width`` cells: most important lines first."""
        dev = ref.device
        pal = ctx.palette
        health = ctx.health(ref)
        hist = ctx.history
        key = ref.key
        spark_width = max(0, width - 25)

        def line(*parts: tuple[str, str]) -> Text:
            text = Text(no_wrap=True, overflow="ellipsis")
            for chunk, style in parts:
                text.append(safe(chunk), style=style)
            return text

        def metric(label: str, value: str, style: str, series: str, low: float = 0.0,
                   high: float = 100.0) -> Text:
            return line((f"{label:<6}", "bold"), (f"{value:<18} ", style),
                        (spark(hist.series(key, series), spark_width, low, high), pal.accent))

        lines = [line((describe_device(dev), "bold"), (f"  {dev.name or NA}  ", ""),
                      (health, pal.health(health)), (f"  group {dev.resource_group or NA}", ""))]
        if len(ctx.host_names) > 1:
            lines[0].append(f"  on {ctx.host_names.get(ref.host, ref.host)}", style=pal.accent)
        util = dev.utilization_percent
        idle = ctx.idle(ref)  # held while below the idle threshold: the table's "idle" marker
        lines.append(metric("util", percent(util) + ("  idle (held)" if idle else ""),
                            f"bold {pal.warn}" if idle else pal.load(util), "utilization"))
        lines.extend(line(*parts) for parts in activity_lines(dev, pal.accent))
        share = memory_percent(dev)
        lines.append(metric("mem", f"{human_bytes(dev.memory_used_bytes)}/{human_bytes(dev.memory_total_bytes)}",
                            pal.load(share), "memory"))
        limit = dev.power_limit_watts
        top = limit or max((v for v in hist.series(key, "power") if v is not None), default=0.0) or 1.0
        lines.append(metric("power", f"{watts(dev.power_watts)} / {watts(limit)}", "", "power", 0.0, top))
        temp = dev.temperature_celsius
        lines.append(metric("temp", celsius(temp), pal.temperature(temp) or "", "temperature", 20.0, 100.0))
        lines.extend(line(*parts) for parts in workload_lines(dev, pal.accent))
        lines.extend(line(*parts) for parts in share_lines(dev, pal.accent))
        lines.extend(line(*parts) for parts in waiting_lines(dev, pal.accent, pal.warn))
        cores = dev.details.get("core_utilization_percent")
        if isinstance(cores, tuple) and cores and all(isinstance(c, (int, float)) for c in cores):
            values = [float(c) for c in cores]
            strip = core_strip(values, min(len(values), 24), pal)
            lines.append(Text.assemble(("cores ", "bold"), strip,
                                       ("  " + " ".join(f"{v:.0f}" for v in values), ""),
                                       no_wrap=True, overflow="ellipsis"))
        lines.append(line(("clock ", "bold"), (na(dev.clock_mhz, "{:.0f}", " MHz"), ""),
                          ("  fan ", "bold"), (percent(dev.fan_percent), ""),
                          ("  energy ", "bold"), (f"{energy_text(energy)} since start", "")))
        if dev.labels:
            lines.append(line(("labels ", "bold"), (labels_text(dev.labels), pal.accent)))
        lines.append(line(("id ", "bold"), (dev.id, "dim")))
        extra = [f"bus {dev.bus_id}"] if dev.bus_id else []
        extra.append(f"driver {dev.driver_version or NA}")
        if dev.firmware_version:
            extra.append(f"fw {dev.firmware_version}")
        lines.append(line(("  ".join(extra), "dim")))
        return [safe_text(text) for text in lines]


def workload_text(work: Workload) -> str:
    """``pod inference/vllm-0/main  job 4931  user alice  (kubernetes)``: what is known."""
    parts = []
    if work.namespace or work.pod or work.container:
        parts.append("pod " + "/".join(v for v in (work.namespace, work.pod, work.container) if v))
    if work.job_id:
        parts.append(f"job {work.job_id}")
    if work.user:
        parts.append(f"user {work.user}")
    return "  ".join(parts or ["(nothing known)"]) + f"  ({work.source})"


def workload_lines(dev: DeviceSample, accent: str) -> list[tuple[tuple[str, str], ...]]:
    """The detail panel's workload lines: nothing when no attribution source is active
    (``workloads`` is ``None``), ``held by  none`` when sources see no holder. A device shared
    by several holders is described by :func:`share_lines` instead (every holder, its share)."""
    works = dev.workloads
    if works is None:
        return []
    if not works:
        return [(("held by ", "bold"), ("no pod or job", "dim"))]
    if len(works) > 1:
        return []
    return [(("held by ", "bold"), (workload_text(works[0]), accent))]


def holder_name(holder: Holder) -> str:
    """Who ``holder`` is, in the words the waiting lines use (:func:`holder_words`)."""
    return holder_words(holder.pod, holder.job, holder.user, holder.namespace)


def _share(weight: float) -> str:
    """A share as a percentage with a decimal where it has one: ``12.5%``, ``25%``."""
    return f"{weight * 100:.1f}".rstrip("0").rstrip(".") + "%"


def share_lines(dev: DeviceSample, accent: str) -> list[tuple[tuple[str, str], ...]]:
    """Who pays for a shared device: one line per holder with its allocated share, its used
    share and the methods (as the exporter and the ledger split them: :mod:`allsmi.fairshare`),
    and its processes' ``util``; then the share no holder claimed. Nothing for a device with
    one holder or none (the ``held by`` line says who)."""
    units = claim_units(dev)
    if len(units) < 2 and not (units and len(units[0].members) > 1):
        return []
    shares = split(dev)
    rest = 1.0 - sum(w for _, w in shares.allocated)
    if len(shares.allocated) < 2 and rest <= 1e-9:  # one holder (several processes of it)
        return []
    used = dict(shares.used)
    procs_of: dict[Holder, list[ProcessSample]] = {}
    for unit in units:
        for holder, mine in unit.members:
            procs_of.setdefault(holder, []).extend(mine)
    out: list[tuple[tuple[str, str], ...]] = [(
        ("shared by ", "bold"), (f"{len(shares.allocated)} holders", ""),
        (f"  allocated by {shares.allocation_method}, used by {shares.usage_method}", "dim"))]
    for holder, given in shares.allocated:
        procs = procs_of.get(holder, [])
        utils = "  ".join(f"{p.pid} {percent(p.utilization_percent)}" for p in procs)
        out.append((("  alloc ", ""), (f"{_share(given):>6}", "bold"), ("  used ", ""),
                    (f"{_share(used.get(holder, 0.0)):>6}  ", "bold"), (holder_name(holder), accent),
                    (f"  util {utils}" if utils else "", "dim"),
                    (f"  ns {holder.namespace}" if holder.namespace and holder.pod else "", "dim")))
    if rest > 1e-9:
        out.append((("  alloc ", ""), (f"{_share(rest):>6}", "bold"), ("  used      -  ", ""),
                    ("unclaimed", "bold"), ("  (declared shares leave it to nobody)", "dim")))
    return out


TOTALS_COLUMNS = (("name", "name", 12), ("devices", "devices", 8), ("util", "util", 5),
                  ("memory", "memory", None), ("power", "power / limit", None),
                  ("energy", "energy", None), ("procs", "procs", 5), ("hosts", "hosts", 5),
                  ("labels", "labels", None))
"""Columns of the group and vendor totals (vendors leave out ``labels``). A number is never
cut: the memory (``1023.9 MiB/1023.9 GiB (2 of 3)``), the power (``(2 of 5)``) and the energy
(``1234.56 kWh`` after a long day) are as wide as their longest."""


def totals_cells(totals: Totals, palette: Palette, with_labels: bool = True,
                 unit: tuple[str, float] | None = None) -> tuple[Any, ...]:
    """One totals row (group or vendor), in :data:`TOTALS_COLUMNS` order; ``unit`` the energy
    column's unit (:func:`energy_unit` of the table's largest), so a column never mixes J and Wh."""
    util = totals.utilization_percent
    devices = str(totals.devices)
    if totals.partitions:
        devices += f"+{totals.partitions}p"
    if totals.lost:
        devices += f" {totals.lost}!"
    memory = memory_totals(totals)
    power = power_totals(totals)
    cells: tuple[Any, ...] = (
        Text(totals.name, style="bold"),
        Text(devices, justify="right", style=palette.hot if totals.lost else ""),
        Text(percent(util), justify="right", style=palette.load(util)),
        Text(memory, style=palette.load(totals.memory_percent)),
        power, Text(energy_text(totals.energy_joules) if unit is None
                    else energy_in(totals.energy_joules, unit), justify="right"),
        Text(str(totals.processes), justify="right"),
        Text(str(len(totals.hosts)), justify="right"))
    return cells + (labels_text(totals.labels),) if with_labels else cells


#: The columns of :data:`TOTALS_COLUMNS` as wide as their longest cell (power, energy).
AUTO_TOTALS = tuple(i for i, (_, _, width) in enumerate(TOTALS_COLUMNS) if width is None and i < 8)


def same_widths(*tables: list[tuple[str, tuple[Any, ...]]]) -> list[list[tuple[str, tuple[Any, ...]]]]:
    """The rows of the groups and vendors tables with their auto-width cells (power, energy)
    padded to the longest of both, so that the two tables' columns line up."""
    width = {i: max((Text(c[i]).cell_len if isinstance(c[i], str) else c[i].cell_len
                     for rows in tables for _, c in rows), default=0) for i in AUTO_TOTALS}

    def padded(cell: Any, i: int) -> Any:
        if i not in width:
            return cell
        text = Text(cell) if isinstance(cell, str) else cell.copy()
        room = width[i] - text.cell_len
        if room > 0:
            text.pad_left(room) if text.justify == "right" else text.pad_right(room)
        return text

    return [[(key, tuple(padded(c, i) for i, c in enumerate(cells))) for key, cells in rows]
            for rows in tables]


def memory_totals(totals: Totals) -> str:
    """A set's memory in use against its total, like with like: of the devices that report
    both; where others report only one of them (or a value was thrown away), ``(2 of 3)`` says
    how many devices the pair covers (the width of :data:`TOTALS_COLUMNS`' memory column)."""
    pair = memory_pair(totals.memory_used_bytes, totals.memory_total_bytes)
    if totals.memory_count < totals.memory_reported:
        return f"{pair} ({totals.memory_count} of {totals.memory_reported})"
    return pair


def memory_pair(used: int | None, total: int | None) -> str:
    """"45.1 GiB/79.6 GiB", or "N/A" when neither is known."""
    if used is None and total is None:
        return NA
    return f"{human_bytes(used)}/{human_bytes(total)}"


def power_totals(totals: Totals) -> str:
    """A set's power against its limits, like with like: the power and limits of the devices
    that report both; where some devices report power but no limit, ``(2 of 5)`` says how many
    devices the pair covers (the power of all of them: :attr:`Totals.power_watts`)."""
    if totals.power_limited_count == 0 or totals.power_limited_count == totals.power_count:
        return power_pair(totals.power_watts, totals.power_limit_watts)
    return (f"{power_pair(totals.power_limited_watts, totals.power_limit_watts)} "
            f"({totals.power_limited_count} of {totals.power_count})")


def power_pair(power: float | None, limit: float | None) -> str:
    """"9.9/20.2 kW" or "312/700 W": one unit for both, chosen by the larger."""
    if power is None and limit is None:
        return NA
    largest = max((v for v in (power, limit) if v is not None), default=0.0)
    if largest >= 10000:
        return f"{na(None if power is None else power / 1000, '{:.1f}')}/" \
               f"{na(None if limit is None else limit / 1000, '{:.1f}')} kW"
    return f"{na(power, '{:.0f}')}/{na(limit, '{:.0f}')} W"
