"""Grafana dashboards for the fleet, from the definitions the monitor already has: one panel
per figure of monitor/figures.py (what `top` and `report` show, its vLLM series named by the
settings' metrics, as the rules name them), and the alerts of
monitor/rules.py (one stat panel each, firing or not, its expression and runbook in the
panel's description; their thresholds drawn on the figures they watch; their firing as
annotations). Each dashboard is Grafana's JSON model, with a Prometheus datasource variable,
so it imports on any Grafana.

The output is deterministic (fixed uids, ids in layout order, sorted keys): rendering again
changes no byte, so the monitor role's copy is idempotent.

`panel_queries` gives every query of a dashboard with Grafana's variables substituted, as
PromQL a Prometheus answers: the unit tests ask a real Prometheus over a backfilled history,
and a lab test can ask the lab's own."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from acceldeploy.monitor import figures, rules

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's units for figures.Figure.unit
UNITS = {
    "count": "short",
    "ratio": "percentunit",
    "per_second": "suffix:/s",
    "seconds": "s",
    "bytes": "bytes",
}
SERVICE_FILTER = 'host=~"$host",service=~"$service"'
HOST_FILTER = 'host=~"$host"'
LEGEND = "{{host}}/{{service}}"
FIRING = 'ALERTS{alertstate="firing"}'
SEVERITY_COLOURS = {"critical": "red", "warning": "orange"}
# What Grafana puts for its variables when it sends a query, as panel_queries substitutes them.
GRAFANA_INTERVALS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
WIDTH = 24  # Grafana's grid

_SELECTOR = re.compile(r"(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(?P<matchers>.*)\})?")
_THRESHOLD = re.compile(r"(?P<series>.+) > (?P<value>[0-9.eE+-]+)")


def filtered(query: str, matchers: str = SERVICE_FILTER) -> str:
    """One vector selector (a metric name, with or without {matchers}; a recording rule's
    name with colons) with the dashboard's label matchers added inside its braces."""
    found = _SELECTOR.fullmatch(query.strip())
    if not found:
        raise ValueError(f"not a single vector selector, cannot filter it: {query!r}")
    own = (found["matchers"] or "").strip().rstrip(",").strip()
    return f"{found['name']}{{{','.join(m for m in (own, matchers) if m)}}}"


def build(settings: rules.Settings) -> dict[str, dict[str, Any]]:
    """{file name: dashboard} for the fleet whose rules `settings` give."""
    alerts = alert_rules(rules.document(settings))
    shown = figures.figures(settings.metrics)
    return {"acceldeploy-fleet.json": fleet(alerts, shown), "acceldeploy-hosts.json": hosts()}


def text(dashboard: Mapping[str, Any]) -> str:
    """A dashboard as the file holds it: the same bytes for the same dashboard."""
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def files(settings: rules.Settings) -> dict[str, str]:
    """{file name: its text}: what the monitor role and `acceldeploy dashboards` write."""
    return {name: text(board) for name, board in build(settings).items()}


def fleet(
    alerts: list[dict[str, Any]], shown: tuple[figures.Figure, ...] = figures.FIGURES
) -> dict[str, Any]:
    """Every service's figures (`shown`: their vLLM series named as the rules name them) and
    the fleet's alerts, filtered by host and service."""
    thresholds = _thresholds(alerts, shown)
    layout = _Layout()
    panels = [layout.row("Alerts"), layout.place(_firing_table(), 24, 7)]
    for name, same_name in _by_name(alerts):
        panels.append(layout.place(_alert_stat(name, same_name), 4, 4))
    panels.append(layout.row("Services"))
    for figure in shown:
        panel = _figure_panel(figure, thresholds.get(figure.query))
        panels.append(layout.place(panel, 12, 8))
    return _dashboard(
        "acceldeploy-fleet",
        "acceldeploy fleet",
        "Every vLLM service's figures (acceldeploy top / report) and the fleet's alerts.",
        [_query_variable("host", 'up{job="vllm"}', "host"),
         _query_variable("service", 'up{job="vllm",host=~"$host"}', "service")],
        panels,
        [_alerts_annotation(SERVICE_FILTER)],
    )  # fmt: skip


