"""The long-term store for real: VictoriaMetrics, vmalert and Prometheus (Debian packages) scrape
two ``allsmi serve --simulate mixed`` exporters, and the same windows are billed from
Prometheus' raw counters, VictoriaMetrics' raw counters and the roll-ups vmalert wrote back,
within 0.5 % of each other (issue 22).

Time is compressed: the ``allsmi-billing-hourly`` group of deploy/prometheus/allsmi-rules.yml is
loaded with its hour scaled to 10 s (interval, ranges and the marker's value; the expressions
are otherwise the shipped ones), so a minute holds six "hours". A window is rolled up live by
vmalert in one VictoriaMetrics, and by ``vmalert -replay.*`` (the backfill of deploy/README.md)
in another that scraped the same exporters over the same window.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from allsmi.schema import WAITING_REASONS

from ..deploy.support import RULES
from ..prometheus_server import running_prometheus, wait_scraped
from ..victoriametrics_server import (force_flush, run_vmalert_replay, running_victoriametrics,
                                      running_vmalert)
from .fleet import export, iso, simulated_exporters, wait_until

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
"""
HOUR = 10  # the scaled "hour", seconds
HOURS = 8  # the scaled hours of the window that three stores bill alike
SCRAPE_SECONDS = 1.0  # how often the stores scrape (victoriametrics_server, prometheus_server)
#: The activity columns (issue 31): active hours, allocated seconds by waiting reason.
WAITING_COLUMNS = tuple(f"waiting_{r}_seconds" for r in WAITING_REASONS)
ACTIVITY_COLUMNS = ("active_device_hours",) + WAITING_COLUMNS
COLUMNS = ("observed_device_hours", "allocated_device_hours", "billed_device_hours",
           "used_device_hours", "idle_allocated_device_hours", "energy_kwh",
           "cost") + ACTIVITY_COLUMNS


def scaled_rules(path: Path) -> Path:
    """The shipped hourly roll-up group with its hour scaled to :data:`HOUR` seconds."""
    doc = yaml.safe_load(RULES.read_text())
    group = next(g for g in doc["groups"] if g["name"] == "allsmi-billing-hourly")
    assert group["interval"] == "1h"
    group["interval"] = f"{HOUR}s"
    for rule in group["rules"]:
        expr = rule["expr"]
        assert "[1h]" in expr or expr.startswith("vector(3600) "), rule["record"]
        rule["expr"] = expr.replace("[1h]", f"[{HOUR}s]").replace("vector(3600)", f"vector({HOUR})")
    path.write_text(yaml.safe_dump({"groups": [group]}))
    return path


def totals(doc: dict) -> dict[str, dict[str, float]]:  # type: ignore[type-arg]
    """Per resource group, the columns summed over the rows (and the devices counted)."""
    out: dict[str, dict[str, float]] = {}
    for row in doc["rows"]:
        acc = out.setdefault(row["resource_group"], {c: 0.0 for c in COLUMNS + ("device_count",)})
        for col in COLUMNS + ("device_count",):
            acc[col] += row[col] or 0.0
    return out


