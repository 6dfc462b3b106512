"""Bad inputs of the gateway and monitor roles that used to pass preflight, each refused on the
controller naming the variable (and the host) and the fix: a gateway timeout or check interval
HAProxy cannot read, a gateway_tls_certificate that is no absolute path, a scrape interval or
retention Prometheus cannot read, an exporter on a port the inventory already gives its host,
and services given to a gateway or monitor host that no serving host runs. The roles' defaults,
the lab's inventory and the examples (with a gateway and a monitor added) still pass."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from playbook_report import lab_inventory

from acceldeploy import roles
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway import plan
from acceldeploy.inventory import bounds, durations
from acceldeploy.inventory.roledefaults import role_defaults
from acceldeploy.inventory.scope import Scope
from acceldeploy.monitor import rules, targets
from acceldeploy.serving import selection

ROOT = Path(__file__).resolve().parents[2]
HAPROXY = durations.HAPROXY_SYNTAX
PROMETHEUS = durations.PROMETHEUS_SYNTAX
TIMEOUTS = role_defaults("gateway")["gateway_timeouts"]
CHECK = role_defaults("gateway")["gateway_check"]
LAB_SERVICES = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())[
    "acceldeploy_services"
]
OTHER = {"name": "other", "model": "acceldeploy/tiny-qwen3-vl", "source": "hf",
         "revision": "main", "port": 8100}  # fmt: skip


def lab(tmp_path: Path, **extra: dict[str, Any]) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The lab's inventory with each host's extra variables, and every host's variables."""
    path = lab_inventory(tmp_path, **extra)
    return path, selection.every_host(str(path))


def gateway_plan(every: dict[str, dict[str, Any]], gateway: str) -> list[plan.Frontend]:
    """The gateway's plan as the role computes it: its own services passed too."""
    serving, gateways = plan.fleet_views(every)
    own = {h: hv.get("acceldeploy_services") for h, hv in every.items() if plan.is_gateway(hv)}
    hv = every[gateway]
    return plan.plan(hv["gateway_frontends"], serving, gateways, plan.settings(hv), own)


def check_ports(every: dict[str, dict[str, Any]]) -> None:
    """The one check of a host's ports (roles.check_ports) on every host of the fleet, as the
    monitor's plan runs it on the hosts it scrapes and a gateway's on itself."""
    groups: dict[str, list[str]] = {}
    for host, hv in every.items():
        for group in hv.get("group_names") or []:
            groups.setdefault(group, []).append(host)
    for host, hv in every.items():
        roles.check_ports(Scope.of_values(host, hv, every, groups))


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(AcceldeployError) as caught:
        call(*args)
    return str(caught.value)


# 1. HAProxy durations: gateway_timeouts.<key> and gateway_check.inter


@pytest.mark.parametrize("value", ["10 minutes", "abc", "1.5s", "5S", "1m30s", "25d", "", True,
                                   2**31, "-5s", 1.5])  # fmt: skip
def test_a_gateway_timeout_haproxy_cannot_read_is_refused_by_name(value: Any) -> None:
    (message,) = bounds.errors({"gateway_timeouts": {**TIMEOUTS, "client": value}})
    assert (
        message == f"gateway_timeouts.client must be a HAProxy duration: {HAPROXY}, got {value!r}"
    )


def test_the_gateway_timeout_message_as_the_operator_reads_it() -> None:
    (message,) = bounds.errors({"gateway_timeouts": {**TIMEOUTS, "server": "10 minutes"}})
    assert message == (
        "gateway_timeouts.server must be a HAProxy duration: whole milliseconds, or a whole "
        "number with one unit of us, ms, s, m, h or d, such as 5s or 10m, up to 2147483647 ms "
        "(24.8 days), got '10 minutes'"
    )