def hosts() -> dict[str, Any]:
    """Each host: its services' units (state, restarts) and its memory."""
    layout = _Layout()
    memory = filtered(rules.SERVICE_MEMORY, HOST_FILTER)
    panels = [
        _timeseries("Services' units active", "short", [
            (f'node_systemd_unit_state{{state="active",{HOST_FILTER}}}', "{{host}}/{{name}}")]),
        _timeseries("Unit restarts in 15 minutes", "short", [
            (f"increase(node_systemd_service_restart_total{{{HOST_FILTER}}}[15m])",
             "{{host}}/{{name}}")]),
        _timeseries("Memory available", "bytes", [
            (f"node_memory_MemAvailable_bytes{{{HOST_FILTER}}}", "{{host}} available"),
            (f"node_memory_MemTotal_bytes{{{HOST_FILTER}}}", "{{host}} total")]),
        _timeseries("Services' memory (PSS, RSS, cgroup)", "bytes", [
            (memory, "{{host}}/{{service}} {{source}}")]),
    ]  # fmt: skip
    return _dashboard(
        "acceldeploy-hosts",
        "acceldeploy hosts",
        "Each host's vLLM units (node exporter's systemd collector) and its memory.",
        [_query_variable("host", 'up{job="node"}', "host")],
        [layout.place(panel, 12, 8) for panel in panels],
        [_alerts_annotation(HOST_FILTER)],
    )


def panel_queries(dashboard: Mapping[str, Any], host: str = ".*", service: str = ".*") -> list[str]:
    """Every query the dashboard sends (its panels' targets, then its annotations), as PromQL:
    $host and $service as given (regexes; ".*" for all), Grafana's intervals as in
    GRAFANA_INTERVALS."""
    exprs = [t["expr"] for panel in _panels(dashboard) for t in panel.get("targets", [])]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    return [_substituted(e, {"$host": host, "$service": service}) for e in exprs]


def variable_selectors(dashboard: Mapping[str, Any], host: str = ".*") -> list[tuple[str, str]]:
    """The (selector, label) of each label_values() variable, $host substituted: the series
    whose label values fill the variable's list."""
    found = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            call = re.fullmatch(r"label_values\((.*), *(\w+)\)", variable["definition"])
            assert call, variable["definition"]
            found.append((_substituted(call[1], {"$host": host}), call[2]))
    return found


def _substituted(expr: str, values: Mapping[str, str]) -> str:
    # the longest names first: $__rate_interval before $__range
    for name, value in sorted({**GRAFANA_INTERVALS, **values}.items(), key=lambda i: -len(i[0])):
        expr = expr.replace(name, value)
    return expr


def _panels(dashboard: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its own


class _Layout:
    """Grafana's grid, filled left to right, top to bottom; panel ids in that order."""

    def __init__(self) -> None:
        self.x = self.y = self.height = 0
        self.next_id = 1

    def place(self, panel: dict[str, Any], width: int, height: int) -> dict[str, Any]:
        if self.x + width > WIDTH:
            self.x, self.y, self.height = 0, self.y + self.height, 0
        panel = {"id": self.next_id, "gridPos": {"h": height, "w": width, "x": self.x,
                                                 "y": self.y}, **panel}  # fmt: skip
        self.next_id += 1
        self.x += width
        self.height = max(self.height, height)
        return panel

    def row(self, title: str) -> dict[str, Any]:
        if self.x:
            self.x, self.y, self.height = 0, self.y + self.height, 0
        row = {"type": "row", "title": title, "collapsed": False, "panels": []}
        return self.place(row, WIDTH, 1)


def _dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[dict[str, Any]],
    panels: list[dict[str, Any]],
    annotations: list[dict[str, Any]],
) -> dict[str, Any]:
    datasource = {"name": "datasource", "label": "Prometheus", "type": "datasource",
                  "query": "prometheus", "current": {}, "hide": 0, "options": [],
                  "refresh": 1, "regex": ""}  # fmt: skip
    builtin = {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
               "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
               "name": "Annotations & Alerts", "type": "dashboard"}  # fmt: skip
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["acceldeploy", "vllm"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "links": [],
        "templating": {"list": [datasource, *variables]},
        "annotations": {"list": [builtin, *annotations]},
        "panels": panels,
    }


def _query_variable(name: str, selector: str, label: str) -> dict[str, Any]:
    definition = f"label_values({selector}, {label})"
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": definition,
        "query": {"query": definition, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "refresh": 2,  # on the time range's change: hosts come and go
        "regex": "",
        "sort": 1,
        "hide": 0,
    }


