"""roles/ascend_runtime and roles/gaudi_runtime (playbooks/runtime.yml) on the lab hosts
(named test_runtimes_lab.py: tests/unit/test_runtimes.py has the plain name, and pytest needs
unique basenames across tests/).

NPUs and Gaudis cannot exist on the lab hosts, so tests/lab/fixtures/prepare.yml makes two
hosts look like accelerator servers as far as files and tools go: real recorded version files
(tests/data/recorded, tests/lab/fixtures/recorded; each cites its public source on line 1)
in their real places, fake `npu-smi` / `hl-smi` scripts that print recorded real output, a
synthetic `docker` (tests/lab/fixtures/bin/docker says what it answers), and fake device nodes.
The first host gets a fitting stack, the second one that does not (CANN 8.2.RC1 on Ascend,
habanalabs 1.24.0 on Gaudi). Then:

- ``--check --diff``: the first host passes the gate and shows the exact conda commands
  (Ascend) or container invocation (Gaudi); the second stops at the gate naming both versions;
- a real run on the mismatched host stops it before anything is installed (nothing on the host
  changes, changed=0);
- the runtime roles converge on the fitting host and a second run changes nothing; Gaudi's
  opt-in HCCL check records the recorded bandwidth.

Runs against $ACCELDEPLOY_TEST_INVENTORY (default inventory/lab/hosts.yml; two hosts needed)
and leaves the hosts as it found them (tests/lab/fixtures/cleanup.yml).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import REPO, PlaybookRun, lab_hosts, run_playbook, ssh

from acceldeploy import runtimes

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/runtime.yml"
FIXTURES = REPO / "tests" / "lab" / "fixtures"
RECORDED = REPO / "tests" / "data" / "recorded"
FAKE = "/etc/acceldeploy-fake"
TEST_USER = "acceldeploy-rt-test"
STUB = "/srv/acceldeploy-fake"
CONNECTION = (
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_ssh_private_key_file",
    "ansible_ssh_common_args",
    "ansible_python_interpreter",
)
SNAPSHOT = (
    "{ find /opt /etc/ansible /usr/local/Ascend /var/cache/acceldeploy /etc/docker -maxdepth 4 "
    "-xdev -printf '%p %y %m %s %T@\\n' 2>/dev/null | LC_ALL=C sort; "
    f"getent passwd {TEST_USER}; getent group HwHiAiUser; "
    # what the synthetic docker was asked to change (queries left out)
    f"grep -E '^docker (load|pull|tag|run)' {FAKE}/docker-calls.log 2>/dev/null; "
    "sha256sum /etc/passwd /etc/group; } 2>&1"
)


def recorded(name: str) -> str:
    path = RECORDED / name if (RECORDED / name).exists() else FIXTURES / "recorded" / name
    return path.read_text()


def body(name: str) -> str:
    """A recorded file without its '# source:' header, as the real file on a host reads."""
    return recorded(name).split("\n", 1)[1]


def text(dest: str, content: str, mode: str = "0644") -> dict[str, str]:
    return {"dest": dest, "content": content, "mode": mode}


def tool(name: str) -> dict[str, str]:
    return text(f"/usr/local/bin/{name}", (FIXTURES / "bin" / name).read_text(), "0755")


def ascend_fixture(cann: str) -> dict[str, Any]:
    """Driver 24.1.rc3 + its firmware 7.5.0.1.129, CANN <cann> (recorded install.info), npu-smi
    info of 8 x 910B1 (recorded), fake set_env.sh, device nodes, HwHiAiUser."""
    home = "/usr/local/Ascend"
    return {
        "fake_texts": [
            text(f"{home}/driver/version.info", body("driver-version-info-24.1.rc3.txt")),
            text(
                f"{home}/firmware/version.info",
                body("ascend-firmware-version-info-7.5.0.1.129.txt"),
            ),
            text(
                f"{home}/ascend-toolkit/{cann}/aarch64-linux/ascend_toolkit_install.info",
                body(f"ascend-toolkit-install-info-cann-{cann}.txt"),
            ),
            text(
                f"{home}/ascend-toolkit/set_env.sh",
                "# FAKE (lab): stands in for CANN's set_env.sh\n",
            ),
            text(f"{home}/nnal/atb/set_env.sh", "# FAKE (lab): stands in for NNAL's set_env.sh\n"),
            text(f"{FAKE}/npu-smi-info.txt", recorded("npu-smi-info-910b1-x8.txt")),
            tool("npu-smi"),
            text(
                f"{STUB}/Miniforge3-Linux-x86_64.sh",
                "# STUB (lab): never run; check mode only\nexit 1\n",
            ),
        ],
        "fake_links": [
            {"dest": f"{home}/ascend-toolkit/latest", "src": f"{home}/ascend-toolkit/{cann}"}
        ],
        "fake_nodes": [f"/dev/davinci{i}" for i in range(8)]
        + ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"],
        "fake_groups": ["HwHiAiUser"],
    }


def gaudi_fixture(hl_smi: str) -> dict[str, Any]:
    """hl-smi <hl_smi> (recorded), module ids and topology (recorded), hccl_demo output
    (recorded), the documented daemon.json, a runtime stub, device nodes, a synthetic docker
    and an image 'tarball' the fake docker loads."""
    daemon = {
        "runtimes": {"habana": {"path": "/usr/bin/habana-container-runtime", "runtimeArgs": []}}
    }
    return {
        "fake_texts": [
            text(f"{FAKE}/hl-smi.txt", recorded(hl_smi)),
            text(
                f"{FAKE}/hl-smi-modules.txt", recorded("hl-smi-Q-index-module_id-csv-gaudi2e.txt")
            ),
            text(f"{FAKE}/hl-smi-topo.txt", recorded("hl-smi-topo-c-N-gaudi2.txt")),
            text(f"{FAKE}/hccl-demo.txt", recorded("hccl-demo-all-reduce-8x-gaudi2.txt")),
            text(f"{FAKE}/docker-images", ""),
            text("/etc/docker/daemon.json", json.dumps(daemon, indent=4) + "\n"),
            text("/usr/bin/habana-container-runtime", "#!/bin/sh\n# STUB (lab)\nexit 1\n", "0755"),
            text(f"{STUB}/vllm-fork-aice-v1.22.0.tar", runtimes.stack("gaudi")["image"] + "\n"),
            text(
                "/opt/hccl_demo/run_hccl_demo.py",
                "# STUB (lab): the fake docker prints the recording\n",
            ),
            tool("hl-smi"),
            tool("docker"),
        ],
        "fake_nodes": [f"/dev/accel/accel{i}" for i in range(8)],
    }


@pytest.fixture(scope="module")
def lab() -> dict[str, dict[str, Any]]:
    found = lab_hosts()
    if len(found) < 2:
        pytest.skip("needs two lab hosts (one fitting, one mismatched)")
    names = sorted(found)[:2]
    return {name: {k: found[name][k] for k in CONNECTION if k in found[name]} for name in names}


def write_inventory(path: Path, hosts: dict[str, dict[str, Any]], common: dict[str, Any]) -> Path:
    data = {"all": {"children": {"runtime_test": {"vars": common, "hosts": hosts}}}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cleanup(inventory: Path) -> None:
    run = run_playbook(FIXTURES / "cleanup.yml", inventory)
    assert run.ok, run.output


def prepare(inventory: Path, host: str, fixture: dict[str, Any]) -> None:
    run = run_playbook(FIXTURES / "prepare.yml", inventory, fixture, limit=host)
    assert run.ok, run.output


def snapshot(hostvars: dict[str, Any]) -> str:
    return ssh(hostvars, SNAPSHOT).stdout


def failed_message(run: PlaybookRun, host: str) -> str:
    return "\n".join(
        str(r.get("msg")) for _, h, r in run.iter_results() if h == host and r.get("failed")
    )


# ---------------------------------------------------------------------------- Ascend


@pytest.fixture(scope="module")
def ascend(
    lab: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    fits, mismatched = sorted(lab)
    common = {
        "acceldeploy_platform": "ascend",
        "ascend_runtime_devices": [2, 3],
        "ascend_runtime_service_user": TEST_USER,
        "python_env_miniforge_installer": f"{STUB}/Miniforge3-Linux-x86_64.sh",
        "python_env_index_url": "https://mirrors.aliyun.com/pypi/simple/",
        "python_env_extra_index_urls": ["https://mirrors.huaweicloud.com/ascend/repos/pypi"],
        # Not the lab's own python_env fact (its cpu venv stays as it is).
        "python_env_fact_file": f"{FAKE}/acceldeploy_python_env.fact",
    }
    inventory = write_inventory(tmp_path_factory.mktemp("ascend") / "hosts.yml", lab, common)
    cleanup(inventory)
    prepare(inventory, fits, ascend_fixture("8.3.RC2"))
    prepare(inventory, mismatched, ascend_fixture("8.2.RC1"))
    yield {"inventory": inventory, "fits": fits, "mismatched": mismatched, "common": common}
    cleanup(inventory)


def test_ascend_check_diff_gate_and_exact_conda_commands(ascend: dict[str, Any]) -> None:
    fits, mismatched = ascend["fits"], ascend["mismatched"]
    run = run_playbook(PLAYBOOK, ascend["inventory"], check=True, diff=True)
    assert run.failed(fits) == 0, run.output
    gate = run.results("Check | Driver, firmware and CANN fit the pinned stack")
    assert (
        "CANN 8.3.RC2, driver 24.1.rc3, firmware 7.5.0.1.129 fit vllm-ascend v0.12.0rc1"
        in " ".join(str(gate[fits]["msg"]).split())
    )
    # The exact commands the conda environment would be built with, as Python plans them.
    plan = runtimes.python_env_plan(
        {
            "platform": "ascend",
            "index_url": ascend["common"]["python_env_index_url"],
            "extra_index_urls": ascend["common"]["python_env_extra_index_urls"],
            "env_scripts": runtimes.stack("ascend")["env_scripts"],
        }
    )
    shown = run.results("Build | Commands that will build the environment")[fits]["msg"]
    assert shown == plan["commands"]
    assert any(
        "VLLM_TARGET_DEVICE=empty" in c and f"-e {plan['staging']}/src/vllm" in c for c in shown
    )
    record = run.results("Build | Record what was built")[fits]
    assert "--branch v0.12.0rc1" in json.dumps(record.get("diff"))
    # The mismatched host stopped at the gate, naming both versions and the fix.
    message = failed_message(run, mismatched)
    assert "CANN 8.2.RC1 is installed" in message
    assert "vllm-ascend v0.12.0rc1 needs CANN 8.3.RC2" in message
    assert "ascend_runtime_cann_toolkit_package" in message
    assert run.changed(mismatched) == 0


def test_ascend_mismatch_stops_before_anything_is_installed(
    ascend: dict[str, Any], lab: dict[str, dict[str, Any]]
) -> None:
    host = ascend["mismatched"]
    before = snapshot(lab[host])
    run = run_playbook(PLAYBOOK, ascend["inventory"], limit=host)
    assert not run.ok
    assert run.failed(host) == 1 and run.changed(host) == 0
    assert "needs CANN 8.3.RC2" in failed_message(run, host)
    assert not run.results("Build | Create the environment"), "python_env ran on a failed host"
    assert snapshot(lab[host]) == before


def test_ascend_runtime_converges_then_changes_nothing(
    ascend: dict[str, Any], lab: dict[str, dict[str, Any]]
) -> None:
    host = ascend["fits"]
    first = run_playbook(PLAYBOOK, ascend["inventory"], limit=host, tags=["ascend_runtime"])
    assert first.ok, first.output
    assert first.changed(host) >= 2  # the service user joins HwHiAiUser; the fact is written
    second = run_playbook(PLAYBOOK, ascend["inventory"], limit=host, tags=["ascend_runtime"])
    assert second.ok and second.changed(host) == 0, second.output
    check = run_playbook(
        PLAYBOOK, ascend["inventory"], limit=host, tags=["ascend_runtime"], check=True, diff=True
    )
    assert check.ok and check.changed(host) == 0, check.output
    fact = json.loads(
        ssh(lab[host], "cat /etc/ansible/facts.d/acceldeploy_ascend_runtime.fact").stdout
    )
    assert (fact["cann"], fact["driver"], fact["firmware"]) == (
        "8.3.RC2",
        "24.1.rc3",
        "7.5.0.1.129",
    )
    assert fact["env_scripts"] == runtimes.stack("ascend")["env_scripts"]
    assert "/dev/davinci2" in fact["device_nodes"]
    groups = ssh(lab[host], f"id -nG {TEST_USER}").stdout.split()
    assert "HwHiAiUser" in groups


def test_the_upgrade_advisor_reads_what_the_host_holds_read_only(
    ascend: dict[str, Any], lab: dict[str, dict[str, Any]]
) -> None:
    """`plan upgrade --read-hosts` reads the host over SSH with the first contact's probe and
    judges it against the stack it would move to; nothing on the host changes."""
    host = ascend["fits"]
    before = snapshot(lab[host])
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools"), "COLUMNS": "200"}
    argv = [sys.executable, "-m", "acceldeploy", "plan", "upgrade", "-i", str(ascend["inventory"]),
            "--limit", host, "--to", "ascend-vllm-0.13.0", "--read-hosts", "--json"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    rows = json.loads(proc.stdout)
    (read,) = [r["detail"] for r in rows if r["what"] == "read from the host"]
    assert "driver 24.1.rc3" in read and "firmware 7.5.0.1.129" in read and "cann 8.3.RC2" in read
    (cann,) = [r for r in rows if r["kind"] == "runtime"]
    assert cann["blocking"] and cann["detail"].startswith("CANN 8.3.RC2 -> 8.5.0: ")
    assert proc.returncode == 1  # the CANN move blocks until the role is told to install it
    assert snapshot(lab[host]) == before


def test_ascend_in_the_release_image_loads_it_once_and_reads_no_host_cann(
    ascend: dict[str, Any], lab: dict[str, dict[str, Any]]
) -> None:
    """python_env_manager container: the host whose CANN 8.2.RC1 stops the conda path runs
    the stack's image instead, which carries CANN. The synthetic docker stands in for Docker
    (it loads the 'tarball' by the name it holds); driver, firmware and devices are judged as
    on the conda path. Nothing here runs the image: that needs an NPU host."""
    host, inventory = ascend["mismatched"], ascend["inventory"]
    image = runtimes.stack("ascend")["image"]
    tarball = f"{STUB}/vllm-ascend-v0.12.0rc1.tar"
    docker = [text(f"{FAKE}/docker-images", ""), text(tarball, image + "\n"), tool("docker")]
    prepare(inventory, host, {"fake_texts": docker})
    extra = {
        "python_env_manager": "container",
        "ascend_runtime_image_tarball": tarball,
        # The synthetic docker cannot say which vLLM an image holds; nothing is faked there.
        "python_env_verify_import": False,
    }
    first = run_playbook(PLAYBOOK, inventory, extra, limit=host)
    assert first.ok, first.output
    assert first.changed(host) >= 2  # docker load, the facts
    found = first.results("Check | What was found")[host]["msg"]
    assert found["cann"] == "absent"  # the host's 8.2.RC1 is not read
    shown = first.results("Container | How the services will start it")[host]["msg"]
    assert shown.endswith(image) and "--shm-size=1g" in shown
    assert not first.results("Build | Create the environment"), "a conda env was built"
    second = run_playbook(PLAYBOOK, inventory, extra, limit=host)
    assert second.ok and second.changed(host) == 0, second.output
    calls = ssh(lab[host], f"cat {FAKE}/docker-calls.log").stdout
    assert calls.count(f"docker load --input {tarball}") == 1
    fact = json.loads(
        ssh(lab[host], "cat /etc/ansible/facts.d/acceldeploy_ascend_runtime.fact").stdout
    )
    assert fact["image"] == image and fact["image_id"].startswith("sha256:fake-")
    assert fact["env_scripts"] == [] and fact["driver"] == "24.1.rc3"
    python_env = json.loads(ssh(lab[host], f"cat {FAKE}/acceldeploy_python_env.fact").stdout)
    assert python_env["manager"] == "container" and python_env["run_argv"][-1] == image
    ssh(lab[host], "rm -f /etc/ansible/facts.d/acceldeploy_ascend_runtime.fact "
                   f"{FAKE}/acceldeploy_python_env.fact")  # fmt: skip


def test_ascend_installs_the_pinned_cann_from_operator_packages(
    ascend: dict[str, Any], lab: dict[str, dict[str, Any]]
) -> None:
    """The mismatched host (CANN 8.2.RC1) with ascend_runtime_cann_install and the three 8.3.RC2
    packages: installs them (toolkit, kernels, nnal; the packages are test stubs that lay down
    the recorded 8.3.RC2 install.info), gates again and passes; a second run installs nothing."""
    host = ascend["mismatched"]
    arch = ssh(lab[host], "uname -m").stdout.strip()
    stub = (FIXTURES / "cann" / "fake-cann.run").read_text()
    names = {
        "toolkit": f"Ascend-cann-toolkit_8.3.RC2_linux-{arch}.run",
        "kernels": f"Ascend-cann-kernels-910b_8.3.RC2_linux-{arch}.run",
        "nnal": f"Ascend-cann-nnal_8.3.RC2_linux-{arch}.run",
    }
    prepare(
        ascend["inventory"],
        host,
        {
            "fake_texts": [text(f"{STUB}/cann/{n}", stub, "0755") for n in names.values()]
            + [
                text(
                    f"{FAKE}/toolkit-install.info",
                    body("ascend-toolkit-install-info-cann-8.3.RC2.txt"),
                )
            ]
        },
    )
    extra = {
        "ascend_runtime_cann_install": True,
        **{f"ascend_runtime_cann_{kind}_package": f"{STUB}/cann/{n}" for kind, n in names.items()},
    }
    first = run_playbook(PLAYBOOK, ascend["inventory"], extra, limit=host, tags=["ascend_runtime"])
    assert first.ok, first.output
    log = ssh(lab[host], f"cat {FAKE}/cann-installs.log").stdout.splitlines()
    assert [line.split()[0] for line in log] == list(names.values())
    assert "--full --install-path=/usr/local/Ascend --quiet" in log[0]
    again = run_playbook(PLAYBOOK, ascend["inventory"], extra, limit=host, tags=["ascend_runtime"])
    assert again.ok and again.changed(host) == 0, again.output
    assert len(ssh(lab[host], f"cat {FAKE}/cann-installs.log").stdout.splitlines()) == 3
    fact = json.loads(
        ssh(lab[host], "cat /etc/ansible/facts.d/acceldeploy_ascend_runtime.fact").stdout
    )
    assert fact["cann"] == "8.3.RC2"


# ---------------------------------------------------------------------------- Gaudi


@pytest.fixture(scope="module")
def gaudi(
    lab: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    fits, mismatched = sorted(lab)
    common = {
        "acceldeploy_platform": "gaudi",
        "gaudi_runtime_devices": [2, 3],
        "gaudi_runtime_image_tarball": f"{STUB}/vllm-fork-aice-v1.22.0.tar",
        # The synthetic docker cannot say which vLLM an image holds; nothing is faked there.
        "python_env_verify_import": False,
        "python_env_fact_file": f"{FAKE}/acceldeploy_python_env.fact",
    }
    inventory = write_inventory(tmp_path_factory.mktemp("gaudi") / "hosts.yml", lab, common)
    cleanup(inventory)
    prepare(inventory, fits, gaudi_fixture("hl-smi-gaudi2-hl225-x8.txt"))
    prepare(inventory, mismatched, gaudi_fixture("hl-smi-gaudi2e-hl288e-x8.txt"))
    yield {"inventory": inventory, "fits": fits, "mismatched": mismatched}
    cleanup(inventory)


def test_gaudi_check_diff_gate_and_container_invocation(gaudi: dict[str, Any]) -> None:
    fits, mismatched = gaudi["fits"], gaudi["mismatched"]
    run = run_playbook(PLAYBOOK, gaudi["inventory"], check=True, diff=True)
    assert run.failed(fits) == 0, run.output
    found = run.results("Check | What was found")[fits]["msg"]
    assert found["driver"] == "1.22.1" and found["image"]["source"] == "tarball"
    assert {m["module_id"]: m["numa"] for m in found["modules"]} == {
        2: 0,
        6: 1,
        3: 0,
        7: 1,
        0: 0,
        4: 1,
        5: 1,
        1: 0,
    }
    shown = run.results("Container | How the services will start it")[fits]["msg"]
    assert shown == runtimes.python_env_plan({"platform": "gaudi"})["run_command"]
    assert shown.startswith("docker run --rm --runtime=habana -e HABANA_VISIBLE_DEVICES=all")
    message = failed_message(run, mismatched)
    assert (
        "habanalabs driver 1.24.0 (hl-smi: Driver Version 1.24.0-bb94c81) does not match" in message
    )
    assert "Intel Gaudi software 1.22.0" in message
    assert run.changed(mismatched) == 0


def test_gaudi_mismatch_stops_before_anything_is_installed(
    gaudi: dict[str, Any], lab: dict[str, dict[str, Any]]
) -> None:
    host = gaudi["mismatched"]
    before = snapshot(lab[host])
    run = run_playbook(PLAYBOOK, gaudi["inventory"], limit=host)
    assert not run.ok and run.failed(host) == 1 and run.changed(host) == 0
    assert "does not match Intel Gaudi software 1.22.0" in failed_message(run, host)
    assert snapshot(lab[host]) == before  # no docker load, no fact, nothing


def test_gaudi_loads_the_image_records_modules_and_hccl_bandwidth(
    gaudi: dict[str, Any], lab: dict[str, dict[str, Any]]
) -> None:
    host = gaudi["fits"]
    extra = {"gaudi_runtime_hccl_check": True}
    first = run_playbook(PLAYBOOK, gaudi["inventory"], extra, limit=host)
    assert first.ok, first.output
    assert first.changed(host) >= 2  # docker load, the fact (python_env's fact too)
    calls = ssh(lab[host], f"cat {FAKE}/docker-calls.log").stdout
    assert f"docker load --input {STUB}/vllm-fork-aice-v1.22.0.tar" in calls
    second = run_playbook(PLAYBOOK, gaudi["inventory"], extra, limit=host)
    assert second.ok and second.changed(host) == 0, second.output
    assert ssh(lab[host], f"cat {FAKE}/docker-calls.log").stdout.count("docker load") == 1
    fact = json.loads(
        ssh(lab[host], "cat /etc/ansible/facts.d/acceldeploy_gaudi_runtime.fact").stdout
    )
    assert fact["driver"] == "1.22.1" and fact["firmware"] == "61.4.2.1"
    assert fact["hccl"]["nw_bandwidth_gbps"] == 258.209121
    assert {"index": 0, "module_id": 2, "numa": 0, "cpus": "0-39,80-119"} in fact["modules"]
    python_env = json.loads(ssh(lab[host], f"cat {FAKE}/acceldeploy_python_env.fact").stdout)
    assert python_env["manager"] == "container"
    assert python_env["run_argv"][-1] == runtimes.stack("gaudi")["image"]
