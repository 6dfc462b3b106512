"""python_env's contract: the serving environment's commands, pins and rebuild key."""

from __future__ import annotations

from typing import Any

from acceldeploy import runtimes
from acceldeploy.downloads import wheelcache, wheelhouse
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.ansible_adapter import plain
from acceldeploy.inventory.scope import Scope
from acceldeploy.roles.contract import Contract

ROLE = "python_env"
# Each read as python_env_<name>.
INPUTS = (
    "platform", "stack", "manager", "stacks_file", "venv_path", "venv_python", "conda_root",
    "conda_env_path", "conda_channels", "find_links", "index_url", "extra_index_urls",
    "trusted_hosts", "install_from", "vllm_repo", "vllm_ascend_repo", "extra_packages",
    "env_scripts", "image", "tmp_dir", "soc_version", "build_from_sdist", "built_store",
    "wheel_cache",
)  # fmt: skip


def npu_names(scope: Scope) -> list[str]:
    """The chips npu-smi names on the host, as ascend_runtime recorded them (none before it
    ran)."""
    local = plain(scope.get("ansible_local") or {})
    npus = (local.get("acceldeploy_ascend_runtime") or {}).get("npus") or []
    return [str(npu.get("name")) for npu in npus]


def plan(scope: Scope) -> dict[str, Any]:
    inputs = {
        "controller_cache": str(wheelhouse.cache_dir()),
        **scope.fields(ROLE, INPUTS),
        "no_index": (
            runtimes.wheelhouse_only(str(scope["python_env_platform"] or ""))
            if scope["python_env_no_index"] is None
            else scope.flag("python_env_no_index")
        ),
        "npu_names": npu_names(scope),
    }
    return {"python_env_spec": runtimes.python_env_plan(inputs)}


def state_inputs(scope: Scope) -> dict[str, Any]:
    return {
        "spec": scope["python_env_spec"],
        "fact_file": scope["python_env_fact_file"],
        "verify_import": scope.flag("python_env_verify_import"),
    }


def footprint(scope: Scope) -> dict[str, list[str]]:
    return runtimes.python_env_state_spec(
        scope["python_env_spec"], str(scope["python_env_fact_file"])
    )


def wheels(scope: Scope) -> dict[str, Any]:
    """The controller's part, after the first contact: what its wheel cache
    (python_env_wheel_cache) lacks to install this host's cpu stack with its venv's interpreter
    (preflight_target's stack_wheels), and the command that adds it."""
    spec, cache = scope[f"{ROLE}_spec"], str(scope[f"{ROLE}_wheel_cache"])
    target = plain(scope.get("preflight_target") or {})
    wanted = target.get("stack_wheels") or {}
    argv = wheelcache.fetch_argv(
        spec, cache, str(wanted.get("python", "")), str(scope["ansible_playbook_python"]),
        str(scope[f"{ROLE}_stacks_file"] or "") or None,
    )  # fmt: skip
    command = f"PYTHONPATH=tools {' '.join(argv)}"
    return {
        "python_env_wheels_missing": wheelcache.stack_wheel_errors(spec, cache, target, command),
        "python_env_wheels_fetch": argv,
    }


def wheels_present(scope: Scope) -> dict[str, Any]:
    """After the fetch: nothing is missing any more (refused naming the wheel and the
    command that adds it)."""
    missing = wheels(scope)["python_env_wheels_missing"]
    if missing:
        offline = scope.flag("acceldeploy_offline", unset=False)
        raise AcceldeployError(
            ("acceldeploy_offline is true and " if offline else "") + "; ".join(missing)
        )
    return {}


CONTRACT = Contract(ROLE, plan, {"wheels": wheels, "wheels_present": wheels_present},
                    state_inputs=state_inputs, footprint=footprint)  # fmt: skip
