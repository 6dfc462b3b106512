"""The Ray node unit of a multi-node service: `ray-<service>` on every node of the group.

The head runs `ray start --head`, the others `ray start --address=<head>`; each stays in the
foreground (`--block`) under systemd, which restarts it, so a worker that starts before its
head keeps trying until it joins. Ray's session files live in the service's state directory
(shared with the vLLM unit on the head, which connects to the cluster as a driver). The vLLM
unit on the head requires this unit and, before vLLM starts, waits until the cluster holds
every node with the devices the layout needs (`ray-wait`, unit.py).
"""

from __future__ import annotations

import dataclasses

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.platforms import HostPlatform
from acceldeploy.serving import backends, cluster, render
from acceldeploy.serving.launchers import launcher_for
from acceldeploy.serving.layout import UnitLayout, cache_dir, state_dir
from acceldeploy.serving.service import Service
from acceldeploy.serving.unit import ServiceUnit, env_value
from acceldeploy.serving.values import HostContext, UnitOptions

RAY_TEMP = "ray"  # under the service's state directory: short enough for Ray's socket paths
TEMPLATE = "ray-node.service.j2"  # beside vllm.service.j2 (unit.TEMPLATES)


def ray_temp_dir(service_name: str) -> str:
    return f"{state_dir(service_name)}/{RAY_TEMP}"


def ray_command(platform: HostPlatform, context: HostContext) -> str:
    return launcher_for(platform).ray_command(context.env_prefix)


def ray_argv(service: Service, platform: HostPlatform, context: HostContext) -> list[str]:
    where = render.node_place(service, context)
    metrics = backends.RAY.node_metrics_port(service.cluster_port)
    argv = [ray_command(platform, context), "start", "--block", "--disable-usage-stats",
            f"--node-ip-address={where.ip}", f"--metrics-export-port={metrics}"]  # fmt: skip
    if where.is_head:
        argv += ["--head", f"--port={service.cluster_port}", "--include-dashboard=false",
                 f"--temp-dir={ray_temp_dir(service.name)}"]  # fmt: skip
    else:
        argv.append(f"--address={where.head_address}")
    return argv


def build_node(
    service: Service,
    platform: HostPlatform,
    context: HostContext,
    options: UnitOptions | None = None,
) -> ServiceUnit:
    if not service.nodes:
        raise AcceldeployError(f"{service.where}: only a service with nodes has a Ray node unit")
    opts = options or UnitOptions()
    where = render.node_place(service, context)
    name = cluster.node_unit_name(service)
    state, cache = state_dir(service.name), cache_dir(service.name)
    # Ray's workers (vLLM's model ranks on this node) inherit the node's environment: the
    # server's own, as rendered on this node, without the driver's RAY_ADDRESS.
    served = render.render_service(service, platform, context)
    env = {"HOME": state, "XDG_CACHE_HOME": cache, **served.env}
    env = dict(sorted((k, v) for k, v in env.items() if k != "RAY_ADDRESS"))
    argv = ray_argv(service, platform, context)
    # the served launch, as Ray's: its devices, env scripts and the node's place in the group
    launch = dataclasses.replace(
        served, name=name, argv=argv, env=env, secret_env=[], port=service.cluster_port,
        host=where.ip, max_model_len=0, kv={},
    )  # fmt: skip
    launcher = launcher_for(platform)
    exec_argv = launcher.ray_exec_argv(launch, opts, context.models_root, state, cache)
    groups = opts.groups if opts.groups is not None else platform.groups
    role = "head" if where.is_head else "worker"
    # The values of ray-node.service.j2's directives (roles/vllm_service/templates/).
    directives = {
        "description": f"Ray {role} node of {service.name} ({where.ip}, cluster "
                       f"{where.head_address})",
        "user": opts.user,
        "supplementary_groups": " ".join(groups),
        "environment": [env_value(k, v) for k, v in env.items()],
        "working_directory": state,
        "state_directory": state.removeprefix("/var/lib/"),
        "cache_directory": cache.removeprefix("/var/cache/"),
        "exec_start": opts.layout.launcher(name),
        "restart_sec": opts.restart_sec,
        **launcher.hardening(launch),
    }  # fmt: skip
    return ServiceUnit(
        name=name,
        platform=platform.name,
        unit_path=UnitLayout.unit(name),
        launcher_path=opts.layout.launcher(name),
        ready_path="",
        secret_path=None,
        state_dir=state,
        cache_dir=cache,
        argv=argv,
        env=env,
        secret_env=[],
        groups=list(groups),
        exec_argv=exec_argv,
        env_scripts=list(launcher.host_env_scripts()),
        template=TEMPLATE,
        directives=directives,
        start_timeout=0,
        health_url="",
        base_url="",
        argcheck=None,
        argcheck_python=None,
        launch=launch.to_dict(),
    )
