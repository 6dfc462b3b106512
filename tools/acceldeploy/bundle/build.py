"""``acceldeploy bundle build``: everything an inventory needs, collected into one directory.

The downloads go through the controller's cache (``$ACCELDEPLOY_CACHE``) exactly as an online
deploy's preflight makes them (the serving stack's wheels by acceldeploy.downloads.wheelhouse,
the hub clients' by acceldeploy.downloads.fetchlock, the models by the hosts' own fetch code
against the inventory's hub endpoints), then land in the bundle as hard links (a copy across
filesystems, atomically). A rerun fetches only what is missing; a killed one resumes (the
stamps of the wheel cache, the models' partial files). The manifest is written last.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceldeploy import __version__
from acceldeploy.bundle import manifest, ospackages, ownwheel
from acceldeploy.bundle.hostclass import HostClass, classes
from acceldeploy.downloads import fetchlock, wheelcache, wheelhouse
from acceldeploy.downloads.weights import merge, model_specs
from acceldeploy.errors import AcceldeployError
from acceldeploy.gateway.plan import serving_hosts
from acceldeploy.host.fetch.common import GIB, ModelSpec, WeightsError
from acceldeploy.host.fetch.run import HostRequest, plan_host, run
from acceldeploy.inventory import roledefaults
from acceldeploy.monitor import device_exporters
from acceldeploy.planner.stacks import host_stack, lock_requirements
from acceldeploy.platforms import find
from acceldeploy.runtimes import python_env
from acceldeploy.serving.hostplan import env_inputs

Say = Callable[[str], None]
HUB_ENDPOINT_VARS = {
    "hf": "model_weights_hf_endpoint",
    "modelscope": "model_weights_modelscope_endpoint",
}
# The bundle's directory of wheels builds made from sdists, one directory per build key (what
# python_env's built_store names under a wheel cache).
BUILT = "built"
HUB_TOKEN_VARS = {"hf": "model_weights_hf_token", "modelscope": "model_weights_modelscope_token"}
# The operator's artefacts a bundle names but does not hold: (path variable, where its sha256
# is given: a variable, and the key inside it when it is a mapping). A host names those of its
# platform's runtime role and device exporter (``_named``).
REFERENCES: tuple[tuple[str, str, str], ...] = (
    ("gaudi_runtime_image_tarball", "gaudi_runtime_image_tarball_checksum", ""),
    ("ascend_runtime_image_tarball", "ascend_runtime_image_tarball_checksum", ""),
    ("ascend_runtime_cann_toolkit_package", "ascend_runtime_cann_checksums", "toolkit"),
    ("ascend_runtime_cann_kernels_package", "ascend_runtime_cann_checksums", "kernels"),
    ("ascend_runtime_cann_nnal_package", "ascend_runtime_cann_checksums", "nnal"),
    ("monitor_npu_exporter_package", "monitor_npu_exporter_checksum", ""),
    ("monitor_gaudi_exporter_image_tarball", "monitor_gaudi_exporter_image_tarball_checksum", ""),
)


@dataclass
class Collected:
    """Files placed in the bundle, by relative path: kind, source, classes."""

    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, rel: str, kind: str, source: str, klass: str = "") -> None:
        entry = self.files.setdefault(rel, {"kind": kind, "source": source, "classes": []})
        if klass and klass not in entry["classes"]:
            entry["classes"].append(klass)


def _clock(started: float, say: Say) -> Say:
    return lambda message: say(f"[{time.monotonic() - started:6.1f}s] {message}")


def place(source: Path, dest: Path, hashes: manifest.HashCache) -> bool:
    """``dest`` becomes ``source``'s content: a hard link, else an atomic copy. False when it
    already was."""
    same_size = dest.is_file() and dest.stat().st_size == source.stat().st_size
    if same_size and (
        os.path.samefile(dest, source) or hashes.sha256(dest) == hashes.sha256(source)
    ):
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    with fetchlock.replacing(dest) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
    return True


def copy_bytes(sources: Sequence[Path], dest_dir: Path) -> int:
    """What placing ``sources`` in ``dest_dir`` writes: nothing for a file already there or a
    hard link on the same filesystem."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    device = dest_dir.stat().st_dev
    return sum(
        s.stat().st_size
        for s in sources
        if s.stat().st_dev != device
        and not ((dest_dir / s.name).is_file() and os.path.samefile(dest_dir / s.name, s))
    )


