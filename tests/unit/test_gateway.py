"""The gateway's plan from the inventory (tools/acceldeploy/gateway/plan.py), its refusals by
variable name, and the role's HAProxy config as rendered, checked with `haproxy -c`."""

from __future__ import annotations

import http.server
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import jinja2
import pytest
import yaml

from acceldeploy import roles
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway.plan import Settings, backend_keys, plan, targets
from acceldeploy.inventory.scope import Scope
from acceldeploy.verify.gateway import _server_checks, server_states

ROLE = Path(__file__).resolve().parents[2] / "roles" / "gateway"
KEY = "sk-backend-0123456789"


def service(**changes: Any) -> dict[str, Any]:
    base = {"name": "qwen3-vl", "model": "acceldeploy/tiny-qwen3-vl", "source": "hf",
            "revision": "main", "port": 8001, "host": "0.0.0.0", "api_key": KEY}  # fmt: skip
    return {**base, **changes}


def serving(**hosts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: {"services": services, "platform": "cpu", "address": f"10.213.0.{10 + i}"}
        for i, (name, services) in enumerate(hosts.items(), start=1)
    }


GW = {"gw1": "10.213.0.20"}
FLEET = serving(lab1=[service()], lab2=[service(port=8002)])


def test_one_frontend_per_service_with_every_host_that_serves_it() -> None:
    (frontend,) = plan([{"service": "qwen3-vl", "port": 9001}], FLEET, GW)
    assert (frontend.service, frontend.port, frontend.bind) == ("qwen3-vl", 9001, "127.0.0.1")
    assert [(s.host, s.address, s.port, s.keyed) for s in frontend.servers] == [
        ("lab1", "10.213.0.11", 8001, True),
        ("lab2", "10.213.0.12", 8002, True),
    ]


def test_a_service_bound_to_one_address_is_reached_there() -> None:
    fleet = serving(lab1=[service(host="10.9.0.5")])
    (frontend,) = plan([{"service": "qwen3-vl", "port": 9001}], fleet, GW)
    assert frontend.servers[0].address == "10.9.0.5"


def test_weights_follow_the_devices_and_a_group_is_served_by_its_head() -> None:
    group = {"name": "big", "model": "acceldeploy/tiny-qwen3-vl", "source": "hf",
             "revision": "main", "port": 8100, "host": "0.0.0.0", "api_key": KEY,
             "nodes": ["lab1", "lab2"], "pipeline_parallel_size": 2}  # fmt: skip
    fleet = serving(lab1=[group], lab2=[group], lab3=[{**group, "nodes": None,
                                                       "pipeline_parallel_size": 1}])  # fmt: skip
    (frontend,) = plan([{"service": "big", "port": 9100}], fleet, GW)
    assert [(s.host, s.weight) for s in frontend.servers] == [("lab1", 2), ("lab3", 1)]


def test_a_listed_server_must_be_one_the_service_has() -> None:
    chosen = [{"host": "lab2", "port": 8002}]
    (frontend,) = plan([{"service": "qwen3-vl", "port": 9001, "servers": chosen}], FLEET, GW)
    assert [s.host for s in frontend.servers] == ["lab2"]
    wrong = [{"host": "lab2", "port": 8009}]
    with pytest.raises(AcceldeployError) as error:
        plan([{"service": "qwen3-vl", "port": 9001, "servers": wrong}], FLEET, GW)
    assert str(error.value) == (
        "gateway_frontends[0].servers[0]: no service qwen3-vl answers on lab2:8009; it is "
        "served on lab1:8001, lab2:8002"
    )


