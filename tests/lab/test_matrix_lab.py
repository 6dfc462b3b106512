"""The racks' releases side by side with real vLLM: lab1 Debian 12 (Python 3.11), lab2 Debian
11 (Python 3.9, systemd 247), lab3 Debian 13 (Python 3.13, systemd 257). `make test-matrix`
(~20 min, ~16 GB on the hosts); not part of `make test`, whose suites tests cover the fast part.

- The controller's wheel cache starts without cp313 wheels: site.yml on bookworm and trixie
  fetches them in preflight, before any host changes, then serves the tiny Qwen3-VL on both
  (trixie's venv on its Python 3.13) and ends with tools/verify.py green per host.
- Bullseye cannot serve the stack (Python 3.9): site.yml there is refused in preflight (the
  suites tests), so it gets what it can run: host tuning and the models stage.
- Second runs change nothing on any of the three.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_run import lab_hosts, lab_inventory, run_playbook
from labhost import lab_cli, on_host

from acceldeploy.downloads import wheelhouse

pytestmark = pytest.mark.matrix

ROOT = Path(__file__).resolve().parents[2]
SUITES = {"lab1": "bookworm", "lab2": "bullseye", "lab3": "trixie"}
SERVING = "lab1,lab3"


@pytest.fixture(scope="module", autouse=True)
def matrix_lab() -> Iterator[None]:
    lab_cli("down", timeout=1200)
    lab_cli("up", "--suites", ",".join(SUITES.values()), timeout=1200)
    assert {h: v["lab_suite"] for h, v in lab_hosts().items()} == SUITES
    yield
    lab_cli("down", timeout=1200)


def test_site_fetches_cp313_first_then_serves_bookworm_and_trixie() -> None:
    wheels = wheelhouse.wheels_dir(wheelhouse.cache_dir())
    for cp313 in [*wheels.glob("*-cp313-*.whl"), wheelhouse.fetch_stamp(wheels, "3.13")]:
        cp313.unlink(missing_ok=True)
    first = run_playbook("site.yml", lab_inventory(), limit=SERVING, timeout=3600)
    assert first.ok, first.output[-6000:]
    results = list(first.iter_results())
    fetched = [i for i, (name, _, r) in enumerate(results) if "Add the missing CPythons" in name]
    assert fetched and results[fetched[0]][2].get("changed"), "preflight fetched no cp313 wheels"
    host_change = next(
        i for i, (name, host, r) in enumerate(results) if r.get("changed") and host != "localhost"
        and "Prepare |" not in name and "Add the missing" not in name
    )  # fmt: skip
    assert fetched[0] < host_change
    assert list(wheels.glob("vllm-0.12.0+cpu-cp313-*.whl"))
    for host, python in (("lab1", "3.11"), ("lab3", "3.13")):
        assert on_host(host, "systemctl is-active qwen3-vl").strip() == "active"
        version = "/opt/acceldeploy/venv/bin/python -c 'import sys; print(sys.version[:4])'"
        assert on_host(host, version).strip() == python
        assert on_host(host, "readlink /opt/acceldeploy/venv").startswith("/opt/acceldeploy/venv-")
    report = first.results("Show the verify report")
    assert report, "site.yml ended without tools/verify.py"
    second = run_playbook("site.yml", lab_inventory(), limit=SERVING, timeout=3600)
    assert second.ok, second.output[-6000:]
    assert {h: second.changed(h) for h in ("lab1", "lab3")} == {"lab1": 0, "lab3": 0}


def test_bullseye_gets_host_tuning_and_the_model() -> None:
    # Alone in the play, it downloads from the lab's hub mirror itself.
    each = {"model_weights_strategy": "each"}
    for playbook in ("playbooks/host.yml", "playbooks/models.yml"):
        first = run_playbook(playbook, lab_inventory(), each, limit="lab2", timeout=1800)
        assert first.ok, first.output[-6000:]
        second = run_playbook(playbook, lab_inventory(), each, limit="lab2", timeout=1800)
        assert second.ok and second.changed("lab2") == 0, second.output[-6000:]
    assert on_host("lab2", "ls /models/acceldeploy/tiny-qwen3-vl@main/config.json")


def test_verify_reports_per_host() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "verify.py"), "-i", str(lab_inventory()),
         "--limit", SERVING],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    for host in ("lab1", "lab3"):
        assert host in proc.stdout
