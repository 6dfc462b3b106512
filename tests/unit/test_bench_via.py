"""bench --via-gateway's selection: one target per frontend of the gateway, the load run from a
serving host that reaches the frontend, with the gateway's client key; refusals name the flag
or the variable."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceldeploy.bench import profiles, via
from acceldeploy.cli import bench
from acceldeploy.cli.common import parents
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway.plan import Frontend, Server, url_from
from acceldeploy.serving import selection
from acceldeploy_lab.inventory import InventoryHost, write_inventory

LAB = Path(__file__).resolve().parents[2] / "inventory" / "lab"


def lab_inventory(tmp_path: Path, **gateway_vars: Any) -> Path:
    path = tmp_path / "hosts.yml"
    shutil.copytree(LAB / "group_vars", tmp_path / "group_vars")
    write_inventory(path, [InventoryHost("lab1", 1, 2201), InventoryHost("lab2", 2, 2202),
                           InventoryHost("lab3", 3, 2203, gateway=True)], tmp_path / "id")  # fmt: skip
    if gateway_vars:
        (tmp_path / "host_vars").mkdir()
        (tmp_path / "host_vars" / "lab3.yml").write_text(yaml.safe_dump(gateway_vars))
    return path


def bench_args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    """`acceldeploy bench -i <the lab with a gateway> --profile smoke EXTRA...`, parsed."""
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers(), parents())
    inventory = str(lab_inventory(tmp_path))
    return parser.parse_args(["bench", "-i", inventory, "--profile", "smoke", *extra])


def smoke(hv: Any) -> profiles.Profile:
    return profiles.pick(hv.get(profiles.VAR), "smoke", None)


def test_one_target_per_frontend_run_from_a_host_it_sends_to(tmp_path: Path) -> None:
    every = selection.every_host(str(lab_inventory(tmp_path)))
    (target,) = via.targets(every, "lab3", [], smoke)
    assert (target.host, target.where, target.service) == ("lab1", "lab3", "qwen3-vl")
    assert target.via is not None
    assert (target.via.gateway, target.via.url, target.via.servers, target.via.key) == (
        "lab3", "http://127.0.0.1:9001", ("lab1", "lab2"), None)  # fmt: skip
    # each server's prefix-cache counters are read on the server itself, by its stack's names
    assert [(c.host, c.metrics_url) for c in target.via.caches] == [
        ("lab1", "http://127.0.0.1:8001/metrics"), ("lab2", "http://127.0.0.1:8002/metrics")]  # fmt: skip
    assert target.via.caches[0].series["vllm:prefix_cache_hits_total"] == "prefix_cache_hits"


def test_the_gateways_client_key_and_tls_go_with_the_load(tmp_path: Path) -> None:
    path = lab_inventory(tmp_path, gateway_client_keys=["sk-client-1", "sk-client-2"],
                         gateway_tls_certificate="/etc/haproxy/gw.pem")  # fmt: skip
    (target,) = via.targets(selection.every_host(str(path)), "lab3", ["qwen3-vl"], smoke)
    assert target.via is not None and target.via.key == "sk-client-1"
    assert target.via.url == "https://127.0.0.1:9001"


@pytest.mark.parametrize(
    ("gateway", "services", "says"),
    [("lab1", [], "--via-gateway lab1: not a host of the gateways group (gateways: lab3)"),
     ("lab3", ["other"], "--service other: lab3 does not publish it")],
)  # fmt: skip
def test_a_wrong_gateway_or_service_is_named(
    tmp_path: Path, gateway: str, services: list[str], says: str
) -> None:
    every = selection.every_host(str(lab_inventory(tmp_path)))
    with pytest.raises(AcceldeployError, match=re.escape(says)):
        via.targets(every, gateway, services, smoke)


def test_where_the_load_reaches_a_frontend() -> None:
    server = (Server("a", "10.0.0.11", 8000, 1, False),)
    public = Frontend("m", 9001, "0.0.0.0", server)
    assert url_from(public, "10.0.0.5", "10.0.0.11", False) == "http://10.0.0.5:9001"
    assert url_from(public, "10.0.0.5", "10.0.0.5", True) == "https://127.0.0.1:9001"
    private = Frontend("m", 9001, "10.0.1.5", server)
    assert url_from(private, "10.0.0.5", "10.0.0.11", False) == "http://10.0.1.5:9001"
    # on the gateway's own machine a frontend bound to one address answers only there
    assert url_from(private, "10.0.0.5", "10.0.0.5", False) == "http://10.0.1.5:9001"
    loopback = Frontend("m", 9001, "127.0.0.1", server)
    with pytest.raises(AcceldeployError, match="gateway_bind: the gateway's m frontend binds"):
        url_from(loopback, "10.0.0.5", "10.0.0.11", False)


@pytest.mark.parametrize(
    ("extra", "says"),
    [(["--limit", "lab1"], "--limit picks hosts; --via-gateway"),
     (["--restart"], "--restart restarts one host's service")],
)  # fmt: skip
def test_bench_refuses_flags_that_do_not_mix_with_a_gateway(
    tmp_path: Path, extra: list[str], says: str
) -> None:
    args = bench_args(tmp_path, "--via-gateway", "lab3", *extra)
    with pytest.raises(AcceldeployError, match=says):
        bench.select(args)


def test_the_driver_loads_the_gateway_and_samples_its_own_host(tmp_path: Path) -> None:
    from acceldeploy.bench import runner
    from acceldeploy.host.bench import driver

    path = lab_inventory(tmp_path, gateway_client_keys=["sk-client-1"])
    (target,) = via.targets(selection.every_host(str(path)), "lab3", [], smoke)
    plan = runner.driver_plan(target, "/var/tmp/acceldeploy-bench/r/qwen3-vl", restart=False)
    assert plan["load_url"] == "http://127.0.0.1:9001"
    assert plan["base_url"] == target.unit.base_url  # /metrics and /health of lab1's own unit
    assert plan["api_key_file"] == f"/var/tmp/acceldeploy-bench/r/qwen3-vl/{runner.GATEWAY_KEY}"
    assert plan["label"] == "lab3-qwen3-vl"
    argv = driver.bench_argv(plan, 1.0, tmp_path, 0)
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:9001"
    assert "sk-client-1" not in repr(plan)


def test_bench_without_a_gateway_flag_benches_the_serving_hosts_only(tmp_path: Path) -> None:
    """A fleet with a gateway (and monitors): the gateway runs no vLLM, so `bench -i` without
    --limit benches lab1 and lab2 and does not plan lab3 (which has no platform)."""
    args = bench_args(tmp_path)
    assert sorted(t.host for t in bench.select(args)) == ["lab1", "lab2"]


def test_a_url_of_the_operators_is_loaded_with_the_fleets_counters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--via-url: a router the project does not deploy, in front of the hosts serving the one
    service; its key from OPENAI_API_KEY, never on a command line."""
    monkeypatch.setenv(via.KEY_VARIABLE, "sk-router")
    every = selection.limited(str(lab_inventory(tmp_path)), "all")
    (target,) = via.url_targets(every, "http://127.0.0.1:30000/", "qwen3-vl", smoke)
    assert target.via is not None and target.host == "lab1"
    assert (target.where, target.via.url, target.via.servers, target.via.key) == (
        "url-127.0.0.1-30000", "http://127.0.0.1:30000", ("lab1", "lab2"), "sk-router")  # fmt: skip
    assert [c.host for c in target.via.caches] == ["lab1", "lab2"]


