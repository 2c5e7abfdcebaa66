"""Honest activity and what each holder waited on, as the dashboard shows them.

``utilization_percent`` is the vendor's headline figure (on NVIDIA the share of time any
kernel ran); ``compute_active_percent`` the share of compute units busy, with its source
(docs/activity.md). The device table shows the second beside the first (``active``: ``20% sm``)
and, per device, the costliest thing its holders waited on (``waiting``: ``input +2``); the
details panel shows every figure and each holder's reason with its evidence.
"""

from __future__ import annotations

from typing import Any, Hashable

from rich.text import Text

from allsmi.schema.formatting import NA, SOURCE_SHORT, percent, waiting_summary, waiting_words
from allsmi.schema import DeviceSample, HolderWaiting

from allsmi.dashboard.state.model import DeviceRef


def active_key(ref: DeviceRef, ctx: Any) -> Hashable:
    dev = ref.device
    value = dev.compute_active_percent
    return None if value is None else (round(value), dev.compute_active_source)


def active_render(key: Any, ctx: Any) -> Text:
    """``20% sm``: the share of compute units busy, and what measured it; ``N/A`` where the
    hardware does not say (never the headline utilization in its place)."""
    if key is None:
        return Text(NA, style="dim")
    value, source = key
    return Text(f"{value:>3}% {SOURCE_SHORT.get(source or '', '?')}", style=ctx.palette.load(value))


def waiting_key(ref: DeviceRef, ctx: Any) -> Hashable:
    return waiting_summary(ref.device)


def waiting_render(key: Any, ctx: Any) -> Text:
    if key is None:
        return Text("-", style="dim")
    reason = key[0]
    style = ctx.palette.ok if reason == "computing" else "dim" if reason == "unknown" else ctx.palette.warn
    return Text(waiting_words(key), style=style)


def rate_text(value: float | None) -> str:
    """Bytes per second as ``1.2 GB/s`` (decimal units, as link speeds are given)."""
    if value is None:
        return NA
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B/s"


def holder_words(pod: str | None, job: str | None, user: str | None, namespace: str | None) -> str:
    """``pod vllm-0  job 4931  user alice``: what tells holders of one device apart first (they
    often share a namespace, named only when nothing else is known)."""
    parts = [f"{what} {value}" for what, value in (("pod", pod), ("job", job), ("user", user))
             if value]
    if namespace and not parts:
        parts.append(f"ns {namespace}")
    return "  ".join(parts) or "-"


def holder_of(wait: HolderWaiting) -> str:
    """Who a waiting classification is about (:func:`holder_words`)."""
    return holder_words(wait.pod, wait.job_id, wait.user, wait.namespace)


def activity_lines(dev: DeviceSample, accent: str) -> list[tuple[tuple[str, str], ...]]:
    """The details panel's activity lines: the activity figures with their source (nothing
    where the device reports none of them), then the link traffic."""
    out: list[tuple[tuple[str, str], ...]] = []
    figures = [(label, getattr(dev, name)) for label, name in (
        ("occupancy", "sm_occupancy_percent"), ("tensor", "tensor_active_percent"),
        ("bandwidth", "memory_bandwidth_percent"))]
    if dev.compute_active_percent is not None or any(v is not None for _, v in figures):
        line: tuple[tuple[str, str], ...] = (
            ("active ", "bold"), (percent(dev.compute_active_percent), ""),
            (f" ({dev.compute_active_source})" if dev.compute_active_source else "", "dim"))
        for label, value in figures:
            if value is not None:
                line += ((f"  {label} ", "bold"), (percent(value), ""))
        out.append(line)
    links = [(label, getattr(dev, f"{name}_rx_bytes_per_second"), getattr(dev, f"{name}_tx_bytes_per_second"))
             for label, name in (("interconnect", "interconnect"), ("pcie", "pcie"))]
    known = [(label, rx, tx) for label, rx, tx in links if rx is not None or tx is not None]
    if known:
        line = (("links ", "bold"),)
        for label, rx, tx in known:
            line += ((f"{label} ", ""), (f"rx {rate_text(rx)} tx {rate_text(tx)}  ", accent))
        out.append(line)
    return out


def waiting_lines(dev: DeviceSample, accent: str, warn: str) -> list[tuple[tuple[str, str], ...]]:
    """One line per holder: what it was doing over the last interval, the evidence that decided
    it (``input: 3 of 4 processes in I/O wait, 480 MB/s read``), and who it is; nothing when the
    device's holders are not classified."""
    out: list[tuple[tuple[str, str], ...]] = []
    for wait in dev.waiting or ():
        style = "" if wait.reason == "computing" else "dim" if wait.reason == "unknown" else warn
        said = wait.evidence if wait.evidence.startswith(wait.reason) else \
            f"{wait.reason}: {wait.evidence}" if wait.evidence else wait.reason
        out.append((("waiting ", "bold"), (said, f"bold {style}".strip()), ("  ", ""),
                    (holder_of(wait), accent)))
    return out
