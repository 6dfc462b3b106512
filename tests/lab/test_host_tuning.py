"""roles/host_tuning on the lab hosts (playbooks/host.yml): bad input stops before any host is
touched, --check --diff changes nothing, converge changes, again changes nothing, and a rolling
reboot goes one host at a time.

The lab hosts are systemd-nspawn containers: kernel knobs are read-only there, so the role must
persist, report "not applied live" and not fail; the /proc/cmdline check is "not applicable".
Runs against $ACCELDEPLOY_TEST_INVENTORY (default inventory/lab/hosts.yml).
"""

from __future__ import annotations

import base64
import http.server
import itertools
import json
import threading
from typing import Any, ClassVar

import pytest
from ansible_run import PlaybookRun, lab_hosts, lab_inventory, run_playbook, ssh

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/host.yml"
DROPIN = "/etc/default/grub.d/90-acceldeploy.cfg"
SYSCTL_FILE = "/etc/sysctl.d/90-acceldeploy.conf"
HUGEPAGES_FILE = "/etc/sysctl.d/91-acceldeploy-hugepages.conf"
# The cpu profile plus a hugepage count and a sysctl the lab's kernel does not already have, so
# "persisted, not applied live" is exercised.
EXTRA: dict[str, Any] = {
    "host_tuning_hugepages": 64,
    "host_tuning_sysctls_extra": {"vm.swappiness": 10},
}
TREE = (
    "cd / && { find etc boot -xdev -printf '%p %y %m %U:%G %s %T@ %l\\n' | LC_ALL=C sort; "
    "find etc boot -xdev -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; }"
)


@pytest.fixture(scope="module")
def hosts() -> dict[str, dict[str, Any]]:
    found = lab_hosts()
    assert found, "the lab inventory lists no hosts"
    # Fresh as far as host tuning goes: remove what the role writes.
    for name, hostvars in found.items():
        gone = ssh(hostvars, f"rm -f {DROPIN} {SYSCTL_FILE} {HUGEPAGES_FILE}")
        assert gone.returncode == 0, f"{name}: {gone.stderr}"
    return found


def remote(hostvars: dict[str, Any], command: str) -> str:
    result = ssh(hostvars, command)
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result.stdout


