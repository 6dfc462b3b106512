"""Each role's contract (tools/acceldeploy/roles/) is the one home of what the role plans, what
its no-op key covers and what it owns: the roles' tasks run it through one action each
(acceldeploy_contract, acceldeploy_state), and none restates it in Jinja."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from acceldeploy import roles
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.roledefaults import role_defaults
from acceldeploy.inventory.scope import Scope
from acceldeploy.roles import gateway, vllm_service

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"


def tasks(role: str) -> list[dict]:
    found = []

    def walk(items: list[dict]) -> None:
        for task in items or []:
            found.append(task)
            for key in ("block", "rescue", "always"):
                walk(task.get(key) or [])

    for path in sorted((ROLES / role / "tasks").glob("*.yml")):
        walk(yaml.safe_load(path.read_text()) or [])
    return found


def test_every_role_that_plans_on_the_controller_runs_its_contract() -> None:
    for role in roles.CONTRACTS:
        runs = [t["acceldeploy.fleet.acceldeploy_contract"] for t in tasks(role)
                if "acceldeploy.fleet.acceldeploy_contract" in t]  # fmt: skip
        assert runs and all(args["role"] == role for args in runs), role
        assert all(roles.has_part(role, args.get("part", "")) for args in runs), role


def test_the_no_op_record_is_keyed_and_watched_by_the_roles_contract_only() -> None:
    for role_dir in sorted(p for p in ROLES.iterdir() if (p / "tasks").is_dir()):
        for task in tasks(role_dir.name):
            args = task.get("acceldeploy.fleet.acceldeploy_state")
            if args is None or args.get("state") == "absent":
                continue
            assert args.get("role") == role_dir.name, (role_dir.name, task["name"])
            assert not set(args) & {"key", "files", "trees", "units"}, task["name"]
            contract = roles.contract(role_dir.name)
            assert contract.state_inputs and contract.footprint, role_dir.name


def test_no_role_with_a_contract_plans_in_jinja() -> None:
    for role in roles.CONTRACTS:
        path = ROLES / role / "vars/main.yml"
        variables = yaml.safe_load(path.read_text()) if path.is_file() else {}
        for name, value in (variables or {}).items():
            assert "_planned" not in name and not name.endswith("_state_spec"), (path, name)
            if name.endswith("_inputs"):  # only a reader of what the contract returned
                assert f"{role}_contract.facts." in str(value), (path, name)


def test_a_scope_names_the_variable_it_lacks() -> None:
    scope = Scope.of_values("lab1", {"python_env_keep": 2})
    assert scope["python_env_keep"] == 2
    assert scope.get("python_env_stack", "") == ""
    with pytest.raises(AcceldeployError, match=r"^lab1: python_env_stack is not defined"):
        scope["python_env_stack"]


def test_an_unknown_role_or_part_is_named() -> None:
    with pytest.raises(AcceldeployError, match="no contract for role 'nginx'"):
        roles.plan("nginx", Scope.of_values("lab1", {}))
    with pytest.raises(AcceldeployError, match="role model_weights has no part 'later'"):
        roles.plan("model_weights", Scope.of_values("lab1", {}), "later")


def test_the_gateways_footprint_is_what_it_writes() -> None:
    values = {f"gateway_{name}": f"/x/{name}" for name in (
        "config_file", "stats_socket", "state_file", "backend_keys_file", "client_keys_file",
        "libexec_dir", "dropin_file")}  # fmt: skip
    owned = roles.owned("gateway", Scope.of_values("gw1", values))
    assert owned == {
        "files": ["/x/config_file", "/x/backend_keys_file", "/x/client_keys_file",
                  "/x/libexec_dir/haproxy-save-state",
                  "/x/dropin_file"],
        "trees": [],
        "units": ["haproxy.service"],
    }  # fmt: skip


def test_every_input_a_contract_names_is_a_variable_its_role_declares() -> None:
    from acceldeploy.inventory import varcheck
    from acceldeploy.roles import ascend_runtime, gaudi_runtime, host_tuning, python_env

    declared = varcheck.declared(ROLES)
    for module in (python_env, host_tuning, ascend_runtime, gaudi_runtime):
        for name in (*module.INPUTS, *getattr(module, "FLAGS", ())):
            assert f"{module.ROLE}_{name}" in declared, (module.ROLE, name)


def test_a_host_s_ports_are_every_role_s_listeners_in_one_check() -> None:
    """sshd, then the services (and their groups' ports), HAProxy on a gateway, Prometheus and
    the exporters where the fleet has monitors: one list, one check, naming both variables."""
    services = [{"name": "a", "model": "acceldeploy/tiny-qwen3-vl", "port": 8001},
                {"name": "g", "model": "acceldeploy/tiny-qwen3-vl", "port": 8002,
                 "nodes": ["both", "other"], "backend": "mp", "cluster_port": 13345}]  # fmt: skip
    both = {"group_names": ["gateways", "monitors"], "acceldeploy_serves": True,
            "acceldeploy_platform": "cpu", "acceldeploy_services": services,
            "ansible_host": "10.0.0.1", "ansible_port": 2201,
            "gateway_frontends": [{"service": "a", "port": 9001}]}  # fmt: skip
    groups = {"gateways": ["both"], "monitors": ["both"]}
    scope = Scope.of_values("both", both, {"both": both}, groups)
    found = [(listener.port, listener.var) for listener in roles.host_listeners(scope)]
    assert found == [
        (2201, "ansible_port"), (8001, "acceldeploy_services[0] (a).port"),
        (8002, "acceldeploy_services[1] (g).port"),
        (13345, "acceldeploy_services[1] (g).cluster_port"), (9001, "gateway_frontends[0].port"),
        (9090, "monitor_prometheus_port"), (9100, "monitor_node_exporter_port"),
    ]  # fmt: skip
    roles.check_ports(scope)
    clash = {**both, "monitor_node_exporter_port": 8001}
    with pytest.raises(AcceldeployError, match=r"^both: monitor_node_exporter_port 8001 is also "
                       r"acceldeploy_services\[0\] \(a\)\.port"):  # fmt: skip
        roles.check_ports(Scope.of_values("both", clash, {"both": clash}, groups))
    alone = Scope.of_values("both", clash, {"both": clash}, {})  # no monitors: no exporters
    assert [listener.var for listener in roles.host_listeners(alone)][-1] == (
        "gateway_frontends[0].port"
    )


def test_the_hub_clients_wheel_sets_are_planned_once_for_the_play(tmp_path: Path) -> None:
    """model_weights's part wheels (roles/model_weights/tasks/prepare.yml): one set per Python,
    architecture and glibc the hosts' first contact found, named by the lock's sha1 as the
    controllers' caches already are; a download only for a set the cache lacks; offline, that
    one refused naming the command."""
    lock = tmp_path / "fetch.txt"
    lock.write_text("huggingface-hub==1.0\n\n")
    digest = hashlib.sha1(b"huggingface-hub==1.0").hexdigest()
    cp311 = {"key": "cp311-x86_64-glibc2.36", "python": "3.11", "arch": "x86_64", "glibc": 36}
    cp39 = {"key": "cp39-x86_64-glibc2.31", "python": "3.9", "arch": "x86_64", "glibc": 31}
    hostvars = {host: {"preflight_target": {"fetch_wheels": found}}
                for host, found in (("a", cp311), ("b", cp311), ("c", cp39))}  # fmt: skip
    (tmp_path / f"{cp39['key']}-{digest}").mkdir()
    values = {
        "model_weights_versions_file": str(lock), "model_weights_wheels_cache": str(tmp_path),
        "model_weights_find_links": "", "ansible_play_hosts": ["a", "b", "c"],
        "ansible_playbook_python": "/usr/bin/python3",
        "model_weights_pip_download_args": ["--retries=9"],
    }  # fmt: skip

    def wheels(**extra: object) -> dict:
        scope = Scope.of_values("a", {**values, **extra}, hostvars)
        return roles.plan("model_weights", scope, "wheels")

    facts = wheels()
    assert facts["model_weights_versions_sha1"] == digest
    assert facts["model_weights_wheel_sets"] == [cp311, cp39]
    dest = f"{tmp_path}/{cp311['key']}-{digest}"
    assert facts["model_weights_wheel_downloads"] == [{"key": cp311["key"], "dest": dest, "argv": [
        "/usr/bin/python3", "-m", "acceldeploy.downloads.fetchlock", "download", "--python",
        "3.11", "--arch", "x86_64", "--glibc", "36", "--lock", str(lock), "--dest", dest,
        "--pip-arg=--retries=9"]}]  # fmt: skip
    with pytest.raises(AcceldeployError, match=r"^acceldeploy_offline is true and the controller "
                       r"has no hub-client wheels for cp311-x86_64-glibc2\.36 under .*"
                       r"--dest \S+ --pip-arg=--retries=9` and copy"):  # fmt: skip
        wheels(acceldeploy_offline=True)
    assert wheels(acceldeploy_offline=False)["model_weights_wheel_downloads"]
    assert (
        wheels(model_weights_find_links="http://127.0.0.1:8091/")["model_weights_wheel_sets"] == []
    )


def test_a_default_derived_from_the_fleet_is_the_contract_s_and_a_given_value_stays() -> None:
    """vllm_service_allow_from and vllm_service_topology default to null: the gateways' and the
    monitors' addresses, and the modules gaudi_runtime recorded; [] given means [] (any
    address, no topology). python_env_no_index null: the platform's class decides."""
    hostvars = {"gw": {"ansible_host": "10.0.0.5"},
                "mon": {"ansible_host": "mon", "acceldeploy_node_ip": "10.1.0.6"}}  # fmt: skip
    recorded = {"modules": [{"module_id": 3, "numa": 1, "cpus": "0-7"}, {"numa": 0}]}
    values = {"vllm_service_gateways": ["gw"], "vllm_service_allow_from": None,
              "vllm_service_topology": None,
              "ansible_local": {"acceldeploy_gaudi_runtime": recorded}}  # fmt: skip
    scope = Scope.of_values("lab1", values, hostvars, {"monitors": ["mon"]})
    assert vllm_service.derived_defaults(scope, values) == {
        "vllm_service_allow_from": ["10.0.0.5", "10.1.0.6"],
        "vllm_service_topology": [{"device": 3, "numa": 1, "cpus": "0-7"}],
    }
    given = {**values, "vllm_service_allow_from": [], "vllm_service_topology": []}
    assert vllm_service.derived_defaults(scope, given) == {}
    assert set(vllm_service.DERIVED) == {k for k, v in role_defaults("vllm_service").items()
                                         if v is None}  # fmt: skip
    assert {k for k, v in role_defaults("python_env").items() if v is None} == {
        "python_env_no_index"
    }


