"""Ansible adapter over acceldeploy.monitor (tools/acceldeploy/monitor/): the monitor role's
scrape targets, rules and Grafana dashboards, from the inventory, checked on the controller
before any host is touched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.inventory.ansible_adapter import filters, plain
from acceldeploy.monitor import dashboards, device_exporters, record, rules, targets


def monitor_host_view(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """hostvars[h] | monitor_host_view: what the targets need of one host."""
    return dict(plain(targets.host_view(hostvars)))  # only these keys are templated


def monitor_file_sd(views: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """{host: monitor_host_view} | monitor_file_sd: {job: file_sd target groups}."""
    return targets.file_sd(targets.targets(plain(dict(views))))


def monitor_metrics(views: Mapping[str, Any]) -> dict[str, str]:
    """{host: monitor_host_view} | monitor_metrics: {role: vLLM series name} of the stacks the
    monitors scrape ("a|b" where two name a series differently: rules.settings reads it)."""
    return targets.series(plain(dict(views)))


def monitor_state_spec(
    device_exporter: Mapping[str, Any], is_monitor: Any, paths: Mapping[str, Any]
) -> dict[str, list[str]]:
    """monitor_device_exporter | monitor_state_spec(monitor_is_monitor, {config_dir, libexec_dir,
    grafana_dir}): the files, trees and units the no-op path watches on this host."""
    return record.spec(plain(dict(device_exporter)), bool(is_monitor), plain(dict(paths)))


def monitor_units(hostvars: Mapping[str, Any], host: str) -> list[str]:
    """hostvars[h] | monitor_units(h): the host's units that run vLLM (their memory, their
    systemd state)."""
    return targets.host_units(str(host), plain(dict(hostvars)))


def monitor_rules(settings: Mapping[str, Any]) -> dict[str, Any]:
    """{alert_for, kv_cache_high, growth_window, growth_band_mib, ttft_slo, metrics} |
    monitor_rules: the rule file's document (metrics: monitor_metrics's names)."""
    return rules.document(rules.settings(plain(dict(settings))))


def monitor_dashboards(settings: Mapping[str, Any]) -> dict[str, str]:
    """The same settings as monitor_rules | monitor_dashboards: {file name: the dashboard's
    JSON text}, the same bytes `acceldeploy dashboards` writes."""
    return dashboards.files(rules.settings(plain(dict(settings))))


def monitor_device_exporter(view: Mapping[str, Any], host: str) -> dict[str, Any]:
    """hostvars[h] | monitor_host_view | monitor_device_exporter(h): the host's device exporter
    and how it runs ({'exporter': ''} for none), its inputs checked."""
    return device_exporters.plan(str(host), plain(dict(view)))


def monitor_device_exporter_unit(
    planned: Mapping[str, Any], scrapers: list[str], device_nodes: list[str]
) -> dict[str, Any]:
    """plan | monitor_device_exporter_unit(monitors' addresses, device nodes found): the
    directives of its unit that depend on the host."""
    return device_exporters.unit(plain(dict(planned)), plain(scrapers), plain(device_nodes))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(
            monitor_host_view,
            monitor_file_sd,
            monitor_metrics,
            monitor_units,
            monitor_state_spec,
            monitor_rules,
            monitor_dashboards,
            monitor_device_exporter,
            monitor_device_exporter_unit,
        )
