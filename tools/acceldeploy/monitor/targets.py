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

``series`` names the vLLM series the rules and figures read, from the stacks of the services
scraped (each host's acceldeploy_stack, else its platform's default): stacks that name one
differently are refused, naming both, rather than one of them silently watched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import groups, nonserving, roledefaults
from acceldeploy.inventory.listeners import Listener
from acceldeploy.monitor import device_exporters, rules
from acceldeploy.planner.stacks import STACK_VAR, STACKS_FILE, host_stack, metric_names
from acceldeploy.serving import cluster
from acceldeploy.serving.service import host_services, reached_by

GROUP = groups.MONITORS
JOBS = ("vllm", "node", "ray", *device_exporters.EXPORTERS)
NODE_EXPORTER_PORT = "monitor_node_exporter_port"
# What listens on each exporter's port, for the messages.
EXPORTERS = {
    NODE_EXPORTER_PORT: "node exporter",
    **{e.port_variable: e.name for e in device_exporters.EXPORTERS.values()},
}
PROMETHEUS_PORT = "monitor_prometheus_port"
LISTENERS = {PROMETHEUS_PORT: "Prometheus", **EXPORTERS}
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
    return int(roledefaults.value(hostvars, NODE_EXPORTER_PORT))


def exporters(hostvars: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(job, variable, port) of the exporters the monitors scrape on a host: node exporter,
    and its platform's device exporter where the role deploys it or the inventory says it
    runs."""
    found = [("node", NODE_EXPORTER_PORT, node_exporter_port(hostvars))]
    exporter = device_exporters.of_platform(str(hostvars.get("acceldeploy_platform") or ""))
    if exporter and device_exporters.scraped(hostvars):
        var = exporter.port_variable
        found.append((exporter.job, var, int(roledefaults.value(hostvars, var))))
    return found


def targets(every: Mapping[str, Mapping[str, Any]]) -> list[Target]:
    """Every target the monitors scrape: all input checked."""
    monitors = {h: address(h, hv) for h, hv in every.items() if is_monitor(hv)}
    if not monitors:
        raise AcceldeployError("the monitors group is empty: list the monitor hosts in it")
    found: list[Target] = []
    for host, hv in sorted(every.items()):
        here = address(host, hv)
        device_exporters.plan(host, hv)  # its inputs refused here too, in preflight
        for job, _, port in exporters(hv):
            found.append(Target(job, here, port, (("host", host),)))
        platform = str(hv.get("acceldeploy_platform") or "")
        for service in host_services(host, hv):
            labels = (("host", host), ("service", service.name), ("platform", platform))
            if service.backend:
                node = (("host", host), ("service", service.name))
                metrics = service.backend.node_metrics_port(service.cluster_port)
                if metrics:  # each node's Ray exports its metrics
                    found.append(Target("ray", here, metrics, node))
                if service.nodes[0] != host:
                    continue  # a worker node: its head answers the API
            reach = reached_by(service, host, here, monitors.values(), "monitor")
            found.append(Target("vllm", reach, service.port, labels))
    nonserving.refuse_unserved(
        GROUP,
        {host: hv.get("acceldeploy_services") for host, hv in every.items() if is_monitor(hv)},
        (hv.get("acceldeploy_services") for hv in every.values() if groups.serves(hv)),
    )
    return found


def own_listeners(hostvars: Mapping[str, Any]) -> list[Listener]:
    """What the monitor role opens on a host: Prometheus on a monitor (which may serve as
    well), then each exporter the monitors scrape there."""
    own = [Listener(port, var, LISTENERS[var]) for _, var, port in exporters(hostvars)]
    if is_monitor(hostvars):
        port = int(roledefaults.value(hostvars, PROMETHEUS_PORT))
        own.insert(0, Listener(port, PROMETHEUS_PORT, LISTENERS[PROMETHEUS_PORT]))
    return own


# The variable naming another stacks file (python_env's), as the hosts' other roles read it.
STACKS_FILE_VAR = "python_env_stacks_file"


def _heads(host: str, hv: Mapping[str, Any]) -> list[Any]:
    """The host's services whose /metrics the monitors scrape here (a group's head only)."""
    return [s for s in host_services(host, hv) if not s.nodes or s.nodes[0] == host]


def _stack(host: str, hv: Mapping[str, Any]) -> dict[str, Any]:
    platform = str(hv.get("acceldeploy_platform") or "")
    try:
        chosen, file = str(hv.get(STACK_VAR) or ""), str(hv.get(STACKS_FILE_VAR) or "")
        return host_stack(platform, chosen, file or None)
    except AcceldeployError as exc:
        raise AcceldeployError(f"{host}: {exc}") from None


def series(every: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """{role: vLLM series name} of rules.SERIES_ROLES: the names of the stacks whose services
    the monitors scrape (rules.DEFAULT_SERIES when none serves). Where two of them name a
    series differently (a fleet halfway through an upgrade), the names joined by "|" in the
    order of the stacks: rules.settings reads them as one recorded series that is either."""
    stacks: dict[tuple[str, str], dict[str, Any]] = {}
    for host, hv in sorted(every.items()):
        if _heads(host, hv):
            entry = _stack(host, hv)
            stacks.setdefault((entry["file"], entry["name"]), entry)
    named: dict[str, list[str]] = {}  # role -> its names, each once
    for entry in stacks.values():
        label = str(entry["name"])
        if entry["file"] != str(STACKS_FILE):
            label += f" of {entry['file']}"
        for role, name in metric_names(entry).items():
            if role not in rules.SERIES_ROLES:
                continue
            if not rules.METRIC_NAME.fullmatch(name):
                raise AcceldeployError(
                    f"stack {label}: metrics.{role} {name!r} is not a Prometheus metric name; "
                    f"fix it in {entry['file']}"
                )
            if name not in named.setdefault(role, []):
                named[role].append(name)
    return {role: "|".join(named.get(role) or [default])
            for role, default in rules.DEFAULT_SERIES.items()}  # fmt: skip


VIEW_KEYS = ("group_names", groups.SERVES_VAR, "ansible_host", cluster.NODE_IP_VAR,
             "acceldeploy_platform",
             "acceldeploy_services", STACK_VAR, STACKS_FILE_VAR,
             "monitor_node_exporter_port", "monitor_device_exporters",
             # the ports the inventory gives a host, which its exporters must not take
             "ansible_port", "monitor_prometheus_port", "gateway_frontends",
             "gateway_stats_port", *device_exporters.VIEW_KEYS)  # fmt: skip


def host_view(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """What the targets need of a host's variables."""
    return {k: hostvars[k] for k in VIEW_KEYS if k in hostvars}


def host_units(host: str, hostvars: Mapping[str, Any]) -> list[str]:
    """This host's units that run vLLM: each service's, and its node unit of a multi-node
    service (Ray's node, or a headless data-parallel rank)."""
    units = []
    for service in host_services(host, hostvars):
        if cluster.runs_node_unit(service, host):
            units.append(f"{cluster.node_unit_name(service)}.service")
        if not service.nodes or service.nodes[0] == host:
            units.append(f"{service.name}.service")
    return units


def file_sd(found: list[Target]) -> dict[str, list[dict[str, Any]]]:
    """job -> its file_sd target groups (every job present, empty when nothing runs it)."""
    return {job: [t.group() for t in found if t.job == job] for job in JOBS}
