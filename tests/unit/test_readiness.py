"""The readiness gate of a multi-node group: what each node checks (cluster.gate_spec, for the
Ascend two-node example and the lab's mp group), when it runs (gates_for_run), and how what a
host reports is judged (readiness.py) on recorded real output: `ip -j addr show`,
/proc/net/tcp, and hccn_tool's (tests/data/recorded/SOURCES.md)."""

from __future__ import annotations

import copy
import json
import runpy
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceldeploy import roles
from acceldeploy.host.readiness import gate as readiness
from acceldeploy.host.readiness import hlports, procnet
from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.inventory.scope import Scope
from acceldeploy.serving import cluster, hostplan

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests/data/recorded"
DP = str(ROOT / "inventory/examples/ascend-910b-2node-dp")
LAB_DP = str(ROOT / "inventory/lab-dp")
# A lab host's sshd: cgroup v1 controllers, the unified hierarchy's line last.
CGROUP = "9:name=systemd:/\n2:cpuacct:/\n1:cpu:/\n0::/system.slice/ssh.service\n"


def recorded(name: str) -> str:
    """A recording without its `# source:` line."""
    return (RECORDED / name).read_text().split("\n", 1)[1]


def lab_dp() -> dict[str, dict[str, Any]]:
    """inventory/lab-dp's hosts (its hosts.yml is the running lab's: not there before `make lab`)."""
    shared = yaml.safe_load((ROOT / LAB_DP / "group_vars/all.yml").read_text())
    return {
        host: {**shared, **yaml.safe_load((ROOT / LAB_DP / f"host_vars/{host}.yml").read_text()),
               "acceldeploy_platform": "cpu", "inventory_hostname": host}
        for host in ("lab1", "lab2")
    }  # fmt: skip


def gates(inventory: str) -> dict[str, dict[str, Any]]:
    every = hostplan.with_node_ips(lab_dp() if inventory == LAB_DP else hosts_vars(inventory))
    found = {}
    for host, hostvars in every.items():
        for unit in hostplan.plan_host(hostvars):
            if unit.readiness:
                found[host] = unit.readiness
    return found


def seen(**given: Any) -> dict[str, Any]:
    """What a healthy lab node reports, with `given` replaced."""
    up = json.dumps(
        [{"ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "operstate": "UNKNOWN",
          "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]}]
    )  # fmt: skip
    return {"ip_addr": up, "held": {}, "dials": [], "npus": [], "hccn_conf": "", **given}


def test_each_node_of_the_ascend_example_checks_its_nic_the_head_port_and_every_npu() -> None:
    found = gates(DP)
    assert set(found) == {"npu-01", "npu-02"}
    head, worker = found["npu-01"], found["npu-02"]
    assert head["free_ports"][0]["port"] == 13389 and worker["free_ports"] == []
    assert "--data-parallel-rpc-port" in head["free_ports"][0]["what"]
    assert [(d["peer"], d["port"]) for d in worker["dials"]] == [
        ("npu-01", 13389),
        ("npu-01", readiness.EPHEMERAL_PORT),
    ]
    assert [(d["peer"], d["port"]) for d in head["dials"]] == [("npu-02", readiness.EPHEMERAL_PORT)]
    assert head["npus"] == list(range(8)) and worker["npus"] == list(range(8))
    assert head["interface"] and head["interface"] == worker["interface"]
    name = head["service"]
    assert head["owners"] == [name] and worker["owners"] == [f"dp-{name}"]
    assert head["units_by_node"] == {"npu-01": [name], "npu-02": [f"dp-{name}"]}


def test_the_lab_group_checks_no_npus_and_only_one_unit_per_node_carries_the_gate() -> None:
    found = gates(LAB_DP)
    assert set(found) == {"lab1", "lab2"} and all(g["npus"] == [] for g in found.values())
    every = hostplan.with_node_ips(lab_dp())
    assert sum(bool(u.readiness) for u in hostplan.plan_host(every["lab1"])) == 1


def test_a_group_is_gated_when_any_node_restarts_one_of_its_units() -> None:
    gate = gates(LAB_DP)["lab1"]
    name = gate["service"]
    ran = cluster.gates_for_run([gate], {"lab1": [], "lab2": [f"dp-{name}"]})
    assert ran[0]["restarting"] is True
    quiet = cluster.gates_for_run([gate], {"lab1": ["other"], "lab2": []})
    assert quiet[0]["restarting"] is False


def test_interfaces_read_from_recorded_ip_json() -> None:
    found = readiness.interfaces(recorded("ip-j-addr-debian12.txt"))
    assert found["eth0"].up and found["lo"].up
    assert not found["ifb0"].up  # down: no UP flag
    assert found["lo"].carries("127.0.0.22")  # the kernel's local route takes all of 127/8
    assert not found["eth0"].carries("192.0.2.99")


def test_listening_ports_and_their_units() -> None:
    ports = readiness.listening(procnet.parse(recorded("proc-net-tcp-debian12.txt")))
    assert 0x1F9A in ports and all(ports.values())
    assert readiness.unit_of(CGROUP) == "ssh"
    assert readiness.unit_of("0::/\n") == ""


def test_a_healthy_node_passes() -> None:
    gate = gates(LAB_DP)["lab2"]
    dials = [{**d, "outcome": "refused"} for d in gate["dials"]]
    assert readiness.node_errors("lab2", {**gate, "interface": ""}, seen(dials=dials)) == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"interface": "eth9"}, "network_interface eth9 does not exist here (interfaces: lo)"),
        ({"interface": "lo", "address": "10.0.0.2"}, "lo (network_interface) does not carry "
         "10.0.0.2, the address the other nodes dial (acceldeploy_node_ip)"),
        ({"address": "10.0.0.2"}, "no interface here carries 10.0.0.2"),
    ],
)  # fmt: skip
def test_a_wrong_nic_or_address_is_refused_naming_the_variable(
    change: dict[str, Any], says: str
) -> None:
    gate = {**gates(LAB_DP)["lab2"], **change}
    dials = [{**d, "outcome": "open"} for d in gate["dials"]]
    errors = readiness.node_errors("lab2", gate, seen(dials=dials))
    assert len(errors) == 1 and errors[0].startswith("lab2: ") and says in errors[0]


