"""Runs the checks for every host of an inventory in parallel, over SSH (fabric)."""

from __future__ import annotations

import json
import shlex
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.serving import selection
from acceldeploy.serving.hostplan import HostPlan, host_plan
from acceldeploy.serving.render import Launch, model_arch
from acceldeploy.serving.service import Service
from acceldeploy.serving.unit import cluster_check_argv
from acceldeploy.verify import api, hoststate, memprobe
from acceldeploy.verify.model import Check


@dataclass(frozen=True)
class Options:
    timeout: float = 60.0
    mm_leak_probe: int = 0
    mm_leak_threshold_mib: float = 512.0


def takes_images(service: Service) -> bool:
    if service.limit_mm_per_prompt is not None:
        return service.limit_mm_per_prompt.get("image", 0) > 0
    return model_arch(service).is_multimodal


def connection(hostname: str, hv: dict[str, Any], timeout: float) -> Any:
    from fabric import Connection

    key = hv.get("ansible_ssh_private_key_file")
    args: dict[str, Any] = {"banner_timeout": timeout, "auth_timeout": timeout}
    if key:
        args["key_filename"] = str(key)
    conn = Connection(
        host=str(hv.get("ansible_host", hostname)),
        port=int(hv.get("ansible_port", 22)),
        user=str(hv.get("ansible_user", "root")),
        connect_kwargs=args,
        connect_timeout=timeout,
    )
    _host_key_policy(conn.client, str(hv.get("ansible_ssh_common_args", "")))
    return conn


def _host_key_policy(client: Any, ssh_args: str) -> None:
    """The inventory's choice: known_hosts checked unless it turns StrictHostKeyChecking off
    (the lab's throwaway hosts do); verify never writes known_hosts."""
    import paramiko

    if "StrictHostKeyChecking=no" in ssh_args.replace(" ", ""):
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    else:
        client.load_system_host_keys()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def tunnel(conn: Any, launch: Launch) -> Iterator[str]:
    local = free_port()
    remote_host = "127.0.0.1" if launch.host in ("0.0.0.0", "::", "localhost") else launch.host
    with conn.forward_local(local_port=local, remote_port=launch.port, remote_host=remote_host):
        _wait_listening(local)
        yield f"http://127.0.0.1:{local}"


def _wait_listening(port: int, timeout: float = 5.0) -> None:
    """fabric starts the tunnel's listener in a thread: wait until it accepts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)


def collect(
    conn: Any, units: list[str], files: hoststate.TunedFiles, timeout: float
) -> dict[str, Any]:
    command = hoststate.remote_command(units, files)
    result = conn.run(command, hide=True, warn=True, timeout=timeout)
    if result.exited != 0:
        raise AcceldeployError(f"collecting facts failed: {result.stderr.strip()[-300:]}")
    facts: dict[str, Any] = json.loads(result.stdout)
    return facts


def check_host(hostname: str, hv: dict[str, Any], options: Options) -> list[Check]:
    try:
        plan = host_plan(hv)
        launches = plan.launches()
        files = hoststate.TunedFiles.from_hostvars(hv)
    except AcceldeployError as exc:
        return [Check(hostname, "inventory", "fail", str(exc), "fix the inventory")]
    platform = plan.platform.name
    services = {s.name: s for s in plan.services}
    try:
        conn = connection(hostname, hv, options.timeout)
        conn.open()
    except Exception as exc:
        return [
            Check(
                hostname,
                "ssh",
                "fail",
                f"unreachable: {type(exc).__name__}: {exc}",
                "check the host is up and the inventory's ansible_host/port/user/key",
            )
        ]
    checks = [Check(hostname, "ssh", "pass", f"{conn.user}@{conn.host}:{conn.port}")]
    nodes = plan.node_units()
    try:
        units = [x.name for x in launches] + [n.name for n in nodes]
        facts = collect(conn, units, files, options.timeout)
        checks += hoststate.judge_host(hostname, facts)
        # every service's devices here, a group's ranks on a worker node too
        checks += hoststate.judge_devices(hostname, platform, facts.get("smi", {}), plan.services)
        for node in nodes:  # this host's Ray node of each multi-node service
            checks += hoststate.judge_unit(hostname, node.name, facts["units"].get(node.name, {}))
        for launch in launches:
            props = facts["units"].get(launch.name, {})
            unit_checks = hoststate.judge_unit(hostname, launch.name, props)
            checks += unit_checks
            if unit_checks[0].status != "pass":
                continue
            if launch.ray_unit:
                checks.append(check_cluster(conn, plan, launch, options.timeout))
            spec = services[launch.name]
            with tunnel(conn, launch) as base:
                target = api.Target(
                    host=hostname,
                    service=launch.name,
                    base=base,
                    expect_version=plan.platform.vllm_version,
                    multimodal=takes_images(spec),
                    dev_mode=launch.env.get("VLLM_SERVER_DEV_MODE") == "1",
                    api_key=spec.api_key,
                    timeout=options.timeout,
                )
                checks += api.check_api(target)
                if options.mm_leak_probe and target.multimodal:
                    checks.append(memprobe.probe(conn, target, launch, options))
    except Exception as exc:
        checks.append(
            Check(
                hostname,
                "checks",
                "fail",
                f"{type(exc).__name__}: {exc}",
                "see the detail; re-run with --limit this host",
            )
        )
    finally:
        conn.close()
    return checks


def check_cluster(conn: Any, plan: HostPlan, launch: Launch, timeout: float) -> Check:
    """On a group's head: the Ray cluster holds every node with the devices its ranks need
    (ray-wait's one look, as the service user); a missing node is named with its fix."""
    argv = cluster_check_argv(launch, plan.platform, plan.unit_options)
    command = shlex.join(["runuser", "-u", plan.unit_options.user, "--", *argv])
    result = conn.run(command, hide=True, warn=True, timeout=timeout)
    said = (result.stdout + result.stderr).strip().splitlines()
    last = said[-1] if said else f"exit {result.exited}"
    if result.exited == 0:
        return Check(plan.context.host, "cluster", "pass", last, service=launch.name)
    return Check(plan.context.host, "cluster", "fail", last,
                 f"on the node named: systemctl status {launch.ray_unit}; journalctl -u "
                 f"{launch.ray_unit}", launch.name)  # fmt: skip


def run(inventory: str, limit: str, options: Options) -> list[Check]:
    found = selection.limited(inventory, limit)
    with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
        results = pool.map(lambda item: check_host(item[0], item[1], options), found.items())
    return [check for host_checks in results for check in host_checks]
