"""Runs a bench profile on every selected service of a fleet over SSH: ships the driver and
its plan to the host, streams its events into the live table, fetches the results back and
turns them into the run directory (summary, CSV, plots, HTML)."""

from __future__ import annotations

import hashlib
import json
import shlex
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acceldeploy import secrets
from acceldeploy.bench import dataset, report, series, summary
from acceldeploy.bench.profiles import Profile
from acceldeploy.errors import AcceldeployError
from acceldeploy.host import unitmemory
from acceldeploy.host.bench import conversations, driver
from acceldeploy.serving.hostplan import HostPlan
from acceldeploy.serving.unit import ServiceUnit
from acceldeploy.serving.values import Launch
from acceldeploy.verify.remote import connection

REMOTE_ROOT = "/var/tmp/acceldeploy-bench"
SETTLE_SECONDS = 3.0
IDLE_SECONDS = 4.0
DRIVER_POLL_SECONDS = 0.2
GATEWAY_KEY = "gateway.key"
# What the driver runs with (shipped beside it).
MODULES = (driver, unitmemory, conversations)
EXCLUDED = ("images", "dataset.json", "dataset.template.json", GATEWAY_KEY,
            *(Path(str(m.__file__)).name for m in MODULES))  # fmt: skip


@dataclass(frozen=True)
class CacheReader:
    """Where a run reads one server's prefix-cache counters, before and after it (over SSH, on
    the host itself: a serving host's port is open to the gateways and monitors only)."""

    host: str
    hostvars: dict[str, Any] = field(compare=False, repr=False)
    metrics_url: str = ""
    # {series: key} by the names of the host's stack
    series: dict[str, str] = field(default_factory=dict, compare=False)


PREFIX_KEYS = ("prefix_cache_queries", "prefix_cache_hits")
# prometheus_client's own series in vLLM's /metrics: a restart in the run restarts the counters
STARTED = "process_start_time_seconds"
READ_METRICS = (
    "python3 -c 'import sys, urllib.request as r; "
    "sys.stdout.write(r.urlopen(sys.argv[1], timeout=10).read().decode())' {url}"
)


def cache_reader(
    host: str, hostvars: dict[str, Any], plan: HostPlan, unit: ServiceUnit
) -> CacheReader:
    series = {plan.platform.metrics[key]: key for key in PREFIX_KEYS}
    series[STARTED] = STARTED
    return CacheReader(host, hostvars, f"{unit.base_url}/metrics", series)


def read_counters(readers: tuple[CacheReader, ...], timeout: float) -> dict[str, dict[str, float]]:
    """{host: {prefix_cache_queries, prefix_cache_hits}}; a host that cannot say is left out."""
    found: dict[str, dict[str, float]] = {}
    for reader in readers:
        conn = connection(reader.host, reader.hostvars, timeout)
        try:
            command = READ_METRICS.format(url=shlex.quote(reader.metrics_url))
            out = conn.run(command, hide=True, warn=True, timeout=timeout)
        except Exception:
            continue
        finally:
            conn.close()
        counters = driver.parse_metrics(out.stdout, reader.series)
        if out.exited == 0 and set(PREFIX_KEYS) <= set(counters):
            found[reader.host] = counters
    return found


def fleet_prefix_cache(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], hosts: list[str]
) -> dict[str, Any]:
    """The prefix-cache hit rate of every server over the run, and the fleet's (hits over
    queries, summed): what the gateway's routing leaves in the engines' caches. A server that
    restarted in the run (a rollout) started its counters again: its rise is unknown (None)."""
    per_host: dict[str, Any] = {}
    for host in hosts:
        then, now = before.get(host), after.get(host)
        restarted = then and now and then.get(STARTED) != now.get(STARTED)
        if not then or not now or restarted or any(now[k] < then[k] for k in PREFIX_KEYS):
            per_host[host] = None
            continue
        queries, hits = (now[k] - then[k] for k in PREFIX_KEYS)
        per_host[host] = {"queries": queries, "hits": hits,
                          "hit_rate": round(hits / queries, 4) if queries else None}  # fmt: skip
    read = [v for v in per_host.values() if v]
    queries = sum(v["queries"] for v in read)
    hits = sum(v["hits"] for v in read)
    return {
        "hosts": per_host,
        "queries": queries,
        "hits": hits,
        "hit_rate": round(hits / queries, 4) if queries and len(read) == len(hosts) else None,
    }


