"""The fleet path against a real Prometheus: ``allsmi export --prometheus`` agrees with the ledger.

One ``allsmi serve --simulate mixed --ledger`` run is scraped every second by
``/usr/bin/prometheus`` (Debian package ``prometheus``) while it records its
own ledger in 5-second intervals (``[ledger] interval_seconds = 5``). Both
exports of the same window must agree:

* ``device_count`` and the group labels exactly;
* hours and energy within 5 % plus 1.5 device-seconds per device: Prometheus'
  ``increase()`` extrapolates linearly from the first and last scrapes in the
  window to its edges, and the counters only move once per collection (0.5 s),
  so each window edge can be off by up to a scrape interval plus a collection
  interval of one device's usage; the ledger splits increments exactly at the
  boundaries.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from allsmi.schema import WAITING_REASONS

from ..prometheus_server import running_prometheus, wait_scraped
from .fleet import allsmi, export, iso, simulated_exporters

pytestmark = [pytest.mark.integration]


CONFIG = """\
[[rules]]
resource_group = "training"
vendor = "nvidia"

[[rules]]
resource_group = "inference"
vendor = "amd"

[groups.training]
labels = { team = "ml-research" }
price_per_device_hour = 2.0
price_per_kwh = 0.2
currency = "EUR"

[groups.inference.labels]
team = "serving"

