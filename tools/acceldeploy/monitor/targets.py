"""What the monitors scrape, from the inventory: Prometheus file_sd target groups per job.

- ``vllm``: every service's /metrics (a multi-node group's head), where the monitors reach it;
- ``node``: node exporter on every host (its systemd collector and the services' memory from
  the textfile collector);
- ``ray``: each node of a multi-node group, on its Ray metrics port;
- ``npu`` / ``gaudi``: the vendor's device exporter on Ascend / Gaudi hosts, where the role
  deploys it (device_exporters.py) or the inventory says it runs (``monitor_device_exporters``).

Every target is labelled with its inventory host (and service), so alerts and pictures name
what the operator knows. A mistake is refused here, naming the variable, before any host is
touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import groups, roledefaults
from acceldeploy.monitor import device_exporters
from acceldeploy.serving import cluster
from acceldeploy.serving.raynode import metrics_port
from acceldeploy.serving.service import parse_services, reached_by

GROUP = groups.MONITORS
JOBS = ("vllm", "node", "ray", "npu", "gaudi")
# The device exporters' ports: MindCluster's npu-exporter and Habana's metric exporter.
DEVICE_JOBS = {"ascend": ("npu", "monitor_npu_exporter_port"),
               "gaudi": ("gaudi", "monitor_gaudi_exporter_port")}  # fmt: skip
# What the role installs from the distribution: Prometheus on the monitors, node exporter on
# every host (the offline bundle carries them).
PACKAGES = ("prometheus",)
NODE_PACKAGES = ("prometheus-node-exporter", "dbus")


@dataclass(frozen=True)
class Target:
    job: str
    address: str
    port: int
    labels: tuple[tuple[str, str], ...]

    def group(self) -> dict[str, Any]:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return {"targets": [f"{host}:{self.port}"], "labels": dict(self.labels)}


def is_monitor(hostvars: Mapping[str, Any]) -> bool:
    return groups.in_group(hostvars, GROUP)


def address(host: str, hostvars: Mapping[str, Any]) -> str:
    """Where the other hosts reach a host (acceldeploy_node_ip, else ansible_host)."""
    return cluster.node_ip(hostvars, host)


def node_exporter_port(hostvars: Mapping[str, Any]) -> int:
    return int(roledefaults.value(hostvars, "monitor_node_exporter_port"))


def _services(host: str, hv: Mapping[str, Any]) -> list[Any]:
    platform = str(hv.get("acceldeploy_platform") or "")
    if not platform or not hv.get("acceldeploy_services") or not groups.serves(hv):
        return []
    try:
        return parse_services(hv["acceldeploy_services"], platform)
    except AcceldeployError as exc:
        raise AcceldeployError(f"{host}: {exc}") from None


def targets(every: Mapping[str, Mapping[str, Any]]) -> list[Target]:
    """Every target the monitors scrape: all input checked."""
    monitors = {h: address(h, hv) for h, hv in every.items() if is_monitor(hv)}
    if not monitors:
        raise AcceldeployError("the monitors group is empty: list the monitor hosts in it")
    found = []
    for host, hv in sorted(every.items()):
        here = address(host, hv)
        found.append(Target("node", here, node_exporter_port(hv), (("host", host),)))
        platform = str(hv.get("acceldeploy_platform") or "")
        device_exporters.plan(host, hv)  # its inputs refused here too, in preflight
        if platform in DEVICE_JOBS and device_exporters.scraped(hv):
            job, var = DEVICE_JOBS[platform]
            port = int(roledefaults.value(hv, var))
            found.append(Target(job, here, port, (("host", host),)))
        for service in _services(host, hv):
            labels = (("host", host), ("service", service.name), ("platform", platform))
            if service.nodes:
                node = (("host", host), ("service", service.name))
                found.append(Target("ray", here, metrics_port(service), node))
                if service.nodes[0] != host:
                    continue  # a worker node: its head answers the API
            reach = reached_by(service, host, here, monitors.values(), "monitor")
            found.append(Target("vllm", reach, service.port, labels))
    return found


VIEW_KEYS = ("group_names", "ansible_host", cluster.NODE_IP_VAR, "acceldeploy_platform",
             "acceldeploy_services", "monitor_node_exporter_port", "monitor_device_exporters",
             "monitor_npu_exporter_port", "monitor_gaudi_exporter_port",
             *device_exporters.VIEW_KEYS)  # fmt: skip


def host_view(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """What the targets need of a host's variables."""
    return {k: hostvars[k] for k in VIEW_KEYS if k in hostvars}


def host_units(host: str, hostvars: Mapping[str, Any]) -> list[str]:
    """This host's units that run vLLM: each service's (a worker node's Ray node unit)."""
    units = []
    for service in _services(host, hostvars):
        if service.nodes:
            units.append(f"{cluster.ray_unit_name(service)}.service")
        if not service.nodes or service.nodes[0] == host:
            units.append(f"{service.name}.service")
    return units


def file_sd(found: list[Target]) -> dict[str, list[dict[str, Any]]]:
    """job -> its file_sd target groups (every job present, empty when nothing runs it)."""
    return {job: [t.group() for t in found if t.job == job] for job in JOBS}
