#!/usr/bin/env python3
"""The HTML report of a month for a synthetic fleet: its size and the time to build it, and the
same charts drawn by each chart library that is installed (pygal, matplotlib's SVG backend,
Vega-Lite through vl-convert-python), for docs/report.md's choice of library.

The fleet: ``--hosts`` hosts of ``--devices`` devices (default 1000 x 8), in four priced
resource groups with budgets, three models; every device held by one pod (so 8000 holders by
default) for two hours of three, busy half of that. The report's rows are built from these
parts exactly as ``allsmi report`` builds them from a source (``build_report``: the window by
group, by holder and by pool, and each of the month's 30 days), then the page is written.

Reports, per library: the time to draw the report's charts, their bytes (SVG, inline) and the
whole page's bytes with them; and the time to build the rows, the content and the page.

Usage: ``python benchmarks/report_size.py [--hosts 1000] [--devices 8] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allsmi.accounting.htmlreport.charts import Chart, charts, svg  # noqa: E402
from allsmi.accounting.htmlreport.data import Views, content  # noqa: E402
from allsmi.accounting.htmlreport.page import render_html  # noqa: E402
from allsmi.accounting.periods import Window  # noqa: E402
from allsmi.accounting.report import Part, build_report  # noqa: E402
from allsmi.config import parse_config  # noqa: E402

GROUPS = ("training", "inference", "research", "batch")
MODELS = (("nvidia", "NVIDIA H100 80GB HBM3"), ("amd", "AMD Instinct MI300X"),
          ("intel", "Intel Gaudi 3"))
CONFIG = "\n".join(f'[groups.{g}]\nprice_per_device_hour = {2.0 + i}\nprice_per_kwh = 0.2\n'
                   f'currency = "EUR"\nbudget_per_month = {200000 * (i + 1)}\n'
                   for i, g in enumerate(GROUPS))
HOLDER_KEYS = ("resource_group", "user", "namespace", "pod", "job")


def fleet(hosts: int, devices: int, seconds: float) -> tuple[list[Part], list[Part]]:
    """Device parts and their holders' shares over ``seconds``."""
    parts, holders = [], []
    for h in range(hosts):
        vendor, model = MODELS[h % len(MODELS)]
        group = GROUPS[h % len(GROUPS)]
        for d in range(devices):
            allocated = seconds * 2 / 3
            idle = allocated * (0.1 if (h + d) % 5 else 0.6)
            common = dict(resource_group=group, labels=(), vendor=vendor, model=model,
                          host=f"host{h:04d}", device=f"host{h:04d}/{d}", observed_s=seconds,
                          allocated_s=allocated, busy_s=allocated / 2,
                          busy_observed_s=seconds, energy_j=seconds * 250.0, idle_s=idle,
                          idle_energy_j=idle * 120.0, attributed_s=seconds)
            parts.append(Part(**common))
            holders.append(Part(**common, user=f"user{(h * devices + d) % 97}",
                                namespace=f"team-{h % 40}", pod=f"job-{h}-{d}"))
    return parts, holders


def views(hosts: int, devices: int) -> Views:
    config = parse_config(CONFIG)
    start = dt.datetime(2026, 9, 1, tzinfo=dt.timezone.utc)
    month = Window(start, start + dt.timedelta(days=30))
    parts, holders = fleet(hosts, devices, month.seconds)
    build = lambda w, keys, p, hp: build_report(p, w, keys, config, holder_parts=hp,  # noqa: E731
                                                source="synthetic fleet")
    day_parts, day_holders = fleet(hosts, devices, 86400.0)
    trend = tuple((day.date().isoformat(), build(Window(day, day + dt.timedelta(days=1)),
                                                  ("resource_group",), day_parts, None))
                  for day in (start + dt.timedelta(days=k) for k in range(30)))
    return Views(build(month, ("resource_group",), parts, None),
                 build(month, HOLDER_KEYS, parts, holders),
                 build(month, ("resource_group", "vendor", "model"), parts, None),
                 trend, 0.95)


def matplotlib_svg(chart: Chart) -> str:
    import io

    import matplotlib
    matplotlib.use("svg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.fonttype"] = "none"  # text as text, not paths
    plt.rcParams["svg.hashsalt"] = "allsmi"
    fig, ax = plt.subplots(figsize=(8, 3.8))
    n = len(chart.series)
    for i, (name, values) in enumerate(chart.series):
        ys = [float("nan") if v is None else v for v in values]
        xs = [k + (i - (n - 1) / 2) * 0.8 / n for k in range(len(values))]
        if chart.kind == "line":
            ax.plot(range(len(values)), ys, marker="o", label=name)
        elif chart.kind == "hbar":
            ax.barh(xs, ys, height=0.8 / n, label=name)
        else:
            ax.bar(xs, ys, width=0.8 / n, label=name)
    ticks = range(len(chart.labels))
    (ax.set_yticks if chart.kind == "hbar" else ax.set_xticks)(ticks, chart.labels)
    ax.set_title(chart.title)
    ax.legend()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def vega_svg(chart: Chart) -> str:
    import vl_convert

    rows = [{"label": label, "series": name, "value": value}
            for name, values in chart.series for label, value in zip(chart.labels, values)
            if value is not None]
    mark = {"line": {"type": "line", "point": True}, "bar": "bar", "hbar": "bar"}[chart.kind]
    band, value = ("y", "x") if chart.kind == "hbar" else ("x", "y")
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "width": 640,
            "title": chart.title, "data": {"values": rows}, "mark": mark,
            "encoding": {band: {"field": "label", "type": "nominal", "sort": None},
                         value: {"field": "value", "type": "quantitative"},
                         "color": {"field": "series", "type": "nominal"}}}
    if chart.kind != "line":
        spec["encoding"]["xOffset" if band == "x" else "yOffset"] = {"field": "series"}
    return vl_convert.vegalite_to_svg(spec)


LIBRARIES: dict[str, Callable[[Chart], str]] = {"pygal": svg, "matplotlib": matplotlib_svg,
                                                "vl-convert": vega_svg}


def timed(func: Callable[[], Any], runs: int) -> tuple[float, Any]:
    walls, result = [], None
    for _ in range(runs):
        began = time.perf_counter()
        result = func()
        walls.append(time.perf_counter() - began)
    return statistics.median(walls), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows_s, v = timed(lambda: views(args.hosts, args.devices), 1)
    content_s, c = timed(lambda: content(v), args.runs)
    drawn = charts(c)
    page_s, page = timed(lambda: render_html(v), args.runs)
    svgs = sum(len(svg(chart).encode()) for chart in drawn.values())
    print(f"fleet: {args.hosts} hosts x {args.devices} devices, "
          f"{len(v.holders.rows)} holders, {len(v.trend)} days, {len(drawn)} charts")
    print(f"rows (build_report x {3 + len(v.trend)}): {rows_s:.2f} s; content: {content_s:.3f} s;"
          f" whole page with pygal: {page_s:.3f} s, {len(page.encode()):,} bytes")
    print("library     | first chart s (import) | all charts s | charts bytes | page bytes")
    for name, draw in LIBRARIES.items():
        try:
            first_s, _ = timed(lambda: draw(next(iter(drawn.values()))), 1)
        except ImportError as exc:
            print(f"{name:11} | not installed ({exc.name})")
            continue
        all_s, drawings = timed(lambda: [draw(chart) for chart in drawn.values()], args.runs)
        size = sum(len(d.encode()) for d in drawings)
        print(f"{name:11} | {first_s:22.3f} | {all_s:12.3f} | {size:12,} | "
              f"{len(page.encode()) - svgs + size:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
