"""Multi-node services (cluster.py, raynode.py): the layout checks, the cross-node preflight, the
head's argv and env, each node's Ray unit, and the rendered units through systemd-analyze."""

import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from unit_files import analyze_host_plan

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.planner.engineopts import engine_options
from acceldeploy.planner.kvplan import kv_layout
from acceldeploy.planner.modelconfig import ModelArch
from acceldeploy.planner.platforms import get_platform
from acceldeploy.serving import cluster, hostplan
from acceldeploy.serving.service import parse_service, parse_services
from acceldeploy.serving.unit import render_files

ROOT = Path(__file__).resolve().parents[2]
ASCEND = str(ROOT / "inventory/examples/ascend-910b-2node")
GAUDI = str(ROOT / "inventory/examples/gaudi2-2node")


def inventory(path: str) -> dict:
    return hostplan.with_node_ips(hosts_vars(path))


def rendered_directives(unit, section: str) -> list[tuple[str, str]]:
    """(directive, value) of one section of the unit as its template renders it, in order."""
    found, current = [], ""
    for line in render_files(unit)[unit.unit_path].splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current == section and "=" in line:
            key, value = line.split("=", 1)
            found.append((key, value))
    return found


def spec(**changes):
    base = {"name": "ds", "model": "deepseek-ai/DeepSeek-R1", "nodes": ["a", "b"],
            "devices": list(range(8)), "tensor_parallel_size": 8, "pipeline_parallel_size": 2}  # fmt: skip
    return {**base, **changes}


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"nodes": ["a"]}, "nodes must list two or more inventory hostnames"),
        ({"nodes": ["a", "a"]}, "each once"),
        ({"pipeline_parallel_size": 4}, "8 x pipeline_parallel_size 4 = 32 ranks, but devices"),
        ({"devices": [0, 1, 2, 3]}, "list 8 device(s) per node"),
        ({"network_interface": "eth0; rm"}, "network_interface must be a network interface"),
        ({"cluster_port": 0}, "cluster_port must be an integer between 1 and 65534"),
        ({"extra_args": {"distributed-executor-backend": "mp"}}, "set its backend"),
        ({"extra_args": {"pp": 2}}, "set its pipeline_parallel_size"),
    ],
)
def test_bad_layouts_name_the_variable(changes, says):
    with pytest.raises(AcceldeployError) as exc:
        parse_service(spec(**changes), "ascend", 0)
    assert says in str(exc.value)
    assert "acceldeploy_services[0] (ds)" in str(exc.value)


def test_layout_defaults_and_ranks():
    service = parse_service(spec(tensor_parallel_size=None), "ascend", 0)
    assert (service.tensor_parallel_size, service.pipeline_parallel_size, service.ranks) == (
        8,
        2,
        16,
    )
    single = parse_service(
        spec(nodes=None, pipeline_parallel_size=1, tensor_parallel_size=None), "ascend", 0
    )
    assert (single.tensor_parallel_size, single.nodes) == (8, ())
    cpu = parse_service({"name": "t", "model": "acceldeploy/tiny-qwen3-vl", "nodes": ["a", "b"],
                         "pipeline_parallel_size": 2}, "cpu", 0)  # fmt: skip
    assert (cpu.tensor_parallel_size, cpu.pipeline_parallel_size) == (1, 2)


def test_pipeline_stages_hold_their_share_of_the_layers():
    arch = ModelArch("qwen2", ("Qwen2ForCausalLM",), 61, 64, 8, 128, "bfloat16", False, None, False)
    whole, stage = kv_layout(arch, 8, 128), kv_layout(arch, 8, 128, pp=2)
    assert (whole.num_layers, stage.num_layers) == (61, 31)  # vLLM's largest stage: ceil(61 / 2)