def test_a_nic_without_carrier_is_refused() -> None:
    gate = {**gates(LAB_DP)["lab2"], "interface": "ifb0", "address": "192.0.2.2"}
    errors = readiness.node_errors("lab2", gate, seen(ip_addr=recorded("ip-j-addr-debian12.txt")))
    assert "ifb0 (network_interface) is not up" in errors[0] and "ip link set ifb0 up" in errors[0]


def test_a_dropped_or_unroutable_dial_is_refused_and_a_refusal_is_an_answer() -> None:
    gate = gates(LAB_DP)["lab2"]
    rpc, ephemeral = gate["dials"]
    dials = [{**rpc, "outcome": "timeout"}, {**ephemeral, "outcome": "EHOSTUNREACH"}]
    errors = readiness.node_errors("lab2", {**gate, "interface": ""}, seen(dials=dials))
    assert len(errors) == 2
    assert "cannot reach lab1 at 127.0.0.21:" in errors[0] and "a firewall drops it" in errors[0]
    assert "allow all TCP between the group's nodes" in errors[0]
    assert "EHOSTUNREACH: no route" in errors[1]


def test_the_heads_port_held_by_another_program_is_refused_its_own_units_are_not() -> None:
    gate = gates(LAB_DP)["lab1"]
    port = gate["free_ports"][0]["port"]
    own = seen(held={str(port): [gate["service"]]}, dials=[])
    assert readiness.node_errors("lab1", {**gate, "dials": [], "interface": ""}, own) == []
    other = seen(held={str(port): ["pid 77 (redis-server)"]})
    errors = readiness.node_errors("lab1", {**gate, "dials": [], "interface": ""}, other)
    assert f"port {port}" in errors[0] and "pid 77 (redis-server)" in errors[0]
    assert "set cluster_port of acceldeploy_services[0] (qwen3-vl-dp) to a port free" in errors[0]


def test_an_npu_down_or_unhealthy_is_refused_from_hccn_tools_output() -> None:
    gate = copy.deepcopy(gates(DP)["npu-02"])
    gate["npus"] = [7]
    link_down = recorded("hccn-tool-link-g-format.txt").splitlines()[1]
    npus = [
        {"device": 7, "link": link_down, "health": "net health status: Success",
         "ip": recorded("hccn-tool-ip-g-910b1.txt")}
    ]  # fmt: skip
    dials = [{**d, "outcome": "open"} for d in gate["dials"]]
    errors = readiness.node_errors(
        "npu-02", {**gate, "interface": ""}, seen(npus=npus, dials=dials,
                                                  hccn_conf=recorded("hccn-conf-910b1.txt"),
                                                  ip_addr=json.dumps([]))
    )  # fmt: skip
    assert any("NPU 7: link status DOWN" in e for e in errors)


