"""python_env's contract: the serving environment's commands, pins and rebuild key."""

from __future__ import annotations

from typing import Any

from acceldeploy import runtimes
from acceldeploy.downloads import wheelhouse
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
        "no_index": scope.flag("python_env_no_index"),
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


CONTRACT = Contract(ROLE, plan, state_inputs=state_inputs, footprint=footprint)
