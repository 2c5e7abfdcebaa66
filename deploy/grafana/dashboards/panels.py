"""The building blocks of Grafana's dashboard JSON: queries, panels, rows, the layout on
Grafana's 24 columns, the template variables and the dashboard around them."""

from __future__ import annotations

from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}


def target(expr: str, legend: str = "", table: bool = False, ref: str = "A") -> dict[str, Any]:
    out: dict[str, Any] = {"datasource": DS, "editorMode": "code", "expr": expr, "refId": ref}
    if table:
        out.update(format="table", instant=True, range=False, legendFormat="__auto")
    else:
        out.update(range=True, instant=False, legendFormat=legend or "__auto")
    return out


def targets(*specs: tuple[str, str], table: bool = False) -> list[dict[str, Any]]:
    return [target(expr, legend, table, chr(ord("A") + i)) for i, (expr, legend) in enumerate(specs)]


def panel(kind: str, title: str, description: str, unit_: str, tgts: list[dict[str, Any]],
          w: int, h: int, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": kind, "title": title, "description": description, "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit_}, "overrides": []},
        "options": {}, "targets": tgts, "gridPos": {"w": w, "h": h}}
    if kind == "timeseries":
        out["fieldConfig"]["defaults"]["custom"] = {"fillOpacity": 10, "showPoints": "never"}
        out["options"] = {"legend": {"displayMode": "table", "placement": "right",
                                     "calcs": ["lastNotNull", "max"]},
                          "tooltip": {"mode": "multi", "sort": "desc"}}
    elif kind == "stat":
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                          "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    elif kind == "table":
        out["transformations"] = [{"id": "merge", "options": {}},
                                  {"id": "organize", "options": {"excludeByName": {"Time": True}}}]
        out["options"] = {"showHeader": True, "cellHeight": "sm"}
    elif kind == "bargauge":
        out["options"] = {"displayMode": "gradient", "orientation": "horizontal",
                          "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    if "thresholds" in extra:
        out["fieldConfig"]["defaults"]["thresholds"] = {
            "mode": "absolute", "steps": [{"color": "green", "value": None}] + [
                {"color": color, "value": value} for value, color in extra.pop("thresholds")]}
        out["fieldConfig"]["defaults"]["color"] = {"mode": "thresholds"}
    if "links" in extra:
        out["fieldConfig"]["defaults"]["links"] = extra.pop("links")
    out.update(extra)
    return out


def table(title: str, description: str, columns: list[tuple[str, str, str]], w: int, h: int,
          **extra: Any) -> dict[str, Any]:
    """A table of instant queries merged on their labels, one named column per query:
    ``columns`` is (expression, column name, Grafana unit) each, so that every column says
    what it holds in its own unit. Grafana calls the value of query A "Value #A" where a
    panel has several queries, "Value" where it has one."""
    out = panel("table", title, description, "none",
                targets(*((expr, "") for expr, _name, _unit in columns), table=True), w, h, **extra)
    fields = ["Value"] if len(columns) == 1 else \
        [f"Value #{target['refId']}" for target in out["targets"]]
    out["transformations"][1]["options"]["renameByName"] = {
        field: name for field, (_expr, name, _unit) in zip(fields, columns)}
    out["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": name}, "properties": [{"id": "unit", "value": unit_}]}
        for _expr, name, unit_ in columns if unit_ != "none"]
    return out


def row(title: str) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"w": 24, "h": 1}}


def layout(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Number the panels and place them left to right, top to bottom, on Grafana's 24 columns."""
    x = y = line_h = 0
    for number, item in enumerate(items, 1):
        grid = item["gridPos"]
        if item["type"] == "row" or x + grid["w"] > 24:
            x, y, line_h = 0, y + line_h, 0
        grid.update(x=x, y=y)
        item["id"] = number
        x += grid["w"]
        line_h = max(line_h, grid["h"])
        if item["type"] == "row":
            x, y, line_h = 0, y + grid["h"], 0
    return items


def query_variable(name: str, label: str, query: str, *, all_: bool = True) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "definition": query, "query": {"query": query, "refId": f"allsmi-{name}"},
            "refresh": 2, "sort": 1, "regex": "", "hide": 0, "multi": all_, "includeAll": all_,
            "allValue": ".*" if all_ else None, "current": {}, "options": []}


def variables(host_all: bool) -> list[dict[str, Any]]:
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "refresh": 1, "regex": "", "hide": 0, "multi": False, "includeAll": False,
         "current": {}, "options": []},
        query_variable("resource_group", "Resource group",
                       "label_values(allsmi_device_info, resource_group)"),
        query_variable("vendor", "Vendor",
                       'label_values(allsmi_device_info{resource_group=~"$resource_group"}, vendor)'),
        query_variable("host", "Host", 'label_values(allsmi_device_info{resource_group=~'
                       '"$resource_group", vendor=~"$vendor"}, instance)', all_=host_all),
    ]


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]],
              host_all: bool, links: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["allsmi", "accelerators"],
        "editable": True, "graphTooltip": 1, "timezone": "browser", "refresh": "30s",
        "schemaVersion": 39, "version": 1, "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": variables(host_all)}, "annotations": {"list": []},
        "links": links, "panels": layout(panels)}


G = 'resource_group=~"$resource_group", vendor=~"$vendor"'   # group-level (every host)
S = G + ', instance=~"$host"'                                 # narrowed to the chosen hosts
DEVICE_LEGEND = "{{instance}} {{vendor}} {{index}} {{model}}"
