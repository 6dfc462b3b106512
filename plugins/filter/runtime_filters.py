"""Ansible adapter over acceldeploy.runtimes (tools/acceldeploy/runtimes/) and
acceldeploy.stacks for the roles ascend_runtime, gaudi_runtime and python_env: the roles
collect raw text on the hosts, these filters decide; bad input fails naming the variable.

acceldeploy is installed (editable) in the controller's venv by pyproject.toml."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy import runtimes
from acceldeploy.inventory.ansible_adapter import filters, plain
from acceldeploy.runtimes import envfanout


def gaudi_runtime_daemon_json(text: str, name: str = "habana", path: str = "") -> str:
    """daemon.json text | gaudi_runtime_daemon_json: with the habana runtime registered"""
    return runtimes.docker_daemon_with_runtime(
        str(text or ""), str(name), str(path or "/usr/bin/habana-container-runtime")
    )


def ascend_runtime_check(
    probe: Mapping[str, Any], stack: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """probe | ascend_runtime_check(stack, options): the verdict, what was found, the plan."""
    return runtimes.ascend_check(plain(probe), plain(stack), plain(options))


def gaudi_runtime_check(
    probe: Mapping[str, Any], stack: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    """probe | gaudi_runtime_check(stack, options)"""
    return runtimes.gaudi_check(plain(probe), plain(stack), plain(options))


def ascend_runtime_fact(check: Mapping[str, Any]) -> dict[str, Any]:
    """check | ascend_runtime_fact: the stable facts recorded for the launcher"""
    return runtimes.ascend_fact(plain(check))


def gaudi_runtime_fact(
    check: Mapping[str, Any], hccl: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """check | gaudi_runtime_fact(hccl result): the stable facts recorded for the launcher"""
    return runtimes.gaudi_fact(plain(check), plain(hccl) if hccl else None)


def gaudi_runtime_hccl(output: str) -> dict[str, Any]:
    """hccl_demo stdout | gaudi_runtime_hccl: {benchmark, nw_bandwidth_gbps, algo_bandwidth_gbps}"""
    return runtimes.parse_hccl_demo(str(output))


def python_env_verify(
    plan: Mapping[str, Any], pip_list: str, vllm_output: str = ""
) -> dict[str, Any]:
    """plan | python_env_verify(pip list --format=json, import vllm output)"""
    return runtimes.python_env_verify(plain(plan), str(pip_list), str(vllm_output))


def python_env_fact(plan: Mapping[str, Any], vllm_output: str = "") -> dict[str, Any]:
    """plan | python_env_fact(import vllm output): the local fact for the launcher"""
    return runtimes.python_env_fact(plain(plan), str(vllm_output or ""))


def python_env_record_key(record_text: str) -> str:
    return runtimes.record_key(str(record_text))


def python_env_fanout_plan(
    hosts: Sequence[Mapping[str, Any]], enabled: bool = True
) -> dict[str, Any]:
    """play hosts' hostvars | python_env_fanout_plan(python_env_fanout): who builds, who pulls."""
    wanted = (
        "inventory_hostname",
        "python_env_rebuild",
        "python_env_spec",
        "ansible_host",
        "python_env_fanout_port",
    )
    return envfanout.plan([{k: plain(h[k]) for k in wanted if k in h} for h in hosts], enabled)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(
            ascend_runtime_check,
            gaudi_runtime_daemon_json,
            gaudi_runtime_check,
            gaudi_runtime_hccl,
            ascend_runtime_fact,
            gaudi_runtime_fact,
            python_env_verify,
            python_env_fact,
            python_env_record_key,
            python_env_fanout_plan,
        )
