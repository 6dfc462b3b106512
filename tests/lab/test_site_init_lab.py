"""`acceldeploy init` on the lab's hosts over real SSH (make test, e2e: after test_site.py has
served the lab): given lab1 and lab2's SSH ports and key, the lab's site settings as --vars and
the tiny model, it writes an inventory that site.yml deploys (the services it describes are the
lab's own, so the converged lab's services keep running: none restarts), a second run changes
nothing, and verify passes on it. With
a fake `npu-smi` on lab2 printing recorded real output, it finds an Ascend host with 8 NPUs;
an unreachable host is refused with the reason and nothing is written."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, on_host, verify_report

pytestmark = pytest.mark.e2e

RECORDED = ROOT / "tests/data/recorded/npu-smi-info-910b1-x8.txt"
HOSTS = ("lab1", "lab2")


def lab_hosts() -> dict[str, dict[str, object]]:
    hosts = yaml.safe_load(INVENTORY.read_text())["all"]["children"]["lab"]["hosts"]
    return {name: hosts[name] for name in HOSTS}


def site_vars(tmp: Path) -> Path:
    """The lab's site settings (inventory/lab/group_vars/all.yml), its per-host port as a Jinja
    expression of the SSH port init writes (2201 -> 8001)."""
    lab = yaml.safe_load((INVENTORY.parent / "group_vars/all.yml").read_text())
    (service,) = lab["acceldeploy_services"]
    keep = ("model_weights_hf_endpoint", "model_weights_strategy", "model_weights_seed_host",
            "python_env_find_links")  # fmt: skip
    settings = {
        "service": {"port": "{{ 8000 + (ansible_port | int) - 2200 }}", "env": service["env"]},
        **{k: lab[k] for k in keep},
        "python_env_wheel_cache": "/var/cache/acceldeploy",
        "python_env_venv_python": "/usr/bin/python3.11",
    }
    path = tmp / "lab-site.yml"
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return path


def init(tmp: Path, hosts: str, *extra: str) -> subprocess.CompletedProcess[str]:
    first = lab_hosts()["lab1"]
    argv = [sys.executable, "-m", "acceldeploy", "init", "lab", "-H", hosts, "--user", "root",
            "--key", str(first["ansible_ssh_private_key_file"]),
            "--ssh-args", str(first["ansible_ssh_common_args"]),
            "--model", "acceldeploy/tiny-qwen3-vl", "--name", "qwen3-vl", *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tools")})  # fmt: skip


def targets(*names: str) -> str:
    return ",".join(f"{n}=127.0.0.1:{lab_hosts()[n]['ansible_port']}" for n in names)


def test_init_writes_an_inventory_that_site_yml_deploys(tmp_path: Path) -> None:
    done = init(tmp_path, targets(*HOSTS), "--vars", str(site_vars(tmp_path)))
    assert done.returncode == 0, done.stderr
    written = tmp_path / "inventory/lab"
    hosts = yaml.safe_load((written / "hosts.yml").read_text())["all"]["children"]["cpu"]
    assert hosts["vars"] == {"acceldeploy_platform": "cpu"}
    assert {h: v["acceldeploy_os"] for h, v in hosts["hosts"].items()} == dict.fromkeys(
        HOSTS, "debian-12"
    )
    pids = {h: on_host(h, "systemctl show -p MainPID --value qwen3-vl").strip() for h in HOSTS}
    run = run_playbook("site.yml", written / "hosts.yml", timeout=1800)
    assert run.ok, run.output[-6000:]
    assert {h: on_host(h, "systemctl show -p MainPID --value qwen3-vl").strip()
            for h in HOSTS} == pids, "a service restarted: the written inventory differs"  # fmt: skip
    again = run_playbook("site.yml", written / "hosts.yml", timeout=1800)
    assert again.ok, again.output[-6000:]
    assert {h: again.changed(h) for h in HOSTS} == dict.fromkeys(HOSTS, 0), again.drift()
    code, report = verify_report(written / "hosts.yml")
    assert code == 0, [c for c in report["checks"] if c["status"] == "fail"]


def test_init_finds_the_npus_of_a_fake_device_host_and_refuses_an_unreachable_one(
    tmp_path: Path,
) -> None:
    fake, text = "/usr/local/bin/npu-smi", "/etc/acceldeploy-init-npu-smi.txt"
    recording = base64.b64encode(RECORDED.read_bytes()).decode()
    on_host("lab2", f"echo {recording} | base64 -d > {text} && printf '#!/bin/sh\\ncat {text}\\n' "
            f"> {fake} && chmod 0755 {fake}")  # fmt: skip
    try:
        done = init(tmp_path, targets("lab2"), "--model", "Qwen/Qwen3-VL-32B-Instruct",
                    "--name", "qwen3-vl-32b", "--out", "ascend")  # fmt: skip
    finally:
        on_host("lab2", f"rm -f {fake} {text}")
    assert done.returncode == 0, done.stderr
    assert "lab2: Debian GNU/Linux 12 (bookworm)" in done.stdout
    assert "ascend: 8 x 910B1 (64 GiB each)" in done.stdout
    shared = yaml.safe_load((tmp_path / "ascend/group_vars/all.yml").read_text())
    assert shared["acceldeploy_services"][0]["devices"] == [0, 1]

    closed = init(tmp_path, "gone=127.0.0.1:9", "--out", "gone")
    assert closed.returncode == 2
    assert "gone: unreachable over SSH as root@127.0.0.1:9" in closed.stderr
    assert not (tmp_path / "gone").exists()
