"""deploy/grafana: built from the declarations, and every panel query answers in a real Prometheus.

The live test scrapes ``allsmi serve --simulate mixed --processes`` (with resource groups
from a config) and a node_exporter-style textfile target carrying the status of a real
``allsmi export --textfile`` run, with deploy/prometheus/allsmi-rules.yml loaded, then
resolves each dashboard's template variables through Prometheus' label API (as Grafana
does) and runs every panel query.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from allsmi.exporter.families import GAUGES

from ..conftest import run_allsmi
from ..exporter.server import run_serve
from ..prometheus_server import running_prometheus
from .support import (DASHBOARDS, DEPLOY, PENDING, RULES, VARIABLE, build_module, metric_names,
                      panels, pending_rules)

GRAFANA = DEPLOY / "grafana"
VARIABLES = ["datasource", "resource_group", "vendor", "host"]
#: Grafana's unit ids for the exporter's base units, written out independently of build.py.
UNIT_IDS = {"bytes": "bytes", "celsius": "celsius", "watts": "watt", "hertz": "hertz",
            "ratio": "percentunit", "seconds": "s", "joules": "joule"}
#: How the test fills Grafana's built-in interval variables (scrapes are 1 s apart).
BUILTINS = {"$__rate_interval": "10s", "$__range": "1m", "$__interval": "2s"}

CONFIG = """\
[[rules]]
resource_group = "training"
vendor = "nvidia"

[[rules]]
resource_group = "inference"
vendor = "amd"

[groups.training]
labels = { team = "ml-research" }
price_per_device_hour = 2.5
price_per_kwh = 0.2
currency = "USD"
budget_per_month = 100

