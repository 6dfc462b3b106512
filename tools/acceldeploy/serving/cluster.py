"""A service that spans hosts: the group's nodes, their addresses and each node's part.

A service with `nodes: [a, b, ...]` runs over those inventory hosts in one of two ways
(`backend`):

- ray (the default): one Ray cluster over the nodes. Every node runs the Ray node unit
  `ray-<service>` (`ray start --head` on the first node, `ray start --address=<head>:
  <cluster_port>` on the others) and the head runs vLLM with `--distributed-executor-backend
  ray`, its TP x PP ranks spread evenly over the nodes. Ray workers inherit their node's
  environment, so the platform's variables, the devices and the network variables
  (`node_env`) are set on every node's Ray unit, before `ray start`.
- mp: data parallel across the nodes on vLLM's own multiprocessing, upstream's multi-node
  recipe (vllm-ascend's tutorials): each node runs one whole replica (TP x PP over its own
  devices); the head runs the API server with `--data-parallel-size <nodes>
  --data-parallel-size-local 1 --data-parallel-address <head> --data-parallel-rpc-port
  <cluster_port>`, every other node the unit `dp-<service>`, the same engine with
  `--headless --data-parallel-start-rank <its place in nodes>` (dpnode.py).

`check_groups` is the preflight over the whole inventory: every node is in it, defines the
same service, and agrees with the others on platform, stack, model, layout and device count;
a node in the run (--limit) without its head is refused. `check_node_env` refuses a per-node
network variable (its address, its NIC) set once in the service's env for every node.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.host.readiness import gate as readiness
from acceldeploy.inventory import bounds
from acceldeploy.planner.platforms import HostPlatform
from acceldeploy.serving import backends
from acceldeploy.serving.service import Service

NODE_IP_VAR = "acceldeploy_node_ip"
# What the nodes of one group must agree on, as Service attributes.
SHARED = ("nodes", "backend", "model", "revision", "tensor_parallel_size",
          "pipeline_parallel_size", "cluster_port", "port")  # fmt: skip


def node_ip(hostvars: Mapping[str, Any], host: str) -> str:
    """The address a node is reached on by the others: acceldeploy_node_ip, else ansible_host."""
    given = hostvars.get(NODE_IP_VAR) or hostvars.get("ansible_host") or host
    try:
        return str(ipaddress.ip_address(str(given)))
    except ValueError:
        var = NODE_IP_VAR if hostvars.get(NODE_IP_VAR) else "ansible_host"
        raise AcceldeployError(
            f"{host}: {var} is {given!r}, not an IP address; a node of a multi-node service "
            f"needs one: set {NODE_IP_VAR} to its address on the network the nodes share"
        ) from None


def node_unit_name(service: Service) -> str:
    """The unit a node of a group runs besides the head's vLLM: its Ray node (ray), its
    headless part (mp, nnodes)."""
    return _backend(service).node_unit(service.name)


def runs_node_unit(service: Service, host: str) -> bool:
    """Whether `host`, defining the service, runs its node unit (backends.py). A host outside
    the service's nodes is refused when its unit is planned (place)."""
    return bool(service.backend) and _backend(service).runs_node_unit(service.nodes, host)


def _backend(service: Service) -> backends.Backend:
    if service.backend is None:
        raise AcceldeployError(f"{service.where}: a service on one host has no node unit")
    return service.backend


@dataclass(frozen=True)
class Place:
    """One host's part in a group service: its rank among the nodes and the addresses."""

    service: Service
    host: str
    ips: Mapping[str, str]  # the group's nodes' addresses

    @property
    def rank(self) -> int:
        return self.service.nodes.index(self.host)

    @property
    def is_head(self) -> bool:
        return self.rank == 0

    @property
    def ip(self) -> str:
        return self.ips[self.host]

    @property
    def head_ip(self) -> str:
        return self.ips[self.service.nodes[0]]

    @property
    def head_address(self) -> str:
        return f"{_url_ip(self.head_ip)}:{self.service.cluster_port}"