@pytest.mark.parametrize(
    ("url", "service", "says"),
    [("127.0.0.1:30000", "qwen3-vl", "--via-url 127.0.0.1:30000: give the endpoint's base URL"),
     ("http://r:1/v1", "qwen3-vl", "no path: bench adds /v1/"),
     ("http://r:port", "qwen3-vl", "--via-url http://r:port: give the endpoint's base URL"),
     ("http://r:1", "other", "--service other: no selected host serves it")],
)  # fmt: skip
def test_a_wrong_url_or_service_is_named(tmp_path: Path, url: str, service: str, says: str) -> None:
    every = selection.limited(str(lab_inventory(tmp_path)), "all")
    with pytest.raises(AcceldeployError, match=re.escape(says)):
        via.url_targets(every, url, service, smoke)


@pytest.mark.parametrize(
    "extra",
    [[], ["--service", "qwen3-vl", "--restart"],
     ["--service", "qwen3-vl", "--via-gateway", "lab3"]],
)  # fmt: skip
def test_bench_via_url_wants_one_service_and_no_gateway_or_restart(
    tmp_path: Path, extra: list[str]
) -> None:
    args = bench_args(tmp_path, "--via-url", "http://127.0.0.1:30000", *extra)
    with pytest.raises(AcceldeployError, match="give exactly one --service"):
        bench.select(args)