@pytest.mark.parametrize(("platform", "links", "no_index"), [
    ("cpu", ["http://127.0.0.1:8091/"], True), ("ascend", [], False)])  # fmt: skip
def test_python_env_installs_from_the_wheelhouse_alone_where_the_platform_says(
    platform: str, links: list[str], no_index: bool
) -> None:
    values = {**role_defaults("python_env"), "python_env_platform": platform,
              "python_env_find_links": links, "python_env_stack": "",
              "python_env_env_scripts": [], "python_env_image": ""}  # fmt: skip
    spec = roles.plan("python_env", Scope.of_values("lab1", values))["python_env_spec"]
    assert ("--no-index" in json.dumps(spec)) is no_index


def test_a_gateway_fronts_every_serving_host_unless_told() -> None:
    hostvars = {"lab1": {"group_names": []}, "gw": {"group_names": ["gateways"]},
                "mon": {"group_names": ["monitors"], "acceldeploy_serves": True}}  # fmt: skip
    fleet = {"all": ["lab1", "gw", "mon"], "gateways": ["gw"], "monitors": ["mon"]}

    def fronted(chosen: list[str] | None) -> list[str]:
        scope = Scope.of_values("gw", {"gateway_serving_hosts": chosen}, hostvars, fleet)
        return gateway.serving_hosts(scope)

    assert fronted(None) == ["lab1", "mon"]
    assert fronted(["lab1"]) == ["lab1"]