def stack_pins(klass: HostClass, hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    extra = sorted(
        {str(p) for h in hosts.values() for p in h.get("python_env_extra_packages") or []}
    )
    return [*lock_requirements(host_stack(klass.platform, klass.stack)), *extra]


def stack_wheels(klass: HostClass, pins: Sequence[str], cache: Path, say: Say) -> list[Path]:
    """The serving stack's wheels for one class, fetched into the cache when missing: the
    class's own stack (its vLLM version and lock), not the platform's default."""
    entry = host_stack(klass.platform, klass.stack)
    version, lock = str(entry["vllm"]), Path(entry["file"]).parent / str(entry["lock"])
    if klass.arch != "x86_64":
        raise AcceldeployError(
            f"host class {klass.key}: the cpu stack's lock is fetched for x86_64 only "
            f"({lock.name} was resolved for x86_64)"
        )
    wheels = wheelhouse.wheels_dir(cache)
    chosen, absent = wheelcache.select(wheels, pins, klass.python, klass.arch, klass.glibc)
    if absent:
        say(f"{klass.key}: fetching the stack's wheels for CPython {klass.python} into {wheels}")
        wheelhouse.fetch(cache, lock, python_version=klass.python, vllm_version=version)
        chosen, absent = wheelcache.select(wheels, pins, klass.python, klass.arch, klass.glibc)
    if absent:
        argv = wheelhouse.download_argv(sys.executable, wheels, klass.python, version)
        wheelhouse.run_logged([*argv, "--no-deps", *absent], cache / "logs" / "fetch.log")
        chosen, absent = wheelcache.select(wheels, pins, klass.python, klass.arch, klass.glibc)
    if absent:
        raise AcceldeployError(f"host class {klass.key}: no wheel of {', '.join(absent)} on PyPI")
    return chosen


# python_env's inputs that decide a build's key beside where the env lives (env_inputs), as
# a host's variables (else the role's defaults) give them.
BUILD_KEY_INPUTS = ("venv_python", "conda_channels", "install_from", "extra_packages",
                    "build_from_sdist", "soc_version")  # fmt: skip


def built_wheels(
    host: str, hostvars: Mapping[str, Any], cache: Path
) -> tuple[str, list[str], list[Path]]:
    """The host's build key, the pins it builds from their sdists and the wheels the
    controller kept from that build (``<store>/<key>``, python_env's built_store); no pins
    for a host that builds none."""
    options: dict[str, Any] = {
        **env_inputs(hostvars),
        **{key: roledefaults.value(hostvars, f"python_env_{key}") for key in BUILD_KEY_INPUTS},
    }
    options.update(
        built_store=hostvars.get("python_env_built_store") or "",
        wheel_cache=hostvars.get("python_env_wheel_cache") or "",
        controller_cache=str(cache),
    )
    try:
        plan = python_env.python_env_plan(options)
    except AcceldeployError as exc:
        raise AcceldeployError(f"{host}: {exc}") from exc
    if not plan.get("from_sdist"):
        return str(plan.get("key") or ""), [], []
    return plan["key"], plan["from_sdist"], sorted(Path(plan["built_store"]).glob("*.whl"))


def fetch_lock_sha1() -> str:
    """As roles/model_weights names its wheel sets: sha1 of the lock as Ansible's file lookup
    reads it (trailing whitespace stripped)."""
    return hashlib.sha1(fetchlock.LOCK.read_text().rstrip().encode()).hexdigest()


def hub_wheels(klass: HostClass, cache: Path, say: Say) -> list[Path]:
    """The hub clients' wheels for one class, in the same wheel-set directory model_weights'
    preflight fills (``<cache>/fetch-wheels/<set>-<lock sha1>``)."""
    dest = cache / "fetch-wheels" / f"{klass.hub_key}-{fetch_lock_sha1()}"
    if not (dest / "requirements.txt").is_file():
        say(f"{klass.key}: fetching the hub clients' wheels ({klass.hub_key})")
        status = fetchlock.download(
            fetchlock.LOCK, dest, klass.hub_python, klass.arch, klass.glibc, (), out=sys.stderr
        )
        if status != 0:
            raise AcceldeployError(f"the hub clients' wheels for {klass.hub_key}: pip failed")
    return sorted(dest.glob("*.whl"))


def controller_wheels(cache: Path, say: Say) -> list[Path]:
    """The controller's toolchain (this package and its dependencies) for this controller's
    Python, so a controller on the rack installs offline too."""
    deps = ownwheel.requirements()
    digest = hashlib.sha256("\n".join([__version__, *deps]).encode()).hexdigest()[:12]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    dest = cache / "controller-wheels" / f"{tag}-{digest}"
    stamp = dest / ".complete"
    if not stamp.is_file():
        say(f"controller: fetching its toolchain's wheels for CPython {tag} into {dest}")
        dest.mkdir(parents=True, exist_ok=True)
        log = cache / "logs" / "controller-wheels.log"
        pip = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(dest)]
        wheelhouse.run_logged([*pip, *deps], log, wheelhouse.pip_env(isolated=False))
        ownwheel.build(dest, log)
        stamp.write_text("\n".join(deps) + "\n")
    return sorted(dest.glob("*.whl"))