def test_the_head_runs_vllm_on_ray_and_every_node_runs_a_ray_node():
    hosts = inventory(ASCEND)
    head, worker = hostplan.host_plan(hosts["npu-01"]), hostplan.host_plan(hosts["npu-02"])
    (launch,) = head.launches()
    argv = launch.argv
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert launch.env["RAY_ADDRESS"] == "192.0.2.31:6379"
    assert launch.env["HCCL_IF_IP"] == launch.env["VLLM_HOST_IP"] == "192.0.2.31"
    assert launch.env["GLOO_SOCKET_IFNAME"] == launch.env["HCCL_SOCKET_IFNAME"] == "enp189s0f0"
    assert launch.nodes == {"npu-01": "192.0.2.31", "npu-02": "192.0.2.32"}
    assert worker.launches() == []  # a worker node serves no API of its own

    (head_ray,), (worker_ray,) = head.node_units(), worker.node_units()
    assert head_ray.name == worker_ray.name == "ray-deepseek-r1"
    assert "--head" in head_ray.argv and "--port=6379" in head_ray.argv
    assert "--address=192.0.2.31:6379" in worker_ray.argv and "--head" not in worker_ray.argv
    assert "--node-ip-address=192.0.2.32" in worker_ray.argv
    # Ray's workers inherit the node's env: the devices, its own address, no driver address
    assert worker_ray.env["HCCL_IF_IP"] == "192.0.2.32"
    assert worker_ray.env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert worker_ray.env["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert "RAY_ADDRESS" not in worker_ray.env

    (unit,) = head.units()
    service = dict(rendered_directives(unit, "Service"))
    unit_section = rendered_directives(unit, "Unit")
    assert ("Requires", "ray-deepseek-r1.service") in unit_section
    assert ("After", "ray-deepseek-r1.service") in unit_section
    assert service["ExecStartPre"].split()[2:] == [
        "192.0.2.31:6379", "450", "ray-deepseek-r1", "NPU=8", "npu-01=192.0.2.31", "npu-02=192.0.2.32"]  # fmt: skip
    assert "IPAddressDeny" not in service  # the head talks to the other nodes


def test_the_head_argv_uses_only_options_its_engine_has():
    for path, head in ((ASCEND, "npu-01"), (GAUDI, "hpu-01")):
        plan = hostplan.host_plan(inventory(path)[head])
        engine = engine_options(plan.platform.engine_options)
        (launch,) = plan.launches()
        flags = [a.split("=", 1)[0] for a in launch.argv if a.startswith("--")]
        assert flags and all(flag in engine.options for flag in flags), flags


def test_gaudi_nodes_run_ray_in_the_image_with_the_session_directory_shared():
    hosts = inventory(GAUDI)
    (head_unit,) = hostplan.host_plan(hosts["hpu-01"]).units()
    state = "/var/lib/acceldeploy-vllm/deepseek-r1"
    assert f"{state}:{state}:rw" in head_unit.exec_argv  # the driver reaches Ray's sockets
    (ray_unit,) = hostplan.host_plan(hosts["hpu-02"]).node_units()
    assert ray_unit.exec_argv[:2] == ["/usr/bin/docker", "run"]
    assert ray_unit.exec_argv[-len(ray_unit.argv) :] == ray_unit.argv
    assert ray_unit.argv[:2] == ["ray", "start"]
    # the bucketing the model ranks read comes with the node's environment
    assert ray_unit.env["VLLM_PROMPT_SEQ_BUCKET_MAX"] == head_unit.env["VLLM_PROMPT_SEQ_BUCKET_MAX"]


def views(hosts):
    return {h: hostplan.node_view(v) for h, v in hosts.items()}


def test_consistent_groups_pass_the_cross_node_check():
    hosts = inventory(ASCEND)
    assert hostplan.group_errors(views(hosts), {"npu-01": "k", "npu-02": "k"}) == []


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda h: h["npu-02"].update(acceldeploy_platform="gaudi"), "disagree on acceldeploy_platform"),
        (lambda h: h["npu-02"]["acceldeploy_services"][0].update(revision="abc123"), ".revision: npu-01 has 'master'"),
        (lambda h: h["npu-02"]["acceldeploy_services"][0].update(devices=[0, 1, 2, 3],
                                                                tensor_parallel_size=4), ".devices"),
        (lambda h: h["npu-02"].update(acceldeploy_services=[]), "npu-02 is in acceldeploy_services[0] (deepseek-r1).nodes but does not define"),
        (lambda h: h.pop("npu-02"), "names npu-02, which is not in this run"),
    ],
)  # fmt: skip
def test_nodes_that_disagree_stop_in_preflight(change, says):
    hosts = copy.deepcopy(hosts_vars(ASCEND))
    change(hosts)
    found = views(hostplan.with_node_ips(hosts))
    errors = hostplan.group_errors(found, {h: "k" for h in hosts})
    assert any(says in e for e in errors), errors


