"""`site.yml --check --diff` on bare lab hosts is the preview an operator runs before touching a
new rack: it runs to the end, says per host and stage what would change, shows configuration
rather than the toolkit's own code, and changes nothing. Needs hosts fresh from `tools/lab.py
up` (`make test` runs the `bare` tests first)."""

from __future__ import annotations

import pytest
from ansible_run import run_playbook
from labhost import INVENTORY, on_host

pytestmark = pytest.mark.bare

HOSTS = ("lab1", "lab2")
SNAPSHOT = (
    "find /etc /opt /boot /models /usr/local -xdev -printf '%p %s %T@ %m\\n' 2>/dev/null"
    " | sort | sha256sum"
)


def test_check_diff_previews_a_bare_rack_and_changes_nothing() -> None:
    assert on_host("lab1", "test -e /opt/acceldeploy/venv && echo yes || echo no").strip() == "no"
    before = {h: on_host(h, SNAPSHOT) for h in HOSTS}
    run = run_playbook("site.yml", INVENTORY, check=True, diff=True, skip_tags=["verify"],
                       timeout=1800)  # fmt: skip
    assert run.ok, run.output[-6000:]
    for host in HOSTS:
        assert on_host(host, SNAPSHOT) == before[host], host
        assert run.changed(host) > 0  # it says what it would do
    diffs = [
        (task, str(d.get("after", "")))
        for task, _, result in run.iter_results()
        for item in [result, *(result.get("results") or [])]  # loop items carry their own
        for d in _as_list(item.get("diff"))
    ]
    assert any("[Service]" in text for _, text in diffs)  # the unit it would write
    code = [task for task, text in diffs if "def " in text and "import " in text]
    assert not code, f"these tasks diff Python source: {code}"


def _as_list(diff: object) -> list[dict]:
    if isinstance(diff, dict):
        return [diff]
    return [d for d in diff if isinstance(d, dict)] if isinstance(diff, list) else []
