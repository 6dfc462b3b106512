"""The repository as the acceldeploy.fleet collection (galaxy.yml): `ansible-galaxy collection
build` makes a tarball with the roles, their argument specs and the plugins, and none of the
local state, the lab or its tests; installed into a temporary collections path, its roles and
plugins resolve by FQCN from a playbook outside the repository with no repository
ansible.cfg, and its modules find the host-side code in the collection's module_utils.
(tests/lab/test_collection_lab.py applies a role of it to a lab host.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

import acceldeploy

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ROLES = sorted(p.parent.name for p in (ROOT / "roles").glob("*/meta"))
TEMPLATES = sorted((ROOT / "tools/acceldeploy/data/vllm_service/templates").glob("*.j2"))


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The collection built from the repository and installed into <tmp>/collections; a
    directory outside the repository with its own ansible.cfg to run Ansible from."""
    tmp = tmp_path_factory.mktemp("collection")
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "ansible.cfg").write_text("[defaults]\ninterpreter_python = auto_silent\n")
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(outside / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(tmp / "collections"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "local"),
        "ANSIBLE_REMOTE_TMP": str(tmp / "remote"),
        "ANSIBLE_NOCOLOR": "1",
    }
    for key in ("ANSIBLE_LIBRARY", "ANSIBLE_MODULE_UTILS", "ANSIBLE_ROLES_PATH",
                "ANSIBLE_FILTER_PLUGINS"):  # fmt: skip
        env.pop(key, None)
    galaxy = str(BIN / "ansible-galaxy")
    done = run([galaxy, "collection", "build", "--output-path", str(tmp), str(ROOT)], tmp, env)
    assert done.returncode == 0, done.stdout + done.stderr
    (tarball,) = tmp.glob("acceldeploy-fleet-*.tar.gz")
    done = run(
        [galaxy, "collection", "install", "-p", str(tmp / "collections"), str(tarball)], tmp, env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    installed = tmp / "collections" / "ansible_collections" / "acceldeploy" / "fleet"
    return {"tarball": tarball, "installed": installed, "outside": outside, "env": env}


def test_galaxy_metadata_agrees_with_the_package() -> None:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("acceldeploy", "fleet")
    assert galaxy["version"] == acceldeploy.__version__
    assert galaxy["license"] == ["Apache-2.0"] and (ROOT / "LICENSE").is_file()
    assert yaml.safe_load((ROOT / "meta/runtime.yml").read_text())["requires_ansible"]
    # a plain clone resolves the collection through collections/ (ansible.cfg collections_path)
    link = ROOT / "collections/ansible_collections/acceldeploy/fleet"
    assert link.is_symlink() and link.resolve() == ROOT


def test_the_tarball_holds_the_roles_and_plugins_and_no_local_state(built) -> None:
    with tarfile.open(built["tarball"]) as tar:
        members = {m.name: m for m in tar.getmembers()}
    names = set(members)
    assert {"MANIFEST.json", "FILES.json", "meta/runtime.yml", "README.md", "LICENSE"} <= names
    for role in ROLES:
        assert f"roles/{role}/meta/argument_specs.yml" in names, role
        assert f"roles/{role}/tasks/main.yml" in names, role
    for kind in ("filter", "modules", "action"):
        shipped = {n for n in names if n.startswith(f"plugins/{kind}/") and n.endswith(".py")}
        expected = {p.relative_to(ROOT).as_posix() for p in (ROOT / "plugins" / kind).glob("*.py")}
        assert shipped == expected and expected, kind
    # the host-side code: a symlink inside the collection, kept as one
    utils = members["plugins/module_utils/acceldeploy"]
    assert utils.issym() and utils.linkname == "../../tools/acceldeploy"
    assert (
        "tools/acceldeploy/host/state/drift.py" in names
        and "tools/acceldeploy/host/fetch/run.py" in names
    )
    assert "roles/vllm_service/templates/vllm.service.j2" in names
    # the package's data seen from the documented places: symlinks inside the collection, kept
    for name in ("versions", "schemas"):
        assert members[name].issym() and members[name].linkname == f"tools/acceldeploy/data/{name}"
    for template in TEMPLATES:
        member = members[f"roles/vllm_service/templates/{template.name}"]
        assert member.issym(), template.name
        assert member.linkname == f"../../../{template.relative_to(ROOT)}", template.name
    for kept_out in (".venv", ".git", ".ansible", ".lab", "site", "collections", "tests/lab",
                     "inventory/lab", "inventory/lab-cluster", "dist", "bench-results",
                     "tune-results", ".ruff_cache", ".mypy_cache", ".pytest_cache",
                     "lab", "tools/lab.py", "tools/bench_noop.py"):  # fmt: skip
        assert not [n for n in names if n == kept_out or n.startswith(kept_out + "/")], kept_out
    # no lab code at all: the lab is its own distribution (lab/), and nothing of it is left
    # under tools/acceldeploy; the product's shims stay
    lab_code = [n for n in names if "acceldeploy_lab" in n or "tools/acceldeploy/lab" in n]
    assert not lab_code, lab_code[:5]
    assert {"tools/acceldeploy/cli/__init__.py", "tools/plan.py", "tools/verify.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".tar.gz"))]
    hidden = [n for n in names if "/." in "/" + n]
    assert not hidden, hidden[:5]


def test_the_installed_collection_reads_the_package_data_through_its_symlinks(built) -> None:
    installed = built["installed"]
    assert (installed / "versions" / "stacks.yml").read_text() == (
        ROOT / "versions" / "stacks.yml"
    ).read_text()
    assert (installed / "schemas" / "verify-report.schema.json").is_file()
    assert TEMPLATES
    for template in TEMPLATES:
        role_template = installed / "roles" / "vllm_service" / "templates" / template.name
        assert role_template.read_text() == template.read_text(), template.name


def test_a_playbook_outside_the_repository_resolves_the_roles_by_fqcn(built) -> None:
    outside, env = built["outside"], built["env"]
    play = [
        {"name": "Host tuning", "hosts": "all", "gather_facts": False,
         "roles": [{"role": "acceldeploy.fleet.host_tuning"}]},
        {"name": "Serve", "hosts": "all", "gather_facts": False,
         "roles": [{"role": "acceldeploy.fleet.vllm_service"}]},
        {"name": "First contact", "hosts": "all", "gather_facts": False,
         "tasks": [{"name": "Preflight", "ansible.builtin.include_role": {
             "name": "acceldeploy.fleet.preflight"}}]},
    ]  # fmt: skip
    (outside / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    done = run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", "play.yml"],
        outside,
        env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(ROOT) not in done.stdout + done.stderr

    doc = run([str(BIN / "ansible-doc"), "-t", "role", "acceldeploy.fleet.host_tuning"],
              outside, env)  # fmt: skip
    assert doc.returncode == 0, doc.stderr
    assert str(built["installed"]) in doc.stdout and "ENTRY POINT:" in doc.stdout
    assert "host_tuning_hugepages" in doc.stdout  # the argument specs, documented
    listed = run([str(BIN / "ansible-doc"), "-t", "module", "-l", "acceldeploy.fleet"],
                 outside, env)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    for module in (ROOT / "plugins" / "modules").glob("*.py"):
        assert f"acceldeploy.fleet.{module.stem}" in listed.stdout, module.stem


def test_an_installed_collections_modules_and_filters_run_without_the_checkout(built) -> None:
    """No module_utils setting: acceldeploy_state finds drift.py in the collection's own
    plugins/module_utils; a role's contract keys the no-op record with the installed
    collection (its action plugin, on the controller)."""
    outside, env = built["outside"], built["env"]
    record = outside / "state" / "role.json"
    keyed = outside / "state" / "python_env.json"
    tasks = [
        {"name": "Record", "acceldeploy.fleet.acceldeploy_state": {
            "path": str(record), "state": "record", "key": "k",
            "files": [str(outside / "ansible.cfg")]}},
        {"name": "Check", "acceldeploy.fleet.acceldeploy_state": {"path": str(record), "key": "k"},
         "register": "checked"},
        {"name": "Record by contract", "acceldeploy.fleet.acceldeploy_state": {
            "path": str(keyed), "state": "record", "role": "python_env"}},
        {"name": "Check by contract", "acceldeploy.fleet.acceldeploy_state": {
            "path": str(keyed), "role": "python_env"}},
    ]  # fmt: skip
    contract_vars = {"python_env_spec": {"manager": "container", "key": "k"},
                     "python_env_fact_file": "/f", "python_env_verify_import": True}  # fmt: skip
    play = [{"hosts": "localhost", "gather_facts": False, "vars": contract_vars, "tasks": tasks}]
    (outside / "modules.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    done = run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "modules.yml"],
        outside,
        {**env, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = {
        task["task"]["name"]: task["hosts"]["localhost"]
        for play in json.loads(done.stdout)["plays"]
        for task in play["tasks"]
    }
    assert results["Check"]["drift"] == [], results["Check"]
    assert json.loads(record.read_text())["key"] == "k"
    assert results["Check by contract"]["drift"] == [], results["Check by contract"]
    assert len(json.loads(keyed.read_text())["key"]) == 64