def agree(name: str, a: dict, b: dict, rel: float = 0.005,  # type: ignore[type-arg]
          scrape_seconds: float = SCRAPE_SECONDS) -> None:
    ta, tb = totals(a), totals(b)
    assert set(ta) == set(tb), name
    across = "Prometheus" in name  # two stores, each scraping at its own moments
    # Two stores' raw counters differ at the window's edges by up to one scrape interval of
    # each device (their samples fall at their own moments; VictoriaMetrics' increase() does
    # not extrapolate to the edge as Prometheus' does): over this test's compressed window that
    # is SCRAPE_SECONDS / (HOURS * HOUR) = 1.25 % (over a real hour's window, 0.03 %). Seen:
    # 0.63 % on observed hours (0.5 s of each of 34 devices), once in seven quiet runs.
    # ``scrape_seconds``: the interval the stores' samples at the edges actually had
    # (:func:`edge_interval`), where a loaded machine made it longer than SCRAPE_SECONDS.
    edge = scrape_seconds / (HOURS * HOUR) if across else 0.0
    for group in ta:
        # one scrape interval of each device, in seconds (see the bounds below)
        seconds = scrape_seconds * max(ta[group]["device_count"], tb[group]["device_count"])
        for col in COLUMNS:
            x, y = ta[group][col], tb[group][col]
            print(name, group, col, x, y, f"{(y - x) / x if x else 0:+.3%}")
            if col in WAITING_COLUMNS:
                # A holder's reason series is born when the reason first counts (the exporter
                # publishes only reasons with time): born inside the window, the seconds of its
                # first scrape are in the raw bill but not in an hourly roll-up, whose increase()
                # starts at the first sample; and two stores' samples at an edge fall a fraction
                # of a second apart. Each reason within a scrape's second per device, and their
                # sum (below) within ``rel``.
                assert abs(y - x) <= max(rel * x, seconds), (name, group, col)
                continue
            # Idle-allocated time (a breakdown, not a charge of its own) comes and goes with the
            # simulated workloads: Prometheus' increase() extrapolates such a counter toward a
            # window's edges less well over these short windows. Used and active hours and the
            # energy are utilization-, activity- and power-weighted and move as unevenly; all
            # are checked at 0.5 % between VictoriaMetrics' raw counters and the roll-ups.
            uneven = ("idle_allocated_device_hours", "used_device_hours", "active_device_hours",
                      "energy_kwh")
            slack = rel if col not in uneven or not across else 10 * rel
            # Across stores, a device-hours column differs at the edges by up to a scrape
            # interval of each device (in device-hours), whatever share of the window the
            # column's time is: idle-allocated time, a few percent of it, was 1.2 s (10 %)
            # apart between two stores on a loaded machine.
            hours = seconds / 3600 if across and col.endswith("_device_hours") else 1e-9
            assert y == pytest.approx(x, rel=max(slack, edge), abs=hours), (name, group, col)
        # Their sum within ``rel``, or within the seconds of a series born in the window (its
        # first scrape, as above: the sum lacks them as the reason does; 10.8 s of a group's
        # 1575 s, 0.69 %, seen under the load of eight test workers).
        x, y = (sum(t[group][c] for c in WAITING_COLUMNS) for t in (ta, tb))
        assert y == pytest.approx(x, rel=max(rel, edge), abs=seconds), (name, group, "waiting seconds")


def edge_interval(stores: list[str], edges: tuple[int, ...], span: float = 5.0) -> float:
    """The longest interval between two samples of one device's observed-seconds counter that
    spans an edge (a sample at or before it, the next after it), over ``stores`` and
    ``edges``, and at least SCRAPE_SECONDS: how far apart two stores' views of an edge may lie.
    A scrape that came late (a loaded machine) makes it longer; none within ``span`` seconds
    of an edge on one side counts as ``span``."""
    longest = SCRAPE_SECONDS
    for store in stores:
        for edge in edges:
            query = urllib.parse.urlencode({
                "query": f"allsmi_device_observed_seconds_total[{2 * span:g}s]", "time": edge + span})
            with urllib.request.urlopen(f"{store}/api/v1/query?{query}", timeout=10) as resp:  # noqa: S310
                series = json.load(resp)["data"]["result"]
            assert series, (store, edge)
            for one in series:
                stamps = [float(t) for t, _ in one["values"]]
                before = [t for t in stamps if t <= edge]
                after = [t for t in stamps if t > edge]
                gap = min(after) - max(before) if before and after else span
                longest = max(longest, gap)
    return longest


def wait_for_rollups(store: str, at: int, count: int, span: int, timeout: float = 20.0) -> None:
    """Until ``count`` roll-up evaluations in ``(at - span, at]`` are searchable in ``store``,
    and with them the roll-ups they mark (written before the marker, the group's last rule;
    flushed here: a series VictoriaMetrics has never seen becomes searchable seconds after
    those it has, which left a new holder's roll-ups out of a bill under load)."""
    from allsmi.accounting.prometheus.rollup import MARKER
    query = urllib.parse.urlencode({"query": f"count_over_time({MARKER}[{span}s])",
                                    "time": at})
    deadline = time.monotonic() + timeout
    while True:
        force_flush(store)
        with urllib.request.urlopen(f"{store}/api/v1/query?{query}", timeout=5) as resp:  # noqa: S310
            result = json.load(resp)["data"]["result"]
        if result and float(result[0]["value"][1]) >= count:
            return
        assert time.monotonic() < deadline, f"{count} roll-ups up to {at} never appeared: {result}"
        time.sleep(0.5)


