"""A planted API key reaches the lab hosts only through its 0600 file, and a planted hub token
(model_weights_hf_token) reaches no file at all: not the site.yml -v output, a unit, launcher,
process list, `systemctl show` or journal on either host; not verify's or bench.py's output,
bench.py's result directory or the controller's fact cache. Runs after test_site.py (`make
test`: -m e2e) on the converged lab, then puts the keyless services back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_run import run_playbook
from labhost import INVENTORY, ROOT, on_host

pytestmark = pytest.mark.e2e

HOSTS = ("lab1", "lab2")
KEY = "sk-acceldeploy-PLANTED-4f1c9e"
HUB_TOKEN = "hf_acceldeployPLANTEDhubtoken7d2a"
# Enough load to write every result file bench.py writes, two rounds for its verdict.
PLANTED_PROFILE = {"dataset": "images", "prompts": 4, "output_len": 4, "max_concurrency": 2,
                   "rounds": 2, "warmups": 0}  # fmt: skip
SECRET = "/etc/acceldeploy/secrets/qwen3-vl.env"
# Everywhere a key could leak to on a host, but the serving env (GBs of wheels).
# The rollout order is test_vllm_service's subject, not this one's: both hosts restart at once.
BOTH_AT_ONCE = {"vllm_service_serial": len(HOSTS)}
SEARCHED = "/etc /usr/local /var/lib /var/log /var/cache/acceldeploy-vllm /run /tmp /var/tmp /root"


def services_with_key() -> list[dict]:
    group = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    return [{**s, "api_key": KEY} for s in group["acceldeploy_services"]]


def grep_controller(token: str, *roots: Path) -> list[str]:
    found = subprocess.run(
        ["grep", "-rIl", "--", token, *map(str, roots)], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    return found.stdout.split()


def test_a_planted_api_key_is_only_in_its_0600_file(tmp_path: Path) -> None:
    # verify runs below against an inventory that holds the key (site.yml's verify stage reads
    # the inventory, not these extra vars)
    planted = {"acceldeploy_services": services_with_key(), "model_weights_hf_token": HUB_TOKEN,
               **BOTH_AT_ONCE}  # fmt: skip
    run = run_playbook("site.yml", INVENTORY, planted, args=["-v"], skip_tags=["verify"],
                       timeout=3000)  # fmt: skip
    try:
        assert run.ok, run.output[-6000:]
        # a preview of a change of key on the converged hosts: the secrets file would change
        preview = run_playbook("site.yml", INVENTORY, {**planted, "acceldeploy_services": [
            {**s, "api_key": KEY[::-1]} for s in services_with_key()]}, check=True, diff=True,
            args=["-v"], skip_tags=["verify"], timeout=900)  # fmt: skip
        assert preview.ok, preview.output[-6000:]
        for token in (KEY, KEY[::-1], HUB_TOKEN):
            assert token not in run.stdout + run.stderr + preview.stdout + preview.stderr
        for host in HOSTS:
            found = on_host(host, f"grep -rIl --exclude-dir=proc -- {KEY} {SEARCHED} || true")
            assert found.split() == [SECRET], found
            hub = on_host(host, f"grep -rIl --exclude-dir=proc -- {HUB_TOKEN} {SEARCHED} || true")
            assert hub.split() == [], hub
            assert on_host(host, f"stat -c '%a %U' {SECRET}").strip() == "600 root"
            for look in (
                "ps -eo args",
                "systemctl show qwen3-vl",
                "systemctl cat qwen3-vl",
                "journalctl --no-pager -o cat -n 20000",
            ):
                seen = on_host(host, look)
                assert KEY not in seen and HUB_TOKEN not in seen, look
        keyed = ROOT / "inventory/lab/hosts-keyed.yml"
        hosts = yaml.safe_load((ROOT / "inventory/lab/hosts.yml").read_text())
        for group in hosts["all"]["children"].values():
            for entry in group["hosts"].values():
                entry["acceldeploy_services"] = services_with_key()  # beats group_vars
                entry["model_weights_hf_token"] = HUB_TOKEN
                entry["acceldeploy_bench_profiles"] = {"planted": PLANTED_PROFILE}
        keyed.write_text(yaml.safe_dump(hosts))
        results = tmp_path / "bench"
        try:
            verify = tool("verify.py", "-i", str(keyed))
            bench = tool("bench.py", "-i", str(keyed), "--limit", HOSTS[0], "--profile", "planted",
                         "--out", str(results))  # fmt: skip
        finally:
            keyed.unlink()
        assert verify.returncode == 0, verify.stdout[-4000:] + verify.stderr[-2000:]
        assert bench.returncode == 0, bench.stdout[-4000:] + bench.stderr[-2000:]
        assert any(results.rglob("summary.json")), sorted(results.rglob("*"))
        for token in (KEY, HUB_TOKEN):
            for proc in (verify, bench):
                assert token not in proc.stdout + proc.stderr
            assert grep_controller(token, results, ROOT / ".ansible") == []
    finally:
        back = run_playbook("playbooks/serve.yml", INVENTORY, BOTH_AT_ONCE, timeout=1800)
        assert back.ok, back.output[-4000:]


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / name), *args],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
