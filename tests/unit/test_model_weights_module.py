"""plugins/modules/model_weights_fetch.py gets its code through the collection's module_utils:
AnsiballZ zips plugins/module_utils/acceldeploy/host/fetch (tools/acceldeploy/host/fetch, and the
``..modelref`` and ``..errors`` it imports) into the module's payload. Here the module runs through a real
``ansible`` ad-hoc call on this machine (local connection), its payload is unpacked and
listed: it carries that and nothing else of acceldeploy. What a host can run of it (the
standard library, relative imports, Python 3.9) is held with all host-side code, in
tests/unit/test_host_side_code.py."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acceldeploy.host.fetch.common import Listing, ModelSpec, RemoteFile, hash_file
from acceldeploy.host.fetch.manifest import write_manifest
from acceldeploy.inventory.scope import Scope
from acceldeploy.roles import model_weights

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "tools" / "acceldeploy"
REV = "0123456789abcdef0123456789abcdef01234567"
# What the module's payload carries of acceldeploy, and nothing else of it.
SHIPPED = {
    "__init__.py",
    "errors.py",
    "modelref.py",
    "secrets.py",
    "host/__init__.py",
    "host/fetch/__init__.py",
    "host/fetch/common.py",
    "host/fetch/hub.py",
    "host/fetch/manifest.py",
    "host/fetch/plan.py",
    "host/fetch/progress.py",
    "host/fetch/publish.py",
    "host/fetch/run.py",
    "host/fetch/seed.py",
}


def ansible_module(args: dict[str, Any], remote_tmp: Path) -> tuple[dict[str, Any], Path]:
    """Runs model_weights_fetch on localhost the way a play does; returns its result and the
    kept AnsiballZ file."""
    ansible = Path(sys.executable).parent / "ansible"
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_KEEP_REMOTE_FILES": "1",
        "ANSIBLE_PIPELINING": "0",
        "ANSIBLE_REMOTE_TMP": str(remote_tmp),
        "ANSIBLE_LOCAL_TEMP": str(remote_tmp / "local"),
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_NOCOLOR": "1",
    }
    proc = subprocess.run(
        [
            str(ansible),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            "acceldeploy.fleet.model_weights_fetch",
            "-a",
            json.dumps(args),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "=> " in proc.stdout, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.split("=> ", 1)[1])
    (payload,) = remote_tmp.glob("ansible-tmp-*/AnsiballZ_model_weights_fetch.py")
    return result, payload


def publish_model(root: Path) -> tuple[ModelSpec, Path]:
    spec = ModelSpec("org/model", "hf", REV)
    directory = root / spec.dirname
    (directory / "sub").mkdir(parents=True)
    (directory / "config.json").write_bytes(b'{"a": 1}\n')
    (directory / "sub" / "w.safetensors").write_bytes(os.urandom(200_000))
    files = tuple(
        RemoteFile(p, (directory / p).stat().st_size, sha256=hash_file(directory / p, "sha256"))
        for p in ("config.json", "sub/w.safetensors")
    )
    write_manifest(directory, Listing(spec.model, "hf", REV, REV, files), spec)
    return spec, directory


def test_module_runs_from_its_payload(tmp_path):
    spec, directory = publish_model(tmp_path / "models")
    args = {
        "state": "planned",
        "mode": "verify",
        "verify": "full",
        "root": str(tmp_path / "models"),
        "models": [spec.to_dict()],
    }
    result, payload = ansible_module(args, tmp_path / "remote")
    assert not result.get("failed"), result
    (plan,) = result["plans"]
    assert plan["action"] == "none" and plan["rehashed_bytes"] == 200_000 + 9, plan

    # What the payload carries: the fetch package and what it imports, no other acceldeploy.
    out = subprocess.run(
        [sys.executable, str(payload), "explode"], capture_output=True, text=True, check=True
    )
    unpacked = Path(out.stdout.split()[-1])
    collection = unpacked / "ansible_collections" / "acceldeploy" / "fleet"
    shipped = collection / "plugins" / "module_utils" / "acceldeploy"
    assert {p.relative_to(shipped).as_posix() for p in shipped.rglob("*.py")} == SHIPPED
    # one import root: nothing of acceldeploy as ansible.module_utils
    assert not (unpacked / "ansible" / "module_utils" / "acceldeploy").exists()

    # A damaged file is found by the shipped code too.
    with (directory / "sub" / "w.safetensors").open("r+b") as fh:
        fh.write(b"\0\0\0")
    result, _ = ansible_module(args, tmp_path / "remote2")
    (plan,) = result["plans"]
    assert plan["action"] == "repair" and "sub/w.safetensors" in plan["bad"], plan


@pytest.mark.parametrize("name", ["__init__.py", "host/__init__.py", "host/state/__init__.py"])
def test_the_package_init_stays_import_light(name):
    """tools/acceldeploy/__init__.py and host/__init__.py are shipped with every call of a
    module, host/state/__init__.py with every call of acceldeploy_state and acceldeploy_prune."""
    tree = ast.parse((PACKAGE / name).read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def test_filter_plugin_and_role_reach_the_package_without_paths():
    plugin = REPO / "plugins" / "filter" / "model_weights_filters.py"
    spec = importlib.util.spec_from_file_location("model_weights_filters", plugin)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.FilterModule().filters()
    unset = Scope.of_values("lab1", {"model_weights_versions_file": None})
    versions = Path(model_weights.versions_file(unset))
    assert versions == PACKAGE / "data" / "versions" / "fetch.txt" and versions.is_file()
    checked = [plugin, REPO / "plugins" / "modules" / "model_weights_fetch.py"]
    checked += sorted((REPO / "roles" / "model_weights").rglob("*.y*ml"))
    for path in checked:
        text = path.read_text()
        assert "sys.path" not in text and "role_path }}/../.." not in text, path
        assert not re.search(r"src:.*\.py\b", text), f"{path}: copies a Python file to hosts"
    assert not (REPO / "roles" / "model_weights" / "filter_plugins").exists()
