"""``allsmi export --prometheus URL --group-by user`` against a real Prometheus (issue 22).

Users come from the ``user`` label of the exporters' per-holder counters (``allsmi_holder_*``),
published only by ``allsmi serve --processes``. Scraped from such an exporter, the export bills
per user, and the users' rows add up to the groups'; scraped from an exporter without
``--processes``, ``--group-by user`` is refused (exit 2) with the reason.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Iterator

import pytest

from allsmi.schema import WAITING_REASONS

from ..prometheus_server import running_prometheus, wait_scraped
from .fleet import export, iso, simulated_exporters
from .test_prometheus_agreement import CONFIG

pytestmark = [pytest.mark.integration]

COLUMNS = ("observed_device_hours", "allocated_device_hours", "used_device_hours", "energy_kwh",
           "cost", "active_device_hours") + tuple(f"waiting_{r}_seconds" for r in WAITING_REASONS)


@contextlib.contextmanager
def _scraped_window(tmp_path: Path, processes: bool) -> Iterator[tuple[str, tuple[str, ...]]]:
    """One ``allsmi serve --simulate mixed`` (with ``--processes`` or not) scraped by a real
    Prometheus for 25 s: (its URL, a window clear of the first scrape and of the present, which
    Prometheus has scraped past)."""
    extra = ("--processes",) if processes else ()
    with simulated_exporters(tmp_path, CONFIG, *extra) as serve, \
            running_prometheus(tmp_path, serve.targets) as prom:
        wait_scraped(prom)
        began = time.time()
        time.sleep(25)
        start, end = math.ceil(began + 4), math.floor(time.time() - 3)
        assert end - start >= 15
        wait_scraped(prom, end + 1)
        yield prom, ("--since", iso(start), "--until", iso(end))


def _totals(doc: dict, group: str) -> dict[str, float]:  # type: ignore[type-arg]
    rows = [r for r in doc["rows"] if r["resource_group"] == group]
    return {c: sum(r[c] or 0.0 for r in rows) for c in COLUMNS}


@pytest.mark.long(32)
def test_group_by_user_from_prometheus(tmp_path: Path) -> None:
    with _scraped_window(tmp_path, processes=True) as (prom, window):
        rc_u, by_user, err_u = export("--prometheus", prom, *window, "--group-by",
                                      "resource_group,user", cwd=tmp_path)
        rc_g, by_group, err_g = export("--prometheus", prom, *window, "--group-by",
                                       "resource_group", cwd=tmp_path)
    assert rc_u == 0, err_u
    assert rc_g == 0, err_g
    assert by_user["group_by"] == ["resource_group", "user"]
    users = {r["user"] for r in by_user["rows"] if r["user"]}
    assert users, by_user["rows"]
    held = [r for r in by_user["rows"] if r["user"]]
    assert any((r["allocated_device_hours"] or 0) > 0 for r in held), held
    # Each user's activity and what they waited on (issue 31): never more than their time.
    assert any(r["active_device_hours"] for r in held), held
    assert {x for r in held for x in WAITING_REASONS if r[f"waiting_{x}_seconds"]} >= \
        {"computing", "nothing"}, held
    for r in held:
        waited = sum(r[f"waiting_{x}_seconds"] or 0 for x in WAITING_REASONS)
        assert waited <= (r["allocated_device_hours"] or 0) * 3600 + 0.01, r
    # The users' rows (and the rest: time no user held) add up to their group's row (each
    # row rounded to 6 decimals, seconds to 3).
    for row in by_group["rows"]:
        totals = _totals(by_user, row["resource_group"])
        n = sum(r["resource_group"] == row["resource_group"] for r in by_user["rows"])
        for col in COLUMNS:
            unit = 1e-3 if col.endswith("_seconds") else 1e-6
            assert totals[col] == pytest.approx(row[col] or 0.0, rel=1e-6, abs=unit * n), \
                (row["resource_group"], col)


@pytest.mark.long(32)
def test_group_by_user_is_refused_without_users(tmp_path: Path) -> None:
    with _scraped_window(tmp_path, processes=False) as (prom, window):
        rc, doc, err = export("--prometheus", prom, *window, "--group-by",
                              "resource_group,user", cwd=tmp_path)
        rc_ns, by_ns, err_ns = export("--prometheus", prom, *window, "--group-by",
                                      "resource_group,namespace", cwd=tmp_path)
    assert rc == 2 and doc == {}, (rc, err)
    assert "--group-by user" in err and "--processes" in err, err
    assert rc_ns == 0 and any(r["namespace"] for r in by_ns["rows"]), err_ns