@dataclass(frozen=True)
class Via:
    """The load through a gateway's frontend (bench --via-gateway): from `host`'s serving env,
    which also gives the memory and vLLM metrics."""

    gateway: str
    url: str  # the frontend as the load's host reaches it
    servers: tuple[str, ...]  # the hosts the frontend sends to
    key: str | None = None  # a client key of the gateway (never logged or on a command line)
    # each server's prefix-cache counters, read before and after the run
    caches: tuple[CacheReader, ...] = ()


@dataclass
class Target:
    host: str
    hostvars: dict[str, Any]
    plan: HostPlan
    unit: ServiceUnit
    launch: Launch
    profile: Profile
    state: dict[str, Any] = field(default_factory=dict)
    # what the host really serves: the running vLLM's argv and the unit's plain Environment=
    deployed: dict[str, list[str]] | None = None
    via: Via | None = None

    @property
    def service(self) -> str:
        return self.unit.name

    @property
    def where(self) -> str:
        """What the run's figures are of: the host, or the gateway the load went through."""
        return self.via.gateway if self.via else self.host


# The running vLLM's argv (its /proc cmdline, after the launcher's exec) and the unit's
# Environment= (secrets live in its EnvironmentFile, which this does not show).
DEPLOYED = (
    "pid=$(systemctl show -p MainPID --value {unit}); "
    "[ \"$pid\" != 0 ] && tr '\\0' '\\n' < /proc/$pid/cmdline; echo @@env; "
    "systemctl show -p Environment --value {unit}"
)


def read_deployed(target: Target, timeout: float) -> None:
    """Sets target.deployed from the host (left None when the host cannot say)."""
    conn = connection(target.host, target.hostvars, timeout)
    try:
        unit = shlex.quote(f"{target.service}.service")
        out = conn.run(DEPLOYED.format(unit=unit), hide=True, warn=True, timeout=timeout).stdout
    except Exception:
        return
    finally:
        conn.close()
    argv, _, env = out.partition("@@env\n")
    if argv.strip():
        target.deployed = {"argv": argv.split("\n")[:-1], "env": sorted(shlex.split(env))}


def read_all_deployed(targets: list[Target], timeout: float) -> None:
    with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
        list(pool.map(lambda t: read_deployed(t, timeout), targets))


def without_address(argv: list[str]) -> list[str]:
    """The argv without --host/--port and their values: where a service listens is not part
    of what it is (hosts of one fleet may use different ports)."""
    kept: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--host", "--port"):
            skip = True
        elif not token.startswith(("--host=", "--port=")):
            kept.append(token)
    return kept


def run_key(target: Target) -> dict[str, Any]:
    """What must match for two runs to be compared: the service, model, stack, argv and plain
    env as deployed (the inventory's plan when the host cannot say), profile and seed."""
    unit, launch = target.unit, target.launch
    served = target.deployed or {
        "argv": list(launch.argv),
        "env": sorted(f"{k}={v}" for k, v in launch.env.items()),
    }
    served = {**served, "argv": without_address(served["argv"])}
    argv = json.dumps([served["argv"], served["env"]])
    profile = json.dumps(target.profile.to_dict(), sort_keys=True)
    return {
        "service": unit.name,
        "model_path": launch.model_path,
        "platform": target.plan.platform.name,
        "vllm_version": target.plan.platform.vllm_version,
        "argv": served["argv"],
        "env": served["env"],
        "argv_sha256": hashlib.sha256(argv.encode()).hexdigest()[:16],
        "profile": target.profile.name,
        "profile_sha256": hashlib.sha256(profile.encode()).hexdigest()[:16],
        "seed": target.profile.seed,
    }


