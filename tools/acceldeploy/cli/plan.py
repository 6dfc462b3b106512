"""`acceldeploy plan` (tools/plan.py): size a model's KV cache, explain a vLLM start-up log,
render a host's services, list the serving stacks and the model catalog."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from acceldeploy import tables
from acceldeploy.cli.argtypes import bounded
from acceldeploy.cli.common import Parents, command
from acceldeploy.errors import AcceldeployError
from acceldeploy.planner import catalog
from acceldeploy.planner.kvplan import (
    BUDGET_SEMANTICS,
    GIB,
    MemoryBudget,
    kv_layout,
    plan_kv,
)
from acceldeploy.planner.modelconfig import ModelArch, load_model_arch
from acceldeploy.planner.platforms import get_platform, platform_names
from acceldeploy.serving.hostplan import host_plan, with_node_ips


def _arch(args: argparse.Namespace) -> ModelArch:
    if args.model_config:
        return load_model_arch(args.model_config, trust_arch=args.trust_arch)
    entry = catalog.find(args.model)
    if entry is None:
        raise AcceldeployError(
            f"model {args.model} is not in the catalog ({', '.join(catalog.model_ids())}); "
            "give --model-config PATH instead"
        )
    return entry.arch()


def _available(args: argparse.Namespace) -> tuple[int, MemoryBudget | None]:
    if args.available_bytes is not None:
        return args.available_bytes, None
    if args.available_gib is not None:
        return int(args.available_gib * GIB), None
    if args.total_gib is None:
        raise AcceldeployError(
            "give the KV memory: --available-gib X, --available-bytes N, or the budget "
            "--total-gib with --weights-gib (and --gpu-memory-utilization, --activation-gib, "
            "--non-torch-gib)"
        )
    if args.weights_gib is None:
        raise AcceldeployError("the budget form needs --weights-gib (weights per device)")
    budget = MemoryBudget(
        total_bytes=int(args.total_gib * GIB),
        gpu_memory_utilization=args.gpu_memory_utilization,
        weights_bytes=int(args.weights_gib * GIB),
        activation_bytes=int(args.activation_gib * GIB),
        non_torch_bytes=int(args.non_torch_gib * GIB),
        other_processes_bytes=int(args.other_processes_gib * GIB),
        semantics=args.semantics,
    )
    return budget.available_kv_bytes, budget


def _table(rows: Sequence[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def cmd_kv(args: argparse.Namespace) -> int:
    if args.block_size is None and args.platform is None:
        raise AcceldeployError(f"give --platform ({', '.join(platform_names())}) or --block-size")
    block = args.block_size or get_platform(args.platform).block_size
    layout = kv_layout(_arch(args), args.tp, block, args.kv_cache_dtype, args.dtype)
    available, budget = _available(args)
    result = plan_kv(layout, available, args.max_model_len).to_dict()
    if budget is not None:
        result["budget"] = {
            "total_gib": round(budget.total_bytes / GIB, 2),
            "requested_gib": round(budget.requested_bytes / GIB, 2),
            "non_kv_gib": round(budget.non_kv_bytes / GIB, 2),
            "semantics": budget.semantics,
        }
    status = 0 if result.get("fits", True) else 1
    if args.json:
        print(json.dumps(result, indent=2))
        return status
    rows: list[tuple[str, Any]] = [
        ("KV bytes per token (per device)", f"{result['bytes_per_token']:,}"),
        ("block size", result["block_size"]),
        ("available KV memory", f"{result['available_gib']:.2f} GiB"),
        ("KV cache blocks", f"{result['num_blocks']:,}"),
        ("KV cache tokens", f"{result['kv_cache_tokens']:,}"),
    ]
    if budget is not None:
        b = result["budget"]
        rows.insert(
            2,
            (
                "budget",
                f"{b['total_gib']} GiB x util = {b['requested_gib']} GiB, "
                f"non-KV {b['non_kv_gib']} GiB ({b['semantics']})",
            ),
        )
    if args.max_model_len is not None:
        rows += [
            ("max model len", f"{args.max_model_len:,}"),
            ("KV needed for it", f"{result['kv_needed_gib']:.2f} GiB"),
            ("fits", "yes" if result["fits"] else "NO"),
            ("largest max model len", f"{result['estimated_max_model_len']:,}"),
            ("max concurrency at it", f"{result['max_concurrency']:.2f}x"),
        ]
    print(_table(rows))
    return status


def cmd_explain(args: argparse.Namespace) -> int:
    from acceldeploy.planner.vllmlog import parse_log

    try:
        with open(args.logfile, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as exc:
        raise AcceldeployError(f"cannot read {args.logfile}: {exc.strerror}") from None
    budget = parse_log(text)
    data = budget.to_dict()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    labels = {
        "weights_gib": "weights",
        "activation_gib": "peak activation",
        "non_torch_gib": "non-torch",
        "non_kv_gib": "= non-KV total",
        "kv_gib": "KV cache",
        "requested_gib": "requested (total x util)",
        "total_gib": "device total",
    }
    rows = [(label, f"{data[k]:.2f} GiB") for k, label in labels.items() if k in data]
    for key in ("kv_cache_tokens", "max_model_len", "estimated_max_model_len"):
        if key in data:
            rows.append((key.replace("_", " "), f"{data[key]:,}"))
    if "kv_needed_gib" in data:
        rows.append(("KV needed for max model len", f"{data['kv_needed_gib']:.2f} GiB"))
    if "fits" in data:
        rows.append(("fits", "yes" if data["fits"] else "NO"))
    print(_table(rows))
    for line in budget.advice:
        print(f"  -> {line}")
    return 0


def _hosts_vars(inventory: str, host: str | None) -> dict[str, dict[str, Any]]:
    """{host: its variables} of one host, or of every serving host (host None: not the
    gateways and monitors), with the addresses of the nodes their multi-node services name."""
    from acceldeploy.inventory import groups
    from acceldeploy.inventory.hostvars import hosts_vars

    every = with_node_ips(hosts_vars(inventory))
    if host is None:
        return {h: hv for h, hv in every.items() if groups.serves(hv)}
    if host not in every:
        raise AcceldeployError(f"host {host} is not in {inventory}")
    return {host: every[host]}


def cmd_render(args: argparse.Namespace) -> int:
    if args.unit:
        if not args.host:
            raise AcceldeployError("plan render --unit prints one host's units: give --host")
        return _print_units(_hosts_vars(args.inventory, args.host)[args.host], args.service)
    rendered: list[tuple[str, dict[str, Any]]] = []
    for host, hostvars in _hosts_vars(args.inventory, args.host).items():
        plan = host_plan(hostvars)
        launches = [x.to_dict() for x in plan.launches()] + [u.launch for u in plan.node_units()]
        rendered += [(host, x) for x in launches if args.service in (None, x["name"])]
    if args.service and not rendered:
        raise AcceldeployError(
            f"no service or node unit {args.service} on {args.host or 'any host'}"
        )
    if args.json:
        listed = [x if args.host else {"inventory_hostname": h, **x} for h, x in rendered]
        print(json.dumps(listed, indent=2))
        return 0
    for host, x in rendered:
        print(f"# {x['name']} on {host} ({x['platform']}); KV: {x['kv']}")
        for key, value in x["env"].items():
            print(f"{key}={value}")
        for key in x["secret_env"]:
            print(f"{key}=<secret, from the service's 0600 EnvironmentFile>")
        print(x["command_line"])
    return 0


def _print_units(hostvars: dict[str, Any], service: str | None) -> int:
    from acceldeploy.serving.unit import render_files

    plan = host_plan(hostvars)
    units = [u for u in [*plan.units(), *plan.node_units()] if service in (None, u.name)]
    if service and not units:
        raise AcceldeployError(f"no service {service} on this host")
    for unit in units:
        for path, text in render_files(unit).items():
            print(f"# ==> {path} <==")
            print(text, end="")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    for model in catalog.model_ids():
        entry = catalog.find(model)
        assert entry is not None
        arch = entry.arch()
        print(
            f"{model:45} layers {arch.num_layers:3}  kv heads {arch.num_kv_heads:3}  "
            f"head {arch.head_size:3}  {'MLA' if arch.is_mla else 'GQA'}  "
            f"tuned for: {', '.join(entry.platforms) or '-'}"
        )
    return 0


def cmd_stacks(args: argparse.Namespace) -> int:
    """The stacks of versions/stacks.yml side by side (what acceldeploy_stack chooses from)."""
    from acceldeploy.planner import stackmatrix

    rows = stackmatrix.matrix()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if args.sources:
        tables.print_table(
            tables.console(),
            "where each stack's facts come from (versions/stacks.yml sources)",
            ("stack", "part", "source"),
            [[str(row["stack"]), str(part), " ".join(str(source).split())]
             for row in rows for part, source in row["sources"].items()],
        )  # fmt: skip
        return 0
    tables.print_table(
        tables.console(),
        "serving stacks (versions/stacks.yml): set acceldeploy_stack to one",
        [title for _, title in stackmatrix.COLUMNS],
        [[str(row[key]) for key, _ in stackmatrix.COLUMNS] for row in rows],
    )
    known = stackmatrix.defect_rows(rows)
    if known:
        tables.print_table(
            tables.console(),
            "known defects of the stacks (versions/stacks.yml known_defects)",
            ("stack", "component", "what", "fix", "source"),
            known,
        )
    return 0


def read_over_ssh(host: str, hostvars: Mapping[str, Any], script: str) -> str:
    """The read-only probe run on ``host`` over SSH, as the inventory reaches it."""
    from acceldeploy.siteinit.probe import Target, run_ssh, ssh_argv, unreachable

    where = Target(host, str(hostvars.get("ansible_host") or host),
                   int(hostvars.get("ansible_port") or 22))  # fmt: skip
    argv = ssh_argv(
        where,
        str(hostvars.get("ansible_user") or "root"),
        str(hostvars.get("ansible_ssh_private_key_file") or ""),
        str(hostvars.get("ansible_ssh_common_args") or ""),
    )
    rc, stdout, stderr = run_ssh(argv, script)
    why = unreachable(rc, stdout, stderr)
    if why is not None:
        raise AcceldeployError(f"ssh {where.address}:{where.port}: {why}")
    return stdout


def cmd_upgrade(args: argparse.Namespace) -> int:
    """What moving the hosts to --to would change or break, before anything changes."""
    from acceldeploy import upgrade
    from acceldeploy.inventory.hostvars import hosts_vars

    every = hosts_vars(args.inventory, args.limit)
    if not every:
        raise AcceldeployError(f"--limit {args.limit} selects no host of {args.inventory}")
    findings = upgrade.advise(every, args.to, read_over_ssh if args.read_hosts else None)
    blocking = [f for f in findings if f.blocking]
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2))
        return 1 if blocking else 0
    from rich.table import Table

    console = tables.console()
    table = Table(title=f"upgrade to {args.to}: what changes (nothing is changed by this command)",
                  box=tables.box(console))  # fmt: skip
    for column in ("host", "service", "kind", "what", "detail"):
        table.add_column(column, overflow="fold")
    for f in findings:
        style = "red" if f.blocking else "yellow" if f.kind == "unchecked" else None
        table.add_row(f.host, f.service, f.kind, f.what, f.detail, style=style)
    console.print(table)
    verdict = f"{len(blocking)} would stop the deploy (red)" if blocking else "nothing blocks it"
    console.print(f"{len(findings)} findings; {verdict}")
    return 1 if blocking else 0


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "plan",
        help="size KV caches, explain vLLM start-up logs, render a host's services",
        description=__doc__,
    )
    sub = parser.add_subparsers(dest="plan_command", metavar="PLAN_COMMAND", required=True)

    kv = command(
        sub.add_parser(
            "kv", parents=[parents.json], help="KV cache size, blocks and the largest max model len"
        )
    )
    model = kv.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-config", help="config.json or a model directory")
    model.add_argument("--model", help="a catalog model id, e.g. Qwen/Qwen3-VL-32B-Instruct")
    kv.add_argument(
        "--trust-arch",
        action="store_true",
        help="size an architecture missing from the known list as full attention",
    )
    kv.add_argument("--tp", type=bounded(int, 1, 1024), default=1, help="tensor parallel size")
    kv.add_argument(
        "--platform",
        choices=platform_names(),
        help="picks the default block size ("
        + ", ".join(f"{p} {get_platform(p).block_size}" for p in platform_names())
        + "); or give --block-size (vLLM on CUDA: 16)",
    )
    kv.add_argument("--block-size", type=bounded(int, 1, 4096))
    kv.add_argument("--kv-cache-dtype", default="auto")
    kv.add_argument("--dtype", default="auto")
    kv.add_argument("--available-gib", type=bounded(float, 0))
    kv.add_argument("--available-bytes", type=bounded(int, 0))
    kv.add_argument(
        "--total-gib", type=bounded(float, 0, above=True), help="device memory as vLLM sees it"
    )
    kv.add_argument("--gpu-memory-utilization", type=bounded(float, 0, 1, above=True), default=0.9)
    kv.add_argument("--weights-gib", type=bounded(float, 0))
    kv.add_argument("--activation-gib", type=bounded(float, 0), default=0.0)
    kv.add_argument("--non-torch-gib", type=bounded(float, 0), default=0.0)
    kv.add_argument(
        "--other-processes-gib",
        type=bounded(float, 0),
        default=0.0,
        help="memory other processes hold (only vllm-ascend-0.12 subtracts it)",
    )
    kv.add_argument("--semantics", choices=BUDGET_SEMANTICS, default="vllm")
    kv.add_argument("--max-model-len", type=bounded(int, 1))
    kv.set_defaults(func=cmd_kv)

    explain = command(
        sub.add_parser(
            "explain", parents=[parents.json], help="the memory budget in a vLLM start-up log"
        )
    )
    explain.add_argument("logfile")
    explain.set_defaults(func=cmd_explain)

    render = command(
        sub.add_parser(
            "render",
            parents=[parents.inventory, parents.json],
            help="the exact vllm serve argv and env of a host",
        )
    )
    render.add_argument("--host", help="one host (default: every host of the inventory)")
    render.add_argument("--service")
    render.add_argument(
        "--unit", action="store_true", help="print the systemd unit and launcher instead"
    )
    render.set_defaults(func=cmd_render)

    stacks = command(
        sub.add_parser(
            "stacks",
            parents=[parents.json],
            help="the serving stacks, side by side (what acceldeploy_stack chooses from)",
        )
    )
    stacks.add_argument(
        "--sources", action="store_true", help="where each stack's facts come from, per part"
    )
    stacks.set_defaults(func=cmd_stacks)

    upgrade = command(
        sub.add_parser(
            "upgrade",
            parents=[parents.inventory, parents.limit, parents.json],
            help="what moving the hosts to another stack would change or break (read-only)",
        )
    )
    upgrade.add_argument("--to", required=True, help="the stack to move to (`plan stacks`)")
    upgrade.add_argument(
        "--read-hosts",
        action="store_true",
        help="also read what each host holds (driver, firmware, CANN; hl-smi) over SSH, "
        "read-only, and judge it against the stack; without it no host is contacted",
    )
    upgrade.set_defaults(func=cmd_upgrade)

    cat = command(sub.add_parser("catalog", help="list the model catalog"))
    cat.set_defaults(func=cmd_catalog)
    return parser


def run(args: argparse.Namespace) -> int:
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)
