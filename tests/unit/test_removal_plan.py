"""What playbooks/remove.yml takes out (acceldeploy.removal.plan): each refusal names the
variable and the fix; a service's files are named by convention; model revisions and
environments are candidates only where no remaining service needs them."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.removal.plan import plan

FILTERS = Path(__file__).resolve().parents[2] / "plugins/filter/removal_filters.py"
MODEL = "acceldeploy/tiny-qwen3-vl"
DIR = f"/models/{MODEL}@main"


def svc(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "model": MODEL, "source": "hf", "revision": "main", **extra}


def host(*services: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"acceldeploy_platform": "cpu", "acceldeploy_services": list(services), **extra}


SEEDED = {"model_weights_strategy": "seed", "model_weights_seed_host": "lab1"}


def fleet(**hosts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return hosts


def test_exactly_one_choice_is_asked_for() -> None:
    with pytest.raises(AcceldeployError, match="set exactly one of acceldeploy_remove_service"):
        plan({"service": "", "model": "", "host": ""}, fleet(lab1=host(svc("a"))), {})
    with pytest.raises(AcceldeployError, match="got acceldeploy_remove_service, "):
        plan({"service": "a", "host": "lab1"}, fleet(lab1=host(svc("a"))), {})


def test_a_service_takes_its_units_and_files_and_keeps_what_another_service_uses() -> None:
    views = fleet(lab1=host(svc("a"), svc("b")), lab2=host(svc("a")))
    removal = plan({"service": "b"}, views, {})
    assert list(removal.hosts) == ["lab1"]
    lab1 = removal.hosts["lab1"]
    assert "b.service" in lab1.units and "dp-b.service" in lab1.units
    assert "/etc/systemd/system/b.service" in lab1.files
    assert "/usr/local/libexec/acceldeploy/b.launch" in lab1.files
    assert "/etc/acceldeploy/secrets/b.env" in lab1.files
    assert lab1.dirs == ["/var/lib/acceldeploy-vllm/b"]
    assert lab1.models == [] and lab1.envs == []  # a still serves from them
    assert removal.remaining == {"lab1": [svc("a")], "lab2": [svc("a")]}


def test_the_last_service_of_a_host_takes_its_model_and_environment() -> None:
    removal = plan({"service": "a"}, fleet(lab1=host(svc("a")), lab2=host(svc("a"))), {})
    assert set(removal.hosts) == {"lab1", "lab2"}
    for part in removal.hosts.values():
        assert part.models == [DIR]
        assert part.envs == ["/opt/acceldeploy/venv-????????????", "/opt/acceldeploy/venv-in-place"]
        assert part.env_links == ["/opt/acceldeploy/venv"]
        assert "/var/lib/acceldeploy/state/python_env.json" in part.records


def test_a_seed_keeps_the_revision_the_other_hosts_serve() -> None:
    views = fleet(lab1=host(svc("a"), svc("b", model="other/m"), **SEEDED),
                  lab2=host(svc("b", model="other/m"), **SEEDED))  # fmt: skip
    assert plan({"service": "a"}, views, {}).hosts["lab1"].models == [DIR]
    views["lab2"]["acceldeploy_services"].append(svc("c"))
    assert plan({"service": "a"}, views, {}).hosts["lab1"].models == []


def test_shared_storage_leaves_the_models_to_the_model_choice() -> None:
    views = fleet(lab1=host(svc("a"), model_weights_shared_storage=True),
                  lab2=host(svc("x", model="other/m"), model_weights_shared_storage=True))  # fmt: skip
    assert plan({"service": "a"}, views, {}).hosts["lab1"].models == []
    removal = plan({"model": "gone/m@abc"}, views, {})
    assert list(removal.hosts) == ["lab1"] and removal.shared_once


def test_a_service_the_inventory_no_longer_lists_is_looked_for_on_every_host() -> None:
    views = fleet(lab1=host(svc("a")), lab2=host())
    for dropped in (True, "true", "yes"):
        removal = plan({"service": "old", "dropped": dropped}, views, {})
        assert set(removal.hosts) == {"lab1", "lab2"}
        assert removal.hosts["lab1"].models == [] and removal.hosts["lab2"].envs


def test_a_name_no_host_runs_is_refused_unless_said_dropped() -> None:
    views = fleet(lab1=host(svc("qwen3-vl")), lab2=host())
    with pytest.raises(AcceldeployError) as refused:
        plan({"service": "qwn3-vl"}, views, {})
    assert str(refused.value) == (
        "acceldeploy_remove_service: no host of the inventory runs 'qwn3-vl' (did you mean "
        "'qwen3-vl'?); its services: qwen3-vl. If you took qwn3-vl out of the inventory "
        "already, add -e acceldeploy_remove_dropped=true to look for it on every serving host "
        "(lab1, lab2)"
    )
    with pytest.raises(
        AcceldeployError,
        match="acceldeploy_remove_dropped: 'perhaps' is not a boolean; use true or false",
    ):
        plan({"service": "qwn3-vl", "dropped": "perhaps"}, views, {})
    with pytest.raises(AcceldeployError, match="goes with acceldeploy_remove_service only"):
        plan({"host": "lab2", "dropped": True}, views, {})


def test_a_service_name_is_checked() -> None:
    with pytest.raises(AcceldeployError, match="acceldeploy_remove_service: 'Bad Name'"):
        plan({"service": "Bad Name"}, fleet(lab1=host(svc("a"))), {})


def test_a_revision_a_service_serves_is_refused_naming_the_service() -> None:
    views = fleet(lab1=host(svc("a")), lab2=host(svc("b", revision="abc")))
    with pytest.raises(
        AcceldeployError, match=r"service b on lab2 serves .*@abc: remove the service"
    ):
        plan({"model": f"{MODEL}@abc"}, views, {})
    removal = plan({"model": f"{MODEL}@old"}, views, {})
    assert removal.hosts["lab1"].models == [f"/models/{MODEL}@old"]
    assert removal.target == f"{MODEL}@old"


def test_a_model_without_a_revision_means_main() -> None:
    with pytest.raises(AcceldeployError, match="service a on lab1 serves"):
        plan({"model": MODEL}, fleet(lab1=host(svc("a"))), {})


def test_a_host_takes_everything_and_leaves_the_fleet_views() -> None:
    views = fleet(lab1=host(svc("a"), **SEEDED), lab2=host(svc("a"), **SEEDED))
    removal = plan({"host": "lab2"}, views, {"lab3": "gateways"})
    assert removal.removed_hosts == ["lab2"] and set(removal.remaining) == {"lab1"}
    lab2 = removal.hosts["lab2"]
    assert lab2.whole_host and lab2.models == [DIR] and lab2.envs
    assert "prometheus-node-exporter.service" in lab2.units
    assert "/usr/local/libexec/acceldeploy" in lab2.dirs
    assert lab2.records == ["/var/lib/acceldeploy/state"]


def test_a_host_takes_what_each_role_s_contract_says_it_left_there(tmp_path: Path) -> None:
    """The roles' contracts say what they leave on a serving host; the device exporter goes
    with an Ascend host, and a file the monitor only rewrites stays with its package."""
    exporter = tmp_path / "npu-exporter"
    exporter.write_text("#!/bin/sh\n")
    npu = {"acceldeploy_platform": "ascend", "group_names": ["ascend"], "ansible_host": "192.0.2.11",
           "monitor_npu_exporter_package": str(exporter)}  # fmt: skip
    gone = plan({"host": "npu-01"}, fleet(**{"npu-01": host(svc("a"), **npu)}), {})
    removed = gone.hosts["npu-01"]
    assert removed.units[-3:] == [
        "prometheus-node-exporter.service", "acceldeploy-service-memory.service",
        "npu-exporter.service",
    ]  # fmt: skip
    assert {"/etc/systemd/system/npu-exporter.service", "/etc/systemd/system/"
            "prometheus-node-exporter.service.d/acceldeploy.conf"} <= set(removed.files)  # fmt: skip
    assert "/etc/default/prometheus-node-exporter" not in removed.files
    assert removed.dirs[-5:] == [
        "/usr/local/libexec/acceldeploy", "/etc/acceldeploy/secrets",
        "/var/lib/acceldeploy/vllm-last-good", "/opt/acceldeploy/fetch-venv",
        "/opt/acceldeploy/fetch-wheels",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("target", "views", "others", "message"),
    [
        ("lab1", fleet(lab1=host(svc("a"), **SEEDED), lab2=host(svc("a"), **SEEDED)), {},
         "lab1 is model_weights_seed_host.*set model_weights_seed_host to one of them"),
        ("lab2", fleet(lab1=host(svc("g", nodes=["lab1", "lab2"], backend="mp")),
                       lab2=host(svc("g", nodes=["lab1", "lab2"], backend="mp"))), {},
         "lab2 is a node of service g .*acceldeploy_remove_service=g"),
        ("lab3", fleet(lab1=host(svc("a"))), {"lab3": "gateways"},
         "lab3 is in the gateways group"),
        ("lab9", fleet(lab1=host(svc("a"))), {}, "lab9 is not a host of the inventory"),
    ],
)  # fmt: skip
def test_a_host_is_refused_when_others_need_it(
    target: str, views: dict[str, Any], others: dict[str, str], message: str
) -> None:
    with pytest.raises(AcceldeployError, match=f"acceldeploy_remove_host: {message}"):
        plan({"host": target}, views, others)


def test_the_last_host_may_be_its_own_seed() -> None:
    removal = plan({"host": "lab1"}, fleet(lab1=host(svc("a"), **SEEDED)), {})
    assert removal.remaining == {}


def test_a_gateway_that_serves_as_well_loses_a_service_but_is_not_removed() -> None:
    """plugins/filter/removal_filters.py: a gateway host with acceldeploy_serves is a serving
    host for a service's removal, and stays a gateway for a host's."""
    removal_plan = runpy.run_path(str(FILTERS))["acceldeploy_removal_plan"]
    gateway = {**host(svc("a"), svc("b")), "group_names": ["gateways"], "acceldeploy_serves": True}
    hostvars = {"lab1": gateway, "lab2": {**host(svc("a")), "group_names": ["fleet"]}}
    groups = {"all": ["lab1", "lab2"], "gateways": ["lab1"]}
    removal = removal_plan({"service": "b"}, hostvars, groups)
    assert list(removal["hosts"]) == ["lab1"]
    assert removal["remaining"] == {"lab1": [svc("a")], "lab2": [svc("a")]}
    with pytest.raises(AcceldeployError, match="lab1 is in the gateways group"):
        removal_plan({"host": "lab1"}, hostvars, groups)
    idle = {**gateway, "acceldeploy_serves": False}
    # A gateway that does not serve runs no unit to remove: no serving host runs b, and when
    # said dropped, it is looked for on the serving hosts.
    with pytest.raises(AcceldeployError, match="no host of the inventory runs 'b'"):
        removal_plan({"service": "b"}, {**hostvars, "lab1": idle}, groups)
    dropped = removal_plan({"service": "b", "dropped": "true"}, {**hostvars, "lab1": idle}, groups)
    assert list(dropped["hosts"]) == ["lab2"]


def test_one_systemctl_show_names_the_loaded_units_of_remove_host() -> None:
    loaded_units = runpy.run_path(str(FILTERS))["acceldeploy_removal_loaded_units"]
    # systemctl show --property=Id,LoadState -- a.service ray-a.service dp-a.service m.service
    show = (
        "Id=a.service\nLoadState=loaded\n\n"
        "Id=ray-a.service\nLoadState=not-found\n\n"
        "LoadState=loaded\nId=dp-a.service\n\n"
        "Id=m.service\nLoadState=masked\n"
    )
    assert loaded_units(show) == ["a.service", "dp-a.service"]
    assert loaded_units("Id=a.service\nLoadState=not-found\n") == []
    assert loaded_units("") == [] and loaded_units(None) == []  # the command skipped: no units
