"""tools/acceldeploy/inventory/bounds.py and the controller-side bounds beside it: every day-2 number of
the roles' argument specs (timeouts, retries, counts, keep, serial, batch) has an explicit
bound that preflight checks, and what a name shows of an interpreter's version is checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from acceldeploy.errors import AcceldeployError
from acceldeploy.hosttuning.inputs import HUGEPAGES_MAX, settings
from acceldeploy.inventory import bounds
from acceldeploy.inventory.roledefaults import ROLES, role_defaults
from acceldeploy.runtimes.python_env import python_env_plan

DAY2 = ("timeout", "retries", "count", "keep", "serial", "batch", "poll", "workers", "port",
        "interval", "burst", "restart_sec", "reserve", "percentage", "tokens")  # fmt: skip
ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
# Bounded with the role's other inputs (tools/acceldeploy/hosttuning/inputs.py STEPS).
HOST_TUNING = {"host_tuning_reboot_batch", "host_tuning_reboot_max_fail_percentage",
               "host_tuning_reboot_timeout", "host_tuning_hugepages",
               "host_tuning_hugepages_max_percent"}  # fmt: skip


def numbers() -> set[str]:
    found = set()
    for role in ROLES:
        data = yaml.safe_load((ROLES_DIR / role / "meta/argument_specs.yml").read_text())
        for entry in data["argument_specs"].values():
            for name, spec in (entry.get("options") or {}).items():
                day2 = any(word in name for word in DAY2)
                if spec.get("type") in ("int", "float") or (day2 and spec.get("type") == "raw"):
                    found.add(name)
    return found


def test_every_number_of_the_argument_specs_has_a_bound() -> None:
    bounded = set(bounds.BOUNDS) | set(bounds.CHECKS) | HOST_TUNING
    # gaudi_runtime_hccl_min_nw_gbps: runtimes.gaudi_options (>= 0, 0 records only)
    missing = numbers() - bounded - {"gaudi_runtime_hccl_min_nw_gbps"}
    assert not missing, missing
    assert set(bounds.BOUNDS) <= numbers()


def test_every_bounded_variable_has_a_default_that_is_in_bounds() -> None:
    for role in ROLES:
        defaults = role_defaults(role)
        names = bounds.names(role)
        assert all(name in defaults for name in names), (role, names)
        assert bounds.errors({name: defaults[name] for name in names}) == [], role


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("python_env_keep", -1, "python_env_keep must be a whole number from 0 to 100 (older "
                                "builds kept; 0 keeps only the current one), got -1"),
        ("python_env_keep", 1.5, "got 1.5"),
        ("python_env_keep", True, "got True"),
        ("python_env_keep", "", "got ''"),
        ("vllm_service_serial", 0, "vllm_service_serial must be a number >= 1"),
        ("vllm_service_serial", "0%", "percentage from 1% to 100%"),
        ("vllm_service_model_keep", -2, "-1 never prunes"),
        ("vllm_service_gate_retries", 0, "vllm_service_gate_retries must be a whole number"),
        ("model_weights_async_poll", 0, "0 would not wait for the download"),
        ("model_weights_free_space_reserve_gib", "lots", "must be a number from 0"),
        ("gaudi_runtime_hccl_timeout", 10**9, "from 60 to 86400"),
    ],
)  # fmt: skip
def test_a_number_out_of_its_bounds_is_named(name: str, value: object, says: str) -> None:
    (message,) = bounds.errors({name: value})
    assert message.startswith(name) and says in message, message


def test_numbers_in_bounds_pass_also_as_extra_vars_text() -> None:
    assert bounds.errors({"python_env_keep": "2", "vllm_service_model_keep": -1,
                          "vllm_service_serial": "25%", "model_weights_free_space_reserve_gib": 0.5,
                          "model_weights_progress_interval": "2.5"}) == []  # fmt: skip


def test_the_hugepages_have_a_bound_before_any_host_is_read() -> None:
    from test_host_tuning_render import inputs

    assert settings({**inputs("cpu"), "hugepages": HUGEPAGES_MAX}).hugepages == 8 * 1024 * 1024
    with pytest.raises(AcceldeployError, match=r"host_tuning_hugepages: 8388609 pages of at least "
                       r"2 MiB is more than 16 TiB"):  # fmt: skip
        settings({**inputs("cpu"), "hugepages": HUGEPAGES_MAX + 1})
    with pytest.raises(AcceldeployError, match=r"host_tuning_reboot_timeout: 86401 is above 86400"):
        settings({**inputs("cpu"), "reboot_timeout": 86401})


@pytest.mark.parametrize(
    ("manager", "python", "says"),
    [
        ("conda", "python2.7", "Python 2.7 by its name; acceldeploy needs Python 3.9 to 3.13"),
        ("venv", "/usr/bin/python3.8", "Python 3.8 by its name"),
        (
            "venv",
            "python3.12",
            "stack ascend-vllm-0.12.0rc1 (vLLM 0.12.0) needs Python >=3.10,<3.12",
        ),
        ("venv", "python2", "Python 2 by its name"),
    ],
)
def test_an_interpreter_whose_name_shows_a_wrong_version_is_refused(
    manager: str, python: str, says: str
) -> None:
    with pytest.raises(AcceldeployError) as exc:
        python_env_plan({"platform": "ascend", "manager": manager, "venv_python": python})
    assert str(exc.value).startswith(f"python_env_venv_python is {python}, ") and says in str(
        exc.value
    )


@pytest.mark.parametrize("python", ["python3.11", "python3", "/opt/py/bin/python", ""])
def test_an_interpreter_whose_name_does_not_rule_it_out_is_left_to_first_contact(
    python: str,
) -> None:
    plan = python_env_plan({"platform": "ascend", "manager": "venv", "venv_python": python})
    assert plan["creator"] == (python or "/usr/bin/python3.11")


def test_each_role_with_bounded_numbers_checks_them_through_its_contract() -> None:
    for role_dir in sorted(p for p in ROLES_DIR.iterdir() if (p / "tasks").is_dir()):
        role = role_dir.name
        tasks = [t.read_text() for t in (role_dir / "tasks").glob("*.yml")]
        checks = [t for t in tasks if "acceldeploy.fleet.acceldeploy_contract:" in t]
        if bounds.names(role):
            assert checks, role
        assert all(f"role: {role}\n" in t for t in checks), role
        variables = role_dir / "vars/main.yml"
        every = "".join(tasks) + (variables.read_text() if variables.is_file() else "")
        assert "_number_errors" not in every and "acceldeploy_number_errors" not in every


def test_the_action_names_each_variable_out_of_bounds() -> None:
    values = {"python_env_keep": -1, "python_env_fanout_port": 8782}
    errors = bounds.role_errors("python_env", lambda name: values.get(name, 60))
    assert len(errors) == 1 and errors[0].startswith("python_env_keep")


@pytest.mark.parametrize("serial", ["0%", "150%", "-5%", True, [1, 2]])
def test_a_serial_share_must_be_a_share_of_the_hosts(serial):
    with pytest.raises(AcceldeployError, match=r"vllm_service_serial must be a number >= 1 or a "
                       r"percentage from 1% to 100%"):  # fmt: skip
        bounds.check_serial(serial)
    assert bounds.check_serial("25%") == (0, 25.0) and bounds.check_serial("3") == (3, 0.0)