# Not alone (beside other tests): under their load scrapes come late, and two stores' views of
# the window's edges lie further apart (0.54-0.58 % seen where the bound was 0.5 %); the bound
# across stores follows the interval their samples at the edges actually had (edge_interval).
@pytest.mark.long(110)
def test_prometheus_victoriametrics_and_rollups_bill_the_same(tmp_path: Path) -> None:
    """One window, eight "hours", seen by three stores at once: Prometheus; a VictoriaMetrics
    whose vmalert rolls the hours up live; another whose hours are rolled up afterwards by a
    replay (the backfill of deploy/README.md), as if vmalert had not run then."""
    rules = scaled_rules(tmp_path / "allsmi-rules-10s.yml")
    live_dir, replay_dir = tmp_path / "live", tmp_path / "replay"
    live_dir.mkdir()
    replay_dir.mkdir()
    with simulated_exporters(tmp_path, CONFIG, count=2, interval=0.25) as serve:
        with running_victoriametrics(live_dir, serve.targets) as vm, \
                running_victoriametrics(replay_dir, serve.targets) as vm_replay, \
                running_prometheus(tmp_path, serve.targets) as prom, \
                running_vmalert(live_dir, [rules], vm, evaluation_interval=f"{HOUR}s"):
            for store in (prom, vm, vm_replay):
                wait_scraped(store)
            lo = math.ceil((time.time() + 3) / HOUR) * HOUR
            # 80 s: the stores scrape every second, each at its own moments, so each edge may be
            # off by part of a scrape between them (about 0.3 % of the window, measured)
            hi = lo + HOURS * HOUR
            wait_until(hi + 2)
            wait_for_rollups(vm, hi, HOURS, HOURS * HOUR)  # the evaluation at the window's end, written
            # evaluations at the ends of the window's five "hours"
            replay = run_vmalert_replay(replay_dir, [rules], vm_replay, iso(lo + HOUR), iso(hi),
                                        f"{HOUR}s")
            assert replay.returncode == 0, replay.stdout + replay.stderr
            wait_for_rollups(vm_replay, hi, HOURS, HOURS * HOUR)
            wait_scraped(prom, hi + 1)
            serve.assert_alive()
            window = ("--since", iso(lo), "--until", iso(hi), "--group-by",
                      "resource_group,vendor,model")
            interval = edge_interval([prom, vm, vm_replay], (lo, hi))
            print("samples around the edges at most", interval, "s apart")
            runs = {
                "prometheus": export("--prometheus", prom, *window, cwd=tmp_path),
                "vm-raw": export("--prometheus", vm, "--no-rollups", *window, cwd=tmp_path),
                "vm-rollups": export("--prometheus", vm, *window, cwd=tmp_path),
                "vm-replayed-raw": export("--prometheus", vm_replay, "--no-rollups", *window,
                                          cwd=tmp_path),
                "vm-replayed-rollups": export("--prometheus", vm_replay, *window, cwd=tmp_path),
            }
    for source, (rc, doc, err) in runs.items():
        assert rc == 0, (source, err, (live_dir / "vmalert.log").read_text())
        assert doc["coverage_ratio"] == pytest.approx(1.0, abs=0.01), source
    docs = {source: doc for source, (_, doc, _) in runs.items()}
    assert docs["prometheus"]["source_data"] == "raw counters"
    for raw, rolled in (("vm-raw", "vm-rollups"), ("vm-replayed-raw", "vm-replayed-rollups")):
        assert docs[raw]["source_data"] == "raw counters (--no-rollups)"
        # Wholly from the roll-ups: the window starts and ends where "hours" do.
        assert docs[rolled]["source_data"].startswith("hourly roll-ups"), docs[rolled]["source_data"]
        assert "raw counters" not in docs[rolled]["source_data"], docs[rolled]["source_data"]
        assert "billed from hourly roll-ups" in runs[rolled][2]
    counts = [sorted((r["resource_group"], r["model"], r["device_count"]) for r in d["rows"])
              for d in docs.values()]
    assert all(c == counts[0] for c in counts) and len(counts[0]) >= 6
    for store in ("vm", "vm-replayed"):
        agree(f"{store}: VictoriaMetrics raw vs Prometheus raw", docs["prometheus"],
              docs[f"{store}-raw"], scrape_seconds=interval)
        agree(f"{store}: roll-ups vs VictoriaMetrics raw", docs[f"{store}-raw"], docs[f"{store}-rollups"])
        agree(f"{store}: roll-ups vs Prometheus raw", docs["prometheus"], docs[f"{store}-rollups"],
              scrape_seconds=interval)
    assert totals(docs["vm-replayed-rollups"])["training"]["cost"] > 0


