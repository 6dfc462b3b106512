"""`acceldeploy bundle`: build, verify, compare and serve an offline bundle (docs/operations/
air-gapped.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from acceldeploy.bundle import build, manifest, server
from acceldeploy.cli.common import Parents, command
from acceldeploy.downloads import wheelhouse
from acceldeploy.errors import AcceldeployError
from acceldeploy.host.fetch.common import GIB
from acceldeploy.inventory.hostvars import hosts_vars

DEFAULT_PORT = 8093


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bundle",
        help="an offline bundle: build where the internet is, verify, diff, serve on the rack",
        description=(
            "Everything an inventory needs (the serving stacks' and hub clients' wheels of "
            "every host class, each service's model, the controller's toolchain), collected "
            "into one directory with a manifest (bundle.json); site.yml -e "
            "acceldeploy_bundle=DIR then deploys from it with no other source."
        ),
    )
    sub = parser.add_subparsers(dest="bundle_command", required=True)
    build_parser = command(
        sub.add_parser(
            "build",
            parents=[parents.inventory, parents.limit, parents.json],
            help="collect (or complete) a bundle for the inventory's hosts",
        )
    )
    build_parser.add_argument("--out", type=Path, required=True, help="the bundle directory")
    verify = command(
        sub.add_parser("verify", parents=[parents.json], help="re-hash every file of a bundle")
    )
    verify.add_argument("directory", type=Path)
    diff = command(
        sub.add_parser("diff", parents=[parents.json], help="what going from A to B changes")
    )
    diff.add_argument("old", type=Path)
    diff.add_argument("new", type=Path)
    serve = command(
        sub.add_parser(
            "serve",
            help="serve a bundle read-only in the foreground (an operator's systemd unit)",
        )
    )
    serve.add_argument("directory", type=Path)
    serve.add_argument(
        "--listen", required=True, help="the controller's address on the hosts' network"
    )
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--token-file", type=Path, help="the models' token, a 0600 file")
    serve.add_argument("--request-log", type=Path, help="default DIR/../<name>-requests.jsonl")
    return parser


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _size(data: dict[str, Any]) -> str:
    rows = manifest.totals(data)
    parts = [f"{k} {v['files']} files {v['bytes'] / GIB:.2f} GiB" for k, v in sorted(rows.items())]
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    cache = wheelhouse.cache_dir()
    if args.bundle_command == "build":
        hosts = hosts_vars(args.inventory, args.limit)
        if not hosts:
            raise AcceldeployError(f"--limit {args.limit} selects no host of {args.inventory}")
        data = build.build(args.inventory, hosts, args.out, cache, _say)
        total = sum(int(e["size"]) for e in data["files"].values())
        summary = {
            "bundle": str(args.out),
            "files": len(data["files"]),
            "bytes": total,
            "build_seconds": data["build_seconds"],
            "classes": sorted(data["classes"]),
            "models": sorted(data["models"]),
            "references": len(data["references"]),
            "os": sorted(data["os"]),
        }
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            print(
                f"{args.out}: {len(data['files'])} files, {total / GIB:.2f} GiB ({_size(data)}); "
                f"{len(data['classes'])} host classes, {len(data['models'])} models, "
                f"{len(data['references'])} references, {len(data['os'])} apt repositories; "
                f"built in {data['build_seconds']:.0f} s"
            )
        return 0
    if args.bundle_command == "verify":
        return _verify(args.directory, args.json)
    if args.bundle_command == "diff":
        changes = manifest.diff(manifest.load(args.old), manifest.load(args.new))
        if args.json:
            print(json.dumps(changes, indent=2))
        else:
            print(_diff_text(changes))
        return 0
    data = manifest.load(args.directory)
    token = server.read_token_file(args.token_file) if args.token_file else ""
    log = args.request_log or args.directory.parent / f"{args.directory.name}-requests.jsonl"
    served = server.Served(
        args.directory / "wheels", log, args.directory / "models", args.listen, args.port, token
    )
    _say(f"serving {args.directory} ({_size(data)}) at {served.url}; requests in {log}")
    server.serve(served)
    return 0


def _verify(directory: Path, as_json: bool) -> int:
    data = manifest.load(directory)
    started = time.monotonic()
    total = sum(int(e["size"]) for e in data["files"].values())
    done = [0, started]

    def progress(size: int) -> None:
        done[0] += size
        if time.monotonic() - done[1] >= 2:
            done[1] = time.monotonic()
            _say(f"verify: {done[0] / GIB:.2f} of {total / GIB:.2f} GiB hashed")

    # Every byte is read again: a bundle just copied onto a rack is checked, not remembered.
    bad = manifest.problems(directory, data["files"], manifest.HashCache(None), progress)
    extra = manifest.unlisted(directory, data["files"])
    seconds = round(time.monotonic() - started, 1)
    if as_json:
        print(json.dumps({"ok": not bad, "problems": bad, "unlisted": extra, "seconds": seconds}))
    else:
        for line in bad:
            print(f"BAD  {line}")
        for line in extra:
            print(f"NOTE {line}: not in the manifest (not served to the hosts)")
        state = "intact" if not bad else f"{len(bad)} damaged or missing"
        print(
            f"{directory}: {len(data['files'])} files, {total / GIB:.2f} GiB: {state} ({seconds} s)"
        )
    return 0 if not bad else 1


def _diff_text(changes: dict[str, Any]) -> str:
    files = changes["files"]
    lines = [
        f"files: +{len(files['added'])} -{len(files['dropped'])} ~{len(files['changed'])} "
        f"({files['added_bytes'] / GIB:.2f} GiB to copy, {files['dropped_bytes'] / GIB:.2f} "
        "GiB no longer needed)"
    ]
    lines += [f"  + {name}" for name in files["added"]]
    lines += [f"  - {name}" for name in files["dropped"]]
    lines += [f"  ~ {name}" for name in files["changed"]]
    for field in manifest.DIFF_FIELDS:
        for sign, key in (("+", "added"), ("-", "dropped")):
            lines += [f"{field}: {sign} {name}" for name in changes[field][key]]
    return "\n".join(lines)
