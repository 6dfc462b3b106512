"""monitor's contract: on a monitor, the vLLM series names of the stacks it scrapes, its scrape
targets, rules and dashboards; on every host, its device exporter."""

from __future__ import annotations

from typing import Any

from acceldeploy.inventory.ansible_adapter import plain
from acceldeploy.inventory.listeners import Listener
from acceldeploy.inventory.scope import Scope
from acceldeploy.monitor import dashboards, device_exporters, record, rules, targets
from acceldeploy.roles.contract import Contract
from acceldeploy.serving import hostplan

ROLE = "monitor"
GROUP = "monitors"
# monitor_<name>: what the rules and dashboards are made from (with the series names).
RULE_INPUTS = (
    "alert_for", "kv_cache_high", "prefix_cache_drop", "growth_window", "growth_band_mib",
    "ttft_slo",
)  # fmt: skip


def is_monitor(scope: Scope) -> bool:
    return GROUP in (scope.get("group_names") or [])


def host_view(hostvars: Any) -> dict[str, Any]:
    """What the targets need of one host's variables."""
    return dict(plain(targets.host_view(hostvars)))


def device_exporter(scope: Scope) -> dict[str, Any]:
    return device_exporters.plan(scope.host, host_view(scope.of(scope.host)))


def node(scope: Scope) -> dict[str, Any]:
    """This host's part (every host's): its device exporter, the units that run vLLM here
    (their memory, and node exporter's systemd collector), the address node exporter listens
    on, and who may scrape it (the monitors, besides localhost)."""
    own = {
        "acceldeploy_platform": scope.get("acceldeploy_platform", ""),
        "acceldeploy_services": scope.get("acceldeploy_services", []),
    }
    return {
        "monitor_device_exporter": device_exporter(scope),
        "monitor_host_units": targets.host_units(scope.host, own),
        "monitor_node_address": hostplan.addresses([scope.host], scope.inventory)[0],
        "monitor_scrapers": hostplan.addresses(scope.group(GROUP), scope.inventory),
    }


def plan(scope: Scope) -> dict[str, Any]:
    facts = node(scope)
    if not is_monitor(scope):
        return facts
    fleet = {
        host: host_view(hostvars)
        for host, hostvars in scope.hosts([str(h) for h in scope[f"{ROLE}_fleet_hosts"]]).items()
    }
    metrics = targets.series(fleet)
    chosen = rules.settings({**scope.fields(ROLE, RULE_INPUTS), "metrics": metrics})
    return {
        "monitor_metrics": metrics,
        "monitor_file_sd": targets.file_sd(targets.targets(fleet)),
        "monitor_rules": rules.document(chosen),
        "monitor_dashboards": dashboards.files(chosen),
        **facts,
    }


def state_inputs(scope: Scope) -> dict[str, Any]:
    """Every input of the files the role writes."""
    return {
        "device_exporter": scope[f"{ROLE}_device_exporter"],
        **{name: scope.get(f"{ROLE}_{name}", {})
           for name in ("file_sd", "rules", "dashboards", "metrics")},
        "node": [scope[f"{ROLE}_{name}"]
                 for name in ("node_address", "node_exporter_port", "scrapers", "host_units",
                              "memory_interval", "textfile_dir")],
        "prometheus": [scope[f"{ROLE}_{name}"]
                       for name in ("prometheus_bind", "prometheus_port", "scrape_interval",
                                    "retention")],
        "paths": [scope[f"{ROLE}_{name}"]
                  for name in ("config_dir", "libexec_dir", "grafana_dashboards_dir",
                               "download_dir")],
    }  # fmt: skip


def footprint(scope: Scope) -> dict[str, list[str]]:
    """The files, trees and units the role keeps on this host."""
    paths = {"config_dir": scope[f"{ROLE}_config_dir"], "libexec_dir": scope[f"{ROLE}_libexec_dir"],
             "grafana_dir": scope[f"{ROLE}_grafana_dashboards_dir"]}  # fmt: skip
    return record.spec(scope[f"{ROLE}_device_exporter"], is_monitor(scope), paths)


def leaves(scope: Scope) -> dict[str, list[str]]:
    return record.node_owned(device_exporter(scope), str(scope[f"{ROLE}_libexec_dir"]))


def listeners(scope: Scope) -> list[Listener]:
    """Where the fleet has monitors: Prometheus on a monitor, then each exporter they scrape."""
    return targets.own_listeners(scope.of(scope.host)) if scope.group(GROUP) else []


def ports_checked(scope: Scope) -> list[str]:
    """A monitor checks every host it scrapes (its exporters' ports are the monitor's
    inputs)."""
    return [str(h) for h in scope[f"{ROLE}_fleet_hosts"]] if is_monitor(scope) else []


CONTRACT = Contract(ROLE, plan, state_inputs=state_inputs, footprint=footprint, leaves=leaves,
                    listeners=listeners, ports_checked=ports_checked)  # fmt: skip
