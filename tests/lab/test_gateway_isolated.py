"""Backends reachable only from the gateways (make test-slow; issue 37), on the isolated lab:
lab1, lab2 and two gateways, lab3 and lab4, each in its own network namespace on the lab
bridge, reaching nothing but the controller's bundle server (tools/lab.py up --isolated
--gateways 2). From bare,
`site.yml -e acceldeploy_bundle=DIR` deploys the services on their private addresses with an
API key, and HAProxy on lab3 and lab4 from the bundle's own apt repository, with client keys on
a public bind. Then:

- verify passes, the gateway's checks included;
- the gateways route by affinity (issue 61): each conversation's turns, through either
  gateway, land on one server, and six conversations reach both;
- lab2 gets no answer from lab1's service (IPAddressAllow= in its unit), lab3 does, and lab1
  does from its own address;
- a client on lab2 is served through the gateway with a client key, and refused without one;
- nftables counted nothing beyond the bundle server;
- a second run changes nothing;
- a flag change rolled across both hosts drains and readies each service on both gateways,
  and both see every backend UP after it.

The shared-network lab is back (up, mirror and wheel server) at the end."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, haproxy_servers, offline_isolated_lab, on_host

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CACHE = Path(os.environ.get("ACCELDEPLOY_CACHE") or "/var/cache/acceldeploy")
SERVING, GATEWAY, GATEWAYS = ("lab1", "lab2"), "lab3", ("lab3", "lab4")
ADDRESS = {f"lab{i}": f"10.213.0.{10 + i}" for i in range(1, 5)}
BACKEND_KEY = "sk-lab-backend-0123456789abcdef"
CLIENT_KEY = "sk-lab-client-0123456789abcdef"


def counters() -> dict[str, int]:
    from acceldeploy_lab import isolation

    return isolation.counters()


def private_inventory(tmp: Path) -> Path:
    """The isolated lab's inventory with its services on their private addresses, keyed, and
    the gateway public with a client key (no dev-mode endpoints: they are refused beyond
    loopback)."""
    shutil.copy(INVENTORY, tmp / INVENTORY.name)
    shutil.copytree(INVENTORY.parent / "group_vars", tmp / "group_vars")
    group_file = tmp / "group_vars/all.yml"
    group = yaml.safe_load(group_file.read_text())
    (spec,) = group["acceldeploy_services"]
    spec.pop("env", None)
    group["acceldeploy_services"] = [{**spec, "host": "{{ ansible_host }}", "api_key": BACKEND_KEY}]
    # the cache-aware routing (issue 61): the same HAProxy from the bundle, keyed on each
    # conversation's opening
    group.update(
        gateway_bind="0.0.0.0", gateway_client_keys=[CLIENT_KEY], gateway_routing="affinity"
    )
    group_file.write_text(yaml.safe_dump(group, sort_keys=False))
    return tmp / INVENTORY.name


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    bundle = CACHE / "bundles" / "lab-gateway"
    tmp = tmp_path_factory.mktemp("isolated-gateway")
    up = ("--hosts", "2", "--gateways", "2")
    with offline_isolated_lab(lambda: private_inventory(tmp), bundle, *up) as inventory:
        yield inventory, bundle


def reach(host: str, url: str, key: str | None = None) -> str:
    """From `host`: the HTTP status of GET url, or the error (no answer within 5 s)."""
    script = (
        "import sys,urllib.request,urllib.error\n"
        "r=urllib.request.Request(sys.argv[1])\n"
        "sys.argv[2:] and r.add_header('Authorization','Bearer '+sys.argv[2])\n"
        "try:\n print(urllib.request.urlopen(r,timeout=5).status)\n"
        "except urllib.error.HTTPError as e:\n print(e.code)\n"
        "except OSError as e:\n print(type(e).__name__)\n"
    )
    argv = ["python3", "-c", script, url, *([key] if key else [])]
    return on_host(host, shlex.join(argv)).strip()


def test_backends_answer_only_the_gateway_on_an_isolated_rack(
    isolated: tuple[Path, Path],
) -> None:
    inventory, bundle = isolated
    before = counters()
    run = run_playbook("site.yml", inventory, {"acceldeploy_bundle": str(bundle)}, timeout=3600)
    assert run.ok, run.output[-6000:]
    left = "ls /etc/apt/sources.list.d/acceldeploy-bundle.list /etc/apt/apt.conf.d/00acceldeploy*"
    for gateway in GATEWAYS:
        assert on_host(gateway, "dpkg-query -W -f '${Status}' haproxy") == "install ok installed"
        assert on_host(gateway, f"{left} 2>/dev/null || true").strip() == ""  # the source is gone
    verify = subprocess.run(
        [sys.executable, str(ROOT / "tools/verify.py"), "-i", str(inventory), "--json"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    checks = json.loads(verify.stdout)["checks"]
    assert verify.returncode == 0, [c for c in checks if c["status"] == "fail"]
    for gateway in GATEWAYS:
        assert {c["name"] for c in checks if c["host"] == gateway} >= {
            "backend lab1", "backend lab2", "gateway chat"}  # fmt: skip

    # systemd shows each as a prefix: 10.213.0.11/32 ... 127.0.0.0/8 ::1/128
    shown = on_host("lab1", "systemctl show -p IPAddressAllow --value qwen3-vl").split()
    unit = {prefix.removesuffix("/32") for prefix in shown}
    assert unit >= {ADDRESS[h] for h in ("lab1", *GATEWAYS)} | {"127.0.0.0/8"}, shown
    assert ADDRESS["lab2"] not in unit
    health = f"http://{ADDRESS['lab1']}:8001/health"
    assert reach("lab2", health) in ("TimeoutError", "URLError")  # dropped: no answer
    assert [reach(h, health) for h in ("lab1", *GATEWAYS)] == ["200"] * 3

    models = f"http://{ADDRESS['lab3']}:9001/v1/models"
    assert reach("lab2", models) == "401"  # the gateway's client key is missing
    assert reach("lab2", models, CLIENT_KEY) == "200"  # the gateway adds the backend's key
    assert reach("lab2", models, BACKEND_KEY) == "401"  # a backend key is no client key

    dropped = {k: v - before.get(k, 0) for k, v in counters().items() if "lab-host" in k}
    assert set(dropped.values()) == {0}, dropped

    again = run_playbook("site.yml", inventory, {"acceldeploy_bundle": str(bundle)}, timeout=3600)
    assert again.ok, again.output[-4000:]
    assert {h: again.changed(h) for h in (*SERVING, *GATEWAYS)} == dict.fromkeys(
        (*SERVING, *GATEWAYS), 0
    ), again.drift()


def chat(host: str, gateway: str, opening: str, turn: int) -> str:
    """From `host`, one turn of a conversation through `gateway` with the client key: its
    opening, then `turn` more questions; the HTTP status or the error."""
    messages = [{"role": "user", "content": opening}]
    for number in range(turn):
        messages += [{"role": "assistant", "content": "Noted."},
                     {"role": "user", "content": f"And question {number}?"}]  # fmt: skip
    body = json.dumps({"model": "qwen3-vl", "messages": messages, "max_tokens": 2})
    script = (
        "import sys,urllib.request,urllib.error\n"
        "r=urllib.request.Request(sys.argv[1],data=sys.argv[2].encode(),headers={"
        "'Content-Type':'application/json','Authorization':'Bearer '+sys.argv[3]})\n"
        "try:\n print(urllib.request.urlopen(r,timeout=60).status)\n"
        "except urllib.error.HTTPError as e:\n print(e.code)\n"
    )
    url = f"http://{ADDRESS[gateway]}:9001/v1/chat/completions"
    return on_host(host, shlex.join(["python3", "-c", script, url, body, CLIENT_KEY])).strip()


def sessions(gateway: str) -> dict[str, int]:
    """{server: the requests HAProxy sent it} on `gateway`'s qwen3-vl backend."""
    rows = haproxy_servers(gateway, "qwen3-vl")
    return {h: int(rows[h]["stot"]) for h in SERVING}