@pytest.mark.long(55)
def test_a_window_not_on_rollup_boundaries_bills_its_edges_from_raw_counters(
        tmp_path: Path) -> None:
    """Roll-ups inside, raw counters for the edges and for an hour nobody rolled up."""
    rules = scaled_rules(tmp_path / "allsmi-rules-10s.yml")
    with simulated_exporters(tmp_path, CONFIG, interval=0.25) as serve:
        with running_victoriametrics(tmp_path, serve.targets) as vm:
            first = math.ceil((time.time() + 2) / HOUR) * HOUR
            wait_until(first + 5 * HOUR + 1)
            # Roll up "hours" 1, 2, 4 and 5 of five: hour 3 stays a hole.
            for lo, hi in ((first + HOUR, first + 2 * HOUR), (first + 4 * HOUR, first + 5 * HOUR)):
                replay = run_vmalert_replay(tmp_path, [rules], vm, iso(lo), iso(hi), f"{HOUR}s")
                assert replay.returncode == 0, replay.stdout + replay.stderr
            wait_for_rollups(vm, first + 5 * HOUR, 4, 5 * HOUR)
            window = ("--since", iso(first + 3), "--until", iso(first + 5 * HOUR - 4),
                      "--group-by", "resource_group")
            raw = export("--prometheus", vm, "--no-rollups", *window, cwd=tmp_path)
            mixed = export("--prometheus", vm, *window, cwd=tmp_path)
    assert raw[0] == 0 and mixed[0] == 0, (raw[2], mixed[2])
    detail = mixed[1]["source_data"]
    # "hours" 2 and 4 lie wholly inside the window; the edges and hour 3 are raw
    assert detail.startswith(f"hourly roll-ups for {2 * HOUR / 3600:g} h"), detail
    assert f"raw counters for {(5 * HOUR - 7) - 2 * HOUR} s" in detail, detail
    agree("edges raw, inside roll-ups", raw[1], mixed[1], rel=0.01)


HOLDER_COLUMNS = ("allocated_device_hours", "billed_device_hours", "used_device_hours",
                  "energy_kwh", "idle_allocated_device_hours", "cost") + ACTIVITY_COLUMNS


@pytest.mark.long(50)
def test_holders_from_rollups_agree_with_holders_from_raw_counters(tmp_path: Path) -> None:
    """``--group-by user,namespace,pod,job`` from the per-holder roll-ups bills each holder as
    the per-holder raw counters do, with the same methods (the exporter runs with
    ``--processes``, so its holders carry their users)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "nvidia0").write_text("9001\n")  # a Slurm job on a GPU, beside the simulated pods
    rules = scaled_rules(tmp_path / "allsmi-rules-10s.yml")
    with simulated_exporters(tmp_path, CONFIG, "--processes", interval=0.25,
                             env={"ALLSMI_HPC_JOB_DIR": str(jobs)}) as serve:
        with running_victoriametrics(tmp_path, serve.targets) as vm:
            first = math.ceil((time.time() + 2) / HOUR) * HOUR
            wait_until(first + 4 * HOUR + 1)
            replay = run_vmalert_replay(tmp_path, [rules], vm, iso(first + HOUR),
                                        iso(first + 4 * HOUR), f"{HOUR}s")
            assert replay.returncode == 0, replay.stdout + replay.stderr
            wait_for_rollups(vm, first + 4 * HOUR, 4, 4 * HOUR)
            window = ("--since", iso(first), "--until", iso(first + 4 * HOUR),
                      "--group-by", "resource_group,user,namespace,pod,job")
            raw = export("--prometheus", vm, "--no-rollups", *window, cwd=tmp_path)
            rolled = export("--prometheus", vm, *window, cwd=tmp_path)
    assert raw[0] == 0 and rolled[0] == 0, (raw[2], rolled[2])
    assert rolled[1]["source_data"].startswith("hourly roll-ups"), rolled[1]["source_data"]
    assert "raw counters" not in rolled[1]["source_data"], rolled[1]["source_data"]
    keys = ("resource_group", "user", "namespace", "pod", "job")

    def by_holder(doc: dict) -> dict[tuple, dict]:  # type: ignore[type-arg]
        return {tuple(r[k] for k in keys): r for r in doc["rows"]}

    a, b = by_holder(raw[1]), by_holder(rolled[1])
    assert set(a) == set(b), ([a[k] for k in set(a) - set(b)], [b[k] for k in set(b) - set(a)])
    held = [k for k in a if any(k[1:])]
    assert len(held) >= 2, sorted(a)
    assert any(k[1] for k in held), sorted(a)  # users, from the roll-ups as from the counters
    # Split by the per-holder counters (the sample-count split has no methods).
    assert any(a[k]["allocation_method"] for k in held), [a[k] for k in held]
    for key, row in a.items():
        assert b[key]["allocation_method"] == row["allocation_method"], key
        assert b[key]["usage_method"] == row["usage_method"], key
        for col in HOLDER_COLUMNS:
            x, y = row[col], b[key][col]
            assert (x is None) == (y is None), (key, col)
            if x is not None:
                print(key, col, x, y)
                # increase() per hour vs over the window: the same samples, a small rounding
                assert y == pytest.approx(x, rel=0.005, abs=1e-6), (key, col)