[ledger]
interval_seconds = 5
"""
IV = 5
#: The activity columns compared besides the hours (issue 31).
ACTIVITY_COLUMNS = ("active_device_hours", "waiting_computing_seconds", "waiting_input_seconds",
                    "waiting_host_seconds", "waiting_communication_seconds",
                    "waiting_nothing_seconds", "waiting_unknown_seconds")
RECORD_SECONDS = 42.0


def ledger_export(*args: str, cwd: Path,
                  timeout: float = 20.0) -> tuple[int, dict, str]:  # type: ignore[type-arg]
    """``export --ledger ledger.db ARGS`` once the ledger holds the whole window: the recorder
    writes an interval when it closes, later than that under load."""
    deadline = time.monotonic() + timeout
    while True:
        rc, doc, err = export("--ledger", "ledger.db", *args, cwd=cwd)
        if rc != 0 or doc.get("coverage_ratio") == 1.0 or time.monotonic() > deadline:
            return rc, doc, err
        time.sleep(0.5)


@pytest.mark.long(50)
def test_prometheus_export_agrees_with_the_ledger(tmp_path: Path) -> None:
    with simulated_exporters(tmp_path, CONFIG, "--ledger", "ledger.db") as serve:
        with running_prometheus(tmp_path, serve.targets) as prom_url:
            wait_scraped(prom_url)
            began = time.time()
            time.sleep(RECORD_SECONDS)
            serve.assert_alive()
            # A window of whole ledger intervals, clear of the start-up and of the present.
            start = math.ceil((began + 4) / IV) * IV
            end = math.floor((time.time() - 3) / IV) * IV
            assert end - start >= 25
            window = ("--since", iso(start), "--until", iso(end))
            wait_scraped(prom_url, end + 1)
            rc_l, ledger, err_l = ledger_export(*window, cwd=tmp_path)
            rc_p, prom, err_p = export("--prometheus", prom_url, *window, cwd=tmp_path)
            by_ns = {src: export(*src, *window, "--group-by", "resource_group,namespace",
                                 cwd=tmp_path) for src in (("--ledger", "ledger.db"),
                                                           ("--prometheus", prom_url))}
            idle = {src: allsmi("idle", *src, *window, "--format", "json", cwd=tmp_path)
                    for src in (("--ledger", "ledger.db"), ("--prometheus", prom_url))}
    assert rc_l == 0, err_l
    assert rc_p == 0, err_p
    assert ledger["coverage_ratio"] == 1.0
    assert prom["coverage_ratio"] == pytest.approx(1.0, abs=0.05)

    def by_key(doc: dict) -> dict:  # type: ignore[type-arg]
        return {(r["resource_group"], r["vendor"], r["model"]): r for r in doc["rows"]}

    lrows, prows = by_key(ledger), by_key(prom)
    for key in sorted(lrows):  # shown with -s: how close the two paths came
        print(key, {c: (lrows[key][c], prows.get(key, {}).get(c)) for c in
                    ("allocated_device_hours", "used_device_hours", "energy_kwh")
                    + ACTIVITY_COLUMNS})
    assert set(lrows) == set(prows)
    assert len(lrows) == 13  # 10 models + 3 MIG profiles
    seconds = end - start
    for key, lr in lrows.items():
        pr = prows[key]
        assert pr["device_count"] == lr["device_count"], key
        assert pr["labels"] == lr["labels"], key
        slack_h = 1.5 * lr["device_count"] / 3600
        for col in ("observed_device_hours", "allocated_device_hours", "used_device_hours",
                    "billed_device_hours", "idle_allocated_device_hours"):
            if lr[col] is None:
                assert pr[col] is None, (key, col)
                continue
            if pr[col] is None and col == "idle_allocated_device_hours":
                # The exporter drops a device's idle counter for good once the device was held
                # while its utilization was unknown (a MIG slice); the ledger still knows, per
                # interval, that a window in which nobody held it has no idle-allocated time.
                # Prometheus says unknown, never a number that disagrees.
                assert lr[col] == 0.0 and lr["allocated_device_hours"] == 0.0, (key, lr)
                continue
            assert pr[col] == pytest.approx(lr[col], rel=0.05, abs=slack_h), (key, col)
        # Activity (issue 31): active hours as the other hours; the seconds per waiting reason
        # with the same slack, in seconds.
        for col in ACTIVITY_COLUMNS:
            if lr[col] is None:
                assert pr[col] is None, (key, col, pr[col])
                continue
            assert pr[col] is not None, (key, col, lr[col])
            slack = slack_h if col.endswith("_hours") else slack_h * 3600
            assert pr[col] == pytest.approx(lr[col], rel=0.05, abs=slack), (key, col)
        for row in (lr, pr):  # never more time classified than allocated (nor active)
            waited = sum(row[f"waiting_{r}_seconds"] or 0 for r in WAITING_REASONS)
            assert waited <= row["allocated_device_hours"] * 3600 + 0.01, (key, row)
            assert (row["active_device_hours"] or 0) <= row["allocated_device_hours"] + 1e-6
        if lr["energy_kwh"] is None:
            assert pr["energy_kwh"] is None, key
        else:
            # Slack: 1.5 s of the model's peak power per device.
            slack_kwh = 1.5 * lr["device_count"] * 850 / 3.6e6
            assert pr["energy_kwh"] == pytest.approx(lr["energy_kwh"], rel=0.05, abs=slack_kwh), key
        assert lr["observed_device_hours"] == pytest.approx(lr["device_count"] * seconds / 3600,
                                                            abs=1e-6)
    train = lrows[("training", "nvidia", "NVIDIA H100 80GB HBM3")]
    assert train["labels"] == {"team": "ml-research"} and train["currency"] == "EUR"
    assert prows[("training", "nvidia", "NVIDIA H100 80GB HBM3")]["cost"] == pytest.approx(
        train["cost"], rel=0.05, abs=0.01)
    # Partitions billed at their share from Prometheus too: the MIG GPU and its slices add up
    # to at most one device-hour per hour.
    mig = [(lr, prows[k]) for k, lr in lrows.items() if k[0] == "training" and "MIG" in k[2]]
    assert mig
    for _, pr in mig:  # a slice idle (unallocated) over this short window bills nothing at all
        assert pr["billed_device_hours"] <= pr["allocated_device_hours"]
        if pr["allocated_device_hours"] > 0:
            assert pr["billed_device_hours"] < pr["allocated_device_hours"]
    # Idle-allocated hours never exceed allocated hours, from either source; some are idle.
    for doc in (ledger, prom):
        for row in doc["rows"]:
            if row["idle_allocated_device_hours"] is not None:
                assert row["idle_allocated_device_hours"] <= row["allocated_device_hours"] + 1e-9
    assert sum(r["idle_allocated_device_hours"] or 0 for r in ledger["rows"]) > 0
    # Grouped by namespace: the workloads' rows add up to the group's totals, from both sources.
    for (rc, doc, err), whole in zip(by_ns.values(), (ledger, prom)):
        assert rc == 0, err
        for group in {r["resource_group"] for r in whole["rows"]}:
            for col in ("allocated_device_hours", "idle_allocated_device_hours", "energy_kwh"):
                wholes = [r[col] for r in whole["rows"] if r["resource_group"] == group]
                if None in wholes and col == "idle_allocated_device_hours":
                    # unknown for the group (a device without utilization was held): so for
                    # some of its workloads, never the known rest booked as the whole
                    assert None in [r[col] for r in doc["rows"] if r["resource_group"] == group]
                    continue
                total = sum(r[col] or 0 for r in whole["rows"] if r["resource_group"] == group)
                parts = sum(r[col] or 0 for r in doc["rows"] if r["resource_group"] == group)
                assert parts == pytest.approx(total, rel=1e-6, abs=1e-5), (group, col)
    lns, pns = ({(r["resource_group"], r["namespace"]): r for r in doc["rows"]}
                for _, doc, _ in by_ns.values())
    assert ("inference", "inference") in lns and set(lns) == set(pns)
    for key, lr in lns.items():
        slack_h = 1.5 * lr["device_count"] / 3600
        assert pns[key]["allocated_device_hours"] == pytest.approx(
            lr["allocated_device_hours"], rel=0.05, abs=slack_h), key
    # allsmi idle: the same holders from both sources, by idle cost within each currency then
    # idle hours, the holders whose idle cost is unknown last.
    (rc_li, lidle, err_li), (rc_pi, pidle, err_pi) = idle.values()
    assert rc_li == 0, err_li
    assert rc_pi == 0, err_pi
    assert lidle["group_by"] == ["resource_group", "user", "namespace", "pod", "job"]
    assert pidle["group_by"] == ["resource_group", "namespace", "pod", "job"]
    for doc in (lidle, pidle):
        assert doc["rows"], doc
        # (unknown idle costs last, whatever their currency; unknown idle time: a holder of a
        # device whose idleness is unknown, listed with its allocated time, never left out)
        order = [(r["idle_cost"] is None, "" if r["idle_cost"] is None else r["currency"] or "",
                  -(r["idle_cost"] or 0), -(r["idle_allocated_device_hours"] or 0))
                 for r in doc["rows"]]
        assert order == sorted(order)
        for row in doc["rows"]:
            if row["idle_allocated_device_hours"] is None:
                assert row["allocated_device_hours"] and row["idle_cost"] is None
                continue
            assert 0 < row["idle_allocated_device_hours"] <= row["allocated_device_hours"] + 1e-9
            assert row["devices"] and all("/" in d for d in row["devices"])
    lsum = sum(r["idle_allocated_device_hours"] or 0 for r in lidle["rows"])
    psum = sum(r["idle_allocated_device_hours"] or 0 for r in pidle["rows"])
    assert psum == pytest.approx(lsum, rel=0.1, abs=1.5 * 41 / 3600)