@pytest.mark.parametrize(
    "frontends, settings, says",
    [
        ([{"service": "other", "port": 9001}], Settings(),
         "gateway_frontends[0].service 'other': no serving host runs it (acceldeploy_services "
         "has qwen3-vl)"),
        ([{"service": "qwen3-vl", "port": 70000}], Settings(),
         "gateway_frontends[0].port must be a port (1-65535), got 70000"),
        ([{"service": "qwen3-vl", "port": 9001, "bind": "0.0.0.0"}], Settings(),
         "gateway_frontends[0]: the gateway binds 0.0.0.0 with no gateway_client_keys"),
        ([{"service": "qwen3-vl", "port": 9001, "backend": "x"}], Settings(),
         "gateway_frontends[0] must be a mapping of service, port, bind, servers"),
        ([], Settings(), "gateway_frontends must list the services the gateway publishes"),
        ([{"service": "qwen3-vl", "port": 9001}, {"service": "qwen3-vl", "port": 9002}],
         Settings(), "gateway_frontends[1].service qwen3-vl is also gateway_frontends[0].service"),
        ([{"service": "qwen3-vl", "port": 9001, "routing": "roundrobin"}], Settings(),
         "gateway_frontends[0].routing must be one of leastconn, affinity"),
        ([{"service": "qwen3-vl", "port": 9001}], Settings(routing="cache"),
         "gateway_routing must be one of leastconn, affinity"),
        ([{"service": "qwen3-vl", "port": 9001}], Settings(affinity_header="x session"),
         "gateway_affinity_header must be an HTTP header's name"),
        ([{"service": "qwen3-vl", "port": 9001}], Settings(affinity_balance_factor=50),
         "gateway_affinity_balance_factor"),
    ],
)  # fmt: skip
def test_misconfigured_frontends_are_refused_by_name(
    frontends: list[dict[str, Any]], settings: Settings, says: str
) -> None:
    with pytest.raises(
        AcceldeployError,
    ) as error:
        plan(frontends, FLEET, GW, settings)
    assert says in str(error.value)


@pytest.mark.parametrize(
    ("frontends", "stats_port", "says"),
    [
        ([{"service": "qwen3-vl", "port": 9001}], 9001,
         r"^gw: gateway_frontends\[0\]\.port 9001 is also gateway_stats_port"),
        ([{"service": "qwen3-vl", "port": 9001}, {"service": "other", "port": 9001}], 9000,
         r"^gw: gateway_frontends\[1\]\.port 9001 is also gateway_frontends\[0\]\.port"),
    ],
)  # fmt: skip
def test_two_of_haproxy_s_listeners_on_one_port_are_refused_by_the_host_s_port_check(
    frontends: list[dict[str, Any]], stats_port: int, says: str
) -> None:
    fleet = serving(lab1=[service(), service(name="other", port=8002)])
    assert plan(frontends, fleet, GW, Settings(stats_port=stats_port))  # its own inputs pass
    gateway = {"group_names": ["gateways"], "gateway_frontends": frontends,
               "gateway_stats_port": stats_port}  # fmt: skip
    scope = Scope.of_values("gw", gateway, {"gw": gateway}, {"gateways": ["gw"]})
    with pytest.raises(AcceldeployError, match=says):
        roles.check_ports(scope)


def test_a_public_gateway_with_client_keys_or_told_so_is_accepted() -> None:
    frontends = [{"service": "qwen3-vl", "port": 9001, "bind": "0.0.0.0"}]
    assert plan(frontends, FLEET, GW, Settings(client_keys=True))
    assert plan(frontends, FLEET, GW, Settings(allow_unauthenticated=True))


def test_a_loopback_backend_is_reachable_only_from_a_gateway_on_its_own_machine() -> None:
    fleet = serving(lab1=[service(host="127.0.0.1", api_key=None)])
    frontends = [{"service": "qwen3-vl", "port": 9001}]
    with pytest.raises(
        AcceldeployError, match=r"lab1 binds 127\.0\.0\.1, which a gateway on another machine"
    ):
        plan(frontends, fleet, GW)
    (frontend,) = plan(frontends, fleet, {"gw1": "10.213.0.11"})  # lab1's own address
    assert (frontend.servers[0].address, frontend.servers[0].keyed) == ("127.0.0.1", False)


def test_a_models_services_share_one_key() -> None:
    assert backend_keys(FLEET) == {"qwen3-vl": KEY}
    fleet = serving(lab1=[service()], lab2=[service(api_key="sk-another-key-0123")])
    with pytest.raises(AcceldeployError, match="api_key differs between lab1, lab2"):
        plan([{"service": "qwen3-vl", "port": 9001}], fleet, GW)


def test_no_gateway_host_is_refused() -> None:
    with pytest.raises(AcceldeployError, match="the gateways group is empty"):
        plan([{"service": "qwen3-vl", "port": 9001}], FLEET, {})


def render(tmp_path: Path, frontends: list[dict[str, Any]], **changes: Any) -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    keys = tmp_path / "backend-keys.map"
    keys.write_text(f"qwen3-vl Bearer {KEY}\n")
    clients = tmp_path / "client-keys.lst"
    clients.write_text("Bearer sk-client-0123456789\n")
    values = {**defaults, "ansible_managed": "Ansible managed",
              "gateway_backend_keys_file": str(keys), "gateway_client_keys_file": str(clients),
              "gateway_state_file": str(tmp_path / "server-state"),
              "gateway_plan": [f.to_dict() for f in plan(frontends, FLEET, GW,
                                                          Settings(client_keys=True))]
              if frontends else [],
              **changes}  # fmt: skip
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLE / "templates"),
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("haproxy.cfg.j2").render(values)


