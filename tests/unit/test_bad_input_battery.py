"""Bad input across every stage and the CLIs, planted secrets among it: each case is refused
before any host is contacted, in a message that names the variable (or flag) as the user wrote
it.

Inventory cases run through the real `playbooks/preflight.yml`, one ansible-playbook run per
stage with one host per case, every host pointed at a closed port on 127.0.0.1: a task that
tried to reach a host would report it unreachable, and the tests assert none did."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from playbook_report import playbook_report, run_playbook

from acceldeploy import secrets
from acceldeploy.errors import AcceldeployError
from acceldeploy.verify.model import Check

ROOT = Path(__file__).resolve().parents[2]
ASCEND = yaml.safe_load((ROOT / "inventory/examples/ascend-910b/group_vars/all.yml").read_text())
GAUDI = yaml.safe_load((ROOT / "inventory/examples/gaudi2/group_vars/all.yml").read_text())
CLOSED = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh"}


@dataclass(frozen=True)
class Case:
    id: str
    stage: str  # the preflight step that must refuse it
    named: str  # what the message must name
    vars: dict[str, Any] = field(default_factory=dict)
    service: dict[str, Any] | None = None  # changes to the first service
    platform: str = "ascend"


def svc(case_id: str, named: str, platform: str = "ascend", **changes: Any) -> Case:
    return Case(case_id, "services", named, service=changes, platform=platform)


CASES = [
    # misspelt or unknown variables with our prefixes
    Case("hugepage-switch", "names", "host_tuning_hugepages_enabled",
         {"host_tuning_hugepage_enabled": False}),
    Case("venvpath", "names", "python_env_venv_path", {"python_env_venvpath": "/srv/env"}),
    Case("strategy-typo", "names", "model_weights_strategy", {"model_weights_stratgy": "seed"}),
    Case("service-user", "names", "vllm_service_user", {"vllm_service_usr": "svc"}),
    Case("platform-typo", "names", "acceldeploy_platform", {"acceldeploy_platfrom": "ascend"}),
    Case("services-typo", "names", "acceldeploy_services", {"acceldeploy_service": []}),
    Case("cann-install", "names", "ascend_runtime_cann_install",
         {"ascend_runtime_cann_instal": True}),
    Case("gaudi-image", "names", "gaudi_runtime_image", {"gaudi_runtime_imag": "x:1"}),
    # host_tuning_*
    Case("ht-hugepages-word", "host_tuning", "host_tuning_hugepages",
         {"host_tuning_hugepages": "lots"}),
    Case("ht-hugepages-negative", "host_tuning", "host_tuning_hugepages",
         {"host_tuning_hugepages": -4}),
    Case("ht-switch-word", "host_tuning", "host_tuning_sysctls_enabled",
         {"host_tuning_sysctls_enabled": "maybe"}),
    Case("ht-max-percent", "host_tuning", "host_tuning_hugepages_max_percent",
         {"host_tuning_hugepages_max_percent": 150}),
    Case("ht-reboot-batch", "host_tuning", "host_tuning_reboot_batch",
         {"host_tuning_reboot_batch": 0}),
    Case("ht-reboot-timeout", "host_tuning", "host_tuning_reboot_timeout",
         {"host_tuning_reboot_timeout": -1}),
    Case("ht-sysctls-list", "host_tuning", "host_tuning_sysctls_extra",
         {"host_tuning_sysctls_extra": ["vm.swappiness=1"]}),
    Case("ht-kernel-args", "host_tuning", "host_tuning_kernel_args_extra",
         {"host_tuning_kernel_args_extra": "iommu=pt"}),
    Case("ht-grub-dropin", "host_tuning", "host_tuning_grub_dropin",
         {"host_tuning_grub_dropin": "relative/grub.cfg"}),
    Case("ht-sysctl-file", "host_tuning", "host_tuning_sysctl_file",
         {"host_tuning_sysctl_file": "sysctl.conf"}),
    Case("ht-governor", "host_tuning", "host_tuning_governor",
         {"host_tuning_governor": "turbo"}),
    Case("ht-reboot-word", "host_tuning", "host_tuning_reboot", {"host_tuning_reboot": "later"}),
    Case("ht-units", "host_tuning", "host_tuning_governor_disable_units",
         {"host_tuning_governor_disable_units": "ondemand"}),
    Case("ht-redfish-attrs", "host_tuning", "host_tuning_bios_redfish_attributes",
         {"host_tuning_bios_redfish_attributes": ["C6"]}),
    # the runtime roles
    Case("ar-cann-package", "runtime", "ascend_runtime_cann_toolkit_package",
         {"ascend_runtime_cann_install": True,
          "ascend_runtime_cann_toolkit_package": "toolkit.zip"}),
    Case("ar-check-driver", "runtime", "ascend_runtime_check_driver",
         {"ascend_runtime_check_driver": "sometimes"}),
    Case("ar-checksums", "runtime", "ascend_runtime_cann_checksums",
         {"ascend_runtime_cann_checksums": {"toolkit": "abc"}}),
    Case("gr-driver-match", "runtime", "gaudi_runtime_driver_match",
         {"gaudi_runtime_driver_match": "major", **{"acceldeploy_platform": "gaudi"},
          "acceldeploy_services": GAUDI["acceldeploy_services"]}, platform="gaudi"),
    Case("gr-hccl-gbps", "runtime", "gaudi_runtime_hccl_min_nw_gbps",
         {"gaudi_runtime_hccl_min_nw_gbps": -5}, platform="gaudi"),
    Case("gr-image", "runtime", "gaudi_runtime_image",
         {"gaudi_runtime_image": "not an image ref"}, platform="gaudi"),
    # acceldeploy_stack: its name, its platform, the inventory's choices against it
    Case("stack-unknown", "services", "acceldeploy_stack 'ascend-vllm-9' is not a stack",
         {"acceldeploy_stack": "ascend-vllm-9"}),
    Case("stack-other-platform", "services",
         "acceldeploy_stack 'gaudi-fork-1.22' is a gaudi stack but the host's "
         "acceldeploy_platform is ascend", {"acceldeploy_stack": "gaudi-fork-1.22"}),
    Case("stack-cann", "runtime",
         "ascend_runtime_cann_toolkit_package is CANN 8.3.RC2 (Ascend-cann-toolkit_8.3.RC2_"
         "linux-aarch64.run) but vllm-ascend v0.13.0 needs CANN 8.5.0 (stack ascend-vllm-0.13.0)"
         ": give the CANN 8.5.0 toolkit package, or set acceldeploy_stack to "
         "ascend-vllm-0.12.0rc1",
         {"acceldeploy_stack": "ascend-vllm-0.13.0", "acceldeploy_services": [],
          "ascend_runtime_cann_toolkit_package": "/srv/Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run"}),
    Case("stack-gaudi-software", "runtime",
         "gaudi_runtime_software is 1.22.0 but stack gaudi-vllm-0.13.0 (vLLM 0.13.0) runs on "
         "Intel Gaudi software 1.23.0 only",
         {"acceldeploy_stack": "gaudi-vllm-0.13.0", "acceldeploy_services": [],
          "gaudi_runtime_software": "1.22.0"}, platform="gaudi"),
    Case("stack-cpu-python39", "python_env",
         "python_env_venv_python is /usr/bin/python3.9, Python 3.9 by its name; acceldeploy "
         "needs Python 3.9 to 3.13 on the host and stack cpu-vllm-0.12.0 (vLLM 0.12.0) needs "
         "Python >=3.11,<3.14",
         {"acceldeploy_platform": "cpu", "acceldeploy_stack": "cpu-vllm-0.12.0",
          "acceldeploy_services": [], "python_env_find_links": ["/srv/wheels"],
          "python_env_venv_python": "/usr/bin/python3.9"}),
    # python_env_*
    Case("pe-venv-relative", "python_env", "python_env_venv_path",
         {"python_env_manager": "venv", "python_env_venv_path": "relative/env"}),
    Case("pe-manager", "python_env", "python_env_manager", {"python_env_manager": "pipx"}),
    Case("pe-manager-platform", "python_env", "python_env_manager",
         {"python_env_manager": "venv"}, platform="gaudi"),
    Case("ar-image-registry", "runtime", "ascend_runtime_image_registry",
         {"python_env_manager": "container", "ascend_runtime_image_registry": "https://reg/"}),
    Case("ar-image-cann-install", "runtime", "ascend_runtime_cann_install: false",
         {"python_env_manager": "container", "ascend_runtime_cann_install": True,
          "ascend_runtime_cann_toolkit_package": "/srv/Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run",
          "ascend_runtime_cann_kernels_package": "/srv/Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run",
          "ascend_runtime_cann_nnal_package": "/srv/Ascend-cann-nnal_8.3.RC2_linux-aarch64.run"}),
    Case("pe-index-url", "python_env", "python_env_index_url",
         {"python_env_index_url": "mirrors.example/simple"}),
    Case("pe-find-links", "python_env", "python_env_find_links",
         {"python_env_find_links": ["ftp://x"]}),
    Case("pe-no-index", "python_env", "python_env_no_index",
         {"python_env_no_index": True, "python_env_find_links": []}),
    Case("pe-extra-packages", "python_env", "python_env_extra_packages",
         {"python_env_extra_packages": ["numpy"]}),
    Case("pe-conda-root", "python_env", "python_env_conda_root",
         {"python_env_manager": "conda", "python_env_conda_root": "conda"}),
    Case("pe-stacks-file", "python_env", "python_env_stacks_file",
         {"python_env_stacks_file": "/nonexistent/stacks.yml"}),
    Case("pe-install-from", "python_env", "python_env_install_from",
         {"python_env_install_from": "tarball"}),
    # model_weights_*
    Case("mw-strategy", "model_weights", "model_weights_strategy",
         {"model_weights_strategy": "sometimes"}),
    Case("mw-verify", "model_weights", "model_weights_verify", {"model_weights_verify": "quick"}),
    Case("mw-root", "model_weights", "model_weights_root", {"model_weights_root": "models"}),
    Case("mw-seed-host", "model_weights", "model_weights_seed_host",
         {"model_weights_strategy": "seed", "model_weights_seed_host": "nowhere-01"}),
    Case("mw-revision", "model_weights", "revision",
         {"model_weights_require_revision": True}, service={"revision": None}),
    Case("mw-shared", "model_weights", "model_weights_shared_storage",
         {"model_weights_shared_storage": "yes please"}),
    # services
    svc("s-platform-unknown", "acceldeploy_platform"),
    svc("s-model", "acceldeploy_services[0] (qwen3-vl).model", model="qwen3-vl-32b"),
    svc("s-source", "acceldeploy_services[0] (qwen3-vl).source", source="github"),
    svc("s-revision", "acceldeploy_services[0] (qwen3-vl).revision", revision="../main"),
    svc("s-patterns", "acceldeploy_services[0] (qwen3-vl).allow_patterns", allow_patterns=[]),
    svc("s-devices-twice", "acceldeploy_services[0] (qwen3-vl).devices", devices=[2, 2]),
    svc("s-device-range", "acceldeploy_services[0] (qwen3-vl).devices[0]", devices=[99, 3]),
    svc("s-tp", "acceldeploy_services[0] (qwen3-vl).tensor_parallel_size",
        tensor_parallel_size=4),
    svc("s-port", "acceldeploy_services[0] (qwen3-vl).port", port=70000),
    svc("s-port-word", "acceldeploy_services[0] (qwen3-vl).port", port="http"),
    svc("s-len", "acceldeploy_services[0] (qwen3-vl).max_model_len", max_model_len=-1),
    svc("s-util", "acceldeploy_services[0] (qwen3-vl).gpu_memory_utilization",
        gpu_memory_utilization=1.5),
    svc("s-mm", "acceldeploy_services[0] (qwen3-vl).limit_mm_per_prompt.image",
        limit_mm_per_prompt={"image": -1}),
    svc("s-memory", "acceldeploy_services[0] (qwen3-vl).memory", memory={"weights_gib": "lots"}),
    svc("s-unknown-key", "acceldeploy_services[0] (qwen3-vl)", maxmodellen=4096),
    svc("s-name", "acceldeploy_services[0].name", name="Qwen3 VL"),
    svc("s-api-key-arg", "extra_args.api_key", extra_args={"api_key": "sk-planted"}),
    svc("s-api-key-env", "env.VLLM_API_KEY", env={"VLLM_API_KEY": "sk-planted"}),
    svc("s-device-env", "env.ASCEND_RT_VISIBLE_DEVICES",
        env={"ASCEND_RT_VISIBLE_DEVICES": "0,1"}),
    svc("s-public-bind", "acceldeploy_services[0] (qwen3-vl).host", host="0.0.0.0"),
    svc("s-abbrev", "extra_args.max-num-seq", extra_args={"max-num-seq": 8}),
    svc("s-range", "extra_args.max-num-seqs", extra_args={"max-num-seqs": -1}),
    svc("s-type", "extra_args.max-num-batched-tokens",
        extra_args={"max-num-batched-tokens": "many"}),
    svc("s-switch", "extra_args.enforce-eager", extra_args={"enforce-eager": "yes"}),
    svc("s-env-mapping", "env.X", env={"X": {"nested": 1}}),
    svc("s-block", "acceldeploy_services[0] (qwen3-vl).block_size", block_size=0),
    svc("s-fit", "acceldeploy_services[0] (qwen3-vl)", max_model_len=262144),
    svc("s-gaudi-flag", "extra_args.mm-processor-cache-gb", platform="gaudi",
        extra_args={"mm-processor-cache-gb": 0}),
    svc("s-gaudi-shape", "vllm_service_gaudi_shapes.qwen2-5-vl", platform="gaudi"),
    # second round: day-2 numbers refused in preflight, not when they act
    Case("pe-keep-negative", "python_env", "python_env_keep", {"python_env_keep": -1}),
    Case("pe-keep-fraction", "python_env", "python_env_keep", {"python_env_keep": 1.5}),
    Case("pe-venv-python2", "python_env", "python_env_venv_python",
         {"python_env_venv_python": "python2.7"}),
    Case("pe-venv-python-stack", "python_env", "python_env_venv_python",
         {"python_env_manager": "venv", "python_env_venv_python": "/usr/bin/python3.12"}),
    Case("vs-serial-zero", "services", "vllm_service_serial", {"vllm_service_serial": 0}),
    Case("vs-serial-share", "services", "vllm_service_serial", {"vllm_service_serial": "150%"}),
    Case("vs-gate-retries", "services", "vllm_service_gate_retries",
         {"vllm_service_gate_retries": 0}),
    Case("vs-model-keep", "services", "vllm_service_model_keep", {"vllm_service_model_keep": -2}),
    Case("mw-async-poll", "model_weights", "model_weights_async_poll",
         {"model_weights_async_poll": 0}),
    Case("mw-max-workers", "model_weights", "model_weights_max_workers",
         {"model_weights_max_workers": 0}),
    Case("gr-hccl-timeout", "runtime", "gaudi_runtime_hccl_timeout",
         {"gaudi_runtime_hccl_timeout": 0}, platform="gaudi"),
    Case("ht-hugepages-huge", "host_tuning", "host_tuning_hugepages",
         {"host_tuning_hugepages": 10**10}),
    Case("ht-reboot-timeout-huge", "host_tuning", "host_tuning_reboot_timeout",
         {"host_tuning_reboot_timeout": 10**9}),
    # second round: vague messages name the key
    svc("s-kv-dtype", "acceldeploy_services[0] (qwen3-vl).kv_cache_dtype", kv_cache_dtype="fp4"),
    svc("s-model-config", "acceldeploy_services[0] (qwen3-vl).model_config",
        model_config="/nonexistent/Qwen3-VL/config.json"),
    svc("s-dev-mode-public", "acceldeploy_services[0] (qwen3-vl).env.VLLM_SERVER_DEV_MODE "
        "exposes the dev-mode endpoints", host="0.0.0.0", api_key="sk-planted",
        env={"VLLM_SERVER_DEV_MODE": "1"}),
    svc("s-dev-mode-no-key", "no api_key (anyone who reaches the port can use /v1) and "
        "env.VLLM_SERVER_DEV_MODE", host="0.0.0.0", env={"VLLM_SERVER_DEV_MODE": "1"}),
    svc("s-mm-modality", "acceldeploy_services[0] (qwen3-vl).limit_mm_per_prompt.imagez",
        limit_mm_per_prompt={"imagez": 2}),
    # third round: the newest features' inputs
    Case("s-string-item", "services", "acceldeploy_services[0] must be a mapping, got 'qwen3-vl'",
         {"acceldeploy_services": ["qwen3-vl"]}),
    Case("serves-word", "names",
         "acceldeploy_serves must be true or false (a YAML boolean, unquoted), got 'yes'",
         {"acceldeploy_serves": "yes"}),
]  # fmt: skip


def host_vars(case: Case) -> dict[str, Any]:
    base = copy.deepcopy(GAUDI if case.platform == "gaudi" else ASCEND)
    hv: dict[str, Any] = {**base, **CLOSED, **case.vars}
    if case.id == "s-platform-unknown":
        hv["acceldeploy_platform"] = "tpu"
    if case.id == "s-gaudi-shape":
        hv["vllm_service_gaudi_shapes"] = {"qwen2-5-vl": {"input": [4, 40000]}}
    if case.service is not None:
        first = {**hv["acceldeploy_services"][0], **case.service}
        hv["acceldeploy_services"] = [first, *hv["acceldeploy_services"][1:]]
    return hv


@cache
def preflight(stage: str, tmp: str) -> dict[str, Any]:
    cases = [c for c in CASES if c.stage == stage]
    inventory = Path(tmp) / f"{stage}.yml"
    hosts = {c.id: host_vars(c) for c in cases}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return playbook_report(inventory, "playbooks/preflight.yml")[1]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("battery"))


def test_the_battery_is_large_and_covers_every_stage() -> None:
    stages = {c.stage for c in CASES}
    assert stages == {"names", "host_tuning", "runtime", "python_env", "model_weights", "services"}
    assert len(CASES) + len(CLI_CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_refused_in_preflight_naming_the_variable(case: Case, tmp: str) -> None:
    data = preflight(case.stage, tmp)
    assert [p["play"]["name"] for p in data["plays"]] == [
        "Preflight - check the inventory before changing any host"
    ]
    stats = data["stats"][case.id]
    assert stats["unreachable"] == 0 and stats["changed"] == 0
    failed = [
        str(task["hosts"][case.id].get("msg", ""))
        for play in data["plays"]
        for task in play["tasks"]
        if task["hosts"].get(case.id, {}).get("failed")
    ]
    assert len(failed) == 1, f"{case.id} was not refused: {stats}"
    assert case.named in failed[0], failed[0]
    for word in ("_AnsibleTagged", "_AnsibleLazy", "Traceback", "has no attribute", "plugin"):
        assert word not in failed[0], failed[0]
    assert "sk-planted" not in json.dumps(data)


TWO_NODE = ROOT / "inventory/examples/ascend-910b-2node"
# A multi-node service's mistakes, on a copy of the two-node example: (id, changes to its
# service, --limit, what the message names).
GROUP_CASES = [
    ("g-cluster-port", {"cluster_port": 8000}, None,
     "acceldeploy_services[0] (deepseek-r1).cluster_port 8000 is also its port"),
    ("g-node-ip-env", {"env": {"HCCL_IF_IP": "192.0.2.99"}}, None,
     "acceldeploy_services[0] (deepseek-r1).env.HCCL_IF_IP"),
    ("g-nic-env", {"env": {"GLOO_SOCKET_IFNAME": "eth0"}}, None,
     "acceldeploy_services[0] (deepseek-r1).env.GLOO_SOCKET_IFNAME"),
    ("g-worker-without-head", {}, "npu-02", "its head npu-01"),
]  # fmt: skip


def two_node_inventory(tmp_path: Path, changes: dict[str, Any]) -> Path:
    """A copy of the two-node example, every host at the closed port. The nodes' addresses
    (acceldeploy_node_ip, 192.0.2.x) stay mere strings of the plan: nothing connects to them."""
    target = tmp_path / TWO_NODE.name
    shutil.copytree(TWO_NODE, target)
    hosts_file = target / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    nodes = hosts["all"]["children"]["ascend"]["hosts"]
    for i, name in enumerate(nodes):
        nodes[name] = {"acceldeploy_node_ip": f"192.0.2.{31 + i}", **(nodes[name] or {}), **CLOSED}
    hosts_file.write_text(yaml.safe_dump(hosts))
    group_vars = target / "group_vars/all.yml"
    data = yaml.safe_load(group_vars.read_text())
    data["acceldeploy_services"][0].update(changes)
    group_vars.write_text(yaml.safe_dump(data))
    return target


@pytest.mark.parametrize(("changes", "limit", "named"), [c[1:] for c in GROUP_CASES],
                         ids=[c[0] for c in GROUP_CASES])  # fmt: skip
def test_multi_node_mistakes_are_refused_in_preflight(
    changes: dict[str, Any], limit: str | None, named: str, tmp_path: Path
) -> None:
    inventory = two_node_inventory(tmp_path, changes)
    returncode, data = playbook_report(inventory, "playbooks/preflight.yml",
                                     *(("--limit", limit) if limit else ()))  # fmt: skip
    assert returncode != 0
    assert [p["play"]["name"] for p in data["plays"]] == [
        "Preflight - check the inventory before changing any host"
    ]
    assert data["stats"] and all(
        s["unreachable"] == 0 and s["changed"] == 0 for s in data["stats"].values()
    ), data["stats"]
    failed = [str(result.get("msg", "")) for play in data["plays"] for task in play["tasks"]
              for result in task["hosts"].values() if result.get("failed")]  # fmt: skip
    assert failed and all(named in m for m in failed), failed
    if limit:
        assert set(data["stats"]) == {limit}
        assert "--limit npu-01,npu-02" in failed[0], failed[0]


def test_nodes_on_different_stacks_are_refused_naming_the_variable_and_both(
    tmp_path: Path,
) -> None:
    inventory = two_node_inventory(tmp_path, {})
    hosts_file = inventory / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    hosts["all"]["children"]["ascend"]["hosts"]["npu-02"]["acceldeploy_stack"] = (
        "ascend-vllm-0.13.0"
    )
    hosts_file.write_text(yaml.safe_dump(hosts))
    returncode, data = playbook_report(inventory, "playbooks/preflight.yml")
    assert returncode != 0
    assert all(s["unreachable"] == 0 and s["changed"] == 0 for s in data["stats"].values())
    failed = [str(result.get("msg", "")) for play in data["plays"] for task in play["tasks"]
              for result in task["hosts"].values() if result.get("failed")]  # fmt: skip
    assert any(
        "the nodes disagree on acceldeploy_stack: npu-01 has 'ascend-vllm-0.12.0rc1', npu-02 "
        "has 'ascend-vllm-0.13.0'" in m
        for m in failed
    ), failed


def test_removing_a_service_no_host_runs_is_refused_before_contact(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"npu-01": host_vars(CASES[0])}}}))
    returncode, data = playbook_report(
        inventory, "playbooks/remove.yml", "-e", "acceldeploy_remove_service=qwen3-v1"
    )
    assert returncode != 0
    assert all(s["unreachable"] == 0 and s["changed"] == 0 for s in data["stats"].values())
    failed = [str(result.get("msg", "")) for play in data["plays"] for task in play["tasks"]
              for result in task["hosts"].values() if result.get("failed")]  # fmt: skip
    assert len(failed) == 1 and "no host of the inventory runs 'qwen3-v1'" in failed[0], failed
    assert "-e acceldeploy_remove_dropped=true" in failed[0]


CLI_CASES = [
    ("plan.py", ["kv", "--model", "Qwen/Qwen3-8B", "--tp", "0", "--platform", "cpu"], "--tp"),
    ("plan.py", ["kv", "--model", "Qwen/Qwen3-8B", "--block-size", "-16"], "--block-size"),
    ("plan.py", ["kv", "--model", "Qwen/Qwen3-8B", "--platform", "cpu",
                 "--available-gib", "lots"], "--available-gib"),
    ("plan.py", ["kv", "--model", "Qwen/Qwen3-8B", "--platform", "ascend", "--total-gib", "64",
                 "--gpu-memory-utilization", "1.5", "--weights-gib", "8"],
     "--gpu-memory-utilization"),
    ("plan.py", ["kv", "--model", "Qwen/Qwen3-8B", "--platform", "cpu", "--available-gib", "4",
                 "--max-model-len", "0"], "--max-model-len"),
    ("plan.py", ["kv", "--model", "Qwen/Qwen3-8B", "--platform", "tpu"], "--platform"),
    ("plan.py", ["kv", "--model", "Qwen/Qwen3-8B", "--available-gib", "4"], "--platform"),
    ("verify.py", ["-i", "inventory/examples/ascend-910b", "--timeout", "-1"], "--timeout"),
    ("verify.py", ["-i", "inventory/examples/ascend-910b", "--mm-leak-probe", "-3"],
     "--mm-leak-probe"),
    ("verify.py", ["-i", "inventory/examples/ascend-910b", "--mm-leak-threshold-mib", "0"],
     "--mm-leak-threshold-mib"),
]  # fmt: skip


@pytest.mark.parametrize(("tool", "args", "named"), CLI_CASES, ids=[c[2] for c in CLI_CASES])
def test_cli_refuses_bad_numbers_before_anything_else(tool: str, args: list[str], named: str):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / tool), *args],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], proc.stderr


def test_one_bad_host_stops_the_run_for_every_host(tmp_path: Path) -> None:
    """A good host is not changed either when another host is refused (site.yml stops)."""
    inventory = tmp_path / "mixed.yml"
    bad = {**ASCEND, **CLOSED, "python_env_manager": "pipx"}
    inventory.write_text(
        yaml.safe_dump({"all": {"hosts": {"good-01": {**ASCEND, **CLOSED}, "bad-01": bad}}})
    )
    returncode, data = playbook_report(inventory, "site.yml")
    assert returncode != 0
    assert [p["play"]["name"] for p in data["plays"]] == [
        "Preflight - check the inventory before changing any host"
    ]
    assert data["stats"]["good-01"]["unreachable"] == 0
    assert data["stats"]["bad-01"]["unreachable"] == 0
    failed = {
        host: str(result.get("msg"))
        for task in data["plays"][0]["tasks"]
        for host, result in task["hosts"].items()
        if result.get("failed")
    }
    assert "python_env_manager" in failed["bad-01"]
    assert "preflight refused bad-01" in failed["good-01"]


# Secrets, with planted credentials: every place a user could put one is either refused before
# any host is contacted (naming the variable to use instead, never echoing the value), or, for
# the service's api_key and the hub tokens, kept out of every unit, launcher, argv, preview,
# `--check --diff` output and error (tests/lab/test_site_secrets.py: on real hosts).
PLANTED = "plantedSECRETx9f3"
HF = f"hf_{PLANTED}"
URL = f"https://mirror-user:{PLANTED}@mirror.example/"

# (case id, what the refusal must name, host variables changed, first service changed)
REFUSED: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("env-hf-token", "env.HF_TOKEN", {}, {"env": {"HF_TOKEN": HF}}),
    ("env-hub-token", "env.HUGGING_FACE_HUB_TOKEN", {},
     {"env": {"HUGGING_FACE_HUB_TOKEN": HF}}),
    ("env-ms-token", "env.MODELSCOPE_API_TOKEN", {}, {"env": {"MODELSCOPE_API_TOKEN": PLANTED}}),
    ("env-api-key", "env.VLLM_API_KEY", {}, {"env": {"VLLM_API_KEY": PLANTED}}),
    ("env-password", "env.S3_PASSWORD", {}, {"env": {"S3_PASSWORD": PLANTED}}),
    ("env-url", "env.HF_ENDPOINT", {}, {"env": {"HF_ENDPOINT": URL}}),
    ("arg-hf-token", "extra_args.hf-token", {}, {"extra_args": {"hf-token": HF}}),
    ("arg-hf-token-flag", "extra_args.--hf_token", {}, {"extra_args": {"--hf_token": HF}}),
    ("arg-api-key", "extra_args.api-key", {}, {"extra_args": {"api-key": PLANTED}}),
    ("arg-url", "extra_args.middleware", {}, {"extra_args": {"middleware": URL}}),
    ("model-url", ".model", {}, {"model": f"{URL}Qwen/Qwen3-VL-8B-Instruct"}),
    ("api-key-lines", ".api_key", {}, {"api_key": f"{PLANTED}\nsecond line"}),
    ("hf-endpoint", "model_weights_hf_token", {"model_weights_hf_endpoint": URL}, {}),
    ("ms-endpoint", "model_weights_modelscope_token",
     {"model_weights_modelscope_endpoint": URL}, {}),
    ("index-url", "python_env_index_url", {"python_env_index_url": f"{URL}simple"}, {}),
    ("find-links", "python_env_find_links[0]", {"python_env_find_links": [URL]}, {}),
    ("bench-dataset", "acceldeploy_bench_profiles.mine.dataset_path",
     {"acceldeploy_bench_profiles": {"mine": {"dataset": "hf", "dataset_path": URL,
                                              "prompts": 4}}}, {}),
    ("hub-token-type", "model_weights_hf_token", {"model_weights_hf_token": [HF]}, {}),
]  # fmt: skip


def host(change_vars: dict[str, Any], change_service: dict[str, Any]) -> dict[str, Any]:
    hv = {**copy.deepcopy(ASCEND), **CLOSED, **change_vars}
    if change_service:
        first = {**hv["acceldeploy_services"][0], **change_service}
        hv["acceldeploy_services"] = [first, *hv["acceldeploy_services"][1:]]
    return hv


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    inventory = tmp_path_factory.mktemp("secrets") / "hosts.yml"
    hosts = {case: host(hv, sv) for case, _, hv, sv in REFUSED}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    proc = run_playbook(inventory, "playbooks/preflight.yml", "-v")
    output = proc.stdout + proc.stderr
    return output, json.loads(proc.stdout[proc.stdout.index("{") :])


@pytest.mark.parametrize(("case", "named"), [c[:2] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_planted_credential_is_refused_naming_the_variable(
    case: str, named: str, refused: tuple[str, dict[str, Any]]
) -> None:
    output, data = refused
    stats = data["stats"][case]
    assert stats["unreachable"] == 0 and stats["changed"] == 0
    failed = [
        str(task["hosts"][case].get("msg", ""))
        for play in data["plays"]
        for task in play["tasks"]
        if task["hosts"].get(case, {}).get("failed")
    ]
    assert len(failed) == 1, f"{case} was not refused: {stats}"
    assert named in failed[0], failed[0]
    assert PLANTED not in output


def test_accepted_credentials_stay_out_of_the_preview_and_check_diff(tmp_path: Path) -> None:
    """The api_key and a hub token from the vault: site.yml --check --diff -v gets as far as
    the first contact (a closed port) and prints neither."""
    inventory = tmp_path / "hosts.yml"
    hv = host({"model_weights_hf_token": HF}, {"api_key": PLANTED})
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"npu-01": hv}}}))
    proc = run_playbook(inventory, "site.yml", "--check", "--diff", "-v")
    data = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert data["stats"]["npu-01"]["unreachable"] == 1, proc.stdout[-3000:]
    shown = [
        t for p in data["plays"] for t in p["tasks"] if t["task"]["name"].startswith("Show what")
    ]
    assert shown and "vllm serve" in json.dumps(shown)  # the preview ran, with the argv
    assert PLANTED not in proc.stdout + proc.stderr


def test_the_api_key_is_in_no_rendered_unit_launcher_or_argv(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    hv = host({"model_weights_hf_token": HF}, {"api_key": PLANTED})
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"npu-01": hv}}}))
    for extra in (["--unit"], ["--json"], []):
        proc = plan("render", "-i", str(inventory), "--host", "npu-01", *extra)
        assert proc.returncode == 0, proc.stderr
        assert PLANTED not in proc.stdout + proc.stderr
    units = plan("render", "-i", str(inventory), "--host", "npu-01", "--unit").stdout
    assert "EnvironmentFile=-/etc/acceldeploy/secrets/qwen3-vl.env" in units or (
        "EnvironmentFile=/etc/acceldeploy/secrets/qwen3-vl.env" in units
    ), units


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    return tool("plan.py", *args)


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / name), *args],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip


INVENTORY = ("-i", "inventory/examples/ascend-910b")
REQUIRED = {
    "verify.py": INVENTORY,
    "bench.py": (*INVENTORY, "--profile", "smoke"),
    "tune.py": (*INVENTORY, "--host", "npu-01", "--service", "qwen3-vl", "--profile", "smoke",
                "--space", "max_num_seqs=4,8", "--sla", "p99_ttft=2s"),
    "plan.py": ("render", *INVENTORY, "--host", "npu-01"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_a_credential_on_a_command_line_is_not_echoed(name: str) -> None:
    proc = tool(name, *REQUIRED[name], "--api-key", PLANTED, f"--hf-token={HF}",
                "--header", f"Authorization: Bearer {PLANTED}")  # fmt: skip
    assert proc.returncode == 2
    assert "--api-key ***" in proc.stderr or "--hf-token=***" in proc.stderr, proc.stderr
    assert PLANTED not in proc.stdout + proc.stderr


def test_a_credential_in_a_bench_profile_is_refused_before_contact(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    profiles = {"mine": {"dataset": "hf", "dataset_path": URL, "prompts": 4}}
    hv = host({"acceldeploy_bench_profiles": profiles}, {})
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"npu-01": hv}}}))
    proc = tool("bench.py", "-i", str(inventory), "--profile", "mine", "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "acceldeploy_bench_profiles.mine.dataset_path" in proc.stderr
    assert PLANTED not in proc.stdout + proc.stderr
    assert not any(tmp_path.iterdir()) or [p.name for p in tmp_path.iterdir()] == ["hosts.yml"]


@pytest.mark.parametrize(
    "text",
    [
        f"unrecognized arguments: --api-key {PLANTED}",
        f"--hf-token={HF}",
        f"model {URL}Qwen/x",
        f"Authorization: Bearer {PLANTED}",
        f"{{'api_key': '{PLANTED}', 'port': 8000}}",
        f'{{"token": "{PLANTED}"}}',
        f"HF_TOKEN={PLANTED} VLLM_API_KEY={PLANTED}",
        f"api_key: {PLANTED}",
        f"a token in text: {HF}",
    ],
)
def test_mask_hides_every_shape_of_credential(text: str) -> None:
    masked = secrets.mask(text)
    assert PLANTED not in masked and secrets.HIDDEN in masked, masked


@pytest.mark.parametrize(
    "text",
    [
        "env.HF_TOKEN is a hub token: the unit serves the local copy offline",
        "max_num_batched_tokens: 8192",
        "git@github.com:org/repo and user@example.com",
        "--max-num-seqs 8 --port 8000",
    ],
)
def test_mask_leaves_plain_text_alone(text: str) -> None:
    assert secrets.mask(text) == text


def test_errors_checks_and_remembered_values_are_masked() -> None:
    assert PLANTED not in str(AcceldeployError(f"cannot reach {URL}"))
    check = Check("h", "api", "fail", f"401: Bearer {PLANTED}", f"api_key: {PLANTED}")
    assert PLANTED not in check.detail + check.fix
    secrets.remember("a-vault-value-with-no-shape")
    assert secrets.mask("saw a-vault-value-with-no-shape here") == "saw *** here"


# Every subcommand that reads an inventory: what comes before -i and after it (no host is
# reached: the inventory is refused first).
READERS = {
    "plan render": (["plan", "render"], []),
    "plan upgrade": (["plan", "upgrade"], ["--to", "ascend-vllm-0.13.0"]),
    "verify": (["verify"], []),
    "bench": (["bench"], ["--profile", "smoke"]),
    "top": (["top"], ["--once"]),
    "bundle build": (["bundle", "build"], ["--out", "/nonexistent/bundle"]),
}


def read_inventory(reader: str, site: Path) -> subprocess.CompletedProcess[str]:
    before, after = READERS[reader]
    return subprocess.run(
        [sys.executable, "-m", "acceldeploy", *before, "-i", str(site), *after],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip


def broken_copy(tmp_path: Path, file: str, text: str) -> Path:
    target = tmp_path / "site"
    shutil.copytree(ROOT / "inventory/examples/ascend-910b", target)
    (target / file).write_text(text)
    return target


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_yaml_error_in_the_inventory_names_the_file_and_line(reader: str, tmp_path: Path):
    site = broken_copy(tmp_path, "group_vars/all.yml",
                       "acceldeploy_platform: ascend\nacceldeploy_services:\n  - name: a\n"
                       "   model: b\n")  # fmt: skip
    done = read_inventory(reader, site)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert f"inventory file {site}/group_vars/all.yml, line 4, column 4: " in line, line


@pytest.mark.parametrize("reader", sorted(READERS))
def test_an_inventory_with_no_host_exits_non_zero_saying_so(reader: str, tmp_path: Path):
    site = broken_copy(tmp_path, "hosts.yml", "all:\n  vars:\n    ansible_user: ops\n")
    done = read_inventory(reader, site)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"inventory {site} has no host" in done.stderr, done.stderr[-2000:]
