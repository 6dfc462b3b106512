"""Lab hosts: one systemd-nspawn container per host, each kept alive by a small supervisor.

Layout:
    $ACCELDEPLOY_CACHE/rootfs/<suite>       shared read-only lower layer (rootfs.py)
    $ACCELDEPLOY_CACHE/lab/<host>/upper     the host's writes (overlayfs upper + work dirs)
    /run/acceldeploy-lab/id_ed25519         root's ssh key for every host
    /run/acceldeploy-lab/hosts/<host>/      host.json, supervisor.pid, nspawn.pid, logs, root/

The supervisor (``python -m acceldeploy_lab.hosts supervise RUN_DIR``) runs detached in its
own session, mounts the overlay on root/, and runs systemd-nspawn in a loop: exit code 133
(the container asked for a reboot) starts it again, anything else ends the loop. SIGTERM to
the supervisor is passed on to systemd-nspawn, which shuts the container down in order.
Each host has its own cgroups; processes.py finds, stops and kills what a host runs.
Each host boots one Debian suite (bookworm unless asked otherwise); hosts of different
suites run side by side, each on the rootfs of its own suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from acceldeploy_lab import (
    REPO,
    isolation,
    ospackages,
    prereq,
    progress,
    pythonpath,
    rootfs,
    wheelserver,
)
from acceldeploy_lab.inventory import InventoryHost, write_inventory
from acceldeploy_lab.processes import (
    HOST_PREFIX,
    MACHINE_PREFIX,
    _read_text,
    cgroup_hosts,
    join_cgroups,
    kill_host_processes,
    nspawn_pids,
    prune_cgroups,
    request_stop,
    supervisor_pid,
    wait_stopped,
)
from acceldeploy_lab.processes import LabError as LabError

DEFAULT_STATE = Path("/run/acceldeploy-lab")
DEFAULT_HOSTS = 2
DEFAULT_BASE_PORT = 2201
REBOOT_EXIT = 133
NETWORK_UNIT = "acceldeploy-lab-net.service"
BOOT_TIMEOUT = 180.0
STOP_TIMEOUT = 60.0
DEFAULT_INVENTORY = REPO / "inventory" / "lab" / "hosts.yml"
HOST_NAME = re.compile(rf"^{HOST_PREFIX}([1-9][0-9]*)$")
SSH_OPTIONS = (
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "IdentitiesOnly=yes",
)

Say = Callable[[str], None]


def say_stdout(message: str) -> None:
    print(message, flush=True)


@dataclass(frozen=True)
class Bind:
    src: Path
    dst: str
    read_only: bool = True

    @classmethod
    def parse(cls, text: str, read_only: bool = True) -> Bind:
        src, sep, dst = text.partition(":")
        if not src:
            raise ValueError(f"bind mount {text!r}: expected SRC:DST")
        return cls(Path(src).absolute(), dst if sep and dst else src, read_only)

    @classmethod
    def of(cls, value: Bind | tuple[str | Path, str, bool]) -> Bind:
        if isinstance(value, Bind):
            return value
        src, dst, read_only = value
        return cls(Path(src).absolute(), str(dst), bool(read_only))

    def nspawn_arg(self) -> str:
        flag = "--bind-ro" if self.read_only else "--bind"
        src = str(self.src).replace(":", "\\:")
        dst = self.dst.replace(":", "\\:")
        return f"{flag}={src}:{dst}"


@dataclass(frozen=True)
class LabPaths:
    state: Path
    cache: Path

    @classmethod
    def from_env(cls) -> LabPaths:
        state = Path(os.environ.get("ACCELDEPLOY_LAB_STATE") or DEFAULT_STATE)
        return cls(state=state, cache=rootfs.cache_dir())

    @property
    def key(self) -> Path:
        return self.state / "id_ed25519"

    @property
    def lock(self) -> Path:
        return self.state / "lock"

    def rootfs(self, suite: rootfs.Suite) -> Path:
        return rootfs.rootfs_path(self.cache, suite)

    def run_dir(self, name: str) -> Path:
        return self.state / "hosts" / name

    def data_dir(self, name: str) -> Path:
        return self.cache / "lab" / name


@dataclass(frozen=True)
class HostSpec:
    name: str
    index: int
    ssh_port: int
    lower: Path
    data: Path
    run: Path
    suite: rootfs.Suite = rootfs.DEFAULT_SUITE
    binds: tuple[Bind, ...] = ()
    capabilities: tuple[str, ...] = ()
    # The isolated lab (acceldeploy_lab.isolation): the host's address on the lab bridge, in its own
    # network namespace; empty: it shares this machine's network (sshd on 127.0.0.1:ssh_port).
    address: str = ""

    @property
    def ssh_host(self) -> str:
        return self.address or "127.0.0.1"

    @property
    def machine(self) -> str:
        return MACHINE_PREFIX + self.name

    @property
    def upper(self) -> Path:
        return self.data / "upper"

    @property
    def work(self) -> Path:
        return self.data / "work"

    @property
    def merged(self) -> Path:
        return self.run / "root"

    @property
    def spec_file(self) -> Path:
        return self.run / "host.json"

    @property
    def supervisor_pid_file(self) -> Path:
        return self.run / "supervisor.pid"

    @property
    def nspawn_pid_file(self) -> Path:
        return self.run / "nspawn.pid"

    @property
    def console_log(self) -> Path:
        return self.run / "console.log"

    @property
    def supervisor_log(self) -> Path:
        return self.run / "supervisor.log"

    def to_json(self) -> str:
        data = {
            "name": self.name,
            "index": self.index,
            "ssh_port": self.ssh_port,
            "lower": str(self.lower),
            "data": str(self.data),
            "run": str(self.run),
            "suite": self.suite.name,
            "binds": [[str(b.src), b.dst, b.read_only] for b in self.binds],
            "capabilities": list(self.capabilities),
            "address": self.address,
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def load(cls, run: Path) -> HostSpec:
        data = json.loads((run / "host.json").read_text())
        return cls(
            name=data["name"],
            index=int(data["index"]),
            ssh_port=int(data["ssh_port"]),
            lower=Path(data["lower"]),
            data=Path(data["data"]),
            run=Path(data["run"]),
            # host.json written before the lab knew suites: those hosts run bookworm
            suite=rootfs.suite_named(data.get("suite", rootfs.DEFAULT_SUITE.name)),
            binds=tuple(Bind(Path(s), d, bool(ro)) for s, d, ro in data["binds"]),
            capabilities=tuple(data["capabilities"]),
            address=str(data.get("address") or ""),
        )


def host_name(index: int) -> str:
    return f"{HOST_PREFIX}{index}"


def host_index(name: str) -> int:
    match = HOST_NAME.match(name)
    if not match:
        raise LabError(
            f"unknown host {name!r}: lab hosts are named {HOST_PREFIX}1, {HOST_PREFIX}2, ..."
        )
    return int(match.group(1))


def _write_atomic(path: Path, content: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(content)
    tmp.chmod(mode)
    os.replace(tmp, path)


def _tail(path: Path, lines: int = 20) -> str:
    text = _read_text(path) or ""
    return "\n".join(f"    {line}" for line in text.splitlines()[-lines:])


def _check_overlay_paths(spec: HostSpec) -> None:
    for path in (spec.lower, spec.upper, spec.work):
        if any(c in str(path) for c in ",:"):
            raise LabError(f"overlayfs cannot use {path}: no ',' or ':' allowed in lab paths")


def mount_overlay(spec: HostSpec) -> None:
    if rootfs.is_mounted(spec.merged):
        return
    _check_overlay_paths(spec)
    for directory in (spec.upper, spec.work, spec.merged):
        directory.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={spec.lower},upperdir={spec.upper},workdir={spec.work}"
    result = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(spec.merged)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise LabError(f"{spec.name}: mounting the overlay failed: {result.stderr.strip()}")


def nspawn_env() -> dict[str, str]:
    env = dict(os.environ)
    env["SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"] = "1"
    return env


def nspawn_argv(spec: HostSpec) -> list[str]:
    # No systemd as PID 1 here, hence no machined/bus: --register=no --keep-unit.
    argv = [
        "systemd-nspawn",
        "--boot",
        f"--directory={spec.merged}",
        f"--machine={spec.machine}",
        "--register=no",
        "--keep-unit",
        "--link-journal=no",
        "--settings=no",
        "--console=read-only",
    ]
    argv += [bind.nspawn_arg() for bind in spec.binds]
    argv += [f"--capability={cap}" for cap in spec.capabilities]
    if spec.address:
        argv.append(f"--network-bridge={isolation.BRIDGE}")
        # systemd's IP firewalling (the units' IPAddressDeny=/IPAddressAllow=) is a cgroup BPF
        # program, and nspawn's seccomp filter refuses bpf() unless allowed: on the isolated
        # lab, where hosts have addresses of their own, the units' firewall holds as on a rack.
        argv.append("--system-call-filter=bpf")
    return argv


class _Supervisor:
    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    def log(self, message: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self.spec.name}: {message}", flush=True)

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.log(f"got {signal.Signals(signum).name}, shutting the host down")
        self.stopping = True
        self._forward_stop()

    def _forward_stop(self) -> None:
        child = self.child
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        spec = self.spec
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _write_atomic(spec.supervisor_pid_file, f"{os.getpid()}\n")
        join_cgroups(spec.machine)
        code = 0
        try:
            while not self.stopping:
                mount_overlay(spec)
                prune_cgroups(spec.machine, keep_top=True)
                with spec.console_log.open("ab") as console:
                    self.child = subprocess.Popen(
                        nspawn_argv(spec),
                        stdin=subprocess.DEVNULL,
                        stdout=console,
                        stderr=subprocess.STDOUT,
                        env=nspawn_env(),
                    )
                _write_atomic(spec.nspawn_pid_file, f"{self.child.pid}\n")
                self.log(f"systemd-nspawn started, pid {self.child.pid}")
                if self.stopping:
                    self._forward_stop()
                code = self.child.wait()
                self.log(f"systemd-nspawn exited with {code}")
                if code != REBOOT_EXIT:
                    break
                self.log("the host rebooted itself; starting it again")
        finally:
            spec.nspawn_pid_file.unlink(missing_ok=True)
            rootfs.unmount_under(spec.merged)
            prune_cgroups(spec.machine, keep_top=True)
            self.log("stopped")
        return code


def supervise(run: Path) -> int:
    return _Supervisor(HostSpec.load(run)).run()


def ensure_key(paths: LabPaths) -> Path:
    key = paths.key
    if key.exists() and key.with_name(key.name + ".pub").exists():
        return key
    paths.state.mkdir(parents=True, exist_ok=True)
    paths.state.chmod(0o755)
    tmp = key.with_name(f".{key.name}.{os.getpid()}")
    for stale in (tmp, tmp.with_name(tmp.name + ".pub")):
        stale.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "acceldeploy-lab", "-f", str(tmp)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    os.replace(tmp.with_name(tmp.name + ".pub"), key.with_name(key.name + ".pub"))
    os.replace(tmp, key)
    return key


def _write_in_host(root: Path, rel: str, content: str, mode: int = 0o644) -> None:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    target.chmod(mode)


def _prepare_host(spec: HostSpec, public_key: str) -> None:
    mount_overlay(spec)
    root = spec.merged
    _write_in_host(root, "etc/hostname", f"{spec.name}\n")
    _write_in_host(root, "etc/hosts", rootfs.HOSTS_FILE + f"127.0.1.1\t{spec.name}\n")
    if not (_read_text(root / "etc/machine-id") or "").strip():
        _write_in_host(root, "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    listen = f"Port {spec.ssh_port}\n" + ("" if spec.address else "ListenAddress 127.0.0.1\n")
    _write_in_host(root, "etc/ssh/sshd_config.d/20-acceldeploy-lab-listen.conf", listen)
    # Packages only from the controller: the wheel server's repository, or on an isolated
    # host the bundle server's (the one port the lab's filter lets through).
    if spec.address:
        bundle = f"http://{isolation.CONTROLLER}:{isolation.ALLOWED_PORTS[0]}"
        line = ospackages.sources_line(bundle, f"{spec.suite.name}-amd64")
    else:
        wheels = f"http://127.0.0.1:{wheelserver.DEFAULT_PORT}"
        line = ospackages.sources_line(wheels, spec.suite.name)
    _write_in_host(root, "etc/apt/sources.list", line)
    unit = root / "etc/systemd/system" / NETWORK_UNIT
    wants = root / "etc/systemd/system/multi-user.target.wants" / NETWORK_UNIT
    if spec.address:
        _write_in_host(
            root, f"etc/systemd/system/{NETWORK_UNIT}", isolation.unit_file(spec.address)
        )
        wants.parent.mkdir(parents=True, exist_ok=True)
        if not wants.is_symlink():
            wants.symlink_to(f"/etc/systemd/system/{NETWORK_UNIT}")
    else:
        wants.unlink(missing_ok=True)
        unit.unlink(missing_ok=True)
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    _write_in_host(root, "root/.ssh/authorized_keys", public_key, 0o600)
    if not (root / "etc/ssh/ssh_host_ed25519_key").exists():
        subprocess.run(["ssh-keygen", "-q", "-A", "-f", str(root)], check=True, capture_output=True)


def boot_host(
    paths: LabPaths,
    index: int,
    ssh_port: int,
    binds: Sequence[Bind | tuple[str | Path, str, bool]] = (),
    capabilities: Sequence[str] = (),
    suite: rootfs.Suite = rootfs.DEFAULT_SUITE,
    say: Say = say_stdout,
    address: str = "",
) -> HostSpec:
    """Start host lab<index> on the suite's rootfs under a detached supervisor; return at
    once (see wait_ready).

    binds are extra mounts: (host source, path in the host, read_only).
    """
    name = host_name(index)
    spec = HostSpec(
        name=name,
        index=index,
        ssh_port=ssh_port,
        lower=paths.rootfs(suite),
        data=paths.data_dir(name),
        run=paths.run_dir(name),
        suite=suite,
        binds=tuple(Bind.of(b) for b in binds),
        capabilities=tuple(capabilities),
        address=address,
    )
    digest = rootfs.recipe_digest(suite)
    digest_file = spec.data / "rootfs.digest"
    if spec.upper.exists() and _read_text(digest_file) != digest:
        say(f"{name}: kept state was made on another rootfs; starting fresh")
        rootfs.remove_tree(spec.data)
    elif spec.upper.exists():
        say(f"{name}: reusing kept state in {spec.data}")
    spec.data.mkdir(parents=True, exist_ok=True)
    _write_atomic(digest_file, digest)
    spec.run.mkdir(parents=True, exist_ok=True)
    for log in (spec.console_log, spec.supervisor_log):
        log.write_bytes(b"")
    _write_atomic(spec.spec_file, spec.to_json())
    public_key = paths.key.with_name(paths.key.name + ".pub").read_text()
    _prepare_host(spec, public_key)
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    with spec.supervisor_log.open("ab") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "acceldeploy_lab.hosts", "supervise", str(spec.run)],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd="/",
            env=env,
            start_new_session=True,
        )
    _write_atomic(spec.supervisor_pid_file, f"{proc.pid}\n")
    say(f"{name}: booting {suite.name} (ssh {spec.ssh_host}:{ssh_port}, supervisor pid {proc.pid})")
    return spec


def ssh_argv(
    key: Path,
    port: int,
    command: Sequence[str] = (),
    batch: bool = True,
    host: str = "127.0.0.1",
) -> list[str]:
    argv = ["ssh", "-i", str(key), "-p", str(port), *SSH_OPTIONS]
    if batch:
        argv += ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    return [*argv, f"root@{host}", *command]


def ssh_run(
    key: Path, port: int, command: str, timeout: float = 30.0, host: str = "127.0.0.1"
) -> tuple[int, str]:
    try:
        result = subprocess.run(
            ssh_argv(key, port, [command], host=host),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return 255, ""
    return result.returncode, result.stdout.strip()


def _boot_failure(spec: HostSpec, why: str) -> LabError:
    return LabError(
        f"{spec.name}: {why}\n"
        f"  console ({spec.console_log}):\n{_tail(spec.console_log)}\n"
        f"  supervisor ({spec.supervisor_log}):\n{_tail(spec.supervisor_log, 8)}"
    )


def wait_ready(
    specs: Sequence[HostSpec], key: Path, timeout: float = BOOT_TIMEOUT
) -> dict[str, str]:
    """Wait until every host's `systemctl is-system-running` has settled; fail unless running."""
    deadline = time.monotonic() + timeout
    pending = list(specs)
    states: dict[str, str] = {}
    last: dict[str, str] = {}
    while pending:
        for spec in list(pending):
            if supervisor_pid(spec.run) is None:
                raise _boot_failure(spec, "stopped while booting")
            _, state = ssh_run(
                key, spec.ssh_port, "systemctl is-system-running", timeout=10, host=spec.ssh_host
            )
            last[spec.name] = state or "no ssh yet"
            if state and state not in ("initializing", "starting"):
                states[spec.name] = state
                pending.remove(spec)
        if pending:
            if time.monotonic() > deadline:
                spec = pending[0]
                raise _boot_failure(
                    spec, f"not ready after {timeout:.0f}s (state: {last.get(spec.name)})"
                )
            time.sleep(0.3)
    problems = []
    for spec in specs:
        if states[spec.name] != "running":
            _, failed = ssh_run(
                key, spec.ssh_port, "systemctl --failed --no-legend --plain", host=spec.ssh_host
            )
            problems.append(
                f"{spec.name}: is-system-running says {states[spec.name]}; failed units:\n"
                + "\n".join(f"    {line}" for line in (failed or "(none listed)").splitlines())
            )
    if problems:
        recipe = "MASKED_UNITS in lab/acceldeploy_lab/rootfs.py"
        raise LabError(
            "\n".join(problems) + f"\n  make them boot clean: fix the rootfs recipe ({recipe})"
        )
    return states