@pytest.mark.parametrize("value", ["2 s", "abc", 0, "0s", "1.5s"])
def test_a_check_interval_haproxy_cannot_read_is_refused_by_name(value: Any) -> None:
    (message,) = bounds.errors({"gateway_check": {**CHECK, "inter": value}})
    assert message == (
        f"gateway_check.inter must be a HAProxy duration above 0: {HAPROXY}, got {value!r}"
    )


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("gateway_timeouts", {"client": "30m"}, "gateway_timeouts has no connect: the "
         "inventory's gateway_timeouts replaces the role's default as a whole; give each of "
         "connect, client, server, http_request, queue, check"),
        ("gateway_timeouts", {**TIMEOUTS, "http-request": "10s"}, "gateway_timeouts.http-request: "
         "no such key; known: connect, client, server, http_request, queue, check"),
        ("gateway_timeouts", "10m", "gateway_timeouts must be a mapping of connect, client, "
         "server, http_request, queue, check, got '10m'"),
        ("gateway_check", {"inter": "2s"}, "gateway_check has no fall"),
        ("gateway_check", {**CHECK, "fall": 0}, "gateway_check.fall must be a whole number from "
         "1 (health checks in a row), got 0"),
    ],
)  # fmt: skip
def test_a_timeouts_or_check_mapping_the_template_cannot_print_is_refused(
    variable: str, value: Any, says: str
) -> None:
    (message,) = bounds.errors({variable: value})
    assert message.startswith(says), message


@pytest.mark.parametrize("value", ["5s", 5000, "5000", "100us", "250ms", "10m", "1h", "2d", "24d",
                                   2**31 - 1, "0"])  # fmt: skip
def test_haproxy_durations_pass(value: Any) -> None:
    assert bounds.errors({"gateway_timeouts": {**TIMEOUTS, "client": value}}) == []
    if value != "0":  # HAProxy refuses a check interval of 0
        assert bounds.errors({"gateway_check": {**CHECK, "inter": value}}) == []


def haproxy_accepts(tmp_path: Path, value: Any) -> bool:
    config = tmp_path / f"t{abs(hash(str(value)))}.cfg"
    config.write_text(
        "defaults\n    mode http\n    timeout connect 5s\n    timeout server 10m\n"
        f"    timeout client {value}\n"
        "frontend f\n    bind 127.0.0.1:1\n    default_backend b\n"
        f"backend b\n    default-server inter {value} fall 2 rise 2\n"
        "    server s 127.0.0.1:2 check\n"
    )
    run = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True,
                         text=True, check=False)  # fmt: skip
    # a warning ("unexpected character ... will be reported as an error") counts as refused
    return run.returncode == 0 and "unexpected" not in run.stdout + run.stderr


@pytest.mark.skipif(not shutil.which("haproxy"), reason="no haproxy here (make host-deps)")
@pytest.mark.parametrize("value", ["5s", "5000", "100us", "10m", "24d", "25d", "1.5s", "5S",
                                   "1m30s", "2147483647", "2147483648", "abc"])  # fmt: skip
def test_the_check_agrees_with_haproxys_own(tmp_path: Path, value: str) -> None:
    """Where the check and HAProxy 2.6's parser could disagree, haproxy -c decides."""
    ours = bounds.errors({"gateway_check": {**CHECK, "inter": value}}) == []
    assert ours == haproxy_accepts(tmp_path, value)


# 2. gateway_tls_certificate: a path on the gateway host (nothing copies it there)


@pytest.mark.parametrize("path", ["gw.pem", "certs/gw.pem", "~/gw.pem", "/etc/haproxy/my cert.pem"])
def test_a_certificate_that_is_no_absolute_path_on_the_gateway_is_refused(
    tmp_path: Path, path: str
) -> None:
    _, every = lab(tmp_path, lab3={"gateway_tls_certificate": path})
    assert refused(gateway_plan, every, "lab3") == (
        "gateway_tls_certificate must be the absolute path, without spaces, of the PEM "
        "(certificate, chain and key) on the gateway hosts, such as "
        f"/etc/haproxy/certs/gateway.pem, or empty for no TLS; got {path!r}"
    )


