"""Usage parts for a window, read from the ledger.

The ledger counts whole intervals: those whose start lies in the window.
Quarter-hour roll-ups serve the quarters inside the window; raw intervals
serve its ragged edges and any quarter not rolled up yet.
"""

from __future__ import annotations

import os

from allsmi.accounting.ledger import Dim, Ledger, Totals
from allsmi.accounting.periods import Window
from allsmi.accounting.report import Part


def _part(dim: Dim, t: Totals, user: str | None = None) -> Part:
    return Part(
        resource_group=dim.resource_group, labels=tuple(sorted(dim.label_map().items())),
        vendor=dim.vendor, model=dim.model, host=dim.host, device=f"{dim.host}/{dim.device_id}",
        observed_s=t.observed_ms / 1000.0,
        allocated_s=None if t.allocated_ms is None else t.allocated_ms / 1000.0,
        busy_s=None if t.busy_ms is None else t.busy_ms / 1000.0,
        busy_observed_s=t.busy_observed_ms / 1000.0,
        energy_j=None if t.energy_mj is None else t.energy_mj / 1000.0,
        mem_sum=None if t.mem_sum is None else float(t.mem_sum), mem_samples=t.mem_samples,
        mem_peak=None if t.mem_peak is None else float(t.mem_peak), user=user,
        billed_s=None if t.billed_ms is None else t.billed_ms / 1000.0)


def _remainder(total: Totals, users: list[Totals]) -> Totals:
    """What no user was given: the device total minus the users' shares (never negative)."""
    def left(whole: int | None, shares: list[int | None]) -> int | None:
        if whole is None:
            return None
        return max(0, whole - sum(s or 0 for s in shares))
    return Totals(observed_ms=left(total.observed_ms, [u.observed_ms for u in users]) or 0,
                  allocated_ms=left(total.allocated_ms, [u.allocated_ms for u in users]),
                  busy_ms=left(total.busy_ms, [u.busy_ms for u in users]),
                  energy_mj=left(total.energy_mj, [u.energy_mj for u in users]),
                  billed_ms=left(total.billed_ms, [u.billed_ms for u in users]))


def ledger_parts(path: str | os.PathLike[str], window: Window,
                 by_user: bool = False) -> tuple[list[Part], list[Part] | None]:
    """Device parts, and (with ``by_user``) user parts including the unattributed remainders."""
    with Ledger(path, readonly=True) as ledger:
        start, end = window.start_unix, window.end_unix
        totals = ledger.totals(start, end)
        dims = ledger.dims()
        users = ledger.user_totals(start, end) if by_user else {}
    device_parts = [_part(dims[d], t) for d, t in totals.items()]
    if not by_user:
        return device_parts, None
    per_dim: dict[int, list[tuple[str, Totals]]] = {}
    for (d, user), t in users.items():
        per_dim.setdefault(d, []).append((user, t))
    user_parts: list[Part] = []
    for d, total in totals.items():
        shares = per_dim.get(d, [])
        user_parts.extend(_part(dims[d], t, user) for user, t in shares)
        rest = _remainder(total, [t for _, t in shares])
        user_parts.append(_part(dims[d], rest, None))
    return device_parts, user_parts
