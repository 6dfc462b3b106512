"""The headless rank of a data-parallel service (backend mp): `dp-<service>` on every node of the
group but the head.

It runs the same engine as the head, with `--headless --data-parallel-start-rank <rank>`: no
API server, so no /health, no readiness probe and no drain of its own. Its engine dials the
head's data-parallel RPC port at start and waits there for the head (vLLM's handshake), so it
may start before or after the head; the head's API server answers /health only once every rank
has joined, which is the group's readiness gate (the head's unit, unit.py).
"""

from __future__ import annotations

import dataclasses

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.platforms import HostPlatform
from acceldeploy.serving import cluster, layout, render
from acceldeploy.serving.launchers import launcher_for
from acceldeploy.serving.service import Service
from acceldeploy.serving.unit import READY_PYTHON, ServiceUnit, build
from acceldeploy.serving.values import HostContext, UnitOptions

# Seconds between its checks, and checks in a row that found the group broken: a node whose
# peer vanished, or a rank whose head went away, is ended within ~15-25 s.
WATCH_INTERVAL, WATCH_MISSES = 5, 3


def build_node(
    service: Service,
    platform: HostPlatform,
    context: HostContext,
    options: UnitOptions | None = None,
) -> ServiceUnit:
    if (
        not service.backend
        or not service.backend.headless
        or not cluster.runs_node_unit(service, context.host)
    ):
        raise AcceldeployError(
            f"{service.where}: only a node of a backend mp or nnodes service other than its head "
            f"({service.nodes[0] if service.nodes else 'none'}) runs a headless rank"
        )
    where = render.node_place(service, context)
    name = cluster.node_unit_name(service)
    served = render.render_service(service, platform, context)
    launch = dataclasses.replace(served, name=name, secret_env=[])
    opts = options or UnitOptions()
    unit = build(launch, platform, context.models_root, opts)
    directives = {
        **unit.directives,
        "description": f"vLLM {service.name}: {service.backend.part} {where.rank} (headless) of "
        f"the group headed by {service.nodes[0]} ({where.head_address})",
        "exec_start_post": [],  # no API server: nothing to probe
        "exec_stop": [],  # nothing to drain: the head's API server holds the requests
    }
    return dataclasses.replace(
        unit,
        directives=directives,
        health_url="",
        base_url="",
        before_exec=watch(where, platform, opts),
    )


def watch(
    where: cluster.Place, platform: HostPlatform, opts: UnitOptions | None = None
) -> list[str]:
    """The launcher's background watch of its node (tools/acceldeploy/host/helpers/vllm-dp-watch),
    on the head and on every headless node: a node whose peer vanished (no answer to a dial)
    ends its server, and so does a rank whose head restarted (its connection gone); systemd
    starts them again and the group forms anew. The launcher decides whether it can watch
    (launchers.py before_exec)."""
    helper = (opts or UnitOptions()).layout.helper(layout.WATCH)
    peers = " ".join(ip for host, ip in where.ips.items() if host != where.host)
    head = "" if where.is_head else f" --head {where.head_ip}"
    line = (
        f"{READY_PYTHON} {helper} $$ {WATCH_INTERVAL} {WATCH_MISSES} {peers}{head} "
        f"--bind {where.ip} &"
    )
    return launcher_for(platform).before_exec([line])
