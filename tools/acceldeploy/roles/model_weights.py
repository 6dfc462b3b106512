"""model_weights's contract: this host's models and settings (checked), then, once the fleet's
fan-out is known, this host's part of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.downloads import weights
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.scope import Scope
from acceldeploy.roles.contract import Contract

ROLE = "model_weights"


def plan(scope: Scope) -> dict[str, Any]:
    settings = weights.Settings.check({
        name: scope[f"{ROLE}_{name}"]
        for name in ("strategy", "seed_host", "shared_storage", "root", "verify")
    })  # fmt: skip
    specs = weights.model_specs(scope[f"{ROLE}_services"], scope.flag(f"{ROLE}_require_revision"))
    info = {
        "specs": [spec.to_dict() for spec in specs],
        "settings": {
            "strategy": settings.strategy, "seed_host": settings.seed_host,
            "shared_storage": settings.shared_storage, "root": settings.root,
            "verify": settings.verify,
        },
        "address": scope.get(f"{ROLE}_seed_address") or scope.get("ansible_host", scope.host),
        "port": int(scope[f"{ROLE}_seed_port"]),
    }  # fmt: skip
    return {"model_weights_info": info}


def fanout(
    infos: Mapping[str, Mapping[str, Any]],
    all_hosts: Sequence[str] = (),
    inventory_hosts: Sequence[str] = (),
) -> dict[str, Any]:
    """{host: its info} of the hosts that passed -> per host, the hub / pull / verify / serve
    model lists and its seed. A seed among `all_hosts` that an earlier check refused is not
    this host's error (the run stops at preflight's summary, naming it); one among
    `inventory_hosts` that --limit left out of the run is."""
    hosts = dict(infos)
    refused = [h for h in all_hosts if h not in hosts]
    everyone = set(all_hosts)
    limited_out = [h for h in inventory_hosts if h not in everyone]
    try:
        jobs: dict[str, Any] = weights.fanout(hosts, list(hosts), refused, limited_out)
    except (KeyError, ValueError) as exc:
        raise AcceldeployError(f"model_weights_fanout: {exc}") from None
    return jobs


def job(scope: Scope) -> dict[str, Any]:
    """This host's part of the fan-out (model_weights_jobs), whether it has anything to do, and
    with which interpreters."""
    mine = scope[f"{ROLE}_jobs"][scope.host]
    busy = len(mine["hub"] + mine["pull"] + mine["verify"]) > 0
    return {
        "model_weights_job": mine,
        "model_weights_busy": busy,
        "model_weights_python": f"{scope[f'{ROLE}_venv']}/bin/python",
        "model_weights_hub_python": scope[f"{ROLE}_venv_python"] if busy else "",
    }


def state_inputs(scope: Scope) -> dict[str, Any]:
    """Who downloads what and every setting that changes the result on the host; tokens stay
    out."""
    return {
        **{name: scope[f"{ROLE}_{name}"]
           for name in ("job", "info", "venv", "venv_python", "host_wheels", "find_links")},
        "endpoints": [scope[f"{ROLE}_hf_endpoint"], scope[f"{ROLE}_modelscope_endpoint"]],
    }  # fmt: skip


def footprint(scope: Scope) -> dict[str, Any]:
    return weights.state_spec(
        scope[f"{ROLE}_job"], str(scope[f"{ROLE}_root"]), str(scope[f"{ROLE}_venv"])
    )


def leaves(scope: Scope) -> dict[str, list[str]]:
    """The hub clients' environment and their wheels (the weights go by revision)."""
    return {"trees": [str(scope[f"{ROLE}_venv"]), str(scope[f"{ROLE}_host_wheels"])]}


CONTRACT = Contract(ROLE, plan, {"job": job}, state_inputs, footprint, leaves)