def test_a_certificate_on_the_gateway_host_or_none_passes(tmp_path: Path) -> None:
    # the path is the gateway host's: it need not exist on the controller
    _, every = lab(tmp_path, lab3={"gateway_tls_certificate": "/etc/haproxy/certs/gw.pem"})
    assert gateway_plan(every, "lab3")
    settings = plan.Settings(tls_certificate="")
    serving, gateways = plan.fleet_views(every)
    assert plan.plan(every["lab3"]["gateway_frontends"], serving, gateways, settings)


# 3. Prometheus durations: monitor_scrape_interval, monitor_retention (monitor_growth_window
# is the rules' own, checked by rules.settings)


@pytest.mark.parametrize("variable", ["monitor_scrape_interval", "monitor_retention"])
@pytest.mark.parametrize("value", ["15 days", "abc", "15", 15, "1.5h", "1m1h", "15S", "0s", "0",
                                   "", None])  # fmt: skip
def test_a_duration_prometheus_cannot_read_is_refused_by_name(variable: str, value: Any) -> None:
    (message,) = bounds.errors({variable: value})
    assert (
        message == f"{variable} must be a Prometheus duration above 0: {PROMETHEUS}, got {value!r}"
    )


def test_the_retention_message_as_the_operator_reads_it() -> None:
    assert bounds.errors({"monitor_retention": "15 days"}) == [
        "monitor_retention must be a Prometheus duration above 0: whole numbers with units y, "
        "w, d, h, m, s or ms, largest first, such as 15s, 15d or 1h30m, got '15 days'"
    ]


@pytest.mark.parametrize(("value", "seconds"), [("15s", 15), ("1h30m", 5400), ("2w", 1209600),
                                                ("500ms", 0.5), ("1y", 31536000),
                                                ("1d12h", 129600)])  # fmt: skip
def test_prometheus_durations_pass(value: str, seconds: float) -> None:
    assert bounds.errors({"monitor_scrape_interval": value, "monitor_retention": value}) == []
    assert bounds.check_prometheus("monitor_scrape_interval", value) == seconds


@pytest.mark.skipif(not shutil.which("promtool"), reason="no promtool here (make host-deps)")
@pytest.mark.parametrize(
    "value", ["15s", "1h30m", "500ms", "2w", "1.5m", "15", "1m1h", "5S", "abc"]
)
def test_the_check_agrees_with_promtools_own(tmp_path: Path, value: str) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global:\n  scrape_interval: {value}\n")
    run = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True,
                         check=False)  # fmt: skip
    assert (bounds.errors({"monitor_scrape_interval": value}) == []) == (run.returncode == 0)


def test_a_growth_window_that_is_no_duration_stays_refused() -> None:
    with pytest.raises(AcceldeployError, match=r"^monitor_growth_window: '1 hour' is not a "):
        rules.settings({"growth_window": "1 hour"})


# 4. An exporter on a port the inventory already gives its host


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"lab1": {"monitor_node_exporter_port": 8001}},
         "lab1: monitor_node_exporter_port 8001 is also acceldeploy_services[0] (qwen3-vl).port "
         "(the API of service qwen3-vl) on this host: node exporter would listen on it too; "
         "give monitor_node_exporter_port another port"),
        ({"lab1": {"monitor_node_exporter_port": 2201}},
         "lab1: monitor_node_exporter_port 2201 is also ansible_port (sshd, 22 when unset) on "
         "this host"),
        ({"lab2": {"monitor_node_exporter_port": 22, "ansible_port": None}},
         "lab2: monitor_node_exporter_port 22 is also ansible_port (sshd, 22 when unset) on "
         "this host"),
        ({"lab3": {"monitor_node_exporter_port": 9001}},
         "lab3: monitor_node_exporter_port 9001 is also gateway_frontends[0].port (the "
         "gateway's qwen3-vl frontend) on this host"),
        ({"lab3": {"monitor_node_exporter_port": 9000}},
         "lab3: monitor_node_exporter_port 9000 is also gateway_stats_port (the gateway's "
         "stats page) on this host"),
        ({"lab4": {"monitor_node_exporter_port": 9090}},
         "lab4: monitor_node_exporter_port 9090 is also monitor_prometheus_port (Prometheus) "
         "on this host"),
    ],
)  # fmt: skip
def test_an_exporter_on_a_port_its_host_already_has_is_refused(
    tmp_path: Path, extra: dict[str, Any], says: str
) -> None:
    _, every = lab(tmp_path, **extra)
    assert refused(check_ports, every).startswith(says)


