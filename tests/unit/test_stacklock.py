"""The stack lock at preflight's first contact (acceldeploy.runtimes.stacklock): the Ascend
driver, firmware and CANN, or the habanalabs driver hl-smi reports, judged against the host's
stack by the runtime checks' own checks, before any host changes.

Every version file and tool output here is a recorded real one (tests/data/recorded and
tests/lab/fixtures/recorded; line 1 of each names its public source and is dropped, as the
real file has no such line). Two ways in:

- a first-contact stdout put together from those recordings, through ``stacklock.check``;
- the real probe script run by /bin/sh, its paths pointed into a temporary root where the
  recordings are planted in the layout the runtime roles' defaults read (Gaudi: an ``hl-smi``
  there prints the recorded hl-smi output, as tests/lab/fixtures/bin/hl-smi does on the lab).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from playbook_report import playbook_report

from acceldeploy.inventory import targets
from acceldeploy.planner import stacks
from acceldeploy.platforms.ascend import runtime as ascend
from acceldeploy.platforms.gaudi import runtime as gaudi
from acceldeploy.runtimes import stacklock

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "lab" / "fixtures" / "recorded"
HOME = "/usr/local/Ascend"

DRIVER = "driver-version-info-24.1.rc3.txt"  # 24.1.rc3, V100R001C19, firmware [7.0.0,7.5.99]
FIRMWARE = "ascend-firmware-version-info-7.5.0.1.129.txt"  # released with 24.1.rc3

BOOKWORM = (
    '== os-release\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
    "== systemd\nsystemd 252 (252.39-1~deb12u2)\n== arch\naarch64\n== glibc\nglibc 2.36\n"
    "== python ansible_python_interpreter\n3.11.2\n"
)


def recorded_path(name: str) -> Path:
    return RECORDED / name if (RECORDED / name).exists() else FIXTURES / name


def body(name: str) -> str:
    """A recording without its '# source:' line: the text as the host has it."""
    return recorded_path(name).read_text().split("\n", 1)[1]


def role_defaults(role: str, home: str = HOME) -> dict[str, Any]:
    """The role's own defaults for where the versions are read, under ``home``."""
    data = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())

    def expand(value: Any) -> Any:
        if isinstance(value, list):
            return [expand(v) for v in value]
        return str(value).replace("{{ ascend_runtime_home }}", home)

    return {k: expand(v) for k, v in data.items()}


def ascend_inputs(stack: str = "", home: str = HOME, **options: Any) -> dict[str, Any]:
    """What playbooks/preflight.yml passes for an Ascend host: its stack and ascend_runtime's
    checked options (the version files' places from the role's defaults)."""
    entry = stacks.host_stack("ascend", stack)
    defaults = role_defaults("ascend_runtime", home)
    role = {
        "ascend_home": home,
        "driver_info": defaults["ascend_runtime_driver_info"],
        "firmware_info": defaults["ascend_runtime_firmware_info"],
        "toolkit_info": defaults["ascend_runtime_toolkit_info"],
        **options,
    }
    checked = ascend.ascend_options(role, entry)
    runtime = {"platform": "ascend", "stack": entry, "options": checked}
    return {"ansible_python": "python3", "runtime": runtime}


def gaudi_inputs(stack: str = "", hl_smi: str = "hl-smi", **options: Any) -> dict[str, Any]:
    entry = stacks.host_stack("gaudi", stack)
    checked = gaudi.gaudi_options({"hl_smi": hl_smi, **options}, entry)
    runtime = {"platform": "gaudi", "stack": entry, "options": checked}
    return {"ansible_python": "python3", "runtime": runtime}


def file_section(name: str, path: str, recording: str | None) -> str:
    if recording is None:
        return f"== file {name}\n@- {path}\n"
    return f"== file {name}\n@ {path}\n{body(recording)}\n"


def ascend_stdout(
    cann: str | None = "8.3.RC2", driver: str | None = DRIVER, firmware: str | None = FIRMWARE
) -> str:
    toolkit = f"ascend-toolkit-install-info-cann-{cann}.txt" if cann else None
    where = f"{HOME}/ascend-toolkit/{cann}/aarch64-linux/ascend_toolkit_install.info"
    return (
        BOOKWORM
        + file_section("driver", f"{HOME}/driver/version.info", driver)
        + file_section("firmware", f"{HOME}/firmware/version.info", firmware)
        + file_section("toolkit", where if cann else f"{HOME}/ascend-toolkit/latest/*", toolkit)
    )


