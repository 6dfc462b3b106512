"""`acceldeploy init`'s decisions, from the hosts' reports (probe.py): the site's platform, each
host's connection variables, and a first service sized by the planner itself for the devices
found: the smallest tensor parallel size (a power of two the model's heads divide, no more than
the devices of the smallest host) whose service the serving planner renders without a memory
refusal, starting from the catalog's tuned size for the platform. The skeletons
(acceldeploy/skeletons/inventory/, the repository's templates/) print it."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2

from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import catalog, platforms
from acceldeploy.platforms import find, for_name
from acceldeploy.serving.hostplan import host_launches
from acceldeploy.siteinit.probe import PYTHON, HostReport

DEFAULT_REVISION = {"hf": "main", "modelscope": "master"}
FIRST_PORT = 8000
SERVICE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")
PLATFORMS = tuple(platforms.platform_names())


@dataclass(frozen=True)
class Connection:
    user: str
    key: str = ""
    ssh_args: str = ""


@dataclass(frozen=True)
class Sized:
    service: dict[str, Any]
    why: str  # one line for the inventory's comment: what the planner found


def service_name(model: str) -> str:
    """Qwen/Qwen3-VL-32B-Instruct -> qwen3-vl-32b."""
    base = model.rsplit("/", 1)[-1].lower()
    base = re.sub(r"-(instruct|chat|thinking)$", "", base)
    return re.sub(r"[^a-z0-9-]+", "-", base).strip("-")[:48] or "model"


def check_model(model: str, platform: str | None) -> catalog.CatalogEntry | None:
    """The model's catalog entry. init sizes catalog models; outside it, only on CPU: checked
    before any host is probed (platform: --platform, if given), and again when sizing."""
    entry = catalog.find(model)
    if entry is not None or (platform is not None and not for_name(platform).has_devices):
        return entry
    raise AcceldeployError(
        f"--model {model} is not in the catalog (acceldeploy plan catalog): init sizes only "
        "catalog models on ascend and gaudi hosts; pick one, write the service by hand "
        "(docs/reference/inventory.md), or on CPU hosts add --platform cpu"
    )


def site_platform(reports: Sequence[HostReport], expected: str | None = None) -> str:
    found = {r.platform for r in reports}
    if len(found) > 1:
        named = ", ".join(f"{r.target.name} {r.platform}" for r in reports)
        raise AcceldeployError(
            f"the hosts are of different platforms ({named}): a site from init is one "
            "platform; run init once per platform with its hosts (each writes its own "
            "inventory directory)"
        )
    platform = found.pop()
    if expected and find(expected) is not find(platform):
        raise AcceldeployError(
            f"--platform {expected}: the hosts report {platform}; drop --platform, or probe "
            f"{expected} hosts"
        )
    return platform


def size_service(
    reports: Sequence[HostReport],
    platform: str,
    spec: Mapping[str, Any],
    models_root: str,
    hostvars: Mapping[str, Mapping[str, Any]],
) -> Sized:
    """The first service for these hosts: on CPU as given; on a device platform the smallest
    TP the planner accepts on the host with the fewest devices. `hostvars`: each host's
    variables, for the Jinja expressions of a --vars file (`port: "{{ ... }}"`)."""
    fewest = min(reports, key=lambda r: len(r.devices))
    expand = templated(hostvars[fewest.target.name])
    if not for_name(platform).has_devices:
        (launch,) = _render(expand(spec), platform, models_root)
        return Sized(dict(spec), f"CPU: max model len {launch.max_model_len} (the planner's)")
    devices = list(fewest.devices)
    entry = check_model(str(spec["model"]), platform)
    assert entry is not None  # a device platform: check_model refused a model outside it
    tuned = int(entry.tuned(platform).get("tensor_parallel_size", 1))
    sizes = [n for n in (1, 2, 4, 8, 16, 32) if n >= tuned and n <= len(devices)]
    refusals = []
    for tp in sizes:
        candidate = {**spec, "devices": devices[:tp], "tensor_parallel_size": tp}
        try:
            (launch,) = _render(expand(candidate), platform, models_root)
        except AcceldeployError as exc:
            refusals.append(f"TP {tp}: {exc}")
            continue
        why = (
            f"TP {tp} on devices {devices[:tp]} of {fewest.target.name}'s {len(devices)}: the "
            f"smallest size the planner fits (max model len {launch.max_model_len})"
        )
        return Sized(candidate, why)
    raise AcceldeployError(
        f"{spec['model']} fits no tensor parallel size on {fewest.target.name}'s "
        f"{len(devices)} {platform} devices: " + "; ".join(refusals or ["no device found"])
    )


def templated(variables: Mapping[str, Any]) -> Callable[[Any], Any]:
    """Render the Jinja expressions in a value with one host's variables, as Ansible would."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)

    def expand(value: Any) -> Any:
        if isinstance(value, str) and "{{" in value:
            try:
                text = env.from_string(value).render(**variables)
            except jinja2.TemplateError as exc:
                raise AcceldeployError(f"--vars: {value!r}: {exc}") from exc
            return int(text) if text.isdigit() else text
        if isinstance(value, Mapping):
            return {k: expand(v) for k, v in value.items()}
        if isinstance(value, list):
            return [expand(v) for v in value]
        return value

    return expand


def _render(spec: Mapping[str, Any], platform: str, models_root: str) -> list[Any]:
    hostvars = {
        "inventory_hostname": "init",
        "acceldeploy_platform": platform,
        "acceldeploy_models_root": models_root,
        "acceldeploy_services": [dict(spec)],
    }
    return host_launches(hostvars)


def host_vars(report: HostReport, connection: Connection) -> dict[str, Any]:
    """What Ansible needs to reach the host, and the release a bundle is built for."""
    out: dict[str, Any] = {"ansible_host": report.target.address}
    if report.target.port != 22:
        out["ansible_port"] = report.target.port
    out["ansible_user"] = connection.user
    if connection.user != "root":
        out["ansible_become"] = True
    if connection.key:
        out["ansible_ssh_private_key_file"] = connection.key
    if connection.ssh_args:
        out["ansible_ssh_common_args"] = connection.ssh_args
    out["ansible_python_interpreter"] = f"/usr/bin/{PYTHON}"
    out["acceldeploy_os"] = report.os
    return out


def first_spec(
    model: str, name: str, source: str, revision: str, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    if not SERVICE_NAME.match(name):
        raise AcceldeployError(
            f"--name {name!r}: a service name is lowercase letters, digits and '-', at most "
            "48, starting with a letter or digit (it names the unit)"
        )
    spec: dict[str, Any] = {
        "name": name,
        "model": model,
        "source": source,
        "revision": revision or DEFAULT_REVISION[source],
        "port": FIRST_PORT,
    }
    return {**spec, **overrides}


def split_vars(site: Any, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A --vars file: (its `service:` mapping, merged into the first service; the rest, the
    site's group variables)."""
    if site is None:
        return {}, {}
    if not isinstance(site, dict):
        raise AcceldeployError(f"--vars {where}: a YAML mapping of variables, got {type(site)}")
    rest = dict(site)
    service = rest.pop("service", {}) or {}
    if not isinstance(service, dict):
        raise AcceldeployError(f"--vars {where}: service: is a mapping of the service's keys")
    for reserved in ("acceldeploy_platform", "acceldeploy_services"):
        if reserved in rest:
            raise AcceldeployError(
                f"--vars {where}: {reserved} is init's to write (from the probe and --model); "
                "drop it from the file, or edit the written inventory afterwards"
            )
    return service, rest