def _alerts_annotation(matchers: str) -> dict[str, Any]:
    return {
        "name": "Firing alerts",
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": "red",
        "expr": filtered(FIRING, matchers),
        "step": "60s",
        "titleFormat": "{{alertname}}",
        "textFormat": "{{host}} {{service}}",
        "tagKeys": "severity",
        "useValueForTime": False,
    }


def _target(
    expr: str, legend: str = "", ref: str = "A", instant: bool = False, table: bool = False
) -> dict[str, Any]:
    return {"refId": ref, "datasource": DATASOURCE, "expr": expr, "legendFormat": legend,
            "range": not instant, "instant": instant,
            "format": "table" if table else "time_series"}  # fmt: skip


def _timeseries(
    title: str,
    unit: str,
    queries: list[tuple[str, str]],
    description: str = "",
    threshold: tuple[float, str] | None = None,
) -> dict[str, Any]:
    refs = "ABCDEFGH"
    defaults: dict[str, Any] = {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 10,
                                                         "showPoints": "never",
                                                         "spanNulls": False}}  # fmt: skip
    if unit == "percentunit":
        defaults |= {"min": 0, "max": 1}
    if threshold:
        value, colour = threshold
        defaults["thresholds"] = {"mode": "absolute", "steps": [
            {"color": "green", "value": None}, {"color": colour, "value": value}]}  # fmt: skip
        defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [_target(expr, legend, refs[i]) for i, (expr, legend) in enumerate(queries)],
    }  # fmt: skip


def _figure_panel(
    figure: figures.Figure, watched_by: tuple[float, dict[str, Any]] | None
) -> dict[str, Any]:
    description = f"`{figure.query}` (monitor/figures.py: {figure.key})"
    threshold = None
    if watched_by:
        value, alert = watched_by
        threshold = (value, SEVERITY_COLOURS.get(alert["labels"]["severity"], "red"))
        description += f"; the line: {alert['alert']} above {value:g} for {alert['for']}"
    query = [(filtered(figure.query), LEGEND)]
    return _timeseries(figure.title, UNITS[figure.unit], query, description, threshold)


def _firing_table() -> dict[str, Any]:
    hidden = {"Time": True, "Value": True, "__name__": True, "alertstate": True}
    return {
        "type": "table",
        "title": "Firing now",
        "description": "Prometheus's ALERTS series: every alert of monitor/rules.py firing now.",
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True, "footer": {"show": False}},
        "transformations": [{"id": "organize", "options": {"excludeByName": hidden}}],
        "targets": [_target(filtered(FIRING), instant=True, table=True)],
    }


def _alert_stat(name: str, same_name: list[dict[str, Any]]) -> dict[str, Any]:
    first = same_name[0]
    severity = first["labels"]["severity"]
    exprs = "; ".join(f"`{rule['expr']}`" for rule in same_name)
    description = (f"{severity}, when {exprs} for {first['for']}. "
                   f"Next: {first['annotations']['runbook']}")  # fmt: skip
    matchers = f'alertname="{name}",alertstate="firing",{SERVICE_FILTER}'
    steps = [{"color": "green", "value": None},
             {"color": SEVERITY_COLOURS.get(severity, "red"), "value": 1}]  # fmt: skip
    return {
        "type": "stat",
        "title": name,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": "short", "noValue": "0", "thresholds": {
            "mode": "absolute", "steps": steps}}, "overrides": []},
        "options": {"colorMode": "background", "graphMode": "none", "textMode": "value",
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "targets": [_target(f"count(ALERTS{{{matchers}}})", instant=True)],
    }  # fmt: skip


def alert_rules(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The alerts of a rule file's document (rules.document), in its order."""
    return [r for group in document["groups"] for r in group["rules"] if "alert" in r]


def _by_name(alerts: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The alerts by name, in rules.py's order (one name per SLO service, for example)."""
    names: dict[str, list[dict[str, Any]]] = {}
    for alert in alerts:
        names.setdefault(alert["alert"], []).append(alert)
    return list(names.items())


def _thresholds(
    alerts: list[dict[str, Any]], shown: tuple[figures.Figure, ...]
) -> dict[str, tuple[float, dict[str, Any]]]:
    """{figure query: (number, alert)} for each alert that fires when a figure's own query
    rises above a number (KV cache over monitor_kv_cache_high): the line on its panel."""
    queries = {figure.query for figure in shown}
    found = {}
    for alert in alerts:
        match = _THRESHOLD.fullmatch(alert["expr"])
        if match and match["series"] in queries:
            found[match["series"]] = (float(match["value"]), alert)
    return found