[groups.inference]
labels = { team = "serving" }
"""


def load(name: str) -> dict[str, Any]:
    return json.loads((GRAFANA / name).read_text())


@pytest.mark.parametrize("name", DASHBOARDS)
def test_committed_json_is_the_build_output(name: str) -> None:
    assert (GRAFANA / name).read_text() == build_module().render(name), \
        "run: python deploy/grafana/build.py"


def test_build_check_mode_reports_a_stale_file(tmp_path: Path, monkeypatch) -> None:
    module = build_module()
    monkeypatch.setattr(module, "HERE", tmp_path)
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0 and module.main(["--check"]) == 0
    assert (tmp_path / "allsmi-fleet.json").read_text() == module.render("allsmi-fleet.json")


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_structure(name: str) -> None:
    dashboard = load(name)
    assert [v["name"] for v in dashboard["templating"]["list"]] == VARIABLES
    assert dashboard["templating"]["list"][0]["type"] == "datasource"
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        for target in panel.get("targets", ()):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            leftover = VARIABLE.findall(target["expr"])
            assert set(leftover) <= set(VARIABLES[1:]) | {"__rate_interval", "__range"}, leftover


def test_node_dashboard_has_a_panel_per_measured_field_in_its_declared_unit() -> None:
    found = {}
    for panel in panels(load("allsmi-node.json")):
        for target in panel.get("targets", ()):
            if panel["type"] == "timeseries":
                found.setdefault(target["expr"].split("{")[0], panel["fieldConfig"]["defaults"]["unit"])
    for family, _field, _scale in GAUGES:
        assert found.get(family.name) == UNIT_IDS[family.unit], family.name


def test_fleet_units_follow_the_declarations() -> None:
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in panels(load("allsmi-fleet.json"))
             if p["type"] != "row"}
    assert units["Utilization by group and vendor"] == "percentunit"
    assert units["Memory by group and vendor"] == "bytes"
    assert units["Power by group and vendor"] == "watt"
    assert units["Energy in the time range by group and vendor"] == "joule"
    assert units["Collection time per backend"] == "s"


# --- live: a real Prometheus scraping the simulated node, rules loaded -------------------------

class _Textfile(http.server.BaseHTTPRequestHandler):
    """node_exporter's textfile collector, reduced to serving one file as /metrics."""

    path_to_serve: Path

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        body = self.path_to_serve.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def query(base: str, expr: str, path: str = "/api/v1/query") -> list[dict[str, Any]]:
    url = f"{base}{path}?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback
            answer = json.load(resp)
    except urllib.error.HTTPError as err:
        raise AssertionError(f"{expr}: {err.read().decode(errors='replace')}") from None
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def label_values(base: str, label: str, match: str) -> list[str]:
    url = f"{base}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback
        return json.load(resp)["data"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("grafana-live")
    config = work / "config.toml"
    config.write_text(CONFIG)
    # The export only fills the textfile panel: without the budget it bills the window alone,
    # not the simulated month so far (which a budget's month-to-date columns replay).
    export_config = work / "export.toml"
    export_config.write_text(CONFIG.replace("budget_per_month = 100\n", ""))
    textfile = work / "allsmi_export.prom"
    since = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    export = run_allsmi("export", "--simulate", "mixed", "--config", str(export_config), "--since", since,
                        "--output", str(work / "bill.csv"), "--textfile", str(textfile),
                        timeout=180)  # (a fraction of a second alone; a loaded CI shares 2 cores)
    assert export.returncode in (0, 3), export.stderr
    handler = type("Handler", (_Textfile,), {"path_to_serve": textfile})
    textfile_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=textfile_server.serve_forever, daemon=True).start()
    serve = run_serve(["--simulate", "mixed", "--interval", "0.5", "--processes",
                       "--config", str(config)], tmp=work)
    try:
        serve.wait_ready()
        targets = [f"127.0.0.1:{serve.port}", f"127.0.0.1:{textfile_server.server_address[1]}"]
        # The hourly roll-ups (and the budgets read from them) evaluated every 2 s: the budget
        # panel's queries answer without waiting for an hour.
        rules = work / RULES.name
        rules.write_text(RULES.read_text().replace("interval: 1h", "interval: 2s"))
        with running_prometheus(work, targets, rule_files=[rules]) as base:
            deadline = time.monotonic() + 90
            ready = ("resource_group_vendor:allsmi_device_energy_joules:rate5m",
                     "resource_group_vendor:allsmi_device_allocated_seconds:rate5m",
                     "allsmi_export_success", "allsmi_process_memory_bytes",
                     "vendor:allsmi_devices:totals", "resource_group:allsmi_cost:month_to_date")
            while not all(query(base, q) for q in ready):
                assert time.monotonic() < deadline, "recording rules and scrapes did not arrive"
                time.sleep(0.5)
            yield base
    finally:
        serve.stop()
        textfile_server.shutdown()
        textfile_server.server_close()


def resolve(base: str, dashboard: dict[str, Any]) -> dict[str, str]:
    """Each query variable as Grafana resolves it: label values, then All (``.*``) where
    allowed, else the first value; each answer must be non-empty."""
    chosen: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        found = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["definition"])
        assert found, variable["definition"]
        values = label_values(base, found.group(2), substitute(found.group(1), chosen))
        assert values, f"${variable['name']} has no values"
        # a single value is regex-escaped inside a PromQL string, as Grafana does: 1\\.2
        chosen[variable["name"]] = variable["allValue"] if variable["includeAll"] else \
            re.escape(values[0]).replace("\\", "\\\\")
    return chosen


def substitute(expr: str, chosen: dict[str, str]) -> str:
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    for name, value in chosen.items():
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return expr


@pytest.mark.integration
@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_panel_query_returns_series(prometheus: str, name: str) -> None:
    dashboard = load(name)
    chosen = resolve(prometheus, dashboard)
    waiting = set(PENDING) | pending_rules()
    empty, checked = [], 0
    for panel in panels(dashboard):
        for target in panel.get("targets", ()):
            expr = substitute(target["expr"], chosen)
            assert not VARIABLE.search(expr), expr
            if metric_names(expr) & waiting:
                continue  # needs a metric not yet exported (tests/deploy/support.py PENDING)
            checked += 1
            if not query(prometheus, expr):
                empty.append(f"{panel['title']}: {expr}")
    assert checked > 10
    assert not empty, "panel queries without any series:\n" + "\n".join(empty)