def known_hosts(paths: LabPaths) -> list[str]:
    names: set[str] = set()
    runs = paths.state / "hosts"
    if runs.is_dir():
        names.update(p.name for p in runs.iterdir() if (p / "host.json").exists())
    datas = paths.cache / "lab"
    if datas.is_dir():
        names.update(p.name for p in datas.iterdir() if p.is_dir())
    names.update(cgroup_hosts())
    names.update(m.removeprefix(MACHINE_PREFIX) for m in nspawn_pids().values())
    return sorted((n for n in names if HOST_NAME.match(n)), key=host_index)


def running_hosts(paths: LabPaths) -> list[str]:
    return [n for n in known_hosts(paths) if supervisor_pid(paths.run_dir(n)) is not None]


def up(
    paths: LabPaths,
    suites: Sequence[rootfs.Suite] = (rootfs.DEFAULT_SUITE,) * DEFAULT_HOSTS,
    base_port: int = DEFAULT_BASE_PORT,
    binds: Sequence[Bind | tuple[str | Path, str, bool]] = (),
    inventory: Path = DEFAULT_INVENTORY,
    timeout: float = BOOT_TIMEOUT,
    say: Say = say_stdout,
    isolated: bool = False,
    gateways: int = 0,
    monitors: int = 0,
) -> Path:
    """Start lab1..labN, host i booting suites[i-1]; hosts already running are left alone.
    isolated: each host in its own network namespace on the lab bridge (acceldeploy_lab.isolation).
    gateways, monitors: that many more hosts after them, in the inventory's gateways group,
    then in its monitors group."""
    suites = [*suites, *[rootfs.DEFAULT_SUITE] * (gateways + monitors)]
    serving = len(suites) - gateways - monitors
    if not suites:
        raise LabError("--hosts must be at least 1")
    bind_list = [Bind.of(b) for b in binds]
    wanted = {host_name(i): suite for i, suite in enumerate(suites, start=1)}
    names = list(wanted)
    running = set(running_hosts(paths))
    orphans = sorted({m.removeprefix(MACHINE_PREFIX) for m in nspawn_pids().values()} - running)
    if orphans:
        raise LabError(
            f"{', '.join(orphans)}: container running without its supervisor: "
            "run `tools/lab.py down` first"
        )
    extra = sorted(running - set(names), key=host_index)
    if extra:
        count = host_index(extra[-1])
        raise LabError(
            f"{', '.join(extra)} running but {len(names)} hosts asked: run `tools/lab.py down` "
            f"first or ask for {count} (--hosts {count}, or {count} --suites)"
        )
    running_specs = {name: HostSpec.load(paths.run_dir(name)) for name in running}
    on_other_suite = [
        f"{name} runs {running_specs[name].suite.name}, {wanted[name].name} asked"
        for name in sorted(running, key=host_index)
        if running_specs[name].suite.name != wanted[name].name
    ]
    if on_other_suite:
        raise LabError(f"{'; '.join(on_other_suite)}: run `tools/lab.py down` first")
    on_other_network = [
        name
        for name in sorted(running, key=host_index)
        if bool(running_specs[name].address) != isolated
    ]
    if on_other_network:
        mode = "isolated" if isolated else "shared-network"
        raise LabError(
            f"{', '.join(on_other_network)} running, not as {mode} hosts: "
            "run `tools/lab.py down` first"
        )
    to_start = [(i, n) for i, n in enumerate(names, start=1) if n not in running]
    ports = {n: 22 if isolated else base_port + i - 1 for i, n in to_start}
    suites_needed = list(dict.fromkeys(suites))
    stale = [s for s in suites_needed if not rootfs.is_current(paths.rootfs(s), s)]
    needed = ["systemd-nspawn", "ssh", "ssh-keygen", "mount", "umount"]
    if stale:
        needed.insert(0, "debootstrap")
    prereq.require(
        [
            *prereq.check_root(),
            *prereq.check_binaries(needed),
            *prereq.check_overlayfs(),
            *prereq.check_cgroup2(),
            *prereq.check_disk(paths.cache),
            *([] if isolated else prereq.check_ports_free(ports.values())),
            *prereq.check_binaries(["ip", "nft"] if isolated else []),
            *prereq.check_paths_exist(b.src for b in bind_list),
        ]
    )
    on_stale = sorted((n for n in running if wanted[n] in stale), key=host_index)
    if on_stale:
        raise LabError(
            f"the rootfs recipe changed while {', '.join(on_stale)} run on the old one: "
            "run `tools/lab.py down` first, then up"
        )
    paths.state.mkdir(parents=True, exist_ok=True)
    with rootfs.file_lock(paths.lock):
        try:
            for suite in suites_needed:
                rootfs.ensure_rootfs(paths.cache, suite, say)
        except rootfs.RootfsError as exc:
            raise LabError(str(exc)) from exc
        key = ensure_key(paths)
        if isolated:
            try:
                isolation.ensure_bridge()
            except isolation.IsolationError as exc:
                raise LabError(str(exc)) from exc
        specs: list[HostSpec] = []
        for name, suite in wanted.items():
            if name in running:
                spec = running_specs[name]
                say(f"{name}: already running (ssh {spec.ssh_host}:{spec.ssh_port}), left alone")
                if set(spec.binds) != set(bind_list):
                    say(f"{name}: runs with other bind mounts than asked; down/up to change them")
                specs.append(spec)
            else:
                index = host_index(name)
                address = isolation.host_address(index) if isolated else ""
                spec = boot_host(
                    paths, index, ports[name], bind_list, suite=suite, say=say, address=address
                )
                specs.append(spec)
        with progress.step(f"boot: {', '.join(s.name for s in specs)} until systemd is running"):
            wait_ready(specs, key, timeout)
        say("all hosts: systemctl is-system-running = running")
        hosts = [
            InventoryHost(
                s.name,
                s.index,
                s.ssh_port,
                s.suite.name,
                s.address,
                serving < s.index <= serving + gateways,
                s.index > serving + gateways,
            )
            for s in specs
        ]
        return write_inventory(inventory, hosts, key, paths.cache)