def gaudi_stdout(recording: str | None) -> str:
    if recording is None:
        return BOOKWORM + "== command hl_smi\n@- hl-smi\n"
    return BOOKWORM + f"== command hl_smi\n@ /usr/bin/hl-smi rc=0\n{body(recording)}\n"


def lock(stdout: str, inputs: dict[str, Any]) -> dict[str, Any]:
    result = stacklock.check(stdout, inputs)
    assert set(result["stack_lock"]["errors"]) <= set(result["errors"])
    return dict(result["stack_lock"])


def refused(stdout: str, inputs: dict[str, Any]) -> str:
    errors = lock(stdout, inputs)["errors"]
    assert errors, "expected a refusal"
    return "; ".join(errors)


PACKAGES = {
    "cann_install": True,
    "cann_packages": {
        kind: f"/srv/ascend/Ascend-cann-{kind}_8.3.RC2_linux-aarch64.run"
        for kind in ("toolkit", "kernels", "nnal")
    },
}


# ---------------------------------------------------------------------------- Ascend


def test_ascend_driver_firmware_and_cann_of_the_stack_pass() -> None:
    result = lock(ascend_stdout(), ascend_inputs())
    assert result["errors"] == []
    assert result["stack"] == "ascend-vllm-0.12.0rc1"
    assert result["detected"] == {
        "driver": "24.1.rc3",
        "driver_family": "V100R001C19",
        "cann": "8.3.RC2",
        "cann_path": "/usr/local/Ascend/ascend-toolkit/8.3.RC2/aarch64-linux",
        "firmware": "7.5.0.1.129",
    }


def test_another_cann_is_refused_naming_the_stack_its_list_and_the_fix() -> None:
    message = refused(ascend_stdout(cann="8.2.RC1"), ascend_inputs())
    assert (
        "CANN 8.2.RC1 is installed (/usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux) but "
        "vllm-ascend v0.12.0rc1 needs CANN 8.3.RC2 (acceldeploy_stack = ascend-vllm-0.12.0rc1 "
        "(the ascend default); compatible_cann: 8.3.RC2) (8.2.RC1 is older): install CANN 8.3.RC2"
    ) in message
    assert "ascend_runtime_cann_install: true" in message


def test_a_cann_another_stack_lists_names_that_stack() -> None:
    newer = refused(ascend_stdout(cann="8.5.0"), ascend_inputs())
    assert "CANN 8.5.0 is installed" in newer
    assert "or set acceldeploy_stack to ascend-vllm-0.13.0" in newer
    older = refused(ascend_stdout(cann="8.3.RC2"), ascend_inputs("ascend-vllm-0.13.0"))
    assert "(acceldeploy_stack = ascend-vllm-0.13.0; compatible_cann: 8.5.0)" in older
    assert "or set acceldeploy_stack to ascend-vllm-0.12.0rc1" in older
    assert lock(ascend_stdout(cann="8.5.0"), ascend_inputs("ascend-vllm-0.13.0"))["errors"] == []


def test_cann_the_runtime_stage_installs_may_be_absent_or_another() -> None:
    """ascend_runtime installs CANN (cann_install with the stack's packages): absent or another
    CANN is then no refusal; without cann_install it is, as in the gate."""
    for cann in (None, "8.2.RC1"):
        assert lock(ascend_stdout(cann=cann), ascend_inputs(**PACKAGES))["errors"] == []
    assert "CANN is not installed" in refused(ascend_stdout(cann=None), ascend_inputs())


def test_the_driver_must_be_there_it_is_never_installed() -> None:
    message = refused(ascend_stdout(driver=None), ascend_inputs(**PACKAGES))
    assert (
        "Ascend driver not installed: /usr/local/Ascend/driver/version.info not found; "
        "acceldeploy_stack = ascend-vllm-0.12.0rc1 (the ascend default) runs CANN 8.3.RC2, which "
        "supports the drivers V100R001C15, V100R001C18, V100R001C19, V100R001C20, V100R001C21, "
        "V100R001C23 (cann_compatible_drivers)"
    ) in message