def trees(hosts: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    return {name: set(remote(h, TREE).splitlines()) for name, h in hosts.items()}


def assert_same_trees(before: dict[str, set[str]], after: dict[str, set[str]]) -> None:
    for name in before:
        assert before[name] == after[name], (
            f"{name}: files under /etc or /boot changed: {sorted(before[name] ^ after[name])[:10]}"
        )


def boot_ids(hosts: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {n: remote(h, "cat /proc/sys/kernel/random/boot_id").strip() for n, h in hosts.items()}


def failure_text(run: PlaybookRun) -> str:
    parts = []
    for _task, _host, result in run.iter_results():
        if result.get("failed"):
            parts.append(str(result.get("msg") or ""))
            parts.extend(str(e) for e in result.get("argument_errors") or [])
    return "\n".join(parts)


def summary(run: PlaybookRun) -> dict[str, list[str]]:
    return {h: list(r.get("msg") or []) for h, r in run.results("Summary | Host tuning").items()}


class FakeBmc(http.server.BaseHTTPRequestHandler):
    """A BMC's Redfish BIOS resource and its pending-settings object, with basic auth."""

    attributes: ClassVar[dict[str, Any]] = {}
    pending: ClassVar[dict[str, Any]] = {}
    patches: ClassVar[list[dict[str, Any]]] = []
    bios = "/redfish/v1/Systems/1/Bios"

    def log_message(self, *args):  # quiet
        pass

    def reply(self, code: int, body: dict[str, Any] | None = None) -> None:
        data = json.dumps(body or {}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("ETag", f'W/"{len(self.patches)}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self) -> bool:
        expected = "Basic " + base64.b64encode(b"admin:s3cret").decode()
        if self.headers.get("Authorization") == expected:
            return True
        self.reply(401, {"error": "unauthorized"})
        return False

    def do_GET(self):
        if not self.authorized():
            return
        if self.path == self.bios:
            settings = {"SettingsObject": {"@odata.id": self.bios + "/Settings"}}
            self.reply(200, {"Attributes": self.attributes, "@Redfish.Settings": settings})
        elif self.path == self.bios + "/Settings":
            self.reply(200, {"Attributes": self.pending})
        else:
            self.reply(404)

    def do_PATCH(self):
        if not self.authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != self.bios + "/Settings" or not self.headers.get("If-Match"):
            self.reply(400)
            return
        type(self).patches.append(body)
        self.pending.update(body["Attributes"])
        self.reply(204)


@pytest.fixture
def bmc():
    FakeBmc.attributes = {"ProcessorC6": "Enabled", "PowerProfile": "Balanced", "Turbo": "Enabled"}
    FakeBmc.pending = {}
    FakeBmc.patches = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeBmc)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_bad_input_fails_before_any_host_is_touched(hosts):
    first = next(iter(hosts.values()))
    mem_kb = int(remote(first, "awk '/^MemTotal/ {print $2}' /proc/meminfo"))
    # (variable values, the variable named, whether the host must be read to know it is bad)
    bad = [
        ({"acceldeploy_platform": "tpu"}, "host_tuning_platform", False),
        ({"host_tuning_hugepages": "lots"}, "host_tuning_hugepages", False),
        ({"host_tuning_hugepages": -1}, "host_tuning_hugepages", False),
        ({"host_tuning_sysctls_enabled": "maybe"}, "host_tuning_sysctls_enabled", False),
        # More 2 MiB pages than the host has memory, whatever the machine.
        ({"host_tuning_hugepages": mem_kb // 2048 + 1000}, "host_tuning_hugepages", True),
        ({"host_tuning_reboot_batch": 0}, "host_tuning_reboot_batch", False),
    ]
    before = trees(hosts)
    for extra, variable, needs_host in bad:
        run = run_playbook(PLAYBOOK, lab_inventory(), extra)
        assert not run.ok, f"{extra} was accepted"
        assert variable in failure_text(run), f"{extra}: the error does not name {variable}"
        for name in hosts:
            assert run.changed(name) == 0, f"{extra}: {name} changed"
        # Stopped in the validation play: the apply play never started.
        assert not run.results("Kernel args | GRUB drop-in"), f"{extra}: got past validation"
        # Bad values need no host to be found: refused on the controller (tasks/check.yml).
        contacted = run.results("Validate | Gather the few facts")
        assert bool(contacted) == needs_host, f"{extra}: hosts contacted: {sorted(contacted)}"
    assert_same_trees(before, trees(hosts))


def test_check_diff_on_a_fresh_host_shows_changes_and_touches_nothing(hosts):
    before = trees(hosts)
    run = run_playbook(PLAYBOOK, lab_inventory(), EXTRA, check=True, diff=True)
    assert run.ok, run.output
    for name in hosts:
        assert run.changed(name) > 0, f"{name}: check mode shows no change on a fresh host"
    dropin = run.results("Kernel args | GRUB drop-in (Debian")
    for name, result in dropin.items():
        after = "".join(d.get("after", "") for d in result.get("diff") or [])
        assert "cpufreq.default_governor=performance" in after, f"{name}: no diff shown"
    for name, lines in summary(run).items():
        assert "check mode" in lines[0], f"{name}: {lines}"
    assert_same_trees(before, trees(hosts))


def test_converge_then_again_changes_nothing(hosts):
    first = run_playbook(PLAYBOOK, lab_inventory(), EXTRA)
    assert first.ok, first.output
    for name, hostvars in hosts.items():
        assert first.changed(name) > 0, f"{name}: first run changed nothing"
        dropin = remote(hostvars, f"cat {DROPIN}")
        assert (
            'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT '
            'cpufreq.default_governor=performance intel_idle.max_cstate=0"'
        ) in dropin
        sysctls = remote(hostvars, f"cat {SYSCTL_FILE}")
        assert "kernel.numa_balancing=0" in sysctls and "vm.swappiness=10" in sysctls
        assert "vm.nr_hugepages=64" in remote(hostvars, f"cat {HUGEPAGES_FILE}")

    again = run_playbook(PLAYBOOK, lab_inventory(), EXTRA)
    assert again.ok, again.output
    for name in hosts:
        assert again.changed(name) == 0, f"{name}: second run changed {again.changed(name)}"
    for lines in summary(again).values():
        text = "\n".join(lines)
        # Read-only kernel knobs: persisted, reported, not failed.
        assert "hugepages: 64 x" in text and "not applied live" in text, text
        assert "vm.swappiness is" in text, text
        # The reboot the first run asked for is still noticed on the second.
        assert "reboot: pending" in text, text
    print(f"second run: changed=0 in {again.duration:.1f}s")
    assert again.drift() == {name: [] for name in hosts}  # the no-op path

    # A hand edit is drift: found by that one call, repaired by the whole role.
    (name, hostvars), *others = hosts.items()
    remote(hostvars, f"sed -i 's/^vm.swappiness=10$/vm.swappiness=60/' {SYSCTL_FILE}")
    repaired = run_playbook(PLAYBOOK, lab_inventory(), EXTRA)
    assert repaired.ok, repaired.output
    assert repaired.drift() == {name: [f"{SYSCTL_FILE} changed"], **{o: [] for o, _ in others}}
    assert repaired.changed(name) >= 1 and all(repaired.changed(o) == 0 for o, _ in others)
    assert "vm.swappiness=10" in remote(hostvars, f"cat {SYSCTL_FILE}")


FAKE_VLLM = "acceldeploy-fake-vllm"
FAKE_UNIT = """[Unit]
Description=stands in for a vLLM service (tests/lab/test_host_tuning.py)
[Service]
ExecStart=/bin/sleep infinity
"""


def test_rolling_reboot_one_host_at_a_time(hosts):
    # A running (not enabled) service named in acceldeploy_services: stopped first, back after.
    for hostvars in hosts.values():
        remote(
            hostvars,
            f"printf '%s' '{FAKE_UNIT}' > /etc/systemd/system/{FAKE_VLLM}.service && "
            f"systemctl daemon-reload && systemctl start {FAKE_VLLM}",
        )
    before = boot_ids(hosts)
    extra = {
        **EXTRA,
        "host_tuning_reboot": True,
        "acceldeploy_services": [{"name": FAKE_VLLM}, {"name": "not-installed"}],
    }
    run = run_playbook(PLAYBOOK, lab_inventory(), extra)
    assert run.ok, run.output
    after = boot_ids(hosts)
    for name, hostvars in hosts.items():
        assert after[name] != before[name], f"{name} did not reboot"
        assert remote(hostvars, f"systemctl is-active {FAKE_VLLM}").strip() == "active"
    for name, result in run.results("Reboot | Stop this host's vLLM services").items():
        stopped = [r["item"] for r in result.get("results") or [] if r.get("changed")]
        assert stopped == [f"{FAKE_VLLM}.service"], f"{name}: {result}"

    spans = sorted(run.task_spans("Reboot | Reboot"), key=lambda s: s[2])
    assert sorted(s[1] for s in spans) == sorted(hosts), spans
    for earlier, later in itertools.pairwise(spans):
        assert earlier[3] <= later[2], f"reboots overlap: {earlier} / {later}"

    for name, result in run.results("Reboot | Kernel argument check").items():
        assert "not applicable" in str(result.get("msg")), f"{name}: {result}"
    for name, lines in summary(run).items():
        assert any(line.startswith("reboot: done") for line in lines), f"{name}: {lines}"
    print(f"rolling reboot of {len(hosts)} hosts: {run.duration:.1f}s")

    # Booted since the change: nothing waits any more, nothing reboots again.
    again = run_playbook(PLAYBOOK, lab_inventory(), extra)
    assert again.ok, again.output
    assert boot_ids(hosts) == after
    for name in hosts:
        assert again.changed(name) == 0, f"{name}: changed after the reboot"
    for name, lines in summary(again).items():
        assert "reboot: not needed" in lines, f"{name}: {lines}"
    for hostvars in hosts.values():
        remote(
            hostvars,
            f"systemctl stop {FAKE_VLLM} && rm /etc/systemd/system/{FAKE_VLLM}.service && "
            "systemctl daemon-reload",
        )


def test_bios_through_redfish_only_what_differs_and_no_secrets_shown(hosts, bmc):
    host = sorted(hosts)[0]
    extra = {
        **EXTRA,
        "host_tuning_bios_redfish_endpoint": bmc,
        "host_tuning_bios_redfish_username": "admin",
        "host_tuning_bios_redfish_password": "s3cret",
        "host_tuning_bios_redfish_attributes": {"ProcessorC6": "Disabled", "Turbo": "Enabled"},
    }
    run = run_playbook(PLAYBOOK, lab_inventory(), extra, limit=host)
    assert run.ok, run.output
    assert FakeBmc.patches == [{"Attributes": {"ProcessorC6": "Disabled"}}]
    assert "s3cret" not in run.stdout + run.stderr
    text = "\n".join(summary(run)[host])
    assert "bios redfish: changed ProcessorC6; staged until reboot: ProcessorC6" in text, text
    assert "BIOS settings staged through Redfish: ProcessorC6" in text, text

    # Staged already: nothing is sent again; the reboot it needs is still reported.
    again = run_playbook(PLAYBOOK, lab_inventory(), extra, limit=host)
    assert again.ok, again.output
    assert len(FakeBmc.patches) == 1
    assert again.changed(host) == 0
    assert "reboot: pending" in "\n".join(summary(again)[host])
