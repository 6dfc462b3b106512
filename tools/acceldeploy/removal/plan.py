"""What `playbooks/remove.yml` takes out of the fleet: one service, one model revision or one
host, decided here from the inventory before any host changes.

A service's files are found by name (its unit, the node units a group adds, launcher, secrets,
rollback copies, state directory), so a service already dropped from the inventory goes too.
Model revisions and environments are only candidates: on the host, acceldeploy_prune keeps
any a remaining launcher or process names. Refusals come first and change nothing: a host
that is a node of a group which stays, a seed other hosts' weights come from, a revision a
service of the inventory serves.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.host.state.drift import RECORD_DIR
from acceldeploy.inventory import bounds
from acceldeploy.inventory.roledefaults import value
from acceldeploy.inventory.scope import Scope
from acceldeploy.modelref import model_dir, parse_model_ref
from acceldeploy.monitor.targets import VIEW_KEYS
from acceldeploy.roles import host_leaves
from acceldeploy.runtimes.python_env import STAGING_KEY_CHARS, build_dir, env_prefix
from acceldeploy.serving.backends import BACKENDS
from acceldeploy.serving.hostplan import DEFAULT_MODELS_ROOT, ENV_KEYS
from acceldeploy.serving.layout import UnitLayout, state_dir
from acceldeploy.serving.service import NAME_RE

CHOICES = {
    "service": "acceldeploy_remove_service",
    "model": "acceldeploy_remove_model",
    "host": "acceldeploy_remove_host",
}
# A service already taken out of the inventory: looked for on every serving host.
DROPPED = "acceldeploy_remove_dropped"
NODE_PREFIXES = ("", *(backend.unit_prefix for backend in BACKENDS.values()))
# The variables the plan reads from each host (a role's default where the inventory is silent):
# its own, and what the roles' contracts read to say what they left on the host.
HOST_VARS = tuple(dict.fromkeys((
    "acceldeploy_platform",
    "acceldeploy_services",
    "acceldeploy_models_root",
    *(f"python_env_{key}" for key in ENV_KEYS),
    "vllm_service_launcher_dir",
    "vllm_service_secret_dir",
    "vllm_service_last_good_dir",
    "model_weights_venv",
    "model_weights_host_wheels",
    "model_weights_strategy",
    "model_weights_seed_host",
    "model_weights_shared_storage",
    "monitor_libexec_dir",
    *VIEW_KEYS,
)))  # fmt: skip
EXAMPLE = "-e acceldeploy_remove_service=qwen3-vl"


@dataclass(frozen=True)
class HostRemoval:
    """One host's part: units stopped, disabled and deleted; files and directories deleted;
    model revisions and environment builds pruned unless still in use; records dropped."""

    units: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    envs: list[str] = field(default_factory=list)
    env_links: list[str] = field(default_factory=list)
    in_use_files: list[str] = field(default_factory=list)
    records: list[str] = field(default_factory=list)
    whole_host: bool = False


@dataclass(frozen=True)
class Removal:
    kind: str
    target: str
    hosts: dict[str, HostRemoval]
    # {serving host: its acceldeploy_services once the removal is done}, removed hosts left out
    remaining: dict[str, list[dict[str, Any]]]
    removed_hosts: list[str]
    # model kind on shared storage: one host deletes what every host sees
    shared_once: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _flag(name: str, given: Any) -> bool:
    """A true/false extra variable; unset is false."""
    return False if given in (None, "") else bounds.flag(given, name)


def choose(values: Mapping[str, Any]) -> tuple[str, str]:
    """{kind: the variable's value} -> (kind, target): exactly one of them set."""
    chosen = [(kind, str(v).strip()) for kind, v in values.items() if v and str(v).strip()]
    if len(chosen) != 1:
        names = ", ".join(CHOICES.values())
        raise AcceldeployError(
            f"set exactly one of {names} (for example {EXAMPLE}); "
            f"got {', '.join(CHOICES[k] for k, _ in chosen) or 'none'}"
        )
    return chosen[0]


def _services(view: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(s) for s in view.get("acceldeploy_services") or [] if isinstance(s, Mapping)]


def _models_root(view: Mapping[str, Any]) -> str:
    return str(view.get("acceldeploy_models_root") or DEFAULT_MODELS_ROOT)


def _model_path(view: Mapping[str, Any], service: Mapping[str, Any], host: str) -> str:
    ref = parse_model_ref(service, f"{host}: acceldeploy_services[{service.get('name')}]")
    return model_dir(_models_root(view), ref.model, ref.revision)


def _service_files(view: Mapping[str, Any], name: str) -> tuple[list[str], list[str], list[str]]:
    """(units, files, dirs) a service named ``name`` may have on a host."""
    layout = _layout(view)
    units, files = [], []
    for unit in (prefix + name for prefix in NODE_PREFIXES):
        units.append(f"{unit}.service")
        files += layout.files(unit)
    return units, files, [state_dir(name)]


def _layout(view: Mapping[str, Any]) -> UnitLayout:
    return UnitLayout(
        launcher_dir=value(view, "vllm_service_launcher_dir"),
        secret_dir=value(view, "vllm_service_secret_dir"),
        last_good_dir=value(view, "vllm_service_last_good_dir"),
    )


def _scope(host: str, view: Mapping[str, Any]) -> Scope:
    """The host's variables as its roles see them: the inventory's, else the role's default."""

    def read(name: str) -> Any:
        return view[name] if name in view else value(view, name)

    return Scope(host, read, {host: view}, {})


def _in_use_files(view: Mapping[str, Any]) -> list[str]:
    return _layout(view).launch_globs()


def _env(view: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(the build patterns, the stable path) of the host's serving environment; none in a
    container (the image stays)."""
    options = {key: value(view, f"python_env_{key}") for key in ENV_KEYS}
    options["platform"] = view.get("acceldeploy_platform") or ""
    env = env_prefix(options)
    if env is None:
        return [], []
    return [build_dir(env, "?" * STAGING_KEY_CHARS), f"{env.rstrip('/')}-in-place"], [env]


def _record(role: str) -> str:
    return f"{RECORD_DIR}/{role}.json"


@dataclass
class _Fleet:
    views: dict[str, dict[str, Any]]
    seeds: set[str]  # model_weights_seed_host of the hosts whose strategy is seed
    shared: bool  # model_weights_shared_storage

    def uses(self, host: str, path: str, remaining: Mapping[str, list[dict[str, Any]]]) -> bool:
        """A remaining service needs ``path`` on ``host``: one of its own, or (the seed)
        another host's, whose weights come from it."""
        others = remaining if host in self.seeds else {host: remaining.get(host, [])}
        return any(_model_path(self.views[h], s, h) == path for h, ss in others.items() for s in ss)

    def host_removal(
        self, host: str, names: list[str], models: list[str],
        remaining: Mapping[str, list[dict[str, Any]]], whole: bool = False,
    ) -> HostRemoval:  # fmt: skip
        view = self.views[host]
        units: list[str] = []
        files: list[str] = []
        dirs: list[str] = []
        for name in names:
            u, f, d = _service_files(view, name)
            units, files, dirs = units + u, files + f, dirs + d
        candidates = [] if self.shared else [m for m in models if not self.uses(host, m, remaining)]
        envs, links = _env(view) if not remaining.get(host) else ([], [])
        records = [_record("vllm_service")]
        records += [_record("model_weights")] if candidates else []
        records += [_record("python_env")] if envs else []
        if whole:  # and what every role left on the host
            left = host_leaves(_scope(host, view))
            units, files, dirs = units + left["units"], files + left["files"], dirs + left["trees"]
            records = [RECORD_DIR]
        return HostRemoval(
            units=units, files=files, dirs=dirs, models=sorted(set(candidates)), envs=envs,
            env_links=links, in_use_files=_in_use_files(view), records=records, whole_host=whole,
        )  # fmt: skip


def _remove_service(fleet: _Fleet, name: str, dropped: bool) -> Removal:
    if not NAME_RE.match(name):
        raise AcceldeployError(
            f"acceldeploy_remove_service: {name!r} is no service name (lowercase letters, "
            "digits, dots, dashes and underscores)"
        )
    listed = [h for h, v in fleet.views.items() if any(s.get("name") == name for s in _services(v))]
    if not listed and not dropped:
        known = sorted({str(s.get("name")) for v in fleet.views.values() for s in _services(v)})
        close = difflib.get_close_matches(name, known, n=1)
        raise AcceldeployError(
            f"acceldeploy_remove_service: no host of the inventory runs {name!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; its services: {', '.join(known) or 'none'}. If you took {name} out of the "
            f"inventory already, add -e {DROPPED}=true to look for it on every serving host "
            f"({', '.join(fleet.views) or 'none'})"
        )
    hosts = listed or list(fleet.views)
    remaining = {
        h: [s for s in _services(v) if s.get("name") != name] for h, v in fleet.views.items()
    }
    plans = {}
    for host in hosts:
        view = fleet.views[host]
        gone = [s for s in _services(view) if s.get("name") == name]
        plans[host] = fleet.host_removal(
            host, [name], [_model_path(view, s, host) for s in gone], remaining
        )
    return Removal("service", name, plans, remaining, [])


def _remove_model(fleet: _Fleet, target: str) -> Removal:
    model, _, revision = target.partition("@")
    where = "acceldeploy_remove_model"
    ref = parse_model_ref({"model": model, "revision": revision or None}, where)
    for host, view in fleet.views.items():
        path = model_dir(_models_root(view), ref.model, ref.revision)
        for service in _services(view):
            if _model_path(view, service, host) == path:
                raise AcceldeployError(
                    f"{where}: service {service.get('name')} on {host} serves {path}: remove the "
                    f"service first (-e acceldeploy_remove_service={service.get('name')}) or "
                    "move it to another revision"
                )
    remaining = {h: _services(v) for h, v in fleet.views.items()}
    plans = {
        host: HostRemoval(
            models=[model_dir(_models_root(view), ref.model, ref.revision)],
            in_use_files=_in_use_files(view),
            records=[_record("model_weights")],
        )
        for host, view in fleet.views.items()
    }
    if fleet.shared:  # the same directory on every host: the first one removes it
        plans = dict(list(plans.items())[:1])
    return Removal("model", ref.dirname, plans, remaining, [], shared_once=fleet.shared)


def _remove_host(fleet: _Fleet, host: str, others: Mapping[str, str]) -> Removal:
    where = "acceldeploy_remove_host"
    if host in others:
        raise AcceldeployError(
            f"{where}: {host} is in the {others[host]} group; remove.yml takes serving hosts out "
            f"(take {host} out of {others[host]} in the inventory and rerun site.yml)"
        )
    if host not in fleet.views:
        raise AcceldeployError(
            f"{where}: {host} is not a host of the inventory ({', '.join(fleet.views) or 'none'})"
        )
    for other, view in fleet.views.items():
        for service in _services(view):
            nodes = [str(n) for n in service.get("nodes") or []]
            if other != host and host in nodes:
                raise AcceldeployError(
                    f"{where}: {host} is a node of service {service.get('name')} (nodes "
                    f"{', '.join(nodes)}): remove the service first "
                    f"(-e acceldeploy_remove_service={service.get('name')})"
                )
    remaining = {h: _services(v) for h, v in fleet.views.items() if h != host}
    if host in fleet.seeds and not fleet.shared and any(remaining.values()):
        raise AcceldeployError(
            f"{where}: {host} is model_weights_seed_host, the hosts that stay get their weights "
            "from it: set model_weights_seed_host to one of them first"
        )
    view = fleet.views[host]
    services = _services(view)
    plan = fleet.host_removal(
        host, [str(s.get("name")) for s in services],
        [_model_path(view, s, host) for s in services], {**remaining, host: []}, whole=True,
    )  # fmt: skip
    return Removal("host", host, {host: plan}, remaining, [host])


def _seed(view: Mapping[str, Any]) -> str:
    if value(view, "model_weights_strategy") != "seed":
        return ""
    return str(value(view, "model_weights_seed_host") or "")


def plan(
    choice: Mapping[str, Any], views: Mapping[str, Mapping[str, Any]], others: Mapping[str, str]
) -> Removal:
    """choice: {service|model|host: the variable's value}; views: {serving host: its
    HOST_VARS}; others: {gateway or monitor host: its group}."""
    choice = dict(choice)
    dropped = _flag(DROPPED, choice.pop("dropped", False))
    kind, target = choose(choice)
    if dropped and kind != "service":
        raise AcceldeployError(f"{DROPPED} goes with acceldeploy_remove_service only")
    hosts = {str(h): dict(v) for h, v in views.items()}
    fleet = _Fleet(
        views=hosts,
        seeds={_seed(v) for v in hosts.values()} - {""},
        shared=any(bool(value(v, "model_weights_shared_storage")) for v in hosts.values()),
    )
    if kind == "service":
        return _remove_service(fleet, target, dropped)
    if kind == "model":
        return _remove_model(fleet, target)
    return _remove_host(fleet, target, others)
