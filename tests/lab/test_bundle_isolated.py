"""Day 0 on an air-gapped rack, in the isolated lab (make test-slow; replaces the lab's hosts):
fresh hosts in their own network namespaces, the lab's mirror and wheel server stopped, each host
able to reach only the controller's bundle server (tools/lab.py up --isolated: nftables counts
anything else). From bare, `site.yml -e acceldeploy_bundle=DIR` serves and verifies; the
bundle server's log accounts for every byte; nothing else was contacted; a second run changes
nothing. Then the same from bare on 2 and on 4 hosts, the environment fanned out host to host
against each host building its own (python_env_fanout: false), timed side by side: the table
goes to $ACCELDEPLOY_CACHE/logs/bundle-fanout.md (docs/benchmarks/ has the measured one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from ansible_run import REPO, run_playbook
from labhost import INVENTORY

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CACHE = Path(os.environ.get("ACCELDEPLOY_CACHE") or "/var/cache/acceldeploy")
GB = 1e9


def lab(*args: str, timeout: float = 1800) -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "lab.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def acceldeploy(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "acceldeploy", *args],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "PYTHONPATH": str(REPO / "tools")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def counters() -> dict[str, int]:
    sys.path.insert(0, str(REPO / "tools"))
    from acceldeploy_lab import isolation

    return isolation.counters()


def served(log: Path, since: int) -> dict[str, object]:
    sys.path.insert(0, str(REPO / "tools"))
    from acceldeploy.bundle import server

    return server.served_counts(log, since)


@pytest.fixture(scope="module")
def bundle() -> Path:
    """Built on the shared-network lab (the mirror is this machine's), before any host goes."""
    lab("mirror", "start")
    out = CACHE / "bundles" / "lab-test"
    acceldeploy("bundle", "build", "-i", str(INVENTORY), "--out", str(out))
    return out


def bare_isolated(hosts: int) -> None:
    lab("down")
    lab("up", "--isolated", "--hosts", str(hosts))
    lab("mirror", "stop")
    lab("wheels", "stop")


def deploy(bundle: Path, fanout: bool) -> dict[str, object]:
    """site.yml from the bundle on the lab as it is; what it took and what was served."""
    log = bundle.parent / f"{bundle.name}-requests.jsonl"
    since = len(log.read_text().splitlines()) if log.exists() else 0
    before = counters()
    started = time.monotonic()
    run = run_playbook(
        "site.yml",
        INVENTORY,
        extra_vars={"acceldeploy_bundle": str(bundle), "python_env_fanout": fanout},
        timeout=3600,
    )
    seconds = time.monotonic() - started
    assert run.ok, run.output
    after = counters()
    pulled = sum(
        int((result.get("pull") or {}).get("bytes", 0))
        for name, _, result in run.iter_results()
        if "Fan-out | Pull the build" in name
    )
    return {
        "run": run,
        "host_to_host": pulled,
        "environment": play_seconds(run, "Runtime - Python environment"),
        "seconds": round(seconds, 1),
        "served": served(log, since),
        "dropped": {k: after.get(k, 0) - before.get(k, 0) for k in after if "lab-host" in k},
    }


def play_seconds(run, name: str) -> float:
    """Wall time of one play, from its first task's start to its last task's end."""
    for play in run.data.get("plays") or []:
        info = play.get("play") or {}
        if info.get("name") == name:
            duration = info.get("duration") or {}
            start = datetime.fromisoformat(str(duration["start"]).replace("Z", "+00:00"))
            end = datetime.fromisoformat(str(duration["end"]).replace("Z", "+00:00"))
            return (end - start).total_seconds()
    return float("nan")


def one_host_set(bundle: Path) -> int:
    data = json.loads((bundle / "bundle.json").read_text())
    return sum(
        int(entry["size"])
        for entry in data["files"].values()
        if entry["kind"] in ("stack", "hub", "model")
    )


def test_isolated_deploy_from_the_bundle_then_fanout_against_per_host(bundle: Path) -> None:
    rows = []
    for hosts in (2, 4):
        for fanout in (True, False):
            bare_isolated(hosts)
            got = deploy(bundle, fanout)
            clients = got["served"]["clients"]
            total = sum(clients.values())
            assert set(got["dropped"].values()) == {0}, got["dropped"]
            assert set(clients) <= {f"10.213.0.{10 + i}" for i in range(1, hosts + 1)} | {
                "10.213.0.1"
            }, clients
            if fanout:
                assert total <= 1.1 * one_host_set(bundle), (total, one_host_set(bundle))
            if hosts == 2 and fanout:
                again = run_playbook(
                    "site.yml", INVENTORY, extra_vars={"acceldeploy_bundle": str(bundle)}
                )
                assert again.ok, again.output
                assert [again.changed(h) for h in ("lab1", "lab2")] == [0, 0]
            mode = "fan-out" if fanout else "per host"
            row = (hosts, mode, got["seconds"], got["environment"], total, got["host_to_host"])
            rows.append(row)
    table = [
        "| hosts | environment | bare to serving and verified | of which the environment "
        "| from the controller | host to host |",
        "|---:|---|---:|---:|---:|---:|",
        *[
            f"| {h} | {m} | {s:.0f} s | {e:.0f} s | {b / GB:.2f} GB | {p / GB:.2f} GB |"
            for h, m, s, e, b, p in rows
        ],
    ]
    out = CACHE / "logs" / "bundle-fanout.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(table) + "\n")
    print("\n" + "\n".join(table))
    # the shared-network lab back for the tests after this one
    lab("down")
    lab("mirror", "start")
    lab("wheels", "start")
    lab("up", "--hosts", "2")
