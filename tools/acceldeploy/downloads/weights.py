"""Model weights, the controller's side: which models each host needs, and who fetches what.

``model_specs`` checks one host's services (through acceldeploy.modelref, the one parser of
a service's model keys) and ``fanout`` decides, for every host of the play, what it downloads
from the hub, what it pulls from a seed host and what it only verifies; bad input fails here,
naming the variable, before any host changes. plugins/filter/model_weights_filters.py is the
Ansible side of this module.

The hosts' side (plan, download, verify, publish, seed server) is the ``acceldeploy.host.fetch``
package, which Ansible ships inside the model_weights_fetch module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acceldeploy.host.fetch.common import ModelSpec, WeightsError
from acceldeploy.modelref import label, model_dir, parse_model_ref

STRATEGIES = ("each", "seed")
VERIFY_MODES = ("fast", "full")


def model_specs(
    services: Any, require_revision: bool, var: str = "acceldeploy_services"
) -> list[ModelSpec]:
    """The models one host's services need, one per published directory, checked.

    Two services of a host may share a model: they share its directory, and their
    allow_patterns are joined (no patterns on either means every file).
    """
    if services is None:
        return []
    if not isinstance(services, list):
        raise WeightsError(f"{var} must be a list of services, got {type(services).__name__}")
    by_dir: dict[str, ModelSpec] = {}
    for index, raw in enumerate(services):
        if not isinstance(raw, Mapping):
            raise WeightsError(f"{label(var, index)} must be a mapping, got {raw!r}")
        name = raw.get("name")
        where = label(var, index, name)
        ref = parse_model_ref(raw, where, require_revision)
        spec = ModelSpec(
            ref.model,
            ref.source,
            ref.revision,
            ref.allow_patterns,
            services=(str(name),) if name else (),
        )
        previous = by_dir.get(spec.dirname)
        if previous is not None and previous.source != spec.source:
            raise WeightsError(
                f"{where}: {spec.dirname} is already taken from {previous.source} by "
                f"{', '.join(previous.services)}; one directory has one source"
            )
        by_dir[spec.dirname] = merge(previous, spec)
    return list(by_dir.values())


@dataclass(frozen=True)
class Settings:
    strategy: str
    seed_host: str
    shared_storage: bool
    root: str
    verify: str

    @classmethod
    def check(cls, raw: Mapping[str, Any]) -> Settings:
        strategy = raw.get("strategy", "each")
        if strategy not in STRATEGIES:
            raise WeightsError(
                f"model_weights_strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
            )
        verify = raw.get("verify", "fast")
        if verify not in VERIFY_MODES:
            raise WeightsError(
                f"model_weights_verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}"
            )
        root = raw.get("root", "/models")
        if not isinstance(root, str) or not root.startswith("/") or root.rstrip("/") == "":
            raise WeightsError(
                f"model_weights_root (acceldeploy_models_root) must be an absolute directory "
                f"other than /, got {root!r}"
            )
        shared = raw.get("shared_storage", False)
        if not isinstance(shared, bool):
            raise WeightsError(
                f"model_weights_shared_storage must be true or false, got {shared!r}"
            )
        seed = raw.get("seed_host") or ""
        return cls(
            strategy=str(strategy),
            seed_host=str(seed),
            shared_storage=shared,
            root=root.rstrip("/"),
            verify=str(verify),
        )


def fanout(
    hosts: Mapping[str, Mapping[str, Any]],
    play_hosts: Sequence[str],
    refused: Sequence[str] = (),
    limited_out: Sequence[str] = (),
) -> dict[str, Any]:
    """Who does what, for every host of the play, from each host's specs and settings.

    ``hosts[h]`` has ``specs`` (ModelSpec dicts) and ``settings`` (see Settings.check). Per host:

    - ``hub``: models it downloads from the hub itself (``each``, or it is a seed);
    - ``pull``: models it pulls from its seed over HTTP (``seed``, not shared storage);
    - ``verify``: models on shared storage that its seed downloads; it only checks them;
    - ``serve``: as a seed, the models its pullers need from it;
    - ``seed``: its seed host ('' for ``each``).

    A seed may serve models it does not run itself (a storage node, or the controller as an
    inventory host with ansible_connection: local): it downloads the union of its pullers'.
    A host whose seed is in ``refused`` (a host of the play an earlier check refused) gets no
    job: the run stops before any download, naming the refused host. A host whose seed is in
    ``limited_out`` (an inventory host this run's --limit leaves out) has no seed to pull from
    in this run: it fetches its models from their source itself (a published model that is
    complete is only verified), or, on shared storage, only verifies them.
    """
    plan: dict[str, dict[str, Any]] = {
        h: {"hub": {}, "pull": {}, "verify": {}, "serve": {}, "seed": ""} for h in play_hosts
    }
    for host in play_hosts:
        info = hosts[host]
        settings = Settings.check(info["settings"])
        specs = [ModelSpec.from_dict(s) for s in info.get("specs") or []]
        if settings.strategy == "each" or not specs:
            for spec in specs:
                plan[host]["hub"][spec.dirname] = spec
            continue
        seed = settings.seed_host or play_hosts[0]
        if seed in refused:
            continue
        if seed in limited_out and seed not in plan:
            bucket = "verify" if settings.shared_storage else "hub"
            for spec in specs:
                plan[host][bucket][spec.dirname] = spec
            continue
        if seed not in plan:
            raise WeightsError(
                f"model_weights_seed_host {seed!r} (for {host}) is not a host of this play "
                f"({', '.join(play_hosts)}); add it to the play or pick another"
            )
        seed_settings = Settings.check(hosts[seed]["settings"])
        if seed_settings.root != settings.root and settings.shared_storage:
            raise WeightsError(
                f"{host} has model_weights_shared_storage: true but its models root "
                f"{settings.root} differs from its seed {seed}'s {seed_settings.root}"
            )
        plan[host]["seed"] = seed
        for spec in specs:
            merged = merge(plan[seed]["hub"].get(spec.dirname), spec)
            plan[seed]["hub"][spec.dirname] = merged
            if host == seed:
                continue
            plan[seed]["serve"][spec.dirname] = merge(plan[seed]["serve"].get(spec.dirname), spec)
            bucket = "verify" if settings.shared_storage else "pull"
            plan[host][bucket][spec.dirname] = spec
    return {
        host: {
            key: (value if key == "seed" else [s.to_dict() for _, s in sorted(value.items())])
            for key, value in entry.items()
        }
        for host, entry in plan.items()
    }


def merge(previous: ModelSpec | None, spec: ModelSpec) -> ModelSpec:
    """One directory asked twice: one source, the allow_patterns joined (none on either side
    means every file), the services of both."""
    if previous is None:
        return spec
    if previous.source != spec.source:
        raise WeightsError(
            f"{spec.dirname} is asked from {previous.source} ({', '.join(previous.services)}) "
            f"and from {spec.source} ({', '.join(spec.services)}); one directory has one source"
        )
    patterns: tuple[str, ...] | None = None
    if previous.allow_patterns and spec.allow_patterns:
        patterns = tuple(dict.fromkeys(previous.allow_patterns + spec.allow_patterns))
    services = tuple(dict.fromkeys(previous.services + spec.services))
    return ModelSpec(spec.model, spec.source, spec.revision, patterns, services)


def state_spec(job: Mapping[str, Any], root: str, venv: str) -> dict[str, list[str]]:
    """What the no-op path compares with the last converge (acceldeploy.host.state.drift): each
    published model directory this host keeps (its files' sizes and mtimes: the fast verify's
    view) and the fetch venv's record of what it was installed from."""
    return {"trees": kept_dirs(job, root),
            "files": [f"{venv}/acceldeploy-requirements.txt", f"{venv}/bin/python"]}  # fmt: skip


def kept_dirs(job: Mapping[str, Any], root: str) -> list[str]:
    """Every published model directory this host's job keeps (downloads, pulls, verifies)."""
    specs = [*job.get("hub", []), *job.get("pull", []), *job.get("verify", [])]
    return sorted({model_dir(root, s["model"], s.get("revision")) for s in specs})


def any_drift(states: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any host of the play must run in full: the seed fan-out plans the hosts together,
    so the no-op path applies to all of them or to none. A host with nothing to do (skipped)
    does not count."""
    return any(not s.get("skipped") and s.get("drift", ["no check"]) for s in states)


def summary_lines(plans: Sequence[Mapping[str, Any]], steady: bool = False) -> list[str]:
    """One line per model of this host: what was done, why, and what it fetched; ``steady``:
    how a rerun that finds it unchanged reads (recorded for the no-op path)."""
    lines = []
    for plan in plans:
        commit = f", commit {plan['commit']}" if plan.get("commit") else ""
        if steady:
            lines.append(f"{plan['dir']}: none (unchanged since the last converge){commit}")
            continue
        mib = round(int(plan.get("needed_bytes") or 0) / 1048576, 1)
        lines.append(
            f"{plan['dir']}: {plan['action']} ({plan['reason']}); {mib} MiB to fetch{commit}"
        )
    return lines
