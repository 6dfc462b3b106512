"""How a service over several hosts runs (a service's `backend`): one class per backend, chosen
once when the service is parsed (`choose`). Whatever differs between ray, mp and nnodes is asked
of the service's backend; nothing else compares its name.

- ray (the default): one Ray cluster over the nodes (`ray-<service>` on every node), vLLM's Ray
  executor on the head, TP x PP spread over the nodes.
- mp: data parallel across the nodes on vLLM's own multiprocessing (vllm-ascend's multi-node
  tutorials): one whole replica per node, every node but the head headless (`dp-<service>`).
- nnodes: one replica's TP x PP spread over the nodes by vLLM's own `--nnodes`, every node but
  the head headless (`node-<service>`); only on stacks that can run it (cluster.check_split).

A value type at the bottom of serving: it imports nothing else of serving.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.listeners import Listener


class NodePlace(Protocol):
    """What a backend's flags need of one node's place in its group (cluster.Place)."""

    @property
    def rank(self) -> int: ...

    @property
    def is_head(self) -> bool: ...

    @property
    def head_ip(self) -> str: ...


class Backend:
    name: ClassVar[str]
    # The head's port the other nodes dial when cluster_port is unset, and what it is.
    default_cluster_port: ClassVar[int]
    cluster_port_kind: ClassVar[str]
    cluster_port_use: ClassVar[str]
    # Who listens on the head's ports, for a clash's message.
    listening: ClassVar[str] = (
        "the head's vLLM listens for its other nodes on cluster_port and for clients on port"
    )
    # The unit every node but a headless group's head runs beside the head's vLLM unit.
    unit_prefix: ClassVar[str]
    # The head serves the API; every other node runs a headless part of the group (what
    # `part` names), with no API server of its own.
    headless: ClassVar[bool] = False
    part: ClassVar[str] = ""
    # Each node runs a whole replica (data parallel), not a share of one.
    replica_per_node: ClassVar[bool] = False
    # Only stacks whose vLLM can split a model this way run it (versions/stacks.yml).
    needs_stack_split: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

    def node_unit(self, service_name: str) -> str:
        return f"{self.unit_prefix}{service_name}"

    def runs_node_unit(self, nodes: Sequence[str], host: str) -> bool:
        """Whether `host`, one of `nodes`, runs the node unit: every node, or every node but the
        head where the head's own vLLM unit is its first part."""
        return not (self.headless and nodes[0] == host)

    def engines(self, nodes: Sequence[str]) -> int:
        """The engines the head's API server spreads requests over."""
        return len(nodes) if self.replica_per_node else 1

    def replica_nodes(self, nodes: tuple[str, ...]) -> tuple[str, ...]:
        """The nodes one replica spans (none: one node's devices hold a whole replica)."""
        return () if self.replica_per_node else nodes

    def node_metrics_port(self, cluster_port: int) -> int | None:
        """Where each node exports its own Prometheus metrics, if it does."""
        return None

    def check_ports(self, port: int, cluster_port: int, var: str) -> None:
        """The service's own API port against the ports its group listens on."""
        metrics = self.node_metrics_port(cluster_port)
        if port not in (cluster_port, metrics):
            return
        clash = "is also its port" if port == cluster_port else (
            f"puts {self.cluster_port_kind}'s metrics on {metrics}, its port")  # fmt: skip
        raise AcceldeployError(
            f"{var}.cluster_port {cluster_port} {clash}: {self.listening}; give cluster_port "
            f"another port (default {self.default_cluster_port})"
        )

    def listeners(
        self, cluster_port: int, is_head: bool, service: str, where: str
    ) -> list[Listener]:
        """What a node of the group listens on besides the API port."""
        if not is_head:
            return []
        what = f"the {self.cluster_port_kind} port of service {service}"
        return [Listener(cluster_port, f"{where}.cluster_port", what)]

    def flags(self, nodes: Sequence[str], cluster_port: int, place: NodePlace) -> Mapping[str, Any]:
        """The group's `vllm serve` flags on this node."""
        raise NotImplementedError


class Ray(Backend):
    name = "ray"
    default_cluster_port = 6379
    cluster_port_kind = "Ray"
    cluster_port_use = "the head's Ray GCS port, ray start --port"
    listening = (
        "the head's Ray (GCS) listens on cluster_port, each node's Ray metrics on the next port, "
        "vLLM's API on its port"
    )
    unit_prefix = "ray-"

    def node_metrics_port(self, cluster_port: int) -> int:
        """Where each node's Ray exports its Prometheus metrics: the port after the cluster's."""
        return cluster_port + 1

    def listeners(
        self, cluster_port: int, is_head: bool, service: str, where: str
    ) -> list[Listener]:
        what = f"the Ray metrics of service {service}, on cluster_port + 1"
        metrics = Listener(self.node_metrics_port(cluster_port), f"{where}.cluster_port", what)
        return [*super().listeners(cluster_port, is_head, service, where), metrics]

    def flags(self, nodes: Sequence[str], cluster_port: int, place: NodePlace) -> Mapping[str, Any]:
        return {"distributed-executor-backend": "ray"}


class Mp(Backend):
    name = "mp"
    default_cluster_port = 13389
    cluster_port_kind = "data-parallel RPC"
    cluster_port_use = "the head's data-parallel RPC port, --data-parallel-rpc-port"
    unit_prefix = "dp-"
    headless = True
    part = "data-parallel rank"
    replica_per_node = True

    def flags(self, nodes: Sequence[str], cluster_port: int, place: NodePlace) -> Mapping[str, Any]:
        options: dict[str, Any] = {
            "data-parallel-size": self.engines(nodes),
            "data-parallel-size-local": 1,
            "data-parallel-address": place.head_ip,
            "data-parallel-rpc-port": cluster_port,
        }
        if not place.is_head:
            options.update({"headless": True, "data-parallel-start-rank": place.rank})
        return options


class Nnodes(Backend):
    name = "nnodes"
    default_cluster_port = 29501
    cluster_port_kind = "--master-port"
    cluster_port_use = "the head's torch.distributed master port, --master-port"
    unit_prefix = "node-"
    headless = True
    part = "node"
    needs_stack_split = True

    def flags(self, nodes: Sequence[str], cluster_port: int, place: NodePlace) -> Mapping[str, Any]:
        split: dict[str, Any] = {
            "nnodes": len(nodes),
            "node-rank": place.rank,
            "master-addr": place.head_ip,
            "master-port": cluster_port,
        }
        return split if place.is_head else {**split, "headless": True}


RAY = Ray()
BACKENDS: dict[str, Backend] = {b.name: b for b in (RAY, Mp(), Nnodes())}
DEFAULT: Backend = RAY


def choose(given: Any, nodes: tuple[str, ...], var: str) -> Backend | None:
    """The backend a service names: ray when it names none (no unit changes under a service that
    said nothing), none for a service on one host."""
    if not nodes:
        if given is not None:
            raise AcceldeployError(
                f"{var}.backend is for a service over several hosts (nodes); drop it, or list "
                "the hosts in nodes"
            )
        return None
    if given is None:
        return DEFAULT
    if not isinstance(given, str) or given not in BACKENDS:
        raise AcceldeployError(f"{var}.backend must be one of {', '.join(BACKENDS)}, got {given!r}")
    return BACKENDS[given]
