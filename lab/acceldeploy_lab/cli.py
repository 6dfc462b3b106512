"""`acceldeploy lab` (tools/lab.py): local Debian hosts (12 by default; 11 and 13 too) with
systemd as PID 1 (systemd-nspawn), reachable over ssh, and the caches, mirror and wheel server
they use. ``configure`` adds the lab's commands to a parser; ``run`` runs the one parsed.
acceldeploy_lab.command wires them into `acceldeploy`."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from acceldeploy.downloads import wheelhouse
from acceldeploy_lab import cpupin, hosts, mirror, rootfs, stack, wheelserver
from acceldeploy_lab.inventory import drop_hosts
from acceldeploy_lab.prereq import MIN_FREE_GB, PrereqError
from acceldeploy_lab.rootfs import RootfsError


def _bind(text: str) -> hosts.Bind:
    try:
        return hosts.Bind.parse(text, read_only=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _suites(text: str) -> list[rootfs.Suite]:
    try:
        return [rootfs.suite_named(name.strip()) for name in text.split(",")]
    except RootfsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _suite_names() -> str:
    return ", ".join(f"{s.name} ({s.release})" for s in rootfs.SUITES.values())


DESCRIPTION = (
    "Debian lab hosts (systemd-nspawn, host network, sshd on 127.0.0.1:PORT), "
    f"{rootfs.DEFAULT_SUITE.release} unless `up --suites` asks for others. "
    f"Needs root, debootstrap, systemd-nspawn, overlayfs, {MIN_FREE_GB} GB free in "
    "$ACCELDEPLOY_CACHE (default /var/cache/acceldeploy)."
)


def configure(top: argparse.ArgumentParser) -> None:
    """The lab's commands (up, down, status, prepare, mirror, wheels, ssh) on top; each
    command's parser is of top's class."""
    top.description = DESCRIPTION
    sub = top.add_subparsers(dest="lab_command", metavar="LAB_COMMAND", required=True)
    up = sub.add_parser(
        "up",
        help="start lab1..labN (idempotent) and write inventory/lab/hosts.yml",
        description="Hosts already running are left alone; others start fresh unless "
        "`down --keep` kept their state. Each suite's rootfs is built once with debootstrap "
        "(a few minutes) and cached.",
    )
    count = up.add_mutually_exclusive_group()
    count.add_argument(
        "--hosts",
        type=int,
        metavar="N",
        help=f"N {rootfs.DEFAULT_SUITE.name} hosts (default {hosts.DEFAULT_HOSTS})",
    )
    count.add_argument(
        "--suites",
        type=_suites,
        metavar="SUITE,...",
        help="one host per suite listed, in order: lab1 boots the first (a suite may repeat; "
        f"not with --hosts); known: {_suite_names()}",
    )
    up.add_argument(
        "--base-port",
        type=int,
        default=hosts.DEFAULT_BASE_PORT,
        metavar="PORT",
        help="ssh port of lab1; labN gets PORT+N-1 (default %(default)s)",
    )
    up.add_argument(
        "--bind-ro",
        type=_bind,
        action="append",
        default=[],
        metavar="SRC:DST",
        help="bind SRC on this machine read-only at DST in every host (repeatable)",
    )
    up.add_argument("--timeout", type=float, default=hosts.BOOT_TIMEOUT, metavar="SECONDS")
    up.add_argument(
        "--isolated",
        action="store_true",
        help="each host in its own network namespace on the bridge acclab0 with this machine "
        "(10.213.0.1), no other route; this machine accepts only SSH replies and the bundle "
        "server's port from them (needs nftables)",
    )
    up.add_argument(
        "--gateways",
        type=int,
        default=0,
        metavar="N",
        help="N more hosts after them, in the inventory's gateways group (roles/gateway: "
        "HAProxy, no vLLM)",
    )
    up.add_argument(
        "--monitors",
        type=int,
        default=0,
        metavar="N",
        help="N more hosts after those, in the inventory's monitors group (roles/monitor: "
        "Prometheus, no vLLM)",
    )
    up.add_argument(
        "--inventory", type=Path, default=hosts.DEFAULT_INVENTORY, help=argparse.SUPPRESS
    )
    down = sub.add_parser("down", help="shut all lab hosts down and remove their state")
    down.add_argument(
        "--keep",
        action="store_true",
        help="keep each host's written state (overlay upper dir) for the next up",
    )
    down.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="only this host (repeatable; the last ones, e.g. a gateway), dropped from the "
        "inventory",
    )
    sub.add_parser("status", help="per host: suite, running, ssh port, boot id, is-system-running")
    prepare = sub.add_parser(
        "prepare",
        help="fill the cache once: vLLM CPU wheels, lab venv, tiny model, mirror repo",
    )
    prepare.add_argument(
        "--rootfs",
        type=_suites,
        default=[],
        metavar="SUITE,...",
        help=f"also build these suites' rootfs (debootstrap; known: {_suite_names()})",
    )
    mirror_cmd = sub.add_parser("mirror", help="the local HF mirror (olah) on 127.0.0.1:PORT")
    mirror_cmd.add_argument("action", choices=("start", "stop", "status", "served"))
    mirror_cmd.add_argument("--port", type=int, default=mirror.DEFAULT_PORT)
    wheels_cmd = sub.add_parser(
        "wheels", help="serve the wheel cache as pip find-links on 127.0.0.1:PORT/<host>/"
    )
    wheels_cmd.add_argument("action", choices=("start", "stop", "status", "served"))
    wheels_cmd.add_argument("--port", type=int, default=wheelserver.DEFAULT_PORT)
    pin = sub.add_parser(
        "pin",
        help="each running host on a CPU of its own (lab<i>: CPU i-1 mod N), as separate "
        "machines; --off: all CPUs again",
    )
    pin.add_argument("--off", action="store_true")
    ssh = sub.add_parser("ssh", help="ssh into a host as root: ssh lab1 [CMD...]")
    ssh.add_argument("host")
    ssh.add_argument("cmd", nargs=argparse.REMAINDER)


def _mirror(action: str, port: int) -> object:
    lab_mirror = mirror.default_mirror(port)
    if action == "start":
        return mirror.start(lab_mirror)
    if action == "stop":
        return {"stopped": mirror.stop(lab_mirror)}
    if action == "status":
        pid = mirror.running_pid(lab_mirror)
        return {"pid": pid, "endpoint": lab_mirror.endpoint}
    return mirror.served(lab_mirror)


def _wheels(action: str, port: int) -> object:
    server = wheelserver.default_server(port)
    if action == "start":
        return wheelserver.start(server)
    if action == "stop":
        return {"stopped": wheelserver.stop(server)}
    if action == "status":
        return {"pid": wheelserver.running_pid(server), "url": server.url}
    return wheelserver.served(server)


def _terminate(signum: int, _frame: FrameType | None) -> None:
    sys.exit(128 + signum)


def run(args: argparse.Namespace, prog: str = "lab") -> int:
    """The lab command parsed into args; errors are one line on stderr naming prog."""
    signal.signal(signal.SIGTERM, _terminate)
    paths = hosts.LabPaths.from_env()
    try:
        if args.lab_command == "up":
            count = hosts.DEFAULT_HOSTS if args.hosts is None else args.hosts
            inventory = hosts.up(
                paths,
                suites=args.suites or [rootfs.DEFAULT_SUITE] * count,
                base_port=args.base_port,
                binds=args.bind_ro,
                inventory=args.inventory,
                timeout=args.timeout,
                isolated=args.isolated,
                gateways=args.gateways,
                monitors=args.monitors,
            )
            print(inventory)
        elif args.lab_command == "down":
            stopped = hosts.down(paths, keep=args.keep, only=args.host)
            if args.host:
                drop_hosts(hosts.DEFAULT_INVENTORY, stopped)
        elif args.lab_command == "status":
            print(hosts.format_status(hosts.status(paths)))
        elif args.lab_command == "prepare":
            print(json.dumps(stack.prepare(rootfs_suites=args.rootfs), indent=2, default=str))
        elif args.lab_command == "mirror":
            print(json.dumps(_mirror(args.action, args.port), indent=2))
        elif args.lab_command == "wheels":
            print(json.dumps(_wheels(args.action, args.port), indent=2))
        elif args.lab_command == "pin":
            for name, where in cpupin.pin(paths, off=args.off).items():
                print(f"{name}: {where}")
        elif args.lab_command == "ssh":
            argv_ssh = hosts.ssh_command(paths, args.host, args.cmd)
            sys.stdout.flush()
            os.execvp(argv_ssh[0], argv_ssh)
    except PrereqError as exc:
        for problem in exc.problems:
            print(problem.line(), file=sys.stderr)
        return 2
    except (
        hosts.LabError,
        RootfsError,
        mirror.MirrorError,
        wheelhouse.WheelhouseError,
        wheelserver.WheelServerError,
    ) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