def test_a_driver_outside_the_stacks_list_names_the_stack_that_lists_it(tmp_path: Path) -> None:
    """A copy of versions/ whose default Ascend stack lists only C21 and C23: the recorded
    24.1.rc3 driver (V100R001C19) is refused, and the stack that lists it is named."""
    versions = tmp_path / "versions"
    shutil.copytree(ROOT / "versions", versions)
    text = (versions / "stacks.yml").read_text()
    full = "cann_compatible_drivers: [V100R001C15, V100R001C18, V100R001C19, V100R001C20, "
    assert text.count(full) == 2
    narrow = "cann_compatible_drivers: [V100R001C21, V100R001C23]"
    narrowed = text.replace(full + "V100R001C21, V100R001C23]", narrow, 1)
    (versions / "stacks.yml").write_text(narrowed)
    entry = stacks.host_stack("ascend", "", versions / "stacks.yml")
    inputs = ascend_inputs(**PACKAGES)
    inputs["runtime"] = {**inputs["runtime"], "stack": entry}
    message = refused(ascend_stdout(cann=None), inputs)
    assert message == (
        "Ascend driver 24.1.rc3 (V100R001C19) is not one CANN 8.3.RC2 supports (V100R001C21, "
        "V100R001C23: cann_compatible_drivers of acceldeploy_stack = ascend-vllm-0.12.0rc1 (the "
        "ascend default)): upgrade the Ascend HDK driver and firmware, or set acceldeploy_stack "
        "to ascend-vllm-0.13.0"
    )


def test_firmware_outside_the_drivers_range_and_absent_firmware() -> None:
    newer_firmware = ascend_stdout(firmware="ascend-firmware-version-info-7.7.0.1.231.txt")
    newer = refused(newer_firmware, ascend_inputs())
    assert (
        "Ascend firmware 7.7.0.1.231 is outside driver 24.1.rc3's compatible firmware range "
        "[7.0.0, 7.5.99]: install the firmware package released with this driver"
    ) in newer
    both = ascend_stdout(
        driver="ascend-driver-version-info-25.0.rc1.1.txt",
        firmware="ascend-firmware-version-info-7.7.0.1.231.txt",
    )
    assert lock(both, ascend_inputs())["errors"] == []
    assert "firmware version file" in refused(ascend_stdout(firmware=None), ascend_inputs())
    assert lock(ascend_stdout(firmware=None), ascend_inputs(check_firmware=False))["errors"] == []


def test_the_lock_agrees_with_the_runtime_check() -> None:
    """First contact runs the gate's own version checks: each of its refusals is the gate's."""
    for cann in ("8.2.RC1", "8.5.0", None):
        inputs = ascend_inputs()
        stdout = ascend_stdout(cann=cann, firmware="ascend-firmware-version-info-7.7.0.1.231.txt")
        facts = targets.Facts.parse(stdout)
        runtime = inputs["runtime"]
        gate = ascend.ascend_check(facts.probe(), runtime["stack"], runtime["options"])
        first = lock(stdout, inputs)["errors"]
        assert first and first == gate["errors"][: len(first)]


# ---------------------------------------------------------------------------- Gaudi


def test_gaudi_driver_of_the_stacks_release_passes() -> None:
    result = lock(gaudi_stdout("hl-smi-gaudi2-hl225-x8.txt"), gaudi_inputs())
    assert result["errors"] == []
    assert result["detected"] == {
        "driver": "1.22.1",
        "driver_build": "1.22.1-97ec1a4",
        "firmware": "61.4.2.1",
        "hl_smi": "hl-1.22.1-fw-61.4.2.1",
    }


def test_gaudi_driver_of_another_release_is_refused() -> None:
    message = refused(gaudi_stdout("hl-smi-gaudi2e-hl288e-x8.txt"), gaudi_inputs())
    assert (
        "habanalabs driver 1.24.0 (hl-smi: Driver Version 1.24.0-bb94c81) does not match Intel "
        "Gaudi software 1.22.0 (acceldeploy_stack = gaudi-fork-1.22 (the gaudi default); "
        "compatible_software: 1.22; image acceldeploy/vllm-fork:aice-v1.22.0; "
        "gaudi_runtime_driver_match: minor): install the 1.22.x driver and firmware"
    ) in message
    plugin = refused(gaudi_stdout("hl-smi-gaudi2-hl225-x8.txt"), gaudi_inputs("gaudi-vllm-0.13.0"))
    assert "or set acceldeploy_stack to gaudi-fork-1.22" in plugin
    older = refused(gaudi_stdout("hl-smi-gaudi2-hl225-x2-1.17.1.txt"), gaudi_inputs())
    assert "habanalabs driver 1.17.1" in older
    relaxed = gaudi_inputs(driver_match="none")
    assert lock(gaudi_stdout("hl-smi-gaudi2e-hl288e-x8.txt"), relaxed)["errors"] == []