@pytest.mark.skipif(not shutil.which("haproxy"), reason="no haproxy here (make host-deps)")
@pytest.mark.parametrize("client_keys, routing", [(False, "leastconn"), (True, "affinity")])
def test_the_rendered_config_passes_haproxys_own_check(
    tmp_path: Path, client_keys: bool, routing: str
) -> None:
    frontends = [{"service": "qwen3-vl", "port": 9001, "bind": "0.0.0.0", "routing": routing}]
    text = render(tmp_path, frontends, gateway_client_keys=["x"] if client_keys else [])
    config = tmp_path / "haproxy.cfg"
    config.write_text(text.replace("chroot /var/lib/haproxy\n", ""))
    proc = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    assert KEY not in text
    assert "server lab1 10.213.0.11:8001 check weight 1" in text
    assert "server lab2 10.213.0.12:8002 check weight 1" in text
    assert ("-f " + str(tmp_path / "client-keys.lst") in text) is client_keys
    for line in ("option httpchk GET /health",
                 "retry-on conn-failure empty-response", "option redispatch 1",
                 "load-server-state-from-file global", "bind 0.0.0.0:9001"):  # fmt: skip
        assert line in text, text
    affine = ("tune.bufsize 131072", "balance hash var(txn.affinity)", "hash-balance-factor 300")
    assert all(line in text for line in affine) is (routing == "affinity"), text
    assert ("balance leastconn" in text) is (routing == "leastconn")


def test_only_an_affinity_frontend_reads_the_body_and_needs_haproxy_2_6() -> None:
    """affinity's `balance hash` is HAProxy 2.6's: the role names the frontend on an older one
    (Debian 11's 2.2) before its config."""
    fleet = serving(lab1=[service(), service(name="other", port=8002)])
    frontends = [{"service": "qwen3-vl", "port": 9001},
                 {"service": "other", "port": 9002, "routing": "affinity"}]  # fmt: skip
    least, affine = plan(frontends, fleet, GW)
    assert (least.balance, least.reads_body, least.haproxy_since) == (
        ("balance leastconn",), False, "")  # fmt: skip
    assert affine.reads_body and "hash-type consistent sdbm avalanche" in affine.balance
    assert affine.haproxy_since == "2.6"
    (by_default,) = plan(frontends[:1], FLEET, GW, Settings(routing="affinity"))
    assert by_default.routing == "affinity"


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def admin(socket_path: Path, command: str) -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(str(socket_path))
        sock.sendall(command.encode() + b"\n")
        return b"".join(iter(lambda: sock.recv(65536), b"")).decode()


def states(socket_path: Path) -> dict[str, str]:
    found = server_states(admin(socket_path, "show stat"))
    return {server: row["status"] for (_, server), row in found.items()}


def wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


@pytest.mark.skipif(not shutil.which("haproxy"), reason="no haproxy here (make host-deps)")
def test_real_haproxy_checks_drains_and_keeps_a_drain_through_a_reload(tmp_path: Path) -> None:
    """The rendered config run by the distribution's HAProxy: a server answering /health is
    UP, one on a closed port DOWN (named by verify), and a drained server stays DRAIN
    across a reload through the role's state-saving helper."""
    up = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    fleet = serving(lab1=[service(port=up.server_address[1])],
                    lab2=[service(port=closed.getsockname()[1])])  # fmt: skip
    sock, state = tmp_path / "admin.sock", tmp_path / "server-state"
    frontends = plan([{"service": "qwen3-vl", "port": free_port()}], fleet, GW)
    text = render(tmp_path, [], gateway_plan=[f.to_dict() for f in frontends],
                  gateway_stats_socket=str(sock), gateway_check={"inter": "100ms", "fall": 2,
                                                                 "rise": 2})  # fmt: skip
    proc = start_haproxy(tmp_path, text)
    try:
        assert wait_for(lambda: sock.exists() and states(sock) == {"lab1": "UP", "lab2": "DOWN"})
        checks = _server_checks("gw1", frontends, server_from(sock))
        assert [(c.name, c.status) for c in checks] == [("backend lab1", "pass"),
                                                         ("backend lab2", "fail")]  # fmt: skip
        assert "HAProxy on gw1 sees lab2 DOWN" in checks[1].fix
        admin(sock, "set server qwen3-vl/lab1 state drain")
        assert states(sock)["lab1"] == "DRAIN"
        helper = ROLE / "files" / "haproxy-save-state"
        subprocess.run([sys.executable, str(helper), str(sock), str(state)], check=True)
        assert "qwen3-vl" in state.read_text()
        proc.send_signal(signal.SIGUSR2)  # the reload haproxy.service's ExecReload sends
        time.sleep(1.0)
        assert wait_for(lambda: sock.exists() and "lab1" in states(sock))
        assert states(sock)["lab1"] == "DRAIN"
        admin(sock, "set server qwen3-vl/lab1 state ready")
        assert wait_for(lambda: states(sock)["lab1"] == "UP")
        # Without the saved states a reload forgets a drain: the helper is what keeps it.
        admin(sock, "set server qwen3-vl/lab1 state drain")
        state.unlink()
        proc.send_signal(signal.SIGUSR2)
        time.sleep(1.0)
        assert wait_for(lambda: sock.exists() and states(sock).get("lab1") == "UP")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        up.shutdown()
        closed.close()


