"""tools/verify.py against real vLLM on a lab host: passes when all is well, and names the
host, service and check when a unit is stopped, the API key is wrong or a host is gone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
import yaml
from labhost import (
    INVENTORY,
    ROOT,
    download_model,
    install_venv,
    launch_of,
    on_host,
    start_unit,
    unit_alive,
)
from vllm_client import wait_healthy

pytestmark = pytest.mark.lab

HOST = "lab1"
UNIT = "qwen3-vl"
SCHEMA = json.loads((ROOT / "schemas/verify-report.schema.json").read_text())


def verify(inventory: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/verify.py"),
            "-i",
            str(inventory),
            "--json",
            "--timeout",
            "30",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, SCHEMA)
    return proc.returncode, report


def failures(report: dict) -> list[tuple[str, str | None, str]]:
    return [(c["host"], c["service"], c["name"]) for c in report["checks"] if c["status"] == "fail"]


@pytest.fixture(scope="module")
def served() -> Iterator[None]:
    """qwen3-vl serving on lab1: the unit site.yml installed when there is one (the demo's
    lab), else the same argv as a transient unit, stopped afterwards."""
    launch = launch_of(HOST)
    found = on_host(HOST, f"systemctl cat {UNIT} >/dev/null 2>&1 && echo yes", check=False)
    deployed = found == "yes\n"
    if deployed:
        on_host(HOST, f"systemctl reset-failed {UNIT}; systemctl start --no-block {UNIT}")
    else:
        python = install_venv(HOST)
        if (
            on_host(HOST, f"test -f {launch.model_path}/config.json && echo yes", check=False)
            != "yes\n"
        ):
            download_model(HOST, python, launch.model_path)
        start_unit(HOST, UNIT, launch)
    wait_healthy(f"http://127.0.0.1:{launch.port}", 240, lambda: unit_alive(HOST, UNIT))
    yield
    on_host(HOST, f"systemctl {'start --no-block' if deployed else 'stop'} {UNIT}", check=False)


def inventory_copy(tmp_path: Path, edit) -> Path:
    target = tmp_path / "inventory"
    shutil.copytree(INVENTORY.parent, target)
    hosts = yaml.safe_load((target / "hosts.yml").read_text())
    group_vars = yaml.safe_load((target / "group_vars/all.yml").read_text())
    edit(hosts, group_vars)
    (target / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (target / "group_vars/all.yml").write_text(yaml.safe_dump(group_vars))
    return target / "hosts.yml"


def test_verify_passes_and_probes_memory(served: None) -> None:
    rc, report = verify(INVENTORY, "--limit", HOST, "--mm-leak-probe", "3")
    assert rc == 0, failures(report)
    names = {c["name"]: c for c in report["checks"] if c["service"] == UNIT}
    for name in (
        "health",
        "models",
        "version",
        "chat_text",
        "chat_image",
        "metrics",
        "reset_mm_cache",
        "mm_leak_probe",
    ):
        assert names[name]["status"] == "pass", names[name]
    probe = names["mm_leak_probe"]["data"]
    assert probe["requests"] == 3 and probe["before_mib"] > 0 and probe["after_reset_mib"] > 0
    print("memory probe:", probe)


def test_wrong_api_key_is_reported(served: None, tmp_path: Path) -> None:
    launch = launch_of(HOST)
    start_unit(HOST, "qwen3-vl-keyed", _moved(launch, 8291), {"VLLM_API_KEY": "right-key"})
    try:
        wait_healthy("http://127.0.0.1:8291", 240, lambda: unit_alive(HOST, "qwen3-vl-keyed"))

        def keyed(key: str):
            def edit(hosts: dict, group_vars: dict) -> None:
                service = group_vars["acceldeploy_services"][0]
                service.update(name="qwen3-vl-keyed", port=8291, api_key=key)

            return edit

        rc, report = verify(inventory_copy(tmp_path / "bad", keyed("wrong-key")), "--limit", HOST)
        assert rc == 1
        models = next(c for c in report["checks"] if c["name"] == "models")
        assert models["status"] == "fail" and "HTTP 401" in models["detail"]
        assert "api_key" in models["fix"]
        rc, report = verify(inventory_copy(tmp_path / "good", keyed("right-key")), "--limit", HOST)
        enforced = next(c for c in report["checks"] if c["name"] == "api_key")
        assert enforced["status"] == "pass", enforced
    finally:
        on_host(HOST, "systemctl stop qwen3-vl-keyed", check=False)


def _moved(launch, port: int):
    argv = list(launch.argv)
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--served-model-name") + 1] = "qwen3-vl-keyed"
    return type(launch)(**{**launch.__dict__, "argv": argv, "port": port})


def test_unreachable_host_is_reported_and_the_others_checked(served: None, tmp_path: Path) -> None:
    def add_ghost(hosts: dict, group_vars: dict) -> None:
        lab = hosts["all"]["children"]["lab"]["hosts"]
        lab["ghost"] = {**lab[HOST], "ansible_port": 1, "lab_index": 9}

    rc, report = verify(inventory_copy(tmp_path, add_ghost), "--limit", f"{HOST}:ghost")
    assert rc == 1
    assert failures(report) == [("ghost", None, "ssh")]
    assert any(
        c["host"] == HOST and c["name"] == "chat_image" and c["status"] == "pass"
        for c in report["checks"]
    )


def test_stopped_service_fails_naming_host_service_and_check(served: None) -> None:
    on_host(HOST, f"systemctl stop {UNIT}")
    rc, report = verify(INVENTORY, "--limit", HOST)
    assert rc == 1
    assert (HOST, UNIT, "unit") in failures(report)
