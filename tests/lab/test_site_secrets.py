"""A planted API key reaches the lab hosts only through its 0600 file: not the site.yml -v
output, not a unit, launcher, process list, `systemctl show` or journal. Runs after
test_site.py (`make test`: -m e2e) on the converged lab, then puts the keyless services back."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, on_host

pytestmark = pytest.mark.e2e

HOSTS = ("lab1", "lab2")
KEY = "sk-acceldeploy-PLANTED-4f1c9e"
SECRET = "/etc/acceldeploy/secrets/qwen3-vl.env"
# Everywhere a key could leak to on a host, but the serving env (GBs of wheels).
# The rollout order is test_vllm_service's subject, not this one's: both hosts restart at once.
BOTH_AT_ONCE = {"vllm_service_serial": len(HOSTS)}
SEARCHED = "/etc /usr/local /var/lib /var/log /var/cache/acceldeploy-vllm /run /tmp /var/tmp /root"


def services_with_key() -> list[dict]:
    group = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    return [{**s, "api_key": KEY} for s in group["acceldeploy_services"]]


def test_a_planted_api_key_is_only_in_its_0600_file() -> None:
    # verify runs below against an inventory that holds the key (site.yml's verify stage reads
    # the inventory, not these extra vars)
    run = run_playbook(
        "site.yml", INVENTORY, {"acceldeploy_services": services_with_key(), **BOTH_AT_ONCE},
        args=["-v"], skip_tags=["verify"], timeout=3000,
    )  # fmt: skip
    try:
        assert run.ok, run.output[-6000:]
        assert KEY not in run.stdout and KEY not in run.stderr
        for host in HOSTS:
            found = on_host(host, f"grep -rIl --exclude-dir=proc -- {KEY} {SEARCHED} || true")
            assert found.split() == [SECRET], found
            assert on_host(host, f"stat -c '%a %U' {SECRET}").strip() == "600 root"
            for look in (
                "ps -eo args",
                "systemctl show qwen3-vl",
                "systemctl cat qwen3-vl",
                "journalctl --no-pager -o cat -n 20000",
            ):
                assert KEY not in on_host(host, look), look
        keyed = ROOT / "inventory/lab/hosts-keyed.yml"
        hosts = yaml.safe_load((ROOT / "inventory/lab/hosts.yml").read_text())
        for group in hosts["all"]["children"].values():
            for entry in group["hosts"].values():
                entry["acceldeploy_services"] = services_with_key()  # beats group_vars
        keyed.write_text(yaml.safe_dump(hosts))
        try:
            verify = subprocess.run(
                [sys.executable, str(ROOT / "tools/verify.py"), "-i", str(keyed)],
                capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
        finally:
            keyed.unlink()
        assert verify.returncode == 0, verify.stdout[-4000:] + verify.stderr[-2000:]
        assert KEY not in verify.stdout + verify.stderr
    finally:
        back = run_playbook("playbooks/serve.yml", INVENTORY, BOTH_AT_ONCE, timeout=1800)
        assert back.ok, back.output[-4000:]
