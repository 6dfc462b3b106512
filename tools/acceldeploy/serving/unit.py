"""The systemd unit and launcher of a service: the one place that decides their values.

`build(launch, platform, options)` turns a rendered Launch (render.py) into a ServiceUnit:
the values of the unit's directives, the launcher (sources the platform's env scripts, then
`exec`s vLLM, or on Gaudi `docker run`s the Habana container around the same argv), the
secrets file, the readiness URLs and the command that checks the argv with the pinned vLLM's
own parser. The role's templates (roles/vllm_service/templates/) read like the files they
write: each section and directive by name, the values from here. Ansible (roles/vllm_service)
and `plan.py render --unit` render the same templates (`render_files`).
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
from dataclasses import dataclass
from typing import Any

from acceldeploy.data_files import DATA_DIR
from acceldeploy.errors import AcceldeployError
from acceldeploy.planner.platforms import HostPlatform
from acceldeploy.planner.stacks import DEFAULT_METRICS
from acceldeploy.serving import layout
from acceldeploy.serving.launchers import launcher_for
from acceldeploy.serving.layout import UnitLayout, cache_dir, state_dir
from acceldeploy.serving.values import Launch, UnitOptions

# The vllm_service role's templates, kept in the package (roles/vllm_service/templates/ holds
# symlinks to them): the role renders them on the controller, and `plan.py render --unit`
# here, the same files.
TEMPLATES = DATA_DIR / "vllm_service" / "templates"
UNIT_TEMPLATE = "vllm.service.j2"
LAUNCHER_TEMPLATE = "vllm-launcher.sh.j2"
HEADER = "Managed by acceldeploy (roles/vllm_service); `tools/plan.py render --unit` prints it"

WILDCARD = ("0.0.0.0", "::", "")
READY_PYTHON = "/usr/bin/python3"
# The series vllm-drain sums to count the requests in flight (stack roles, DEFAULT_METRICS).
DRAIN_SERIES = ("running", "waiting")


@dataclass(frozen=True)
class ServiceUnit:
    name: str
    platform: str
    unit_path: str
    launcher_path: str
    ready_path: str
    secret_path: str | None
    state_dir: str
    cache_dir: str
    argv: list[str]  # vLLM's argv (inside the container on Gaudi)
    env: dict[str, str]
    secret_env: list[str]
    groups: list[str]
    exec_argv: list[str]  # what the launcher execs
    env_scripts: list[str]
    template: str  # the unit's template (roles/vllm_service/templates/)
    directives: dict[str, Any]  # the values the template prints
    start_timeout: int
    health_url: str
    base_url: str
    argcheck: list[str] | None  # argv of the vLLM parser check, None where it cannot run
    argcheck_python: str | None
    launch: dict[str, Any]
    # Commands the launcher runs before it execs the server (a headless rank's watch, dpnode.py).
    before_exec: list[str] = dataclasses.field(default_factory=list)
    # A group's readiness gate on this node (cluster.gate_spec), on the group's first unit here.
    readiness: dict[str, Any] | None = None
    # Prompts of the serving gate's one completion request: two per engine behind the API
    # server, so that each engine's first forward pass (~14 s on the lab, per engine) is done
    # before the gateway sends it traffic.
    gate_prompts: int = 1

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["launcher"] = launcher_context(self)
        data["header"] = HEADER
        return data


def _url_host(host: str) -> str:
    if host in WILDCARD:
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def env_value(key: str, value: str) -> str:
    """One Environment= assignment, quoted for systemd (specifiers and quotes escaped)."""
    if "\n" in value or "\n" in key:
        raise AcceldeployError(f"env {key}: a value cannot contain a newline")
    text = f"{key}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{text}"'


@dataclass(frozen=True)
class _Place:
    """Where one service's files and state live, and how long it may take to start."""

    name: str
    state_dir: str
    cache_dir: str
    launcher_path: str
    ready_path: str
    drain_path: str
    ray_wait_path: str
    secret_path: str | None
    base_url: str
    timeout: int
    groups: tuple[str, ...]

    @classmethod
    def of(cls, launch: Launch, platform: HostPlatform, opts: UnitOptions) -> _Place:
        name, files = launch.name, opts.layout
        return cls(
            name=name,
            state_dir=state_dir(name),
            cache_dir=cache_dir(name),
            launcher_path=files.launcher(name),
            ready_path=files.helper(layout.READY),
            drain_path=files.helper(layout.DRAIN),
            ray_wait_path=files.helper(layout.RAY_WAIT),
            secret_path=files.secrets(name) if launch.secret_env else None,
            base_url=f"http://{_url_host(launch.host)}:{launch.port}",
            timeout=opts.start_timeout or platform.start_timeout,
            groups=opts.groups if opts.groups is not None else platform.groups,
        )


