"""Preflight's check of a bundle against the hosts of a run, on the controller before any host
is contacted: every host class has its serving stack's and hub clients' wheels, every service's
model is there, every gateway host's release has its apt packages, and every file those hosts
need is intact (re-hashed; unchanged files are read once, see manifest.HashCache). Each refusal
names what is missing and the command that adds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from acceldeploy.bundle import manifest, ospackages
from acceldeploy.bundle.build import stack_pins, wanted_models
from acceldeploy.bundle.hostclass import HostClass, classes
from acceldeploy.downloads import fetchlock, wheelcache
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway.plan import serving_hosts
from acceldeploy.host.fetch.common import MANIFEST as MODEL_MANIFEST
from acceldeploy.host.fetch.manifest import manifest_listing, read_manifest


def _build_command(inventory: str, directory: Path) -> str:
    return f"acceldeploy bundle build -i {inventory} --out {directory}"


def _shown(pins: list[str]) -> str:
    return ", ".join(pins[:3]) + (f" and {len(pins) - 3} more" if len(pins) > 3 else "")


def class_errors(
    directory: Path, klass: HostClass, hosts: Mapping[str, Mapping[str, Any]], fix: str
) -> list[str]:
    wheels = directory / "wheels"
    who = f"host class {klass.key} ({', '.join(sorted(hosts))})"
    errors = []
    if klass.collects_stack:
        absent = wheelcache.missing(
            wheels, stack_pins(klass, hosts), klass.python, klass.arch, klass.glibc
        )
        if absent:
            errors.append(
                f"the bundle {directory} has no serving-stack wheels for {who}: "
                f"{_shown(absent)}; add them with `{fix}`"
            )
    hub_pins = fetchlock.pins_for(fetchlock.LOCK.read_text(), klass.hub_python, klass.arch)
    absent = wheelcache.missing(wheels, hub_pins, klass.hub_python, klass.arch, klass.glibc)
    if absent:
        errors.append(
            f"the bundle {directory} has no hub-client wheels for {who} ({klass.hub_key}): "
            f"{_shown(absent)}; add them with `{fix}`"
        )
    return errors


def needed_files(data: Mapping[str, Any], keys: set[str], models: set[str]) -> dict[str, Any]:
    """The manifest's files these classes and models need (the controller's are not)."""
    return {
        name: entry
        for name, entry in data["files"].items()
        if set(entry.get("classes") or ()) & keys
        or (entry["kind"] == "model" and "/".join(name.split("/")[1:3]) in models)
    }


def errors(
    directory: Path, hosts: Mapping[str, Mapping[str, Any]], inventory: str, hash_cache: Path
) -> list[str]:
    """Everything wrong with ``directory`` for these hosts (their templated variables)."""
    fix = _build_command(inventory, directory)
    data = manifest.load(directory)
    try:
        serving = serving_hosts(hosts)
        by_class = classes(serving)
        wanted = wanted_models(serving)
        repos, _ = ospackages.wanted(hosts)
    except AcceldeployError as exc:
        return [str(exc)]
    found: list[str] = ospackages.errors(directory, repos, fix)
    for klass, names in by_class.items():
        found += class_errors(directory, klass, {h: hosts[h] for h in names}, fix)
    for dirname, (_, _, _, model_hosts) in sorted(wanted.items()):
        if read_manifest(directory / "models" / dirname) is None:
            found.append(
                f"the bundle {directory} has no model {dirname} (for {', '.join(model_hosts)}); "
                f"add it with `{fix}`"
            )
    cache = manifest.HashCache(hash_cache)
    bad = manifest.problems(
        directory,
        needed_files(data, {k.key for k in by_class} | {r.name for r in repos}, set(wanted)),
        cache,
    )
    cache.save()
    if bad:
        found.append(
            f"the bundle {directory} is damaged: {'; '.join(bad[:5])}"
            + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            + f"; rebuild it with `{fix}` (it fetches only what differs) or copy it again"
        )
    return found


def listings(directory: Path, dirnames: list[str]) -> dict[str, Any]:
    """The published models' listings, as a seed's hub plan gives them to its pullers."""
    found = {}
    for dirname in dirnames:
        data = read_manifest(directory / "models" / dirname)
        if data is None:
            raise AcceldeployError(f"the bundle {directory} has no {dirname}/{MODEL_MANIFEST}")
        found[dirname] = manifest_listing(data).to_dict()
    return found