def _url_ip(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def place(service: Service, host: str, ips: Mapping[str, str]) -> Place:
    if host not in service.nodes:
        raise AcceldeployError(
            f"{service.where}: this host ({host}) is not in its nodes {list(service.nodes)}; "
            "add it there or define the service only on the group's hosts"
        )
    missing = [n for n in service.nodes if n not in ips]
    if missing:
        raise AcceldeployError(
            f"{service.where}.nodes names {', '.join(missing)}, not in the inventory; add "
            "the host(s) or drop them from nodes"
        )
    seen: dict[str, str] = {}
    for node in service.nodes:
        if ips[node] in seen:
            raise AcceldeployError(
                f"{service.where}: nodes {seen[ips[node]]} and {node} have the same address "
                f"{ips[node]}; the nodes tell each other apart by address: set {NODE_IP_VAR} on "
                "each to its own address on the network the nodes share"
            )
        seen[ips[node]] = node
    return Place(service, host, {n: ips[n] for n in service.nodes})


def node_env(platform: HostPlatform, where: Place) -> dict[str, str]:
    """The network variables of one node: its own address, the NIC the collectives use (a
    wrong NIC picked by Gloo or HCCL is the commonest multi-node failure) and the platform's
    own per-node variables (data/platforms.yml node_env; `{ip}` is the node's address)."""
    env = {**platform.group_env, "VLLM_HOST_IP": where.ip}
    nic = where.service.network_interface
    if nic:
        env.update({name: nic for name in platform.interface_env})
    env.update({k: v.replace("{ip}", where.ip) for k, v in platform.node_env.items()})
    return env


def per_node_env(platform: HostPlatform) -> dict[str, str]:
    """The variables node_env gives each node its own value of, upper-case -> what sets them:
    its address (VLLM_HOST_IP and the platform's `{ip}` variables) and its NIC."""
    owners = {"VLLM_HOST_IP": f"{NODE_IP_VAR} (each node's own address, per host)"}
    owners.update(
        {
            key.upper(): f"{NODE_IP_VAR} (each node's own address, per host)"
            for key, value in platform.node_env.items()
            if "{ip}" in value
        }
    )
    owners.update(
        {
            key.upper(): "network_interface (the NIC the collectives use; per host when the "
            "nodes' NIC names differ)"
            for key in platform.interface_env
        }
    )
    return owners


def check_split(service: Service, platform: HostPlatform) -> None:
    """backend nnodes only where the stack's vLLM can split a model over hosts that way
    (versions/stacks.yml nnodes_split: tensor, pipeline)."""
    if not (service.backend and service.backend.needs_stack_split):
        return
    stack = f"stack {platform.stack} (vLLM {platform.vllm_version})"
    if not platform.nnodes_split:
        raise AcceldeployError(
            f"{service.where}.backend nnodes splits one model over the nodes with vLLM's own "
            f"--nnodes, which {stack} cannot run (versions/stacks.yml nnodes_split); use "
            "backend ray, or mp (one whole replica per node)"
        )
    tp, pp = service.tensor_parallel_size, service.pipeline_parallel_size
    needed = {"pipeline": pp > 1, "tensor": tp * pp // len(service.nodes) < tp}
    for split, used in needed.items():
        if used and split not in platform.nnodes_split:
            key = "pipeline_parallel_size" if split == "pipeline" else "tensor_parallel_size"
            raise AcceldeployError(
                f"{service.where}.{key}: {stack} splits only "
                f"{' and '.join(platform.nnodes_split)} parallelism over hosts with --nnodes, "
                f"not {split} (versions/stacks.yml nnodes_split, with its source); change the "
                "layout, or use backend ray"
            )


def check_node_env(service: Service, platform: HostPlatform) -> None:
    """A multi-node service's env may not set a per-node network variable: one value in the
    service's env would override every node's own (render.service_env applies it last)."""
    if not service.nodes:
        return
    owners = per_node_env(platform)
    for key in service.env:
        owner = owners.get(str(key).upper())
        if owner:
            raise AcceldeployError(
                f"{service.where}.env.{key} would give every node of {list(service.nodes)} "
                f"the same value, overriding each node's own that the toolkit sets; drop it "
                f"and set {owner} instead"
            )


def units_on(service: Service, host: str) -> list[str]:
    """The units of a group service on one of its nodes: its node unit, and on the head the
    vLLM unit."""
    node = [node_unit_name(service)] if runs_node_unit(service, host) else []
    return node + ([service.name] if service.nodes[0] == host else [])


def gate_spec(where: Place, platform: HostPlatform) -> dict[str, Any]:
    """What one node checks before its group starts or restarts (readiness.py judges it): its
    NIC and address, the head's cluster port free on the head and answered from every other
    node, an ephemeral-range port answered between every pair of nodes, on Ascend the NPUs in
    use (hccn_tool), on Gaudi the external ports of the HPUs in use (hl-smi)."""
    service = where.service
    port_use = _backend(service).cluster_port_use
    head = service.nodes[0]
    dials = [
        {"peer": peer, "address": where.ips[peer], "port": readiness.EPHEMERAL_PORT,
         "what": "a port of the ephemeral range, like the ZMQ, gloo and master ports the group "
         "picks at start"}
        for peer in service.nodes if peer != where.host
    ]  # fmt: skip
    if not where.is_head:
        dials.insert(
            0, {"peer": head, "address": where.head_ip, "port": service.cluster_port,
                "what": port_use},
        )  # fmt: skip
    var = f"cluster_port of {service.where}"
    free = [{"port": service.cluster_port, "what": port_use, "var": var}]
    return {
        "service": service.name,
        "host": where.host,
        "address": where.ip,
        "address_var": NODE_IP_VAR,
        "interface": service.network_interface or "",
        "owners": units_on(service, where.host),
        "units_by_node": {node: units_on(service, node) for node in service.nodes},
        "free_ports": free if where.is_head else [],
        "dials": dials,
        "npus": [],
        "hpus": [],
        **platform.behaviour.readiness_devices(service.devices),
    }


def gates_for_run(
    gates: list[Mapping[str, Any]], restarts: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The gates of the groups that will restart in this run: any node restarts one of the
    group's units (`restarts`: {node: the units it restarts}). Each comes back with
    `restarting`; a group none of whose nodes restarts is gated only where its units are not
    running (the module looks)."""
    due = []
    for gate in gates:
        restarting = any(
            set(restarts.get(node) or []) & set(units)
            for node, units in gate["units_by_node"].items()
        )
        due.append({**gate, "restarting": restarting})
    return due


def _shared(service: Service) -> dict[str, Any]:
    values = {key: getattr(service, key) for key in SHARED}
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
    return {**plain, "backend": service.backend.name if service.backend else ""}


def node_view(platform: str, pins: str, services: list[Service], stack: str = "") -> dict[str, Any]:
    """What check_groups needs of one host, as plain data (Ansible carries it between hosts):
    its platform, stack (name and environment pins) and every multi-node service with the keys
    the nodes share."""
    return {
        "platform": platform,
        "stack": stack,
        "pins": pins,
        "services": {
            s.name: {"where": s.where, "devices": len(s.devices), **_shared(s)}
            for s in services
            if s.nodes
        },
    }


def check_groups(views: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every inconsistency of the inventory's multi-node services, each naming the variable
    and the fix. `views`: {host: node_view(...)} of every host of the run. Each group is
    checked once, from its head, else (the head left out with --limit) from the first of its
    nodes in the run: a group is never half-deployed unchecked."""
    errors: list[str] = []
    for host, view in views.items():
        groups = view["services"]
        if len(groups) > 1:
            errors.append(
                f"{host}: services {', '.join(groups)} both span hosts; a host is a node of one "
                "multi-node service (one Ray cluster) at a time"
            )
        for name, service in groups.items():
            if _checker(name, service["nodes"], views) == host:
                errors += _check_group(host, name, views)
    return errors


def _checker(name: str, nodes: list[str], views: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The host a group is checked from: the first of its nodes in the run that defines it."""
    return next((n for n in nodes if name in views.get(n, {}).get("services", {})), None)


def _check_group(host: str, name: str, views: Mapping[str, Mapping[str, Any]]) -> list[str]:
    mine = views[host]["services"][name]
    where, head, errors = mine["where"], mine["nodes"][0], []
    for node in mine["nodes"]:
        if node == host:
            continue
        view = views.get(node)
        if view is None and node == head:
            errors.append(
                f"{where}: {host} is a node of it but its head {head} (the first of its nodes) "
                "is not in this run; a multi-node service deploys as one: add "
                f"{head} to --limit (--limit {','.join(mine['nodes'])}) or drop --limit"
            )
            continue
        if view is None:
            errors.append(
                f"{where}.nodes names {node}, which is not in this run; a multi-node service "
                "deploys as one: add the host to the inventory (and to --limit), or drop it "
                "from nodes"
            )
            continue
        theirs = view["services"].get(name)
        if theirs is None:
            errors.append(
                f"{node} is in {where}.nodes but does not define service {name}; give the "
                "group's hosts the same acceldeploy_services (e.g. in the group's group_vars)"
            )
            continue
        pairs = [
            ("acceldeploy_platform", views[host]["platform"], view["platform"]),
            ("acceldeploy_stack", views[host].get("stack"), view.get("stack")),
            *((f"{where}.{key}", mine[key], theirs[key]) for key in ("devices", *SHARED)),
        ]
        if views[host].get("stack") == view.get("stack"):  # else the pins differ as well
            pairs.append(
                ("the environment its python_env_* variables build (key)", views[host]["pins"],
                 view["pins"])
            )  # fmt: skip
        for key, a, b in pairs:
            if a != b:
                errors.append(
                    f"{where}: the nodes disagree on {key}: {host} has {a!r}, {node} has {b!r}; "
                    "make them the same on every node"
                )
    return errors


def _per_batch(serial: Any, units: int) -> int:
    """vllm_service_serial as Ansible reads serial: a count, or "N%" of the (rollout) units."""
    count, share = bounds.check_serial(serial)
    return count or max(1, int(units * share / 100))


def rollout(
    hosts: list[str],
    views: Mapping[str, Mapping[str, Any]],
    serial: Any,
    idle: Collection[str] = (),
) -> dict[str, Any]:
    """The serve play's batches: `serial` rollout units at a time, a unit being one host or a
    whole multi-node group (its nodes restart together: the head's vLLM waits for every node's
    Ray). `hosts` in play order; a group takes its first node's place. Units whose hosts all
    serve nothing now (`idle`: a bare host, or one whose services are all stopped) have no
    clients to keep, so they start together in the first batch; the rest follow `serial` at a
    time. Returns {"batch_of": {host: batch number}, "sizes": [hosts per batch]} (Ansible's
    serial list)."""
    units: list[list[str]] = []
    placed: set[str] = set()
    for host in hosts:
        if host in placed:
            continue
        groups = list(views.get(host, {}).get("services", {}).values())
        members = [n for n in groups[0]["nodes"] if n in hosts] if groups else [host]
        members = [host, *(n for n in members if n != host)]
        placed.update(members)
        units.append(members)
    starting = [unit for unit in units if all(h in idle for h in unit)]
    serving = [unit for unit in units if unit not in starting]
    per_batch = _per_batch(serial, len(units))
    batches = [[h for unit in starting for h in unit]] if starting else []
    for start in range(0, len(serving), per_batch):
        batches.append([h for unit in serving[start : start + per_batch] for h in unit])
    batch_of = {host: number for number, batch in enumerate(batches) for host in batch}
    sizes = [len(batch) for batch in batches]
    return {"batch_of": batch_of, "sizes": sizes}
