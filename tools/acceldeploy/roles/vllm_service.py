"""vllm_service's contract: every service's unit from the host plan, and the host's part in
its multi-node services (what preflight compares across their nodes); what the no-op path's
key covers, and the files and units the role owns."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.downloads import weights
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway import plan as gateway_plan
from acceldeploy.host.state.prune import revision_patterns as prune_revisions
from acceldeploy.inventory.ansible_adapter import plain
from acceldeploy.inventory.listeners import Listener
from acceldeploy.inventory.scope import Scope
from acceldeploy.platforms.gaudi import runtime as gaudi
from acceldeploy.roles.contract import Contract
from acceldeploy.serving import cluster, hostplan
from acceldeploy.serving.layout import UnitLayout
from acceldeploy.serving.service import host_services, service_listeners

ROLE = "vllm_service"
# The toolkit's own scripts installed beside the launchers (tools/acceldeploy/host/helpers/,
# through roles/vllm_service/files/), with the host's TCP reader and peer dial they import; a
# node of a multi-node service also gets ray-wait (a Ray group's head waits with it for every
# node) and vllm-dp-watch (a data-parallel group node's watch of its peers).
HELPERS = ("vllm-ready", "vllm-drain", "vllm-unit-verify", "acceldeploy_procnet.py")
NODE_HELPERS = ("ray-wait", "vllm-dp-watch")


def plan_vars(scope: Scope) -> dict[str, Any]:
    """The variables the host plan reads (hostplan.PLAN_VARS; an unset one as ''), with the
    addresses of the nodes its multi-node services name."""
    values = {name: scope.get(name, "") for name in hostplan.PLAN_VARS}
    values.update(derived_defaults(scope, values))
    services = plain(values.get("acceldeploy_services"))
    values[hostplan.NODE_IPS_VAR] = hostplan.services_node_ips(services, scope.inventory)
    return {k: v for k, v in values.items() if v is not None}


# The role's variables whose default (null) the contract derives (derived_defaults).
DERIVED = (f"{ROLE}_allow_from", f"{ROLE}_topology")


def derived_defaults(scope: Scope, values: Mapping[str, Any]) -> dict[str, Any]:
    """The role's variables whose default (null) is derived from the fleet: the addresses a
    service takes traffic from (the gateways' and the monitors'), and the topology
    gaudi_runtime recorded on the host."""
    derived: dict[str, Any] = {}
    if values.get(f"{ROLE}_allow_from") is None:
        fronts = [*(str(h) for h in scope[f"{ROLE}_gateways"]), *scope.group("monitors")]
        derived[f"{ROLE}_allow_from"] = hostplan.addresses(fronts, scope.inventory)
    if values.get(f"{ROLE}_topology") is None:
        local = plain(scope.get("ansible_local") or {})
        derived[f"{ROLE}_topology"] = gaudi.recorded_topology(
            local.get("acceldeploy_gaudi_runtime")
        )
    return derived


def gateway_targets(scope: Scope, names: Sequence[str]) -> list[dict[str, str]]:
    """[{gateway, socket, service}]: where the rollout drains each of the named services before
    its restart and readies it after its gate (the gateways' own frontends decide)."""
    gateways = scope.hosts([str(g) for g in scope[f"{ROLE}_gateways"]])
    views = {
        gateway: {"frontends": plain(view.get("gateway_frontends", [])),
                  "socket": str(plain(view.get("gateway_stats_socket", "")) or "")}
        for gateway, view in gateways.items()
    }  # fmt: skip
    return gateway_plan.targets(views, scope.host, list(names))


def plan(scope: Scope) -> dict[str, Any]:
    values = plan_vars(scope)
    units = [unit.to_dict() for unit in hostplan.plan_host(values)]
    node_view = hostplan.node_view(values)
    return {
        "vllm_service_units": units,
        "vllm_service_node_view": node_view,
        "vllm_service_helpers": [*HELPERS, *(NODE_HELPERS if node_view.get("services") else ())],
        "vllm_service_gateway_targets": gateway_targets(scope, [str(u["name"]) for u in units]),
    }


def secret_env(services: Sequence[Mapping[str, Any]], name: str) -> str:
    """The 0600 EnvironmentFile of a service: VLLM_API_KEY=<its api_key> (use under no_log)."""
    for service in services:
        if service.get("name") == name and service.get("api_key"):
            key = str(service["api_key"])
            if "\n" in key:
                raise AcceldeployError(f"service {name}: api_key cannot contain a newline")
            return f"VLLM_API_KEY={key}\n"
    return ""


def secrets_digest(services: Sequence[Mapping[str, Any]], names: Sequence[str]) -> str:
    """sha256 of the named services' secrets files: part of the no-op path's key without the
    key itself appearing anywhere."""
    text = json.dumps([secret_env(services, name) for name in names])
    return hashlib.sha256(text.encode()).hexdigest()


def layout(scope: Scope) -> UnitLayout:
    return UnitLayout(
        scope[f"{ROLE}_launcher_dir"], scope[f"{ROLE}_secret_dir"], scope[f"{ROLE}_last_good_dir"]
    )


def state_inputs(scope: Scope) -> dict[str, Any]:
    units = scope[f"{ROLE}_units"]
    dirs = layout(scope)
    return {
        "units": units,
        "env_key": scope[f"{ROLE}_env_key"],
        "user": scope[f"{ROLE}_user"],
        "dirs": {"launcher": dirs.launcher_dir, "secret": dirs.secret_dir,
                 "last_good": dirs.last_good_dir},
        "argcheck": scope.flag(f"{ROLE}_argcheck"),
        "secrets": secrets_digest(scope.get("acceldeploy_services", []),
                                  [str(u["name"]) for u in units]),
    }  # fmt: skip


def footprint(scope: Scope) -> dict[str, list[str]]:
    """Every file the role writes (units, launchers, secrets, helpers, the rollback point),
    the service user's entries, and each unit (its state: active, enabled)."""
    dirs = layout(scope)
    units = scope[f"{ROLE}_units"]
    files = [dirs.helper(helper) for helper in scope[f"{ROLE}_helpers"]]
    files += ["/etc/passwd", "/etc/group"]
    for unit in units:
        files += dirs.files(str(unit["name"]), argcheck=bool(unit.get("argcheck")))
    return {"files": [str(f) for f in files], "units": [f"{u['name']}.service" for u in units]}


def leaves(scope: Scope) -> dict[str, list[str]]:
    """Its helpers' and launchers' directory, the secrets and the rollback copies."""
    dirs = layout(scope)
    return {"trees": [dirs.launcher_dir, dirs.secret_dir, dirs.last_good_dir]}


def gates(scope: Scope) -> dict[str, Any]:
    """In the serve stage's batch: the readiness gate of each multi-node group this host is a
    node of, marked `restarting` when any node restarts one of the group's units in this run
    (its vllm_service_restart)."""
    planned = [unit["readiness"] for unit in scope[f"{ROLE}_units"] if unit.get("readiness")]
    nodes = {node for gate in planned for node in gate["units_by_node"]}
    restarts = {
        node: plain(scope.of(node).get(f"{ROLE}_restart") or [])
        for node in sorted(nodes)
        if node in scope.inventory
    }
    return {"vllm_service_gates": cluster.gates_for_run(planned, restarts)}


def prune(scope: Scope) -> dict[str, Any]:
    """Once every batch passed its gate, on a host this run switched: acceldeploy_prune's
    patterns (every revision of each model served here; none on shared storage, where other
    hosts serve from them), what stays (the revisions the units serve from now on, and every
    one the models stage keeps here: a seed's for the hosts it feeds) and the files whose text
    keeps a revision (the launchers and their rollback copies)."""
    paths = [str(unit["launch"]["model_path"]) for unit in scope[f"{ROLE}_units"]]
    settings = scope["model_weights_info"]["settings"]
    held = weights.kept_dirs(scope["model_weights_job"], str(settings["root"]))
    return {"vllm_service_model_revisions": {
        "patterns": [] if settings.get("shared_storage") else prune_revisions(paths),
        "current": sorted({*paths, *held}),
        "in_use_files": layout(scope).launch_globs(),
    }}  # fmt: skip


def listeners(scope: Scope) -> list[Listener]:
    """Each service's API (on a group's head), then its group's ports."""
    return service_listeners(host_services(scope.host, scope.of(scope.host)), scope.host)


CONTRACT = Contract(ROLE, plan, {"gates": gates, "prune": prune}, state_inputs=state_inputs,
                    footprint=footprint,
                    leaves=leaves, listeners=listeners)  # fmt: skip
