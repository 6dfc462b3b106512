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