def test_the_same_port_on_a_host_that_does_not_run_it_passes(tmp_path: Path) -> None:
    """The gateway's ports count on a gateway, Prometheus's on a monitor, a service's where it
    is served: every host inherits the fleet's variables."""
    _, every = lab(tmp_path, lab1={"monitor_node_exporter_port": 9001},
                   lab2={"monitor_node_exporter_port": 9090},
                   lab4={"monitor_node_exporter_port": 8001})  # fmt: skip
    assert targets.targets(every)
    check_ports(every)


def example(tmp_path: Path, name: str) -> dict[str, dict[str, Any]]:
    """An example inventory with a gateway and a monitor added, as docs/operations/ shows
    them: the fleet's variables (its services too) in group_vars/all, every service bound
    where the gateway and the monitor reach it, with its key; the device exporters scraped."""
    shutil.copytree(ROOT / "inventory/examples" / name, tmp_path / name)
    path = tmp_path / name / "hosts.yml"
    data = yaml.safe_load(path.read_text())
    data["all"]["children"]["gateways"] = {"hosts": {"gw-01": {"ansible_host": "192.0.2.5"}}}
    data["all"]["children"]["monitors"] = {"hosts": {"mon-01": {"ansible_host": "192.0.2.6"}}}
    path.write_text(yaml.safe_dump(data))
    group_vars = tmp_path / name / "group_vars/all.yml"
    fleet = yaml.safe_load(group_vars.read_text())
    services = [{**s, "host": "0.0.0.0", "api_key": "sk-0123456789abcdef"}
                for s in fleet["acceldeploy_services"]]  # fmt: skip
    fleet.update(acceldeploy_services=services, monitor_device_exporters=True,
                 gateway_frontends=[{"service": s["name"], "port": 9001 + i}
                                    for i, s in enumerate(services)],
                 gateway_stats_port=9000, gateway_bind="0.0.0.0",
                 gateway_client_keys=["sk-client-0123456789"])  # fmt: skip
    group_vars.write_text(yaml.safe_dump(fleet))
    return selection.every_host(str(path))


@pytest.mark.parametrize("name", ["ascend-910b", "ascend-910b-2node", "gaudi2", "gaudi2-2node"])
def test_the_examples_with_a_gateway_and_a_monitor_pass(tmp_path: Path, name: str) -> None:
    every = example(tmp_path, name)
    assert gateway_plan(every, "gw-01")
    found = targets.targets(every)
    assert {t.job for t in found} >= {"vllm", "node"}


def test_a_device_exporter_on_a_ray_port_or_on_node_exporters_is_refused(tmp_path: Path) -> None:
    every = example(tmp_path, "ascend-910b-2node")
    every["npu-02"]["monitor_npu_exporter_port"] = 6380
    assert refused(check_ports, every) == (
        "npu-02: monitor_npu_exporter_port 6380 is also acceldeploy_services[0] (deepseek-r1)"
        ".cluster_port (the Ray metrics of service deepseek-r1, on cluster_port + 1) on this "
        "host: npu-exporter would listen on it too; give monitor_npu_exporter_port another port"
    )
    every["npu-02"]["monitor_npu_exporter_port"] = 9100
    assert refused(check_ports, every).startswith(
        "npu-02: monitor_npu_exporter_port 9100 is also monitor_node_exporter_port (node "
        "exporter) on this host"
    )


# 5. Services given to a gateway or a monitor host


def test_services_only_a_gateway_is_given_are_refused(tmp_path: Path) -> None:
    _, every = lab(tmp_path, lab3={"acceldeploy_services": [OTHER]})
    assert refused(gateway_plan, every, "lab3") == (
        "lab3: acceldeploy_services gives it other, which no serving host runs, but lab3 is in "
        "the gateways group, whose hosts run no vLLM unless told (every serving play skips "
        "them): move other to the acceldeploy_services of a serving host, set "
        "acceldeploy_serves: true on lab3 to serve them there as well, or take lab3 out of "
        "the gateways group"
    )