def test_gaudi_without_hl_smi_is_refused() -> None:
    message = refused(gaudi_stdout(None), gaudi_inputs())
    assert message.startswith(
        "hl-smi not found on PATH: acceldeploy_stack = gaudi-fork-1.22 (the gaudi default) runs "
        "Intel Gaudi software 1.22.0"
    )


def test_cpu_hosts_read_and_judge_nothing_more() -> None:
    inputs = {"ansible_python": "python3"}
    script = stacklock.probe_script(inputs)
    assert "== file" not in script and "== command" not in script
    assert stacklock.check(BOOKWORM, inputs)["stack_lock"] == {}


# ---------------------------------------------------------------------------- the probe, run


def run_probe(inputs: dict[str, Any], path: str | None = None) -> str:
    script = stacklock.probe_script(inputs)
    assert subprocess.run(["/bin/sh", "-n", "-c", script], check=False).returncode == 0
    env = {**os.environ, "PATH": path or os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.run(
        ["/bin/sh", "-c", script], capture_output=True, text=True, check=True, env=env, timeout=60
    )
    return proc.stdout


def plant(root: Path, rel: str, recording: str) -> Path:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body(recording))
    return path


def plant_ascend(root: Path, toolkit: str, cann: str) -> Path:
    """The recorded driver and firmware, and CANN ``cann``'s toolkit info under ``toolkit``."""
    plant(root, f"{HOME}/driver/version.info", DRIVER)
    plant(root, f"{HOME}/firmware/version.info", FIRMWARE)
    return plant(
        root,
        f"{HOME}/{toolkit}/aarch64-linux/ascend_toolkit_install.info",
        f"ascend-toolkit-install-info-cann-{cann}.txt",
    )


def test_the_probe_reads_the_files_where_the_role_reads_them(tmp_path: Path) -> None:
    home = str(tmp_path / "usr/local/Ascend")
    info = plant_ascend(tmp_path, "ascend-toolkit/8.3.RC2", "8.3.RC2")
    (tmp_path / "usr/local/Ascend/ascend-toolkit/latest").symlink_to(info.parents[1])
    inputs = ascend_inputs(home=home)
    stdout = run_probe(inputs)
    facts = targets.Facts.parse(stdout)
    assert facts.files["driver"] == {
        "path": f"{home}/driver/version.info",
        "exists": True,
        "content": body(DRIVER),
    }
    toolkit = facts.files["toolkit"]
    assert (
        toolkit["path"] == f"{home}/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"
    )
    assert toolkit["content"] == body("ascend-toolkit-install-info-cann-8.3.RC2.txt")
    assert stacklock.check(stdout, inputs)["stack_lock"]["errors"] == []
    assert "CANN 8.3.RC2 is installed" in refused(stdout, ascend_inputs("ascend-vllm-0.13.0", home))


def test_the_probe_reads_cann_8_5_from_the_second_place(tmp_path: Path) -> None:
    home = str(tmp_path / "usr/local/Ascend")
    plant_ascend(tmp_path, "cann", "8.5.0")
    stdout = run_probe(ascend_inputs("ascend-vllm-0.13.0", home))
    assert lock(stdout, ascend_inputs("ascend-vllm-0.13.0", home))["detected"]["cann"] == "8.5.0"


def test_the_probe_on_a_host_without_any_ascend_file(tmp_path: Path) -> None:
    home = str(tmp_path / "usr/local/Ascend")
    stdout = run_probe(ascend_inputs(home=home))
    facts = targets.Facts.parse(stdout)
    assert facts.files["toolkit"] == {
        "path": f"{home}/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info",
        "exists": False,
        "content": None,
    }
    message = refused(stdout, ascend_inputs(home=home))
    assert f"Ascend driver not installed: {home}/driver/version.info not found" in message
    assert "CANN is not installed" in message