def cluster_check_argv(launch: Launch, platform: HostPlatform, opts: UnitOptions) -> list[str]:
    """The head's ray-wait with one look (timeout 0): exit 0 when the cluster holds every
    node with its devices, else 1 naming the missing node (tools/verify.py runs it)."""
    place = _Place.of(launch, platform, opts)
    return ray_wait_argv(launch, platform, place, opts, timeout=0)


def ray_wait_argv(
    launch: Launch,
    platform: HostPlatform,
    place: _Place,
    opts: UnitOptions,
    timeout: int | None = None,
) -> list[str]:
    """`ray-wait`: until the group's cluster holds every node, each with the devices its
    ranks need (the platform's Ray resource), or the start timeout; it names a missing node."""
    per_node = max(len(launch.devices), 1)
    wait_for = max(60, place.timeout // 4) if timeout is None else timeout
    wait = [place.ray_wait_path, str(launch.cluster_address), str(wait_for),
            str(launch.ray_unit), f"{platform.ray_resource}={per_node}",
            *(f"{host}={ip}" for host, ip in launch.nodes.items())]  # fmt: skip
    helpers = posixpath.dirname(place.ray_wait_path)
    return [*launcher_for(platform).ray_wait_prefix(launch, opts, helpers, place.state_dir), *wait]


def _directives(
    launch: Launch,
    platform: HostPlatform,
    place: _Place,
    env: dict[str, str],
    opts: UnitOptions,
) -> dict[str, Any]:
    """The values of the unit's directives (vllm.service.j2 names each directive): a list for
    a directive given several times, "" or [] for one the unit leaves out."""
    launcher = launcher_for(platform)
    start_pre = launcher.cleanup(launch.name)
    if launch.ray_unit:
        start_pre.append(shlex.join(ray_wait_argv(launch, platform, place, opts)))
    ready = f"{READY_PYTHON} {place.ready_path} {place.base_url}/health {place.timeout}"
    drain = f"{READY_PYTHON} {place.drain_path} {place.base_url} {opts.drain_timeout}"
    in_flight = [platform.metrics.get(role, DEFAULT_METRICS[role]) for role in DRAIN_SERIES]
    if in_flight != [DEFAULT_METRICS[role] for role in DRAIN_SERIES]:
        # vllm-drain's own defaults are vLLM's names: only another stack's names are passed
        drain = " ".join([drain, *map(shlex.quote, in_flight)])
    numa = launcher.unit_numa(launch, opts.topology)
    return {
        "description": f"vLLM {launch.name}: {launch.model_path} ({launch.platform}) on "
                       f"{launch.host}:{launch.port}",
        "ray_unit": f"{launch.ray_unit}.service" if launch.ray_unit else "",
        "start_limit_interval_sec": opts.start_limit_burst * (place.timeout + opts.restart_sec),
        "start_limit_burst": opts.start_limit_burst,
        "user": opts.user,
        "supplementary_groups": " ".join(place.groups),
        "environment": [env_value(k, v) for k, v in env.items()],
        "environment_file": place.secret_path or "",
        "working_directory": place.state_dir,
        "state_directory": place.state_dir.removeprefix("/var/lib/"),
        "cache_directory": place.cache_dir.removeprefix("/var/cache/"),
        "exec_start_pre": start_pre,
        "exec_start": place.launcher_path,
        "exec_start_post": [ready, *([f"-+{opts.ready_hook}"] if opts.ready_hook else [])],
        "exec_stop": [*([f"-+{opts.drain_hook}"] if opts.drain_hook else []),
                      *([drain] if opts.drain_timeout else [])],
        "exec_stop_post": launcher.cleanup(launch.name),
        "timeout_start_sec": place.timeout,
        "timeout_stop_sec": 60 + opts.drain_timeout,
        "restart_sec": opts.restart_sec,
        "cpu_affinity": numa[0] if numa else "",
        "numa_mask": numa[1] if numa else "",
        **launcher.hardening(launch, opts.allow_from),
    }  # fmt: skip


def build(
    launch: Launch, platform: HostPlatform, models_root: str, options: UnitOptions | None = None
) -> ServiceUnit:
    opts = options or UnitOptions()
    place = _Place.of(launch, platform, opts)
    env = dict(sorted({"HOME": place.state_dir, "XDG_CACHE_HOME": place.cache_dir,
                       **launch.env}.items()))  # fmt: skip
    if "PYTHONOPTIMIZE" in env:
        raise AcceldeployError(
            f"service {launch.name}: env PYTHONOPTIMIZE is refused (vLLM relies on assert "
            "statements); drop it"
        )
    launcher = launcher_for(platform)
    check = launcher.argcheck(launch)
    return ServiceUnit(
        name=launch.name,
        platform=launch.platform,
        unit_path=UnitLayout.unit(launch.name),
        launcher_path=place.launcher_path,
        ready_path=place.ready_path,
        secret_path=place.secret_path,
        state_dir=place.state_dir,
        cache_dir=place.cache_dir,
        argv=list(launch.argv),
        env=env,
        secret_env=list(launch.secret_env),
        groups=list(place.groups),
        exec_argv=launcher.exec_argv(launch, opts, models_root, place.state_dir, place.cache_dir),
        env_scripts=list(launch.env_scripts),
        template=UNIT_TEMPLATE,
        directives=_directives(launch, platform, place, env, opts),
        start_timeout=place.timeout,
        health_url=f"{place.base_url}/health",
        base_url=place.base_url,
        argcheck=check,
        argcheck_python=None if check is None else check[-4],
        launch=launch.to_dict(),
    )


def launcher_context(unit: ServiceUnit) -> dict[str, Any]:
    """What the launcher template prints: pre-quoted source lines and the exec line, one flag
    (with its value) per line; on Gaudi the image and vLLM's argv start lines of their own."""
    inner = len(unit.exec_argv) - len(unit.argv)
    breaks = {inner - 1, inner} if inner > 0 else set()
    lines: list[str] = []
    current: list[str] = []
    for index, arg in enumerate(unit.exec_argv):
        if current and (index in breaks or arg.startswith("-")):
            lines.append(" ".join(current))
            current = []
        current.append(shlex.quote(arg))
    lines.append(" ".join(current))
    return {
        "sources": [shlex.quote(s) for s in unit.env_scripts],
        "before_exec": list(unit.before_exec),
        "exec_lines": lines,
    }


def _jinja_env() -> Any:
    import jinja2

    # Ansible's template module defaults: trim_blocks, trailing newline kept.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        trim_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )


def render_files(unit: ServiceUnit) -> dict[str, str]:
    """{path on the host: text} of the unit and the launcher, through the role's templates."""
    env = _jinja_env()
    context = {"vllm_service_unit": unit.to_dict()}
    return {
        unit.unit_path: env.get_template(unit.template).render(context),
        unit.launcher_path: env.get_template(LAUNCHER_TEMPLATE).render(context),
    }
