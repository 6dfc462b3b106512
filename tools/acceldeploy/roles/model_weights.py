"""model_weights's contract: this host's models and settings (checked), then, once the fleet's
fan-out is known, this host's part of it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from acceldeploy.downloads import fetchlock, weights
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


def versions_file(scope: Scope) -> str:
    """model_weights_versions_file, or (unset) the package's versions/fetch.txt."""
    chosen = scope[f"{ROLE}_versions_file"]
    path = Path(str(chosen)) if chosen else fetchlock.LOCK
    if not path.is_file():
        raise AcceldeployError(
            f"model_weights_versions_file: {path} is not a file on the controller"
        )
    return str(path)


def lock_digest(lock: str) -> str:
    """The wheel sets' version: sha1 of the lock's text without its trailing whitespace (what
    `lookup('file') | hash('sha1')` gave, so the controllers' caches keep their names)."""
    return hashlib.sha1(Path(lock).read_text().rstrip().encode()).hexdigest()


def wheels(scope: Scope) -> dict[str, Any]:
    """The controller's part, once for the play: the hub clients' wheel set each host needs
    (one per Python, architecture and glibc its first contact found; none with
    model_weights_find_links), each in <model_weights_wheels_cache>/<set>-<lock sha1>, and the
    command that downloads each one the controller lacks. With acceldeploy_offline a missing
    one is refused, naming that command."""
    lock, cache = versions_file(scope), str(scope[f"{ROLE}_wheels_cache"])
    digest = lock_digest(lock)
    found: dict[str, Any] = {}
    if not scope[f"{ROLE}_find_links"]:
        for host in scope["ansible_play_hosts"]:
            wanted = (scope.of(str(host)).get("preflight_target") or {}).get("fetch_wheels")
            if wanted:
                found.setdefault(str(wanted["key"]), dict(wanted))
    python = str(scope["ansible_playbook_python"])
    pip_args = [str(a) for a in scope[f"{ROLE}_pip_download_args"]]
    downloads: list[dict[str, Any]] = []
    for key, wheel_set in found.items():
        dest = f"{cache}/{key}-{digest}"
        if not os.path.isdir(dest):
            argv = fetchlock.command(python, wheel_set, lock, dest, pip_args)
            downloads.append({"key": key, "dest": dest, "argv": argv})
    offline = scope.flag("acceldeploy_offline", unset=False)
    if offline and downloads:
        commands = ", ".join(f"`{' '.join(d['argv'])}`" for d in downloads)
        raise AcceldeployError(
            f"acceldeploy_offline is true and the controller has no hub-client wheels for "
            f"{', '.join(str(d['key']) for d in downloads)} under {cache}; prepare them where PyPI "
            f"(or your index) is reachable with {commands} and copy {cache} over, or set "
            f"{ROLE}_find_links to a wheel server"
        )
    return {
        "model_weights_wheel_sets": list(found.values()),
        "model_weights_versions_sha1": digest,
        "model_weights_lock": lock,
        "model_weights_wheel_downloads": downloads,
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


CONTRACT = Contract(ROLE, plan, {"job": job, "wheels": wheels}, state_inputs, footprint, leaves)