def test_different_pins_stop_in_preflight():
    errors = hostplan.group_errors(views(inventory(ASCEND)), {"npu-01": "aaa", "npu-02": "bbb"})
    assert errors and "disagree on the environment its python_env_* variables build" in errors[0]


def test_different_stacks_are_named_with_the_variable_and_both_values():
    hosts = copy.deepcopy(hosts_vars(ASCEND))
    hosts["npu-02"]["acceldeploy_stack"] = "ascend-vllm-0.13.0"
    found = views(hostplan.with_node_ips(hosts))
    (error,) = hostplan.group_errors(found, {"npu-01": "aaa", "npu-02": "bbb"})
    assert (
        "the nodes disagree on acceldeploy_stack: npu-01 has 'ascend-vllm-0.12.0rc1', "
        "npu-02 has 'ascend-vllm-0.13.0'" in error
    ), error


def test_a_node_address_must_be_an_ip():
    hosts = copy.deepcopy(hosts_vars(ASCEND))
    del hosts["npu-02"]["acceldeploy_node_ip"]
    hosts["npu-02"]["ansible_host"] = "npu-02.example"
    with pytest.raises(
        AcceldeployError, match=r"npu-02: ansible_host is 'npu-02\.example', not an IP"
    ):
        hostplan.with_node_ips(hosts)


def test_a_host_is_a_node_of_one_group_at_a_time():
    view = {"platform": "cpu", "services": {
        "x": {"where": "x", "nodes": ["b", "a"]}, "y": {"where": "y", "nodes": ["c", "a"]}}}  # fmt: skip
    errors = cluster.check_groups({"a": {**view, "pins": ""}})
    assert "services x, y both span hosts" in errors[0]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="no systemd-analyze here")
@pytest.mark.parametrize("host", ["npu-01", "npu-02"])
def test_rendered_group_units_pass_systemd_analyze_verify(host, tmp_path):
    plan = hostplan.host_plan(inventory(ASCEND)[host])
    # the env's python (ray-wait's interpreter) is not on this machine: verify the rest
    names = analyze_host_plan(plan, tmp_path, ("vllm-ready", "vllm-drain", "ray-wait"),
                              drop=["ExecStartPre"])  # fmt: skip
    assert names == ({"deepseek-r1", "ray-deepseek-r1"} if host == "npu-01"
                     else {"ray-deepseek-r1"})  # fmt: skip
    assert get_platform("ascend").ray_resource == "NPU"


def group_inventory(tmp_path: Path, groups: dict[str, dict], per_host: dict[str, dict]) -> Path:
    """An inventory of two-node groups (the Ascend example's service, renamed nodes), every
    host pointed at a closed port: nothing may be contacted."""
    from test_bad_input_battery import CLOSED

    example = hosts_vars(ASCEND)["npu-01"]
    hosts, children = {}, {}
    for group, nodes in groups.items():
        service = {**example["acceldeploy_services"][0], "nodes": nodes}
        for node in nodes:
            hosts[node] = {**CLOSED, "acceldeploy_node_ip": f"192.0.2.{len(hosts) + 50}",
                           "acceldeploy_platform": "ascend", "acceldeploy_services": [service],
                           **per_host.get(node, {})}  # fmt: skip
        children[group] = {"hosts": {n: None for n in nodes}}
    path = tmp_path / "hosts.yml"
    import yaml

    path.write_text(yaml.safe_dump({"all": {"hosts": hosts, "children": children}}))
    return path


def preflight_failures(inventory_path: Path) -> tuple[dict, list[str]]:
    from playbook_report import playbook_report

    _, data = playbook_report(inventory_path, "playbooks/preflight.yml")
    failed = [str(result.get("msg", "")) for play in data["plays"] for task in play["tasks"]
              for result in task["hosts"].values() if result.get("failed")]  # fmt: skip
    return data["stats"], failed