def start_haproxy(tmp_path: Path, text: str) -> subprocess.Popen[bytes]:
    """The rendered config run in the foreground by this user, its backends on loopback."""
    for line in (
        "chroot /var/lib/haproxy\n",
        "    user haproxy\n",
        "    group haproxy\n",
        "    daemon\n",
        "    log /dev/log local0\n",
        "    log /dev/log local1 notice\n",
    ):
        text = text.replace(line, "")  # fmt: skip
    config = tmp_path / "haproxy.cfg"
    config.write_text(text.replace("10.213.0.11", "127.0.0.1").replace("10.213.0.12", "127.0.0.1"))
    return subprocess.Popen(["haproxy", "-W", "-db", "-f", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip


class KeyedBackend(Health):
    """A backend that answers /v1/models only to the gateway's key, like vLLM's --api-key."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        if self.path == "/health":
            super().do_GET()
            return
        auth = self.headers.get("Authorization", "")
        self.seen.append(auth)
        self.send_response(200 if auth == f"Bearer {KEY}" else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()


def https_status(port: int, cafile: Path, key: str | None) -> int:
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cafile=str(cafile))
    request = urllib.request.Request(f"https://localhost:{port}/v1/models")
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.skipif(not shutil.which("haproxy") or not shutil.which("openssl"),
                    reason="no haproxy or openssl here (make host-deps)")  # fmt: skip
def test_real_haproxy_terminates_tls_checks_client_keys_and_sends_the_backends_key(
    tmp_path: Path,
) -> None:
    """The public side is the gateway's: TLS from the operator's PEM, a client key checked
    there (401 without it), and the backend sees the gateway's key, never the client's."""
    pem = tmp_path / "gateway.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
                   check=True, capture_output=True)  # fmt: skip
    pem.write_text((tmp_path / "cert.pem").read_text() + (tmp_path / "key.pem").read_text())
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), KeyedBackend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    fleet = serving(lab1=[service(port=backend.server_address[1])])
    port = free_port()
    frontends = plan([{"service": "qwen3-vl", "port": port}], fleet, GW, Settings(client_keys=True))
    text = render(tmp_path, [], gateway_plan=[f.to_dict() for f in frontends],
                  gateway_client_keys=["sk-client-0123456789"], gateway_tls_certificate=str(pem),
                  gateway_stats_socket=str(tmp_path / "admin.sock"),
                  gateway_check={"inter": "100ms", "fall": 2, "rise": 2})  # fmt: skip
    proc = start_haproxy(tmp_path, text)
    try:
        assert wait_for(lambda: (tmp_path / "admin.sock").exists()
                        and states(tmp_path / "admin.sock") == {"lab1": "UP"})  # fmt: skip
        cert = tmp_path / "cert.pem"
        assert https_status(port, cert, None) == 401
        assert https_status(port, cert, "sk-wrong") == 401
        assert KeyedBackend.seen == []  # refused at the gateway, never passed on
        assert https_status(port, cert, "sk-client-0123456789") == 200
        assert KeyedBackend.seen == [f"Bearer {KEY}"]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
            plain.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
            assert not plain.recv(100).startswith(b"HTTP/")  # TLS only
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        backend.shutdown()


def server_from(sock: Path) -> dict[tuple[str, str], dict[str, str]]:
    return server_states(admin(sock, "show stat"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_rollout_drains_a_service_where_a_gateway_sends_to_this_host() -> None:
    everyone = {"gw1": {"frontends": [{"service": "qwen3-vl", "port": 9001}], "socket": ""},
                "gw2": {"frontends": [{"service": "qwen3-vl", "port": 9001,
                                       "servers": [{"host": "lab2", "port": 8002}]},
                                      {"service": "other", "port": 9002}],
                        "socket": "/run/gw2.sock"}}  # fmt: skip
    assert targets(everyone, "lab1", ["qwen3-vl"]) == [
        {"gateway": "gw1", "socket": "/run/haproxy/admin.sock", "service": "qwen3-vl"}]  # fmt: skip
    assert [t["gateway"] for t in targets(everyone, "lab2", ["qwen3-vl", "x"])] == ["gw1", "gw2"]
    assert targets(everyone, "lab1", ["x"]) == []


class Named(Health):
    """A backend that answers a POST with the name of the server it is."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = self.server.name.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def chat(port: int, messages: list[dict[str, Any]], headers: dict[str, str] | None = None) -> str:
    import json
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps({"model": "qwen3-vl", "messages": messages}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-client",
                 **(headers or {})},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=5) as answer:
        return str(answer.read().decode())


def conversation(port: int, first: Any, turns: int, system: bool = True) -> list[str]:
    """The server of each turn of one conversation, each turn's messages extending the last."""
    messages = [{"role": "system", "content": "A long shared system prompt."}] if system else []
    messages.append({"role": "user", "content": first})
    seen = []
    for turn in range(turns):
        seen.append(chat(port, messages))
        messages += [{"role": "assistant", "content": f"answer {turn}"},
                     {"role": "user", "content": f"and then {turn}?"}]  # fmt: skip
    return seen


@pytest.mark.skipif(not shutil.which("haproxy"), reason="no haproxy here (make host-deps)")
def test_real_haproxy_keeps_a_conversation_on_one_server_and_off_a_drained_one(
    tmp_path: Path,
) -> None:
    """Affinity routing by the distribution's HAProxy: every turn of a conversation (text, or
    an image part before its question, with or without a system prompt, or named by the
    session header) lands on one server, the conversations spread over all three; a drained
    server gets none of its conversations' next turns, and has them back once ready."""
    backends = []
    for name in ("lab1", "lab2", "lab3"):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Named)
        server.name = name  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        backends.append(server)
    fleet = serving(**{s.name: [service(port=s.server_address[1])] for s in backends})  # type: ignore[attr-defined]
    sock, port = tmp_path / "admin.sock", free_port()
    frontends = plan([{"service": "qwen3-vl", "port": port, "routing": "affinity"}], fleet, GW)
    text = render(tmp_path, [], gateway_plan=[f.to_dict() for f in frontends],
                  gateway_stats_socket=str(sock),
                  gateway_check={"inter": "100ms", "fall": 2, "rise": 2})  # fmt: skip
    proc = start_haproxy(tmp_path, text.replace("10.213.0.13", "127.0.0.1"))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 40000}}
    try:
        assert wait_for(lambda: sock.exists() and set(states(sock).values()) == {"UP"})
        homes = {}
        for i in range(12):
            first: Any = f"conversation {i}: what is in the report?"
            if i % 3 == 1:
                first = [image, {"type": "text", "text": f"conversation {i}: describe it"}]
            turns = set(conversation(port, first, 4, system=i % 2 == 0))
            assert len(turns) == 1, (i, turns)
            homes[i] = turns.pop()
        named = {chat(port, [{"role": "user", "content": "hi"}], {"X-Session-Id": "s-7"})
                 for _ in range(4)}  # fmt: skip
        assert len(named) == 1
        assert set(homes.values()) == {"lab1", "lab2", "lab3"}, homes
        gone = homes[0]
        admin(sock, f"set server qwen3-vl/{gone} state drain")
        assert wait_for(lambda: states(sock)[gone] == "DRAIN")
        moved = {}
        for i in range(12):
            first = f"conversation {i}: what is in the report?"
            if i % 3 == 1:
                first = [image, {"type": "text", "text": f"conversation {i}: describe it"}]
            (moved[i],) = set(conversation(port, first, 2, system=i % 2 == 0))
        assert gone not in moved.values()
        assert all(moved[i] == homes[i] for i in homes if homes[i] != gone), (homes, moved)
        admin(sock, f"set server qwen3-vl/{gone} state ready")
        assert wait_for(lambda: states(sock)[gone] == "UP")
        assert conversation(port, "conversation 0: what is in the report?", 1) == [gone]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for server in backends:
            server.shutdown()
