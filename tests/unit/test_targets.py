"""Preflight's first contact (acceldeploy.inventory.targets): the probe's output parsed, the release and
the interpreters checked against data/targets.yml and the stack, in plain words."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from acceldeploy.hosttuning import kernelargs
from acceldeploy.inventory import targets
from acceldeploy.runtimes.python_env import python_env_plan


def probe_output(
    os_id: str,
    version_id: str,
    pretty: str,
    systemd: str | None,
    python: str | None,
    venv_python: str | None = None,
    glibc: str | None = "2.36",
) -> str:
    lines = [
        "== os-release",
        f'PRETTY_NAME="{pretty}"',
        f"ID={os_id}",
        f'VERSION_ID="{version_id}"',
        "== systemd",
        *([f"systemd {systemd} ({systemd}.1-1)"] if systemd else []),
        "== arch",
        "x86_64",
        "== glibc",
        *([f"glibc {glibc}"] if glibc else []),
        "== python ansible_python_interpreter",
        python or "not found",
        "== python model_weights_venv_python",
        python or "not found",
        "== python python_env_venv_python",
        venv_python or "not found",
    ]
    return "\n".join(lines) + "\n"


def cpu_env(**options: Any) -> dict[str, Any]:
    return python_env_plan({"platform": "cpu", "find_links": ["/w"], "no_index": True, **options})


def refusal(out: str, given: dict[str, Any]) -> str:
    errors = targets.check(out, given)["errors"]
    assert errors, "expected a refusal"
    return "; ".join(errors)


def inputs(**extra: Any) -> dict[str, Any]:
    return {"ansible_python": "/usr/bin/python3", "hub_python": "python3", **extra}


BOOKWORM = probe_output("debian", "12", "Debian GNU/Linux 12 (bookworm)", "252", "3.11.2", "3.11.2")


def test_the_probe_runs_here_and_parses() -> None:
    script = targets.probe_script({"ansible_python_interpreter": "python3"})
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    facts = targets.Facts.parse(out)
    assert facts.arch and facts.os_id
    assert facts.pythons["ansible_python_interpreter"] is not None


def test_a_missing_interpreter_is_reported_not_an_error_of_the_probe() -> None:
    script = targets.probe_script({"model_weights_venv_python": "/nonexistent/python3"})
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    assert targets.Facts.parse(out).pythons == {"model_weights_venv_python": None}


def test_bookworm_passes_with_its_fetch_wheel_set() -> None:
    target = targets.check(BOOKWORM, inputs(python_env=cpu_env()))
    assert target["fetch_wheels"] == {
        "key": "cp311-x86_64-glibc2.36",
        "python": "3.11",
        "arch": "x86_64",
        "glibc": 36,
    }
    assert target["systemd"] == 252 and target["errors"] == []


def test_bullseye_hub_clients_pass_but_the_cpu_venv_is_refused_naming_the_fix() -> None:
    out = probe_output(
        "debian", "11", "Debian GNU/Linux 11 (bullseye)", "247", "3.9.2", None, "2.31"
    )
    assert targets.check(out, inputs())["fetch_wheels"]["key"] == "cp39-x86_64-glibc2.31"
    message = refusal(out, inputs(python_env=cpu_env()))
    assert "python_env_venv_python: /usr/bin/python3.11 is not on this host" in message
    assert "ships Python 3.9" in message
    assert ">=3.11,<3.14" in message and "python_env_manager: conda" in message


def test_a_venv_interpreter_of_the_wrong_version_is_refused() -> None:
    # a name that does not show its version (python_env_plan refuses /usr/bin/python3.10
    # before any contact): the probe's answer decides
    out = probe_output("ubuntu", "22.04", "Ubuntu 22.04.4 LTS", "249", "3.10.12", "3.10.12")
    given = inputs(python_env=cpu_env(venv_python="/usr/bin/python3"))
    assert "/usr/bin/python3 is Python 3.10" in refusal(out, given)


def test_trixies_python_builds_the_cpu_stack_from_cp313_wheels() -> None:
    out = probe_output("debian", "13", "Debian GNU/Linux 13 (trixie)", "257", "3.13.5", "3.13.5")
    given = inputs(python_env=cpu_env(venv_python="/usr/bin/python3.13"))
    target = targets.check(out, given)
    assert target["errors"] == []
    assert target["stack_wheels"]["key"].startswith("cp313-x86_64-glibc2.")


def test_conda_needs_no_host_interpreter_for_the_stack() -> None:
    out = probe_output("openEuler", "22.03", "openEuler 22.03 (LTS-SP3)", "249", "3.9.9")
    env = python_env_plan({"platform": "ascend", "manager": "conda"})
    assert targets.check(out, inputs(python_env=env))["fetch_wheels"]["python"] == "3.9"


@pytest.mark.parametrize(
    ("os_id", "version", "pretty", "systemd", "python", "expected"),
    [
        ("kylin", "V10", "Kylin Linux Advanced Server V10", "239", "3.7.9", "is refused"),
        ("ubuntu", "20.04", "Ubuntu 20.04.6 LTS", "245", "3.8.10", "is refused"),
        ("rocky", "9.4", "Rocky Linux 9.4", "252", "3.9.18", "acceldeploy_allow_untested_os"),
    ],
)
def test_refused_and_unlisted_releases(
    os_id: str, version: str, pretty: str, systemd: str, python: str, expected: str
) -> None:
    out = probe_output(os_id, version, pretty, systemd, python)
    assert expected in refusal(out, inputs())


def test_allow_untested_still_applies_the_minimums() -> None:
    rocky = probe_output("rocky", "9.4", "Rocky Linux 9.4", "252", "3.9.18")
    assert targets.check(rocky, inputs(allow_untested=True))["errors"] == []
    kylin = probe_output("kylin", "V10", "Kylin V10", "239", "3.7.9")
    message = refusal(kylin, inputs(allow_untested=True))
    assert "systemd 239" in message and "older than 247" in message
    assert "ansible_python_interpreter: /usr/bin/python3 is Python 3.7" in message


def test_no_systemd_and_no_glibc_are_refused() -> None:
    out = probe_output("debian", "12", "Debian 12", None, "3.11.2", glibc=None)
    assert "no systemd on this host" in refusal(out, inputs())
    out = probe_output("debian", "12", "Debian 12", "252", "3.11.2", glibc=None)
    assert "no glibc found" in refusal(out, inputs())


def test_auto_interpreter_discovery_probes_python3() -> None:
    assert targets.probe_pythons({"ansible_python": "auto_silent"}) == {
        "ansible_python_interpreter": "python3"
    }


def test_the_table_grub_column_matches_what_kernelargs_decides() -> None:
    family = {"apt": "Debian", "dnf": "RedHat"}
    for row in targets.table()["supported"]:
        decided = kernelargs.grub_family(family[row["packages"]], str(row["id"]))
        assert decided == {"dropin": "debian", "default_grub": "redhat"}[row["grub"]], row


def test_modelscope_on_python_39_is_refused_naming_the_variable() -> None:
    out = probe_output("openEuler", "22.03", "openEuler 22.03 (LTS-SP3)", "249", "3.9.9")
    message = refusal(out, inputs(hub_sources=["modelscope"]))
    assert "model_weights_venv_python is Python 3.9" in message and "source: hf" in message
    assert targets.check(out, inputs(hub_sources=["hf"]))["errors"] == []


def test_a_glibc_below_the_stacks_wheels_is_refused_naming_stack_and_glibc() -> None:
    """cpu-vllm-0.32.0's lock is manylinux_2_28 wheels: a release with glibc 2.27 is refused at
    the first contact, before any install; 2.28 and the default stack pass."""
    old = probe_output("ubuntu", "18.04", "Ubuntu 18.04.6 LTS", "237", "3.11.2", "3.11.2", "2.27")
    newest = cpu_env(stack="cpu-vllm-0.32.0")
    assert newest["requires_glibc"] == "2.28" and cpu_env()["requires_glibc"] == ""
    errors = targets.stack_glibc_errors(targets.Facts.parse(old), newest)
    assert errors == [
        "acceldeploy_stack: stack cpu-vllm-0.32.0's wheels are built for glibc 2.28 "
        "(manylinux_2_28) and Ubuntu 18.04.6 LTS has glibc 2.27; fix: a stack whose wheels this "
        "release runs (acceldeploy plan stacks), or a release with glibc 2.28 or newer"
    ]
    fits = probe_output("debian", "11", "Debian GNU/Linux 11 (bullseye)", "247", "3.11.2",
                        "3.11.2", "2.31")  # fmt: skip
    assert targets.stack_glibc_errors(targets.Facts.parse(fits), newest) == []
    assert targets.stack_glibc_errors(targets.Facts.parse(old), cpu_env()) == []


def test_an_ascend_stack_from_its_wheels_needs_their_glibc_and_from_source_does_not() -> None:
    """vllm-ascend 0.23.0's wheels are manylinux_2_34 only: with python_env_install_from:
    wheels an openEuler 22.03 host (glibc 2.34) passes and Debian 11 (2.31) does not."""
    ascend = {"platform": "ascend", "stack": "ascend-vllm-0.23.0"}
    wheels = python_env_plan({**ascend, "install_from": "wheels"})
    assert wheels["requires_glibc"] == "2.34"
    assert python_env_plan(ascend)["requires_glibc"] == ""  # from source: built on the host
    bullseye = probe_output("debian", "11", "Debian GNU/Linux 11 (bullseye)", "247", "3.9.2",
                            None, "2.31")  # fmt: skip
    (error,) = targets.stack_glibc_errors(targets.Facts.parse(bullseye), wheels)
    assert "stack ascend-vllm-0.23.0's wheels are built for glibc 2.34" in error
    assert "python_env_install_from: source" in error