def test_preflight_stops_a_group_whose_pins_differ_before_any_host_is_contacted(tmp_path):
    path = group_inventory(
        tmp_path,
        {"good": ["a1", "a2"], "bad": ["b1", "b2"]},
        {"b2": {"python_env_extra_packages": ["acceldeploy-extra==1.0"]}},
    )
    stats, failed = preflight_failures(path)
    assert all(s["unreachable"] == 0 and s["changed"] == 0 for s in stats.values()), stats
    (message,) = failed
    assert "disagree on the environment its python_env_* variables build (key): b1 has" in message
    assert "a1" not in message and "a2" not in message


def test_preflight_stops_a_group_that_names_a_host_outside_the_inventory(tmp_path):
    path = group_inventory(tmp_path, {"g": ["c1", "c2"]}, {})
    text = path.read_text().replace("- c2\n", "- c3\n", 1)  # c1's nodes: [c1, c3]
    path.write_text(text)
    stats, failed = preflight_failures(path)
    assert all(s["unreachable"] == 0 and s["changed"] == 0 for s in stats.values()), stats
    assert any("nodes names c3, not in the inventory" in m for m in failed), failed


def test_a_consistent_group_passes_the_check_and_goes_on_to_first_contact(tmp_path):
    stats, failed = preflight_failures(group_inventory(tmp_path, {"g": ["a1", "a2"]}, {}))
    assert all(s["changed"] == 0 for s in stats.values()), stats
    # the hosts' port is closed: the run got as far as contacting them
    assert all(s["unreachable"] == 1 for s in stats.values()), stats
    assert not any("disagree" in m or "nodes names" in m for m in failed), failed


