"""Every metric the rules and dashboards name exists in the exporter's declarations."""

from __future__ import annotations

import json

from .support import (DASHBOARDS, DEPLOY, PENDING, all_rules, declared, metric_names,
                      panels, recorded)


def used_names() -> dict[str, set[str]]:
    """Where each allsmi metric is named: rules and dashboard panel queries."""
    used: dict[str, set[str]] = {}
    for rule in all_rules():
        for name in metric_names(rule["expr"]):
            used.setdefault(name, set()).add(rule.get("record") or rule["alert"])
    for file in DASHBOARDS:
        dashboard = json.loads((DEPLOY / "grafana" / file).read_text())
        for panel in panels(dashboard):
            for target in panel.get("targets", ()):
                for name in metric_names(target["expr"]):
                    used.setdefault(name, set()).add(f"{file}: {panel['title']}")
        for variable in dashboard["templating"]["list"]:
            for name in metric_names(variable.get("definition", "")):
                used.setdefault(name, set()).add(f"{file}: ${variable['name']}")
    return used


def test_every_named_metric_is_declared_or_recorded() -> None:
    known = declared() | set(recorded()) | set(PENDING)
    unknown = {name: sorted(where) for name, where in used_names().items() if name not in known}
    assert not unknown, f"metrics that no declaration or recording rule produces: {unknown}"


def test_pending_metrics_are_still_missing() -> None:
    """Remove a PENDING entry (tests/deploy/support.py) once its metric is declared."""
    landed = set(PENDING) & declared()
    assert not landed, f"now declared, remove from PENDING: {sorted(landed)}"


def test_pending_metrics_are_used() -> None:
    assert set(PENDING) <= set(used_names())


def test_names_are_found_in_queries() -> None:
    assert metric_names('sum by (x) (rate(allsmi_device_busy_seconds_total{a="allsmi_no"}[5m])) '
                        "/ resource_group:allsmi_cost_per_hour:rate5m") == {
        "allsmi_device_busy_seconds_total", "resource_group:allsmi_cost_per_hour:rate5m"}
    # label names in by/on lists and matchers are not metrics
    assert metric_names('sum by (instance, allsmi_total) (x:allsmi_devices:totals{allsmi_total=~"a"}) '
                        "* on (allsmi_kind) group_left (allsmi_kind) allsmi_device_info") == {
        "x:allsmi_devices:totals", "allsmi_device_info"}
