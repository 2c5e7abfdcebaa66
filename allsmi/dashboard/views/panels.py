"""The smaller widgets: summary bar, device details, processes (the totals tables:
:mod:`allsmi.dashboard.views.groups`)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.strip import Strip

from allsmi.schema.formatting import NA, celsius, memory_pair, na, percent, watts
from allsmi.fairshare import Holder, claim_units, split
from allsmi.schema import DeviceSample, ProcessSample, Workload

from allsmi.dashboard.views.activity import activity_lines, holder_words, waiting_lines
from allsmi.dashboard.tables.device_table import RowContext
from allsmi.dashboard.state.model import DeviceRef, memory_percent
from allsmi.dashboard.state.naming import device_name
from allsmi.dashboard.views.amounts import energy_text, labels_text
from allsmi.dashboard.tables.lines import TextLines
from allsmi.dashboard.tables.process_table import MAX_PROCESS_ROWS, ProcessTable, holder_id  # noqa: F401  (the panels)
from allsmi.dashboard.views.render import core_strip, safe, safe_text, spark


def age_text(age: float | None) -> str:
    """"0 s" / "12 s" / "3 min" / "never" (whole units: the line is redrawn at most once a second)."""
    if age is None:
        return "never"
    if age < 120:
        return f"{age:.0f} s"
    if age < 7200:
        return f"{age / 60:.0f} min"
    return f"{age / 3600:.0f} h"


class SummaryBar(TextLines):
    """Two lines at the top: the host (or fleet) and the state of the view."""

    DEFAULT_CSS = """
    SummaryBar { height: 2; padding: 0 1; }
    """


class DetailPanel(TextLines, can_focus=True):
    """Everything about the selected device, with its history as sparklines (line-based: a
    refresh repaints the sparkline lines, not the device's name, ids and clocks). Longer than
    its height, it scrolls: the mouse wheel, or the keys once ``Tab`` gave it the focus."""

    # As tall as the panel whatever the device: a new text needs no layout pass.
    DEFAULT_CSS = """
    DetailPanel { height: 1fr; &:focus { background-tint: $foreground 5%; } }
    """

    BINDINGS = [Binding("up", "scroll_by(-1)", "Up", show=False),
                Binding("down", "scroll_by(1)", "Down", show=False),
                Binding("pageup", "page(-1)", "Page up", show=False),
                Binding("pagedown", "page(1)", "Page down", show=False),
                Binding("home,ctrl+home", "scroll_by(-1000000)", "Top", show=False),
                Binding("end,ctrl+end", "scroll_by(1000000)", "Bottom", show=False)]

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

    def action_scroll_by(self, lines: int) -> None:
        """Scroll ``lines`` lines (negative: up), within the panel's text."""
        self._scroll(lines)

    def action_page(self, pages: int) -> None:
        """Scroll ``pages`` heights of the panel (negative: up), one line kept in view."""
        self._scroll(pages * max(1, self.size.height - 1))

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
            # A value longer than its 18 cells (``150.0 GiB/192.0 GiB``) takes them from the
            # sparkline's oldest end: the sparklines still end in one column, none is cut.
            width = max(0, spark_width - max(0, len(value) - 18))
            return line((f"{label:<6}", "bold"), (f"{value:<18} ", style),
                        (spark(hist.series(key, series), width, low, high), pal.accent))

        lines = [line((device_name(ref, ctx.places), "bold"), (f"  {dev.name or NA}  ", ""),
                      (health, pal.health(health)), (f"  group {dev.resource_group or NA}", ""))]
        if len(ctx.host_names) > 1:
            lines[0].append(f"  on {ctx.host_names.get(ref.host, ref.host)}", style=pal.accent)
        util = dev.utilization_percent
        idle = ctx.idle(ref)  # held while below the idle threshold: the table's "idle" marker
        lines.append(metric("util", percent(util) + ("  idle (held)" if idle else ""),
                            f"bold {pal.warn}" if idle else pal.load(util), "utilization"))
        lines.extend(line(*parts) for parts in activity_lines(dev, pal.accent))
        share = memory_percent(dev)
        lines.append(metric("mem", memory_pair(dev.memory_used_bytes, dev.memory_total_bytes),
                            pal.load(share), "memory"))
        limit = dev.power_limit_watts
        top = limit or max((v for v in hist.series(key, "power") if v is not None), default=0.0) or 1.0
        lines.append(metric("power", f"{watts(dev.power_watts)} / {watts(limit)}", "", "power", 0.0, top))
        temp = dev.temperature_celsius
        lines.append(metric("temp", celsius(temp), pal.temperature(temp) or "", "temperature", 20.0, 100.0))
        lines.extend(line(*parts) for parts in share_lines(dev, pal.accent)
                     or workload_lines(dev, pal.accent))
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
    (``workloads`` is ``None``), ``held by  none`` when sources see no holder, else one
    ``held by`` line per workload. A device shared by several holders is described by
    :func:`share_lines` instead (every holder, its share); several workloads of one holder (two
    containers of a pod sharing a claim) are not shared, and are listed here."""
    works = dev.workloads
    if works is None:
        return []
    if not works:
        return [(("held by ", "bold"), ("no pod or job", "dim"))]
    return [(("held by ", "bold"), (workload_text(work), accent)) for work in works]


def holder_name(holder: Holder) -> str:
    """Who ``holder`` is, in the words the waiting lines use (:func:`holder_words`)."""
    return holder_words(holder.pod, holder.job, holder.user, holder.namespace)


def holders_text(count: int) -> str:
    """``1 holder``, ``3 holders``."""
    return f"{count} holder{'' if count == 1 else 's'}"


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
    # Claims whose holders are nobody in particular (processes of no known user or job) are
    # not attributed (allsmi.fairshare): their part is the unclaimed rest.
    nobody = sum(1 for unit in units if not any(any(holder) for holder, _ in unit.members))
    out: list[tuple[tuple[str, str], ...]] = [(
        ("shared by ", "bold"), (holders_text(len(shares.allocated) + nobody), ""),
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
                    ("unclaimed", "bold"),
                    (f"  ({nobody} of no known user, pod or job)" if nobody
                     else "  (declared shares leave it to nobody)", "dim")))
    return out