def group_views(**groups: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name, nodes in groups.items():
        for node in nodes:
            out[node] = {"services": {name: {"nodes": nodes}}}
    return out


def test_rollout_keeps_a_group_in_one_batch_and_counts_it_as_one():
    hosts = ["s1", "w1", "s2", "h1", "s3"]
    groups = group_views(big=["h1", "w1"])
    # w1 comes before its head in play order: the group takes w1's place
    assert cluster.rollout(hosts, groups, 1) == {
        "batch_of": {"s1": 0, "w1": 1, "h1": 1, "s2": 2, "s3": 3},
        "sizes": [1, 2, 1, 1],
    }
    assert cluster.rollout(hosts, groups, 2)["sizes"] == [3, 2]
    assert cluster.rollout(hosts, groups, "50%")["sizes"] == [3, 2]  # 4 units: 2 per batch
    assert cluster.rollout(hosts, {}, "100%")["sizes"] == [5]
    # a node outside the run (--limit) is not batched (preflight has refused the group)
    assert cluster.rollout(["h1", "s1"], groups, 1)["sizes"] == [1, 1]


def test_rollout_starts_the_hosts_that_serve_nothing_together_first():
    hosts = ["s1", "w1", "s2", "h1", "s3"]
    groups = group_views(big=["h1", "w1"])
    # s2 and the whole group serve nothing now: one batch, before the serving hosts one by one
    assert cluster.rollout(hosts, groups, 1, idle={"s2", "h1", "w1"}) == {
        "batch_of": {"w1": 0, "h1": 0, "s2": 0, "s1": 1, "s3": 2},
        "sizes": [3, 1, 1],
    }
    # a group with one node still serving is rolled like any serving unit
    assert cluster.rollout(hosts, groups, 1, idle={"h1"})["sizes"] == [1, 2, 1, 1]
    # a bare fleet starts at once; a served one keeps its serial
    assert cluster.rollout(["a", "b", "c"], {}, 1, idle={"a", "b", "c"})["sizes"] == [3]
    assert cluster.rollout(["a", "b", "c"], {}, 1, idle=set())["sizes"] == [1, 1, 1]


@pytest.mark.parametrize("serial", [0, "many", -1, "x%"])
def test_rollout_refuses_a_serial_that_is_not_a_count_or_share(serial):
    with pytest.raises(AcceldeployError, match=r"vllm_service_serial must be a number >= 1"):
        cluster.rollout(["a"], {}, serial)


def test_two_nodes_on_one_address_are_refused_naming_the_variable():
    service = parse_service({"name": "big", "model": "org/m", "nodes": ["a", "b"],
                             "pipeline_parallel_size": 2}, "cpu", 0)  # fmt: skip
    with pytest.raises(AcceldeployError, match=r"nodes a and b have the same address 127\.0\.0\.1; "
                       r"the nodes tell each other apart by address: set acceldeploy_node_ip"):  # fmt: skip
        cluster.place(service, "a", {"a": "127.0.0.1", "b": "127.0.0.1"})
    assert cluster.place(service, "b", {"a": "127.0.0.11", "b": "127.0.0.12"}).head_address == (
        "127.0.0.11:6379"
    )


def test_verify_checks_the_devices_of_a_worker_nodes_ranks():
    """npu-02 serves no API (the head does), but its eight NPUs hold half the ranks: verify's
    device check wants them healthy there, and names the one npu-smi reports not OK."""
    from acceldeploy.verify import hoststate

    smi_text = (ROOT / "tests/data/recorded/npu-smi-info-910b1-x8.txt").read_text()
    plan = hostplan.host_plan(inventory(ASCEND)["npu-02"])
    assert not plan.launches()
    (ok,) = hoststate.judge_devices("npu-02", "ascend", {"npu-smi": {"rc": 0, "out": smi_text}},
                                    plan.services)  # fmt: skip
    assert ok.status == "pass" and "used [0, 1, 2, 3, 4, 5, 6, 7] healthy" in ok.detail
    chip3 = next(line for line in smi_text.splitlines() if line.startswith("| 3 "))
    sick = smi_text.replace(chip3, chip3.replace("OK", "Warning", 1), 1)
    (bad,) = hoststate.judge_devices("npu-02", "ascend", {"npu-smi": {"rc": 0, "out": sick}},
                                     plan.services)  # fmt: skip
    assert bad.status == "fail" and "3: 'Warning'" in bad.detail, bad.detail


def test_a_worker_in_the_run_without_its_head_is_refused_naming_the_head():
    """--limit npu-02: the group is checked from the worker, which names its head."""
    hosts = inventory(ASCEND)
    found = views({"npu-02": hosts["npu-02"]})
    (error,) = hostplan.group_errors(found, {"npu-02": "k"})
    assert error.startswith("acceldeploy_services[0] (deepseek-r1): npu-02 is a node of it but its "
                            "head npu-01 (the first of its nodes) is not in this run")  # fmt: skip
    assert "add npu-01 to --limit (--limit npu-01,npu-02)" in error


def test_a_head_that_does_not_define_the_group_is_named_from_the_worker():
    hosts = copy.deepcopy(hosts_vars(ASCEND))
    hosts["npu-01"]["acceldeploy_services"] = []
    found = views(hostplan.with_node_ips(hosts))
    errors = hostplan.group_errors(found, {h: "k" for h in hosts})
    assert errors == [
        "npu-01 is in acceldeploy_services[0] (deepseek-r1).nodes but does not define service "
        "deepseek-r1; give the group's hosts the same acceldeploy_services (e.g. in the "
        "group's group_vars)"
    ]


def test_each_group_is_checked_once():
    errors = hostplan.group_errors(views(inventory(ASCEND)), {"npu-01": "a", "npu-02": "b"})
    assert len(errors) == 1, errors


def test_the_ray_port_may_not_be_a_service_port():
    with pytest.raises(AcceldeployError, match=r"\(ds\)\.cluster_port 8000 is also its port"):
        parse_service(spec(cluster_port=8000, port=8000), "ascend", 0)
    with pytest.raises(AcceldeployError, match=r"cluster_port 7999 puts Ray's metrics on 8000"):
        parse_service(spec(cluster_port=7999, port=8000), "ascend", 0)
    # a service on one host has no Ray head: its cluster_port is not used
    assert parse_service(spec(nodes=None, cluster_port=8000, port=8000,
                              pipeline_parallel_size=1), "ascend", 0).port == 8000  # fmt: skip
    services = [{"name": "big", "model": "org/m", "nodes": ["a", "b"], "pipeline_parallel_size": 2},
                {"name": "small", "model": "org/n", "port": 6379}]  # fmt: skip
    with pytest.raises(AcceldeployError, match=r"acceldeploy_services\[0\] \(big\)\.cluster_port "
                       r"6379 is also acceldeploy_services\[1\] \(small\)\.port"):  # fmt: skip
        parse_services(services, "cpu")


@pytest.mark.parametrize(
    ("key", "fix"),
    [("HCCL_IF_IP", "set acceldeploy_node_ip"), ("HCCL_SOCKET_IFNAME", "set network_interface"),
     ("GLOO_SOCKET_IFNAME", "set network_interface"), ("TP_SOCKET_IFNAME", "network_interface")],
)  # fmt: skip
def test_a_per_node_variable_in_a_groups_env_is_refused(key, fix):
    """One value in the service's env would override every node's own (render.service_env)."""
    hosts = copy.deepcopy(hosts_vars(ASCEND))
    hosts["npu-02"]["acceldeploy_services"][0]["env"] = {key: "x"}
    with pytest.raises(AcceldeployError) as exc:
        hostplan.host_plan(hostplan.with_node_ips(hosts)["npu-02"])
    message = str(exc.value)
    assert message.startswith(f"acceldeploy_services[0] (deepseek-r1).env.{key} would give every")
    assert fix in message


def test_the_per_node_variables_come_from_the_platform():
    ascend = cluster.per_node_env(get_platform("ascend"))
    assert set(ascend) == {"VLLM_HOST_IP", "HCCL_IF_IP", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME",
                           "HCCL_SOCKET_IFNAME"}  # fmt: skip
    # NOSET is the same on every node: the service may set it
    assert "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES" not in ascend
    # a service on one host may name its NIC itself
    single = parse_service({"name": "one", "model": "org/m", "env": {"GLOO_SOCKET_IFNAME": "eth0"}},
                           "cpu", 0)  # fmt: skip
    cluster.check_node_env(single, get_platform("cpu"))


def test_ansible_renders_the_units_as_plan_render_does(tmp_path):
    """The role's template tasks (Ansible's template module) write what `plan.py render
    --unit` prints, byte for byte: each head's vLLM and Ray node units and their launchers."""
    import json
    import sys

    units = [
        *hostplan.plan_host(inventory(ASCEND)["npu-01"]),
        *hostplan.plan_host(inventory(GAUDI)["hpu-01"]),
    ]
    assert {u.template for u in units} == {"vllm.service.j2", "ray-node.service.j2"}
    (tmp_path / "units.json").write_text(json.dumps([u.to_dict() for u in units]))
    templates = ROOT / "roles/vllm_service/templates"
    loop = {"loop": "{{ units }}", "loop_control": {"loop_var": "vllm_service_unit"}}

    def written(path_key: str) -> str:
        return f"{tmp_path}/{{{{ vllm_service_unit.platform }}}}-{{{{ vllm_service_unit.{path_key} | basename }}}}"

    tasks = [
        {"ansible.builtin.template": {"src": f"{templates}/{{{{ vllm_service_unit.template }}}}",
                                      "dest": written("unit_path"), "mode": "0644"}, **loop},
        {"ansible.builtin.template": {"src": f"{templates}/vllm-launcher.sh.j2",
                                      "dest": written("launcher_path"), "mode": "0644"}, **loop},
    ]  # fmt: skip
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks,
             "vars": {"units": f"{{{{ lookup('file', '{tmp_path}/units.json') | from_json }}}}"}}]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(play))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
        cwd=tmp_path, env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for unit in units:
        for path, text in render_files(unit).items():
            assert (tmp_path / f"{unit.platform}-{Path(path).name}").read_text() == text, path


def test_behind_a_gateway_the_head_still_talks_to_its_nodes():
    head_vars = {**inventory(ASCEND)["npu-01"], "vllm_service_allow_from": ["192.0.2.5"]}
    (unit,) = hostplan.host_plan(head_vars).units()
    service = dict(rendered_directives(unit, "Service"))
    allowed = service["IPAddressAllow"].split()
    assert service["IPAddressDeny"] == "any"
    assert {"localhost", "192.0.2.31", "192.0.2.32", "192.0.2.5"} <= set(allowed)