def wanted_models(
    hosts: Mapping[str, Mapping[str, Any]],
) -> dict[str, tuple[ModelSpec, dict[str, str], dict[str, str], list[str]]]:
    """dirname -> (spec, endpoints, tokens, hosts): every model the hosts' services run."""
    found: dict[str, tuple[ModelSpec, dict[str, str], dict[str, str], list[str]]] = {}
    for host, variables in hosts.items():
        try:
            specs = model_specs(variables.get("acceldeploy_services"), True)
        except WeightsError as exc:
            raise AcceldeployError(f"{host}: {exc}") from exc
        endpoints = {s: str(variables.get(v) or "") for s, v in HUB_ENDPOINT_VARS.items()}
        tokens = {s: str(variables.get(v) or "") for s, v in HUB_TOKEN_VARS.items()}
        for spec in specs:
            previous = found.get(spec.dirname)
            merged = merge(previous[0] if previous else None, spec)
            hosts_of = [*(previous[3] if previous else []), host]
            found[spec.dirname] = (merged, endpoints, tokens, hosts_of)
    return found


def fetch_models(
    out: Path, wanted: Mapping[str, tuple[ModelSpec, dict[str, str], dict[str, str], list[str]]]
) -> list[HostRequest]:
    """One read-only plan per model (its hub listing): what the download needs is known
    before any byte is written."""
    requests = []
    for spec, endpoints, tokens, _ in wanted.values():
        request = HostRequest(
            root=out / "models",
            models=[spec],
            mode="hub",
            endpoints={k: v for k, v in endpoints.items() if v},
            tokens={k: v for k, v in tokens.items() if v},
            reserve_bytes=0,
            progress_interval=5.0,
        )
        try:
            request.plans = [p.to_dict() for p in plan_host(request)]
        except WeightsError as exc:
            raise AcceldeployError(
                f"{exc} (the endpoint is the inventory's {HUB_ENDPOINT_VARS[spec.source]})"
            ) from exc
        requests.append(request)
    return requests


def _named(platform_name: str) -> set[str]:
    """The variables of REFERENCES a host of this platform names: its runtime role's and its
    device exporter's, as its class names them (none for an unknown platform)."""
    platform = find(platform_name)
    if platform is None:
        return set()
    exporter = device_exporters.of_behaviour(platform)
    own = set(exporter.variables if exporter else ())
    return {
        variable
        for variable, _, _ in REFERENCES
        if variable in own or roledefaults.role_of(variable) == platform.runtime_role
    }


