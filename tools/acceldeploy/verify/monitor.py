"""Checks of each monitor host: Prometheus's own view of every target it should scrape (up,
or named with its host and the error), and the alerts firing now (a warning each: the alert
names the command to run next)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import bounds, roledefaults
from acceldeploy.monitor import targets
from acceldeploy.monitor.promapi import Api
from acceldeploy.serving.service import on_host
from acceldeploy.verify.model import Check, Status
from acceldeploy.verify.remote import forward, reach

REDEPLOY = "`ansible-playbook site.yml -i <inventory> --tags monitor`"


def target_checks(monitor: str, active: list[dict[str, Any]]) -> list[Check]:
    """One check per scraped target (Prometheus's /api/v1/targets activeTargets)."""
    checks = []
    for target in sorted(active, key=lambda t: (t["labels"].get("job", ""),
                                               t["labels"].get("host", ""))):  # fmt: skip
        labels = target["labels"]
        job, host = labels.get("job", "?"), labels.get("host", "?")
        what = f"{job} {host}" + (f"/{labels['service']}" if labels.get("service") else "")
        ok = target.get("health") == "up"
        detail = f"{target.get('scrapeUrl', '')}: {target.get('health')}"
        if not ok and target.get("lastError"):
            detail += f" ({target['lastError']})"
        fix = (
            f"Prometheus on {monitor} cannot scrape {job} on {host}: on {host}, systemctl "
            f"status of what serves it; {REDEPLOY}"
        )
        status: Status = "pass" if ok else "fail"
        checks.append(
            Check(
                monitor, f"scrape {what}", status, detail, "" if ok else fix, labels.get("service")
            )
        )
    return checks


def alert_checks(monitor: str, alerts: list[dict[str, Any]]) -> list[Check]:
    """A warning per firing alert, with its summary and runbook line."""
    checks = []
    for alert in alerts:
        if alert.get("state") != "firing":
            continue
        labels, notes = alert.get("labels", {}), alert.get("annotations", {})
        checks.append(Check(monitor, f"alert {labels.get('alertname')}", "warn",
                            str(notes.get("summary", "")), str(notes.get("runbook", "")),
                            labels.get("service")))  # fmt: skip
    return checks


def check_monitor(
    hostname: str,
    hostvars: Mapping[str, Any],
    every: Mapping[str, Mapping[str, Any]],
    timeout: float,
) -> list[Check]:
    var = "monitor_scrape_interval"
    try:
        expected = targets.targets(every)
        interval = bounds.check_prometheus(var, roledefaults.value(hostvars, var))
    except AcceldeployError as exc:
        return [Check(hostname, "inventory", "fail", str(exc), "fix the inventory")]
    wanted = {_key(t.job, dict(t.labels)): t for t in expected}
    conn, reached = reach(hostname, dict(hostvars), timeout)
    checks = [reached]
    if conn is None:
        return checks
    bind = str(roledefaults.value(hostvars, "monitor_prometheus_bind"))
    port = int(roledefaults.value(hostvars, "monitor_prometheus_port"))
    try:
        with forward(conn, on_host(bind), port) as base:
            api = Api(base, timeout)
            mine = scraped(api, 2 * interval + timeout, set(wanted))
            alerts = api.alerts()
    except Exception as exc:
        return [*checks, Check(hostname, "prometheus", "fail", f"{type(exc).__name__}: {exc}",
                               f"on {hostname}: systemctl status prometheus")]  # fmt: skip
    finally:
        conn.close()
    found = {_key(t["labels"].get("job"), t["labels"]) for t in mine}
    for key, t in wanted.items():
        if key not in found:
            what = f"scrape {t.job} {dict(t.labels)['host']}"
            checks.append(Check(hostname, what, "fail", "not among Prometheus's targets",
                                f"{REDEPLOY} writes them"))  # fmt: skip
    return [*checks, *target_checks(hostname, mine), *alert_checks(hostname, alerts)]


def scraped(api: Api, within: float, expected: set[tuple[Any, Any, Any]]) -> list[dict[str, Any]]:
    """The project's active targets once every expected one is there and each is up or was
    found down by a scrape since this call began (by Prometheus's own clock), or as they are
    after `within` seconds. Not settled: a target "unknown" (discovery and the first scrape
    follow a start or a reload), or one whose last scrape, down, predates the call: a scrape
    during the restart a deploy just did says nothing about now."""
    began = api.now()
    deadline = time.monotonic() + within
    while True:
        active = api.targets()
        mine: list[dict[str, Any]] = [t for t in active if t["labels"].get("job") in targets.JOBS]
        found = {_key(t["labels"].get("job"), t["labels"]) for t in mine}
        settled = expected <= found and all(_settled(t, began) for t in mine)
        if settled or time.monotonic() > deadline:
            return mine
        time.sleep(1.0)


def _settled(target: Mapping[str, Any], began: float) -> bool:
    health = target.get("health")
    return health == "up" or (health == "down" and scraped_at(target) >= began)


def scraped_at(target: Mapping[str, Any]) -> float:
    """A target's lastScrape (RFC 3339, nanoseconds, "Z") as unix seconds; 0 without one."""
    try:
        return datetime.fromisoformat(str(target.get("lastScrape", ""))).timestamp()
    except ValueError:
        return 0.0


def _key(job: Any, labels: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return job, labels.get("host"), labels.get("service")
