"""Usage parts for a window, read from the ledger.

The ledger counts whole intervals: those whose start lies in the window.
Quarter-hour roll-ups serve the quarters inside the window; raw intervals
serve its ragged edges and any quarter not rolled up yet. Holder parts (per user,
namespace, pod and job) come with a remainder per device: what no holder was given, so
that the holder parts of a device add up to its total.
"""

from __future__ import annotations

import os

from allsmi.accounting.ledger.store import Dim, Holder, Ledger, Totals
from allsmi.accounting.ledger.schema import HOLDER_SUMS, WAIT_COLUMNS
from allsmi.accounting.periods import Window
from allsmi.accounting.report import Part


def _part(dim: Dim, t: Totals, holder: Holder | None = None) -> Part:
    sec = lambda v: None if v is None else v / 1000.0  # noqa: E731
    who = holder or Holder()
    return Part(
        resource_group=dim.resource_group, labels=tuple(sorted(dim.label_map().items())),
        vendor=dim.vendor, model=dim.model, host=dim.host, device=f"{dim.host}/{dim.device_id}",
        observed_s=t.observed_ms / 1000.0, allocated_s=sec(t.allocated_ms), busy_s=sec(t.busy_ms),
        busy_observed_s=t.busy_observed_ms / 1000.0, energy_j=sec(t.energy_mj),
        mem_sum=None if t.mem_sum is None else float(t.mem_sum), mem_samples=t.mem_samples,
        mem_peak=None if t.mem_peak is None else float(t.mem_peak), user=who.user,
        namespace=who.namespace, pod=who.pod, job=who.job,
        billed_s=sec(t.billed_ms), idle_s=sec(t.idle_ms), idle_billed_s=sec(t.idle_billed_ms),
        idle_energy_j=sec(t.idle_energy_mj), used_billed_s=sec(t.used_billed_ms),
        allocation_method=t.allocation_method, usage_method=t.usage_method,
        attributed_s=None if holder is not None else sec(t.attributed_ms),
        active_s=sec(t.active_ms), active_allocated_s=sec(t.active_allocated_ms),
        activity_method=t.activity_method,
        waiting_s=None if all(getattr(t, c) is None for c in WAIT_COLUMNS)
        else tuple((getattr(t, c) or 0) / 1000.0 for c in WAIT_COLUMNS))


_SHARED = ("allocated_ms", "busy_ms", "energy_mj", "billed_ms", "idle_ms", "idle_billed_ms",
           "idle_energy_mj", "used_billed_ms", "active_ms", "active_allocated_ms") + WAIT_COLUMNS
_ALLSUM = frozenset(c for c, agg in HOLDER_SUMS if agg == "ALLSUM")
#: Parts of the allocated time that no cost is taken of on a row with none (billed time is
#: priced: its rest is what the device billed beyond its holders, kept so that rows add up to
#: the device's cost; idle time is held to the allocated time where it is priced).
_WITHIN_ALLOCATED = ("active_ms", "active_allocated_ms") + WAIT_COLUMNS


def _remainder(total: Totals, shares: list[Totals]) -> Totals:
    """What no holder was given: the device total minus the holders' shares (never negative)."""
    def left(whole: int | None, parts: list[int | None], allsum: bool = False) -> int | None:
        if whole is None or (allsum and None in parts):  # an unknown part: the rest is unknown
            return None
        return max(0, whole - sum(s or 0 for s in parts))
    rest = Totals(observed_ms=left(total.observed_ms, [s.observed_ms for s in shares]) or 0)
    for name in _SHARED:
        setattr(rest, name, left(getattr(total, name), [getattr(s, name) for s in shares],
                                 name in _ALLSUM))
    # Each share is rounded to the millisecond apart from its device's total, so each column
    # of the rest is a difference of rounded sums: its active time (or a waiting reason's)
    # could exceed its allocated time by some milliseconds (active hours on a row nobody held,
    # an efficiency above 1). Never more than it, as on any row.
    held = rest.allocated_ms
    if held is not None:
        for name in _WITHIN_ALLOCATED:
            value = getattr(rest, name)
            if value is not None and value > held:
                setattr(rest, name, held)
    return rest


