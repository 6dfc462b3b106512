"""Ansible adapter over acceldeploy.bundle (tools/acceldeploy/bundle/): site.yml's checks of an
offline bundle (acceldeploy_bundle) on the controller, before any host is contacted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from acceldeploy.bundle import check, hostclass
from acceldeploy.errors import AcceldeployError
from acceldeploy.host.fetch.common import ModelSpec
from acceldeploy.inventory.ansible_adapter import filters, plain
from acceldeploy.inventory.hostvars import hosts_vars


def acceldeploy_bundle_probe_errors(targets: Mapping[str, Any], inventory: str) -> list[str]:
    """{host: preflight_target} | acceldeploy_bundle_probe_errors(inventory): each host whose
    first contact found another wheel set than the class its inventory declares (the class
    the bundle was built for), naming the variables to correct."""
    hosts = hosts_vars(str(inventory), ",".join(targets))
    errors: list[str] = []
    for host, target in targets.items():
        try:
            declared = hostclass.host_class(host, hosts.get(host, {}))
        except AcceldeployError as exc:
            errors.append(str(exc))
            continue
        errors += hostclass.probe_errors(host, declared, plain(dict(target or {})))
    return errors


def acceldeploy_bundle_listings(bundle: str, specs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """acceldeploy_bundle | acceldeploy_bundle_listings(model specs): each model's listing as
    the bundle published it (what a seed's hub plan gives its pullers)."""
    dirnames = [ModelSpec.from_dict(plain(dict(s))).dirname for s in specs]
    return check.listings(Path(str(bundle)), dirnames)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return filters(acceldeploy_bundle_probe_errors, acceldeploy_bundle_listings)