def test_services_only_a_monitor_is_given_are_refused(tmp_path: Path) -> None:
    _, every = lab(tmp_path, lab4={"acceldeploy_services": [OTHER]})
    assert refused(targets.targets, every) == (
        "lab4: acceldeploy_services gives it other, which no serving host runs, but lab4 is in "
        "the monitors group, whose hosts run no vLLM unless told (every serving play skips "
        "them): move other to the acceldeploy_services of a serving host, set "
        "acceldeploy_serves: true on lab4 to serve them there as well, or take lab4 out of "
        "the monitors group"
    )


def test_a_gateway_that_serves_as_well_fronts_its_own_service(tmp_path: Path) -> None:
    """A fleet of two servers, one of them the gateway too: lab3 sets acceldeploy_serves and
    runs the fleet's service (port 8003) beside HAProxy (9001), and its frontend has three
    servers; the other services lab3 is given are its own."""
    extra = {"acceldeploy_serves": True, "acceldeploy_services": [*LAB_SERVICES, OTHER]}
    _, every = lab(tmp_path, lab3=extra)
    (frontend,) = gateway_plan(every, "lab3")
    assert [s.host for s in frontend.servers] == ["lab1", "lab2", "lab3"]


def test_a_gateway_frontend_on_the_port_of_its_own_service_is_refused(tmp_path: Path) -> None:
    frontends = [{"service": "qwen3-vl", "port": 8003}]
    serving = {"acceldeploy_serves": True, "acceldeploy_platform": "cpu"}
    _, every = lab(tmp_path, lab3={**serving, "gateway_frontends": frontends})
    assert refused(check_ports, every) == (
        "lab3: gateway_frontends[0].port 8003 is also acceldeploy_services[0] (qwen3-vl).port "
        "(the API of service qwen3-vl) on this host: the gateway's qwen3-vl frontend would "
        "listen on it too; give gateway_frontends[0].port another port"
    )


def test_a_monitor_that_serves_as_well_scrapes_its_own_service(tmp_path: Path) -> None:
    _, every = lab(tmp_path, lab4={"acceldeploy_serves": True, "acceldeploy_platform": "cpu"})
    seen = {host: targets.host_view(hv) for host, hv in every.items()}  # as the role passes them
    found = {(t.job, dict(t.labels)["host"]) for t in targets.targets(seen) if t.job == "vllm"}
    assert found == {("vllm", "lab1"), ("vllm", "lab2"), ("vllm", "lab4")}


def test_prometheus_on_the_port_of_the_monitors_own_service_is_refused(tmp_path: Path) -> None:
    serving = {"acceldeploy_serves": True, "acceldeploy_platform": "cpu"}
    _, every = lab(tmp_path, lab4={**serving, "monitor_prometheus_port": 8004})
    assert refused(check_ports, every) == (
        "lab4: monitor_prometheus_port 8004 is also acceldeploy_services[0] (qwen3-vl).port "
        "(the API of service qwen3-vl) on this host: Prometheus would listen on it too; give "
        "monitor_prometheus_port another port"
    )


def test_prometheus_on_the_gateways_port_is_refused_on_a_host_that_is_both(
    tmp_path: Path,
) -> None:
    path = lab_inventory(tmp_path)
    hosts = yaml.safe_load(path.read_text())
    hosts["all"]["children"]["monitors"]["hosts"]["lab3"] = None
    path.write_text(yaml.safe_dump(hosts))
    (tmp_path / "host_vars" / "lab3.yml").write_text("monitor_prometheus_port: 9000\n")
    every = selection.every_host(str(path))
    assert refused(check_ports, every).startswith(
        "lab3: monitor_prometheus_port 9000 is also gateway_stats_port (the gateway's stats "
        "page) on this host"
    )