def test_every_gateway_keeps_a_conversation_on_one_server(isolated: tuple[Path, Path]) -> None:
    """The affinity gateway on the air-gapped rack: each conversation's turns, through either
    gateway, land on one server (both gateways hash alike), and the conversations spread."""
    landed: dict[str, set[str]] = {}
    for number in range(6):
        opening = f"Case iso-{number}: the invoice of the shipment by the river?"
        for turn, gateway in enumerate((*GATEWAYS, *GATEWAYS)):
            before = sessions(gateway)
            assert chat("lab2", gateway, opening, turn) == "200"
            after = sessions(gateway)
            moved = {h for h in SERVING if after[h] > before[h]}
            assert len(moved) == 1, (opening, gateway, before, after)
            landed.setdefault(opening, set()).update(moved)
    assert all(len(servers) == 1 for servers in landed.values()), landed
    assert set().union(*landed.values()) == set(SERVING), landed


def test_a_rollout_drains_and_readies_each_service_on_every_gateway(
    isolated: tuple[Path, Path],
) -> None:
    inventory, _ = isolated
    group_file = inventory.parent / "group_vars/all.yml"
    group = yaml.safe_load(group_file.read_text())
    group["acceldeploy_services"][0]["extra_args"] = {"max-num-seqs": 8}
    group_file.write_text(yaml.safe_dump(group, sort_keys=False))
    run = run_playbook("playbooks/serve.yml", inventory, timeout=3000)
    assert run.ok, run.output[-6000:]
    drained = {
        host: sorted(r["vllm_service_gateway"]["gateway"] for r in result.get("results", []))
        for name, host, result in run.iter_results()
        if "Restart | Drained in every gateway" in name  # the role's name goes first
    }
    assert drained == {"lab1": list(GATEWAYS), "lab2": list(GATEWAYS)}, drained
    for gateway in GATEWAYS:
        servers = haproxy_servers(gateway, "qwen3-vl")
        assert {h: servers[h]["status"] for h in SERVING} == {"lab1": "UP", "lab2": "UP"}