def references(
    hosts: Mapping[str, Mapping[str, Any]], cache: manifest.HashCache
) -> list[dict[str, Any]]:
    """The operator's artefacts each host needs, by path and sha256. A path the controller
    holds is hashed and must match."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    errors = []
    for host, variables in sorted(hosts.items()):
        wanted = _named(str(variables.get("acceldeploy_platform") or ""))
        for variable, checksum_var, key in REFERENCES:
            path = str(variables.get(variable) or "")
            if variable not in wanted or not path:
                continue
            given: Any = variables.get(checksum_var) or ""
            sha256 = str((given or {}).get(key, "") if key else given)
            named = f"{checksum_var}.{key}" if key else checksum_var
            if not sha256:
                errors.append(f"{host}: {variable} is set but {named} is empty; give its sha256")
                continue
            local = Path(path)
            if local.is_absolute() and local.is_file() and cache.sha256(local) != sha256.lower():
                errors.append(f"{host}: {variable} {path} does not match {named}")
                continue
            entry = found.setdefault(
                (variable, path),
                {
                    "name": Path(path).name,
                    "variable": variable,
                    "path": path,
                    "sha256": sha256.lower(),
                    "hosts": [],
                },
            )
            entry["hosts"].append(host)
    if errors:
        raise AcceldeployError("; ".join(errors))
    return list(found.values())


def check_room(out: Path, needed: int) -> None:
    free = shutil.disk_usage(out).free
    if needed > free:
        raise AcceldeployError(
            f"not enough room in {out}: the bundle needs {needed / GIB:.2f} GiB more and "
            f"{free / GIB:.2f} GiB is free; free space there or build on a larger filesystem "
            "(on the cache's filesystem the wheels are hard links and cost nothing)"
        )


def build(
    inventory: str,
    hosts: Mapping[str, Mapping[str, Any]],
    out: Path,
    cache: Path,
    say: Say,
) -> dict[str, Any]:
    """Collects the bundle for ``hosts`` (their templated variables) into ``out``."""
    started = time.monotonic()
    say = _clock(started, say)
    serving = serving_hosts(hosts)
    by_class = classes(serving)
    repos, notes = ospackages.wanted(hosts)
    out.mkdir(parents=True, exist_ok=True)
    hashes = manifest.HashCache(cache / manifest.HASHES)
    refs = references(serving, hashes)
    wanted = wanted_models(serving)
    say(f"{len(hosts)} hosts: {len(by_class)} host classes, {len(wanted)} models, "
        f"{len(repos)} apt repositories")  # fmt: skip
    for note in notes:
        say(f"NOTE {note}")
    collected = Collected()
    placements: list[tuple[Path, Path, str, str, str]] = []
    for klass, names in by_class.items():
        members = {h: hosts[h] for h in names}
        if klass.collects_stack:
            for wheel in stack_wheels(klass, stack_pins(klass, members), cache, say):
                placements.append((wheel, out / "wheels", "stack", "pypi", klass.key))
        for wheel in hub_wheels(klass, cache, say):
            placements.append((wheel, out / "wheels", "hub", "pypi", klass.key))
    for wheel in controller_wheels(cache, say):
        placements.append((wheel, out / "controller", "controller", "pypi", ""))
    for host in sorted(serving):
        key, pins, built = built_wheels(host, serving[host], cache)
        if pins and not built:
            say(
                f"NOTE {host} builds {', '.join(pins)} from the sdist and the controller holds "
                f"no wheel of build {key[:12]}: the rack builds it once per class, from sources "
                "that hold the sdist; to carry the wheels instead, run playbooks/runtime.yml on "
                "one host of the class where the sources are reachable, then build again"
            )
        class_key = next(k.key for k, names in by_class.items() if host in names)
        for wheel in built:
            source = f"built from its sdist by build {key[:12]}"
            placements.append((wheel, out / BUILT / key, BUILT, source, class_key))
    for repo in repos:
        say(f"apt packages for {repo.name} ({', '.join(repo.hosts)}): {', '.join(repo.packages)}")
        for file in ospackages.fetch(repo, cache):
            placements.append((file, out / ospackages.KIND / repo.name, ospackages.KIND,
                               f"debian:{repo.suite}", repo.name))  # fmt: skip
    requests = fetch_models(out, wanted)
    model_bytes = sum(int(p["needed_bytes"]) for r in requests for p in r.plans)
    wheel_bytes = sum(
        copy_bytes([src], dest) for src, dest, *_ in {(s, d) for s, d, *_ in placements}
    )
    check_room(out, model_bytes + wheel_bytes)
    placed = 0
    for src, dest, kind, source, klass_key in placements:
        placed += place(src, dest / src.name, hashes)
        collected.add(str((dest / src.name).relative_to(out)), kind, source, klass_key)
    say(f"wheels and packages: {len(collected.files)} files in the bundle ({placed} new)")
    models: dict[str, Any] = {}
    for request, (dirname, (spec, endpoints, _, model_hosts)) in zip(
        requests, wanted.items(), strict=True
    ):
        say(
            f"model {dirname}: {request.plans[0]['action']} "
            f"from {endpoints.get(spec.source) or spec.source}"
        )
        try:
            run(request, check_mode=False)
        except WeightsError as exc:
            raise AcceldeployError(f"{dirname}: {exc}; run bundle build again to resume") from exc
        published = out / "models" / dirname
        for file in sorted(p for p in published.rglob("*") if p.is_file()):
            collected.add(
                str(file.relative_to(out)), "model", f"{spec.source}:{spec.model}@{spec.revision}"
            )
        models[dirname] = {
            "source": spec.source,
            "model": spec.model,
            "revision": spec.revision,
            "hosts": sorted(model_hosts),
        }
    total = sum((out / rel).stat().st_size for rel in collected.files)
    say(f"hashing {len(collected.files)} files, {total / GIB:.2f} GiB")
    for rel, entry in collected.files.items():
        path = out / rel
        entry.update(size=path.stat().st_size, sha256=hashes.sha256(path))
    hashes.save()
    data = {
        "format": manifest.FORMAT,
        "acceldeploy": __version__,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "inventory": inventory,
        "classes": {k.key: {**k.to_dict(), "hosts": sorted(h)} for k, h in by_class.items()},
        "os": {r.name: r.to_dict() for r in repos},
        "models": models,
        "files": dict(sorted(collected.files.items())),
        "references": refs,
        "build_seconds": round(time.monotonic() - started, 1),
    }
    manifest.write_json(out / manifest.MANIFEST, data)
    say(
        f"bundle {out}: {len(collected.files)} files, {total / GIB:.2f} GiB, {len(refs)} references"
    )
    return data