@pytest.mark.parametrize(
    ("recording", "ok"),
    [("hl-smi-gaudi2-hl225-x8.txt", True), ("hl-smi-gaudi2e-hl288e-x8.txt", False)],
)
def test_the_probe_runs_hl_smi_as_the_gate_does(tmp_path: Path, recording: str, ok: bool) -> None:
    """An hl-smi that prints the recorded output (its source line skipped), found on PATH as
    the role looks it up, and by the absolute path gaudi_runtime_hl_smi may give."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "hl-smi"
    tool.write_text(f"#!/bin/sh\nexec tail -n +2 '{recorded_path(recording)}'\n")
    tool.chmod(0o755)
    for inputs, path in (
        (gaudi_inputs(), f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"),
        (gaudi_inputs(hl_smi=str(tool)), None),
    ):
        stdout = run_probe(inputs, path)
        command = targets.Facts.parse(stdout).commands["hl_smi"]
        assert command["found"] and command["path"] == str(tool) and command["rc"] == 0
        assert command["stdout"] == body(recording)
        assert (lock(stdout, inputs)["errors"] == []) is ok


def test_the_probe_reports_a_missing_hl_smi(tmp_path: Path) -> None:
    inputs = gaudi_inputs(hl_smi=str(tmp_path / "bin" / "hl-smi"))
    stdout = run_probe(inputs)
    assert targets.Facts.parse(stdout).commands["hl_smi"]["found"] is False
    assert "hl-smi not found" in refused(stdout, inputs)


# ---------------------------------------------------------------------------- the playbook


def test_preflight_refuses_at_first_contact_before_any_change(tmp_path: Path) -> None:
    """playbooks/preflight.yml on two example hosts reached with the local connection, their
    runtime variables pointing at recorded files in a temporary root: CANN 8.2.RC1 on the
    Ascend host, an hl-smi printing driver 1.24.0 on the Gaudi host. Both are refused at the
    first contact, in the first play, naming their stack; nothing changed."""
    home = tmp_path / "usr/local/Ascend"
    plant_ascend(tmp_path, "ascend-toolkit/latest", "8.2.RC1")
    tool = tmp_path / "bin" / "hl-smi"
    tool.parent.mkdir()
    tool.write_text(
        f"#!/bin/sh\nexec tail -n +2 '{recorded_path('hl-smi-gaudi2e-hl288e-x8.txt')}'\n"
    )
    tool.chmod(0o755)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    examples = ROOT / "inventory" / "examples"
    ascend_vars = yaml.safe_load((examples / "ascend-910b/group_vars/all.yml").read_text())
    gaudi_vars = yaml.safe_load((examples / "gaudi2/group_vars/all.yml").read_text())
    hosts = {
        "npu-local": {
            **ascend_vars,
            **local,
            "ascend_runtime_home": str(home),
            "ascend_runtime_toolkit_info": [
                f"{home}/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info"
            ],
        },
        "hpu-local": {**gaudi_vars, **local, "gaudi_runtime_hl_smi": str(tool)},
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    returncode, data = playbook_report(inventory, "playbooks/preflight.yml")
    assert returncode != 0
    # The inventory's checks passed (no host contacted there), then the first contact refused.
    assert [p["play"]["name"] for p in data["plays"]] == [
        "Preflight - check the inventory before changing any host",
        "Preflight - the gateways' TLS certificate (read-only)",
        "Preflight - first contact with each host, then the controller's downloads",
    ]
    assert all(s["changed"] == 0 and s["unreachable"] == 0 for s in data["stats"].values())
    first_contact = "First contact - release, systemd, glibc, each interpreter, the stack's versions (read-only; fails naming the fix)"  # fmt: skip
    failed = {
        host: str(result.get("msg", ""))
        for task in data["plays"][-1]["tasks"]
        if task["task"]["name"].endswith(first_contact)
        for host, result in task["hosts"].items()
        if result.get("failed")
    }
    assert set(failed) == {"npu-local", "hpu-local"}, data["plays"][-1]["tasks"][-1]
    assert "CANN 8.2.RC1 is installed" in failed["npu-local"]
    assert "acceldeploy_stack = ascend-vllm-0.12.0rc1 (the ascend default)" in failed["npu-local"]
    hpu = failed["hpu-local"]
    assert "habanalabs driver 1.24.0 (hl-smi: Driver Version 1.24.0-bb94c81)" in hpu
    assert "acceldeploy_stack = gaudi-fork-1.22 (the gaudi default)" in hpu
