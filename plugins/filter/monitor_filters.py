"""Ansible adapter over acceldeploy.monitor (tools/acceldeploy/monitor/): the monitor role's
scrape targets, rules and Grafana dashboards, from the inventory, checked on the controller
before any host is touched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.inventory.ansible_adapter import filters, plain
from acceldeploy.monitor import device_exporters


def monitor_device_exporter_unit(
    planned: Mapping[str, Any], scrapers: list[str], device_nodes: list[str]
) -> dict[str, Any]:
    """plan | monitor_device_exporter_unit(monitors' addresses, device nodes found): the
    directives of its unit that depend on the host."""
    return device_exporters.unit(plain(dict(planned)), plain(scrapers), plain(device_nodes))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(
            monitor_device_exporter_unit,
        )
