"""`acceldeploy init SITE`: a site's first inventory, inventory/SITE/, from its hosts. Each host
given with -H is probed over SSH, read-only (its release and Python, `npu-smi info` or `hl-smi`
for the platform and its devices, its NICs); a host that cannot be reached or is not supported
is refused with the reason, and nothing is written. A first service for --model is sized by the
planner for the devices found. --vars FILE merges the site's settings (mirrors, indexes, ports:
group variables; its `service:` mapping goes into the service). What it writes passes
preflight as written: check it with `acceldeploy plan render -i inventory/SITE`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from acceldeploy.cli.common import Parents
from acceldeploy.errors import AcceldeployError
from acceldeploy.serving.hostplan import DEFAULT_MODELS_ROOT
from acceldeploy.siteinit import draft, probe, write


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "init",
        help="write a site's first inventory from what its hosts report (read-only probe)",
        description=__doc__,
    )
    parser.add_argument("site", help="the site's name: the inventory is written to inventory/SITE")
    parser.add_argument("-H", "--hosts", required=True, metavar="[NAME=]HOST[:PORT],...",
                        help="the hosts to probe, comma-separated")  # fmt: skip
    parser.add_argument("--user", default="root", help="the SSH user (default %(default)s; "
                        "any other user gets ansible_become: true)")  # fmt: skip
    parser.add_argument("--key", default="", help="the SSH private key file")
    parser.add_argument("--ssh-args", default="", metavar="ARGS",
                        help="more ssh options, e.g. '-o ProxyJump=bastion' (kept as "
                        "ansible_ssh_common_args)")  # fmt: skip
    parser.add_argument("--model", required=True, help="the first service's model id")
    parser.add_argument("--name", help="the first service's name (default: from the model id)")
    parser.add_argument("--source", choices=sorted(draft.DEFAULT_REVISION), default="hf",
                        help="where its weights come from (default %(default)s)")  # fmt: skip
    parser.add_argument("--revision", default="",
                        help="the revision (default: hf main, modelscope master)")  # fmt: skip
    parser.add_argument("--vars", type=Path, metavar="FILE",
                        help="a YAML file of site variables to merge")  # fmt: skip
    parser.add_argument("--out", type=Path, help="the directory (default inventory/SITE)")
    parser.add_argument("--models-root", default=DEFAULT_MODELS_ROOT,
                        help="where the hosts keep the weights (default %(default)s)")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="replace an existing directory")
    parser.add_argument("--platform", choices=draft.PLATFORMS,
                        help="the platform every host must report (default: what they report); "
                        "--platform cpu lets --model be a model outside the catalog")  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> int:
    """Everything the controller can check is checked before the first connection."""
    out: Path = args.out or Path("inventory") / args.site
    if out.exists() and not args.force:
        raise AcceldeployError(
            f"--out {out} exists; pick another site name or --out, or --force to replace it"
        )
    overrides, site_vars = draft.split_vars(_read_vars(args.vars), str(args.vars))
    key = _key_file(args.key)
    connection = draft.Connection(args.user, key, args.ssh_args)
    targets = [probe.Target.parse(t) for t in args.hosts.split(",") if t.strip()]
    names = [t.name for t in targets]
    if len(set(names)) != len(names) or not targets:
        raise AcceldeployError(f"-H {args.hosts}: give each host once, with a name of its own")
    spec = draft.first_spec(
        args.model, args.name or draft.service_name(args.model), args.source, args.revision,
        overrides,
    )  # fmt: skip
    draft.check_model(str(spec["model"]), args.platform)
    reports = []
    for target in targets:
        print(f"probing {target.name} ({target.address}:{target.port}) ...", file=sys.stderr)
        reports.append(probe.probe(target, args.user, key, args.ssh_args))
    refusals = [e for r in reports for e in r.errors]
    if refusals:
        raise AcceldeployError("nothing written:\n  " + "\n  ".join(refusals))
    platform = draft.site_platform(reports, args.platform)
    hosts = {r.target.name: draft.host_vars(r, connection) for r in reports}
    every = {name: {**site_vars, **values} for name, values in hosts.items()}
    sized = draft.size_service(reports, platform, spec, args.models_root, every)
    files = write.render({
        "site": args.site, "out": str(out), "reports": reports, "platform": platform,
        "hosts": hosts,
        "models_root": args.models_root, "sized": sized, "site_vars": site_vars,
        "vars_file": str(args.vars) if args.vars else "",
    })  # fmt: skip
    try:
        write.write(out, files, args.force)
    except FileExistsError as exc:
        raise AcceldeployError(str(exc)) from exc
    for report in reports:
        print(f"{report.target.name}: {report.summary()}")
    print(f"{sized.why}\nwrote {out}: check it with `acceldeploy plan render -i {out}`")
    return 0


def _read_vars(path: Path | None) -> Any:
    if path is None:
        return None
    try:
        return yaml.safe_load(path.read_text())
    except UnicodeDecodeError as exc:
        raise AcceldeployError(
            f"--vars {path}: not a text file (byte {exc.start} is not UTF-8); give a YAML file "
            "of site variables"
        ) from exc
    except (OSError, yaml.YAMLError) as exc:
        raise AcceldeployError(f"--vars {path}: {' '.join(str(exc).split())}") from exc


def _key_file(key: str) -> str:
    if not key:
        return ""
    path = Path(key).expanduser().resolve()
    if not path.is_file():
        raise AcceldeployError(f"--key {key}: no such file; give the SSH private key's path")
    return str(path)
