"""Each role's contract (tools/acceldeploy/roles/) is the one home of what the role plans, what
its no-op key covers and what it owns: the roles' tasks run it through one action each
(acceldeploy_contract, acceldeploy_state), and none restates it in Jinja."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from acceldeploy import roles
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.scope import Scope

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