def _finish_stop(
    paths: LabPaths, name: str, pid: int | None, deadline: float, keep: bool, say: Say
) -> None:
    run = paths.run_dir(name)
    machine = MACHINE_PREFIX + name
    if not wait_stopped(machine, pid, deadline):
        say(f"{name}: did not shut down in time; killing it")
        kill_host_processes(machine, pid)
    rootfs.unmount_under(run / "root")
    prune_cgroups(machine, keep_top=False)
    for stale in ("host.json", "supervisor.pid", "nspawn.pid"):
        (run / stale).unlink(missing_ok=True)
    if (run / "root").is_dir():
        (run / "root").rmdir()
    if keep:
        say(f"{name}: stopped; state kept in {paths.data_dir(name)}")
    else:
        rootfs.remove_tree(paths.data_dir(name))
        say(f"{name}: stopped and removed")


def down(
    paths: LabPaths,
    keep: bool = False,
    timeout: float = STOP_TIMEOUT,
    say: Say = say_stdout,
    only: Sequence[str] = (),
) -> list[str]:
    """Stops every lab host, or only those named (the last ones: the others keep their
    numbering, and the inventory loses the stopped ones)."""
    prereq.require(prereq.check_root())
    known = known_hosts(paths)
    unknown = sorted(set(only) - set(known))
    if unknown:
        raise LabError(f"{', '.join(unknown)}: no such lab host (known: {', '.join(known)})")
    names = [n for n in known if n in only] if only else known
    if not names:
        say("no lab hosts")
        return []
    paths.state.mkdir(parents=True, exist_ok=True)
    with rootfs.file_lock(paths.lock):
        pids = {name: request_stop(paths.run_dir(name), MACHINE_PREFIX + name) for name in names}
        deadline = time.monotonic() + timeout
        for name in names:
            _finish_stop(paths, name, pids[name], deadline, keep, say)
        if len(names) == len(known) and isolation.remove_bridge():
            say(f"the isolated lab's bridge {isolation.BRIDGE} and its filter removed")
    return names