def test_the_fleets_services_a_gateway_or_monitor_inherits_pass(tmp_path: Path) -> None:
    """inventory/lab's group_vars/all gives every host the fleet's services, the gateway and
    the monitor too (docs/operations/monitoring.md's example does the same): they run on the
    serving hosts, and nothing is refused."""
    _, every = lab(tmp_path)
    assert every["lab3"]["acceldeploy_services"] and every["lab4"]["acceldeploy_services"]
    assert [f.service for f in gateway_plan(every, "lab3")] == ["qwen3-vl"]
    assert targets.targets(every)
    check_ports(every)


# The defaults, and the roles' own plan as preflight runs it


def test_the_roles_defaults_pass() -> None:
    for role in ("gateway", "monitor"):
        defaults = role_defaults(role)
        assert bounds.errors({n: defaults[n] for n in bounds.names(role)}) == [], role
    assert set(TIMEOUTS) == set(bounds.GATEWAY_TIMEOUTS)
    assert set(CHECK) == set(bounds.GATEWAY_CHECK)
    template = (ROOT / "roles/gateway/templates/haproxy.cfg.j2").read_text()
    for key in bounds.GATEWAY_TIMEOUTS:
        assert f"gateway_timeouts.{key} }}" in template, key
    for key in bounds.GATEWAY_CHECK:
        assert f"gateway_check.{key} }}" in template, key


def run_plans(tmp_path: Path, *args: str, **extra: dict[str, Any]) -> tuple[int, str]:
    """The gateway role's plan on lab3 and the monitor role's on lab4 (both on this machine),
    as playbooks/preflight.yml includes them."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    extra = {**extra, "lab3": {**local, **extra.get("lab3", {})},
             "lab4": {**local, **extra.get("lab4", {})}}  # fmt: skip
    lab(tmp_path, **extra)
    plays = [{"hosts": group, "gather_facts": False, "tasks": [{"ansible.builtin.include_role": {
        "name": f"acceldeploy.fleet.{role}", "tasks_from": "plan"}}]}
        for group, role in (("gateways", "gateway"), ("monitors", "monitor"))]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(plays))
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml",
         *args],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "PYTHONPATH": str(ROOT / "tools"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    return run.returncode, run.stdout + run.stderr


def test_the_roles_plans_pass_the_labs_inventory(tmp_path: Path) -> None:
    code, out = run_plans(tmp_path, "-e", "gateway_tls_certificate=/etc/haproxy/gw.pem")
    assert code == 0, out[-3000:]


@pytest.mark.parametrize(
    ("args", "extra", "says"),
    [
        (["-e", json.dumps({"gateway_timeouts": {**TIMEOUTS, "client": "10 minutes"},
                            "gateway_check": {**CHECK, "inter": "abc"}})], {},
         ["gateway_timeouts.client must be a HAProxy duration",
          "gateway_check.inter must be a HAProxy duration above 0"]),
        (["-e", "gateway_tls_certificate=gw.pem"], {},
         ["gateway_tls_certificate must be the absolute path"]),
        ([], {"lab3": {"acceldeploy_services": [OTHER]}},
         ["lab3: acceldeploy_services gives it other, which no serving host runs"]),
        (["-e", "monitor_scrape_interval='15 s' monitor_retention=15days"], {},
         ["monitor_scrape_interval must be a Prometheus duration above 0",
          "monitor_retention must be a Prometheus duration above 0"]),
        ([], {"lab1": {"monitor_node_exporter_port": 8001}},
         ["lab1: monitor_node_exporter_port 8001 is also acceldeploy_services[0] (qwen3-vl)"]),
        ([], {"lab4": {"acceldeploy_services": [OTHER]}},
         ["lab4: acceldeploy_services gives it other, which no serving host runs"]),
    ],
    ids=["timeouts", "certificate", "gateway-services", "durations", "ports", "monitor-services"],
)  # fmt: skip
def test_the_roles_plans_refuse_each(
    tmp_path: Path, args: list[str], extra: dict[str, Any], says: list[str]
) -> None:
    code, out = run_plans(tmp_path, *args, **extra)
    assert code != 0
    for text in says:
        assert text in out, out[-3000:]