def ledger_parts(path: str | os.PathLike[str], window: Window,
                 by_holder: bool = False) -> tuple[list[Part], list[Part] | None]:
    """Device parts, and (with ``by_holder``) holder parts (user, namespace, pod, job) including
    the unattributed remainders."""
    with Ledger(path, readonly=True) as ledger, ledger.snapshot():  # (one commit's ledger)
        start, end = window.start_unix, window.end_unix
        totals = ledger.totals(start, end)
        dims = ledger.dims()
        holders = ledger.holder_totals(start, end) if by_holder else {}
    device_parts = [_part(dims[d], t) for d, t in totals.items()]
    if not by_holder:
        return device_parts, None
    per_dim: dict[int, list[tuple[Holder, Totals]]] = {}
    for (d, holder), t in holders.items():
        per_dim.setdefault(d, []).append((holder, t))
    holder_parts: list[Part] = []
    for d, total in totals.items():
        shares = per_dim.get(d, [])
        holder_parts.extend(_part(dims[d], t, holder) for holder, t in shares)
        holder_parts.append(_part(dims[d], _remainder(total, [t for _, t in shares])))
    return device_parts, holder_parts


def ledger_conflicts(path: str | os.PathLike[str], window: Window, most: int = 5) -> list[str]:
    """A warning naming the device intervals in ``window`` that a pod and a job (no pod's)
    held at once (:meth:`~allsmi.accounting.ledger.read.LedgerReader.conflicts`), the first
    ``most`` of them with their claimants; empty when there are none."""
    import datetime as dt
    with Ledger(path, readonly=True) as ledger:
        found = ledger.conflicts(window.start_unix, window.end_unix)
        dims = ledger.dims() if found else {}
    if not found:
        return []

    def who(h: Holder) -> str:
        return f"pod {h.namespace or ''}/{h.pod}" if h.pod else f"job {h.job}"
    named = "; ".join(
        f"{dims[d].host}/{dims[d].device_id} from "
        f"{dt.datetime.fromtimestamp(at, dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ} "
        f"({', '.join(sorted({who(h) for h in held}))})" for d, at, held in found[:most])
    more = f"; and {len(found) - most} more" if len(found) > most else ""
    return [f"{len(found)} interval(s) of a device claimed by a pod and a job at once (two "
            f"attribution sources disagree), each billed a part: {named}{more}"]


#: What each table that :meth:`~allsmi.accounting.ledger.read.LedgerReader.unheld` names holds,
#: the setting that prunes it, and the coarser roll-up that still holds its time.
_UNHELD = {"quarters": ("quarter hours", "ledger.rollup_retention_days", "UTC day",
                        "whole UTC days (--tz UTC)"),
           "intervals": ("raw intervals", "ledger.retention_days", "quarter hour",
                         "whole quarter hours")}


def ledger_unheld(path: str | os.PathLike[str], window: Window, most: int = 3) -> list[str]:
    """A warning per resolution the ledger no longer holds for part of ``window`` (pruned, its
    time left only inside a coarser roll-up: the edge hours of a day in a ``--tz`` that is not
    UTC, once ``rollup_retention_days`` has pruned their quarter hours): that time is not
    billed, the rows are short of it and their coverage counts it as unobserved. Empty when
    the ledger holds the whole window."""
    with Ledger(path, readonly=True) as ledger, ledger.snapshot():
        found = ledger.unheld(window.start_unix, window.end_unix)
    out = []
    for table, (what, setting, unit, whole) in _UNHELD.items():
        spans = [(lo, hi, held) for t, lo, hi, held in found if t == table]
        if not spans:
            continue
        held = spans[0][2]
        since = f"only from {_utc(held)} on" if held is not None else "none any more"
        shown = ", ".join(f"{_utc(lo)} to {_utc(hi)}" for lo, hi, _ in spans[:most])
        more = f" and {len(spans) - most} more" if len(spans) > most else ""
        out.append(f"not billed: {shown}{more} of the window: the ledger holds {what} {since} "
                   f"({setting}), earlier time only inside a {unit}'s roll-up that this window "
                   "cuts; the rows are short of what was recorded there, if anything (their "
                   f"coverage_ratio counts it as unobserved); bill {whole} to read it")
    return out


def _utc(unix: int) -> str:
    import datetime as dt
    return f"{dt.datetime.fromtimestamp(unix, dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