@dataclass(frozen=True)
class HostStatus:
    name: str
    state: str
    ssh_port: int | None
    boot_id: str = "-"
    system: str = "-"
    suite: str = "-"
    ssh_host: str = "127.0.0.1"


def kept_suite(paths: LabPaths, name: str) -> str:
    """The suite of a stopped host's kept state (`down --keep`), from the rootfs it was made on."""
    digest = _read_text(paths.data_dir(name) / "rootfs.digest")
    return next((s.name for s in rootfs.SUITES.values() if rootfs.recipe_digest(s) == digest), "-")


def status(paths: LabPaths) -> list[HostStatus]:
    prereq.require([*prereq.check_root(), *prereq.check_binaries(["ssh"])])
    rows = []
    for name in known_hosts(paths):
        run = paths.run_dir(name)
        spec = HostSpec.load(run) if (run / "host.json").exists() else None
        port = spec.ssh_port if spec else None
        if supervisor_pid(run) is None or spec is None:
            orphaned = nspawn_pids(MACHINE_PREFIX + name)
            state = "orphaned" if orphaned else "stopped"
            rows.append(HostStatus(name, state, port, suite=kept_suite(paths, name)))
            continue
        code, out = ssh_run(
            paths.key,
            spec.ssh_port,
            "cat /proc/sys/kernel/random/boot_id; systemctl is-system-running",
            timeout=15,
            host=spec.ssh_host,
        )
        lines = out.splitlines()
        boot_id = lines[0] if lines else "-"
        system = lines[1] if len(lines) > 1 else ("unreachable" if code == 255 else "-")
        rows.append(
            HostStatus(name, "running", port, boot_id, system, spec.suite.name, spec.ssh_host)
        )
    return rows


def format_status(rows: Iterable[HostStatus]) -> str:
    table = [("HOST", "SUITE", "STATE", "SSH", "BOOT ID", "SYSTEM")]
    for row in rows:
        port = f"{row.ssh_host}:{row.ssh_port}" if row.ssh_port else "-"
        table.append((row.name, row.suite, row.state, port, row.boot_id, row.system))
    if len(table) == 1:
        return "no lab hosts (tools/lab.py up)"
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table
    )


def ssh_command(paths: LabPaths, name: str, command: Sequence[str]) -> list[str]:
    prereq.require([*prereq.check_root(), *prereq.check_binaries(["ssh"])])
    run = paths.run_dir(name)
    host_index(name)
    if supervisor_pid(run) is None:
        raise LabError(f"{name} is not running (tools/lab.py status; tools/lab.py up)")
    spec = HostSpec.load(run)
    return ssh_argv(paths.key, spec.ssh_port, command, batch=False, host=spec.ssh_host)


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "supervise":
        return supervise(Path(argv[1]))
    print("usage: python -m acceldeploy_lab.hosts supervise RUN_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