def test_the_role_gates_every_node_and_stops_the_group_on_one_refusal() -> None:
    """vllm_service's contract (part gates) says which gates run; the filters read what each
    node's gate answered."""
    filters = runpy.run_path(str(ROOT / "plugins/filter/acceldeploy_filters.py"))
    found = gates(DP)
    units = [{"name": "x", "readiness": found["npu-01"]}, {"name": "y", "readiness": None}]
    name = found["npu-01"]["service"]
    hostvars: dict[str, dict[str, Any]] = {
        "npu-01": {"vllm_service_restart": []},
        "npu-02": {"vllm_service_restart": [f"dp-{name}"]},
    }
    scope = Scope.of_values("npu-01", {"vllm_service_units": units}, hostvars)
    ran = roles.plan("vllm_service", scope, "gates")["vllm_service_gates"]
    assert [g["restarting"] for g in ran] == [True]

    def result(gate: dict[str, Any], **more: Any) -> dict[str, Any]:
        return {"ansible_loop_var": "vllm_service_gate", "vllm_service_gate": gate, **more}

    local = {"results": [result(found["npu-01"], gated=True, npu_addresses={"7": "29.1.0.7"})]}
    theirs = {"results": [result(found["npu-02"], gated=True, npu_addresses={"7": "29.1.0.8"})]}
    hostvars["npu-01"]["vllm_service_gate_local"] = local
    hostvars["npu-02"]["vllm_service_gate_local"] = theirs
    pings = filters["acceldeploy_gate_pings"](local["results"], hostvars, "vllm_service_gate_local")
    assert pings[0]["peer_npus"] == {"npu-02": {"7": "29.1.0.8"}}
    names = ["vllm_service_gate_local", "vllm_service_gate_peers"]
    assert filters["acceldeploy_gate_refused"](local["results"], hostvars, names) == []
    theirs["results"][0]["failed"] = True
    assert filters["acceldeploy_gate_refused"](local["results"], hostvars, names) == ["npu-02"]


def test_a_gaudi_node_checks_the_external_ports_of_its_hpus() -> None:
    """Port types as the recorded format gives them (8, 22, 23 external); link states in the
    published example's format, one external port DOWN (a derived input: no public capture of
    an external port exists); the bus in the example's form."""
    types = recorded("hl-smi-n-ports-format.txt")
    example = recorded("hl-smi-n-link-gaudi2e-example.txt")
    assert set(hlports.ports(example).values()) == {"UP"} and len(hlports.ports(example)) == 18
    assert hlports.ports(types) == {8: "external", 22: "external", 23: "external"}
    up = "port  8:        UP\nport 22:        UP\nport 23:        UP\n"
    bus_csv = "2, 0000:bb:00.0\n6, 0000:bc:00.0\n"
    assert hlports.buses(bus_csv) == {"2": "0000:bb:00.0", "6": "0000:bc:00.0"}
    assert hlports.node_errors("hpu-02", ["2"], bus_csv, {"0000:bb:00.0": (types, up)}) == []
    down = up.replace("port 22:        UP", "port 22:        DOWN")
    (error,) = hlports.node_errors("hpu-02", ["2"], bus_csv, {"0000:bb:00.0": (types, down)})
    assert error.startswith("hpu-02: HPU module 2 (0000:bb:00.0): external port(s) 22 DOWN")
    (missing,) = hlports.node_errors("hpu-02", ["5"], bus_csv, {})
    assert "HPU module 5 is not in hl-smi's list" in missing
    # the Gaudi example inventory's nodes gate their HPUs by module id
    gaudi = hostplan.with_node_ips(hosts_vars(str(ROOT / "inventory/examples/gaudi2-2node")))
    specs = [u.readiness for hv in gaudi.values() for u in hostplan.plan_host(hv) if u.readiness]
    assert specs and all(s["hpus"] == [str(d) for d in range(8)] and not s["npus"] for s in specs)
