"""Runs the checks for every host of an inventory in parallel, over SSH (fabric)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway.plan import is_gateway
from acceldeploy.inventory import groups
from acceldeploy.monitor.targets import is_monitor
from acceldeploy.serving import selection
from acceldeploy.serving.hostplan import HostPlan, host_plan
from acceldeploy.serving.render import model_arch
from acceldeploy.serving.service import Service
from acceldeploy.serving.unit import cluster_check_argv
from acceldeploy.serving.values import Launch
from acceldeploy.verify import api, hoststate, memprobe
from acceldeploy.verify.gateway import check_gateway
from acceldeploy.verify.model import Check
from acceldeploy.verify.monitor import check_monitor
from acceldeploy.verify.remote import reach, tunnel


@dataclass(frozen=True)
class Options:
    timeout: float = 60.0
    mm_leak_probe: int = 0
    mm_leak_threshold_mib: float = 512.0
    # host -> the stack to check it against instead of its inventory's (what a run with
    # `-e acceldeploy_stack=...` deployed: site.yml's verify stage passes it)
    stacks: Mapping[str, str] = field(default_factory=dict)


def takes_images(service: Service) -> bool:
    if service.limit_mm_per_prompt is not None:
        return service.limit_mm_per_prompt.get("image", 0) > 0
    return model_arch(service).is_multimodal


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
    conn, reached = reach(hostname, hv, options.timeout)
    checks = [reached]
    if conn is None:
        return checks
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
    """Every selected host: a gateway's HAProxy (verify/gateway.py), a monitor's Prometheus
    (verify/monitor.py), and the services of a host that serves (one of those too, when it
    sets acceldeploy_serves)."""
    every = selection.every_host(inventory)
    for host, stack in options.stacks.items():
        if host not in every:
            raise AcceldeployError(f"--stack {host}={stack}: {host} is not in {inventory}")
        every[host] = {**every[host], "acceldeploy_stack": stack}
    found = selection.limited(inventory, limit, every)

    def one(host: str, hv: dict[str, Any]) -> list[Check]:
        checks = check_gateway(host, hv, every, options.timeout) if is_gateway(hv) else []
        if is_monitor(hv):
            checks += check_monitor(host, hv, every, options.timeout)
        return checks + (check_host(host, hv, options) if groups.serves(hv) else [])

    with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
        results = pool.map(lambda item: one(*item), found.items())
    return [check for host_checks in results for check in host_checks]