def driver_plan(target: Target, remote: str, restart: bool) -> dict[str, Any]:
    unit, platform = target.unit, target.plan.platform
    memory_command = list(platform.behaviour.smi_command)
    return {
        "run_dir": remote,
        "unit": f"{unit.name}.service",
        "base_url": unit.base_url,
        "load_url": target.via.url if target.via else unit.base_url,
        "served_model_name": unit.name,
        "tokenizer": target.launch.model_path,
        "label": f"{target.where}-{unit.name}",
        "profile": target.profile.to_dict(),
        "dataset_file": f"{remote}/dataset.json",
        "memory_source": "smi" if memory_command else "process_tree",
        "memory_command": memory_command,
        "sample_interval": target.profile.sample_interval,
        "settle": SETTLE_SECONDS,
        "idle_seconds": IDLE_SECONDS,
        "restart": restart,
        "start_timeout": unit.start_timeout,
        "dev_mode": target.launch.env.get("VLLM_SERVER_DEV_MODE") == "1",
        # through a gateway: its client key (the gateway sends the backends theirs), if any
        "api_key_file": f"{remote}/{GATEWAY_KEY}" if target.via else unit.secret_path,
        "hf_endpoint": target.hostvars.get("model_weights_hf_endpoint") or "",
        # the /metrics series the samples keep, by the names of the host's stack
        "metrics": {platform.metrics[key]: key for key in driver.METRICS.values()},
    }


def _upload(conn: Any, local: Path, remote: str) -> None:
    for path in sorted(local.rglob("*")):
        relative = path.relative_to(local).as_posix()
        if path.is_dir():
            conn.run(f"mkdir -p {shlex.quote(f'{remote}/{relative}')}", hide=True)
        else:
            conn.put(str(path), f"{remote}/{relative}")


def _fetch(conn: Any, remote: str, local: Path) -> None:
    excludes = " ".join(f"--exclude=./{shlex.quote(x)}" for x in EXCLUDED)
    archive = f"{remote}.tar.gz"
    conn.run(f"tar -C {shlex.quote(remote)} {excludes} -czf {shlex.quote(archive)} .", hide=True)
    local.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        conn.get(archive, f"{tmp}/run.tar.gz")
        with tarfile.open(f"{tmp}/run.tar.gz") as tar:
            tar.extractall(local, filter="data")
    conn.run(f"rm -f {shlex.quote(archive)}", hide=True)


class EventStream:
    """File-like sink for the driver's stdout: `@@bench` lines update the target's state."""

    def __init__(self, target: Target, changed: Callable[[], None]) -> None:
        self.target, self.changed, self.buffer = target, changed, ""
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        self.buffer += text
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            self.lines.append(line)
            if line.startswith(driver.EVENT):
                self.target.state.update(json.loads(line[len(driver.EVENT) :]))
                self.changed()
        return len(text)

    def flush(self) -> None:
        pass


def run_driver(
    conn: Any, command: str, remote: str, stream: EventStream, stop: threading.Event
) -> Any:
    """Runs the driver (`command`, shipped to `remote`) until it exits. Ctrl-C (KeyboardInterrupt
    in the main thread) or `stop` (set by the main thread for the hosts' worker threads) stops it
    on the host at once: without a pty the host never sees the Ctrl-C, and fabric would wait
    for the driver's output to end before raising it."""
    promise = conn.run(command, hide=True, warn=True, out_stream=stream, err_stream=stream,
                       asynchronous=True)  # fmt: skip
    try:
        while not promise.runner.process_is_finished:
            if stop.is_set():
                raise KeyboardInterrupt
            time.sleep(DRIVER_POLL_SECONDS)
    except BaseException:
        # '[d]river' keeps pkill from matching the shell that runs it.
        pattern = shlex.quote(f"{remote}/[d]river.py")
        gone = f"! pgrep -f {pattern} >/dev/null"
        conn.run(f"pkill -INT -f {pattern}; for _ in $(seq 50); do {gone} && break; sleep 0.1; "
                 f"done; pkill -KILL -f {pattern}", hide=True, warn=True)  # fmt: skip
        promise.join()
        raise
    return promise.join()


