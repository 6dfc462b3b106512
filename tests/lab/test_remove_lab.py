"""playbooks/remove.yml on the served lab with a gateway (lab3) and a monitor (lab4): lab1 runs
a second service (qwen3-vl-b, the same model). Removing qwen3-vl-b takes its unit and files and
nothing the remaining qwen3-vl needs; removing lab2 takes its service, environment, model and
node exporter, its gateway backend and its monitor targets. Each is previewed by --check
--diff without a change, a rerun changes nothing, verify passes on what remains, a refusal
changes nothing, and site.yml brings both back. Its fixture converges the fleet itself and
leaves the lab's two hosts serving as the lab's inventory says."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, haproxy_servers, lab_cli, on_host, verify_report

# ~11 min (a fleet of four converged, lab2's environment rebuilt by site.yml after its removal):
# `make test-slow`. Its figures: docs/operations/remove.md.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REMOVE = "playbooks/remove.yml"
GATEWAY, MONITOR, SERVING = "lab3", "lab4", ("lab1", "lab2")
SECOND = "qwen3-vl-b"
FLEET = (*SERVING, GATEWAY, MONITOR)


def copy_inventory(dest: Path) -> Path:
    shutil.copytree(INVENTORY.parent, dest)
    return dest


def with_second_service(inventory: Path) -> Path:
    """lab1 serves the lab's qwen3-vl and qwen3-vl-b, from the same model directory."""
    group = yaml.safe_load((inventory / "group_vars" / "all.yml").read_text())
    (first,) = group["acceldeploy_services"]
    second = {k: v for k, v in first.items() if k != "env"} | {"name": SECOND, "port": 8011}
    services = [{**first, "port": 8001}, second]
    (inventory / "host_vars").mkdir(exist_ok=True)
    (inventory / "host_vars" / "lab1.yml").write_text(
        yaml.safe_dump({"acceldeploy_services": services})
    )
    return inventory


def without_second_service(inventory: Path, dest: Path) -> Path:
    shutil.copytree(inventory, dest)
    (dest / "host_vars" / "lab1.yml").unlink()
    return dest


def without_host(inventory: Path, dest: Path, host: str) -> Path:
    shutil.copytree(inventory, dest)
    hosts = dest / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    for group in data["all"]["children"].values():
        (group.get("hosts") or {}).pop(host, None)
    hosts.write_text(yaml.safe_dump(data))
    return dest


def active(host: str, unit: str) -> str:
    return on_host(host, f"systemctl is-active {unit} || true").strip()


def exists(host: str, path: str) -> bool:
    return on_host(host, f"test -e {path} && echo yes || echo no").strip() == "yes"


def file_sd_hosts() -> str:
    return on_host(MONITOR, "cat /etc/prometheus/acceldeploy/*.json 2>/dev/null || true")


def assert_verify_passes(inventory: Path) -> None:
    code, report = verify_report(inventory)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert code == 0 and not failed, failed


def assert_no_change(inventory: Path, **extra: str) -> None:
    again = run_playbook(REMOVE, inventory, extra)
    assert again.ok, again.output[-4000:]
    assert {h: again.changed(h) for h in FLEET} == dict.fromkeys(FLEET, 0)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    lab_cli("up", "--hosts", "2", "--gateways", "1", "--monitors", "1")
    inventory = with_second_service(copy_inventory(tmp_path_factory.mktemp("remove") / "inv"))
    try:
        run = run_playbook("site.yml", inventory, timeout=3000)
        assert run.ok, run.output[-6000:]
        assert active("lab1", SECOND) == "active"
        yield inventory
    finally:
        # The lab's own inventory no longer names qwen3-vl-b: remove.yml, told it was dropped,
        # looks for it by name on every serving host. Then the lab as the next tests expect it
        # (lab2 back, should this test have stopped early).
        gone = run_playbook(REMOVE, INVENTORY, {"acceldeploy_remove_service": SECOND,
                                                "acceldeploy_remove_dropped": "true"})  # fmt: skip
        back = run_playbook("site.yml", INVENTORY, timeout=3000)
        lab_cli("down", "--host", GATEWAY)
        lab_cli("down", "--host", MONITOR)
        assert gone.ok, gone.output[-4000:]
        assert back.ok, back.output[-4000:]


def test_remove_a_service_then_a_host_and_site_yml_brings_both_back(
    fleet: Path, tmp_path: Path
) -> None:
    model = "/models/acceldeploy/tiny-qwen3-vl@main"
    choice = {"acceldeploy_remove_service": SECOND}

    preview = run_playbook(REMOVE, fleet, choice, check=True, diff=True)
    assert preview.ok and preview.changed("lab1") > 0, preview.output[-4000:]
    assert active("lab1", SECOND) == "active"

    run = run_playbook(REMOVE, fleet, choice)
    assert run.ok, run.output[-4000:]
    assert active("lab1", SECOND) != "active"
    assert not exists("lab1", f"/etc/systemd/system/{SECOND}.service")
    assert active("lab1", "qwen3-vl") == "active" and exists("lab1", model)
    assert SECOND not in file_sd_hosts()
    assert_no_change(fleet, **choice)
    # What the operator does next: the service leaves the inventory.
    fewer = without_second_service(fleet, tmp_path / "no-second")
    assert_verify_passes(fewer)

    refused = run_playbook(REMOVE, fewer, {"acceldeploy_remove_host": "lab1"})
    assert not refused.ok and "model_weights_seed_host" in refused.output, refused.output
    assert active("lab1", "qwen3-vl") == "active"

    choice = {"acceldeploy_remove_host": "lab2"}
    preview = run_playbook(REMOVE, fewer, choice, check=True, diff=True)
    assert preview.ok and preview.changed("lab2") > 0, preview.output[-4000:]
    assert active("lab2", "qwen3-vl") == "active"

    run = run_playbook(REMOVE, fewer, choice)
    assert run.ok, run.output[-4000:]
    assert active("lab2", "qwen3-vl") != "active"
    assert active("lab2", "prometheus-node-exporter") != "active"
    leftovers = on_host("lab2", "ls -A /opt/acceldeploy /models/acceldeploy 2>/dev/null || true")
    assert leftovers.split() == ["/models/acceldeploy:", "/opt/acceldeploy:"], leftovers
    assert set(haproxy_servers(GATEWAY, "qwen3-vl")) & set(SERVING) == {"lab1"}
    assert "lab2" not in file_sd_hosts() and "lab1" in file_sd_hosts()
    assert_no_change(fewer, **choice)
    assert_verify_passes(without_host(fewer, tmp_path / "no-lab2", "lab2"))

    back = run_playbook("site.yml", fleet, timeout=3000)
    assert back.ok, back.output[-6000:]
    assert active("lab1", SECOND) == "active" and active("lab2", "qwen3-vl") == "active"
    assert set(haproxy_servers(GATEWAY, "qwen3-vl")) & set(SERVING) == set(SERVING)
    assert_verify_passes(fleet)
    print(f"\nremove lab2 {run.duration:.1f} s; site.yml back {back.duration:.1f} s", flush=True)
