"""A month of hourly roll-ups in VictoriaMetrics (Debian's ``victoria-metrics``) makes a report:
last month's counters of a small fleet imported, rolled up by ``vmalert -replay`` with the
shipped ``allsmi-billing-hourly`` rules, then ``allsmi report --prometheus URL --period
last-month`` bills it from the roll-ups alone (no raw-counter warning), its group table equal
to ``allsmi export`` of the same window and options, a day per line in its trend."""

from __future__ import annotations

import calendar
import datetime as dt
import json
import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from ..deploy.support import RULES
from ..victoriametrics_server import run_vmalert_replay, running_victoriametrics
from .support import BUDGETS, allsmi, csv_rows, last_month, printed

pytestmark = [pytest.mark.integration]

STEP = 300  # seconds between imported samples
HOSTS, DEVICES = 2, 2


def _month() -> tuple[int, int]:
    year, month = map(int, last_month().split("-"))
    start = dt.datetime(year, month, 1, tzinfo=dt.timezone.utc)
    days = calendar.monthrange(year, month)[1]
    return int(start.timestamp()), int((start + dt.timedelta(days=days)).timestamp())


def _series(start: int, end: int) -> bytes:
    """JSON lines for /api/v1/import: each device watched all month, held in two hours of
    three by one pod, busy half of that, idle a tenth of it; the groups' info and prices."""
    stamps = list(range(start * 1000, end * 1000 + 1, STEP * 1000))
    lines = []

    def line(labels: dict[str, str], values: list[float]) -> None:
        lines.append(json.dumps({"metric": labels, "values": values, "timestamps": stamps}))

    for host in range(HOSTS):
        group = ("training", "inference")[host]
        common = {"instance": f"node{host}:9477", "job": "allsmi", "resource_group": group}
        line({"__name__": "allsmi_resource_group_info", **common}, [1] * len(stamps))
        for dev in range(DEVICES):
            device = {**common, "uuid": f"GPU-{host}-{dev}", "vendor": "nvidia",
                      "model": "NVIDIA H100 80GB HBM3"}
            held = [STEP if (k // 12 + dev) % 3 else 0 for k in range(len(stamps))]
            counters = {"observed_seconds": [STEP] * len(stamps), "allocated_seconds": held,
                        "busy_seconds": [h / 2 for h in held],
                        "idle_allocated_seconds": [h / 10 for h in held],
                        "energy_joules": [300.0 * STEP] * len(stamps)}
            for name, steps in counters.items():
                total, values = 0.0, []
                for k, inc in enumerate(steps):
                    total += inc if k else 0.0
                    values.append(total)
                line({"__name__": f"allsmi_device_{name}_total", **device}, values)
            line({"__name__": "allsmi_device_info", **device}, [1] * len(stamps))
    return ("\n".join(lines) + "\n").encode()


def test_a_rolled_up_month_in_victoriametrics_makes_a_report(tmp_path: Path) -> None:
    start, end = _month()
    with running_victoriametrics(tmp_path) as store:
        request = urllib.request.Request(f"{store}/api/v1/import", data=_series(start, end),
                                         method="POST")
        with urllib.request.urlopen(request, timeout=120) as resp:  # noqa: S310 - loopback
            assert resp.status == 204
        urllib.request.urlopen(f"{store}/internal/force_flush", timeout=60).read()  # noqa: S310
        doc = yaml.safe_load(RULES.read_text())
        billing = [g for g in doc["groups"] if g["name"] == "allsmi-billing-hourly"]
        (tmp_path / "billing.yml").write_text(yaml.safe_dump({"groups": billing}))
        iso = lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime(  # noqa: E731
            "%Y-%m-%dT%H:%M:%SZ")
        replay = run_vmalert_replay(tmp_path, [tmp_path / "billing.yml"], store,
                                    iso(start + 3600), iso(end), "1h", timeout=600)
        assert replay.returncode == 0, replay.stderr[-2000:]
        urllib.request.urlopen(f"{store}/internal/force_flush", timeout=60).read()  # noqa: S310

        (tmp_path / "c.toml").write_text(BUDGETS)
        args = ("--config", "c.toml", "--prometheus", store, "--period", last_month())
        out = allsmi("report", *args, "-o", "r.html", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "billed from hourly roll-ups" in out.stderr
        export = allsmi("export", *args, "--group-by", "resource_group", cwd=tmp_path)
        assert export.returncode == 0, export.stderr
    page = (tmp_path / "r.html").read_text()
    assert "hourly roll-ups for" in page and "raw counters" not in page
    rows = {r["resource_group"]: r for r in csv_rows(export.stdout)}
    assert set(rows) == {"training", "inference"}
    body = page.split('id="table-hours"')[1].split("</table>")[0]
    for group, row in rows.items():
        line = re.search(rf"<tr><td>{group}</td>(.*?)</tr>", body)
        assert line, group
        cells = re.findall(r">([^<]*)</td>", line.group(1))
        assert cells[2] == printed(float(row["allocated_device_hours"]))  # allocated
        assert cells[0] == row["device_count"]
    budget = page.split('id="table-budget"')[1].split("</table>")[0]
    cost = sum(float(r["cost"]) for r in rows.values())
    assert f">{printed(cost)}</td>" in budget
    trend = page.split('id="table-trend"')[1].split("<tbody>")[1].split("</tbody>")[0]
    assert trend.count("<tr>") == (end - start) // 86400