def run_target(
    target: Target,
    run_id: str,
    out: Path,
    restart: bool,
    changed: Callable[[], None],
    timeout: float,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    remote = f"{REMOTE_ROOT}/{run_id}/{target.service}"
    local = out / target.where / target.service
    python = target.unit.argcheck_python
    if not python:
        raise AcceldeployError(
            f"{target.host}/{target.service}: bench runs vLLM's client from the host's serving "
            f"env; platform {target.plan.platform.name} has none on the host (container)"
        )
    # the run's directory goes too once its last service is done
    run_dir = shlex.quote(f"{REMOTE_ROOT}/{run_id}")
    cleanup = f"rm -rf {shlex.quote(remote)}; rmdir --ignore-fail-on-non-empty {run_dir}"
    conn = connection(target.host, target.hostvars, timeout)
    try:
        conn.run(f"install -d -m 0700 {shlex.quote(remote)}", hide=True)
        with tempfile.TemporaryDirectory() as tmp:
            staging = Path(tmp)
            if target.profile.dataset == "images" or target.profile.first_image:
                dataset.write(target.profile, staging)
            elif target.profile.dataset == "sharegpt" and target.profile.dataset_path:
                (staging / "dataset.json").write_bytes(
                    Path(target.profile.dataset_path).read_bytes()
                )
            for module in MODULES:
                source = Path(str(module.__file__))
                (staging / source.name).write_text(source.read_text())
            plan = driver_plan(target, remote, restart)
            (staging / "plan.json").write_text(json.dumps(plan, indent=1))
            if target.via:
                key = staging / GATEWAY_KEY
                key.touch(mode=0o600)  # fabric's put keeps the mode
                key.write_text(f"VLLM_API_KEY={target.via.key}\n" if target.via.key else "")
            _upload(conn, staging, remote)
        env = f"HF_ENDPOINT={shlex.quote(plan['hf_endpoint'])} " if plan["hf_endpoint"] else ""
        stream = EventStream(target, changed)
        command = f"{env}{shlex.quote(python)} {remote}/driver.py {remote}/plan.json"
        caches = target.via.caches if target.via else ()
        caches = caches or (cache_reader(target.host, target.hostvars, target.plan, target.unit),)
        before = read_counters(caches, timeout)
        try:
            result = run_driver(conn, command, remote, stream, stop or threading.Event())
        except BaseException:
            # The driver is stopped by now; its directory goes too.
            conn.run(cleanup, hide=True, warn=True)
            raise
        after = read_counters(caches, timeout)
        _fetch(conn, remote, local)
        conn.run(cleanup, hide=True)
        if result.exited != 0:
            tail = "\n".join(stream.lines[-15:])
            raise AcceldeployError(
                f"{target.where}/{target.service}: the bench driver failed (exit "
                f"{result.exited}); {local}/vllm-bench.log has vLLM's output. Last lines:\n{tail}"
            )
    finally:
        conn.close()
    platform = target.plan.platform.name
    samples = series.load_samples(local / "samples.jsonl", platform, target.launch.devices)
    meta = {
        "host": target.where,
        "service": target.service,
        "platform": platform,
        "key": run_key(target),
        "dev_mode": plan["dev_mode"],
        "via": target.via
        and {
            "gateway": target.via.gateway,
            "url": target.via.url,
            "servers": list(target.via.servers),
            "load_from": target.host,
        },
    }
    found = summary.service_summary(local, samples, meta)
    found["fleet_prefix_cache"] = fleet_prefix_cache(before, after, [c.host for c in caches])
    report.render_service(samples, found, local)
    return found


def run_all(
    targets: list[Target],
    run_id: str,
    out: Path,
    restart: bool,
    serial: bool,
    changed: Callable[[], None],
    timeout: float,
) -> list[dict[str, Any]]:
    """Hosts in parallel (one at a time with `serial`); a host's services one after another.
    A failing target is recorded (state error) and the others go on. Ctrl-C stops every
    host's driver, then raises KeyboardInterrupt."""
    by_host: dict[str, list[Target]] = {}
    for target in targets:
        by_host.setdefault(target.host, []).append(target)
    lock = threading.Lock()
    results: list[dict[str, Any]] = []
    stop = threading.Event()

    def host_job(host_targets: list[Target]) -> None:
        for target in host_targets:
            try:
                if stop.is_set():
                    return
                found = run_target(target, run_id, out, restart, changed, timeout, stop)
            except Exception as exc:
                target.state.update({"event": "error", "error": secrets.mask(str(exc))})
                changed()
                continue
            target.state.update({"event": "summarised", "verdict": found["verdict"]["state"]})
            changed()
            with lock:
                results.append(found)

    with ThreadPoolExecutor(max_workers=1 if serial else max(1, len(by_host))) as pool:
        jobs = [pool.submit(host_job, host_targets) for host_targets in by_host.values()]
        try:
            for job in jobs:
                while not job.done():
                    time.sleep(DRIVER_POLL_SECONDS)
        except KeyboardInterrupt:
            stop.set()
            raise
    order = {(t.where, t.service): i for i, t in enumerate(targets)}
    return sorted(results, key=lambda r: order[(r["host"], r["service"])])
