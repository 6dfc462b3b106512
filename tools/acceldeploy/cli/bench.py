"""`acceldeploy bench` (tools/bench.py): vLLM's own benchmark on every selected service of a
fleet, with memory and vLLM's metrics through every phase, a leak-or-cache verdict, plots and
baselines."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema

from acceldeploy.bench import baseline, interval, profiles, report, via
from acceldeploy.bench.formatting import significant
from acceldeploy.bench.runner import Target, read_all_deployed, run_all, run_key
from acceldeploy.cli.argtypes import bounded
from acceldeploy.cli.common import PROG, Parents
from acceldeploy.data_files import SCHEMAS_DIR
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import groups
from acceldeploy.secrets import mask
from acceldeploy.serving import selection

SCHEMA = SCHEMAS_DIR / "bench-summary.schema.json"


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        parents=[parents.inventory, parents.limit],
        help="vLLM's benchmark on a fleet's services: memory, leak verdict, plots, baselines",
        description=__doc__,
    )
    parser.add_argument("--service", action="append", default=[], help="only these (repeatable)")
    parser.add_argument("--profile", required=True, help="smoke, image_reuse, random-mm, ...")
    parser.add_argument("--baseline", type=Path, help="an earlier run dir to compare with")
    parser.add_argument(
        "--force", action="store_true", help="compare with a baseline of another key"
    )
    parser.add_argument(
        "--tolerance", type=bounded(float, 0, 1), default=baseline.DEFAULT_TOLERANCE,
        help="share of a baseline figure a run may lose before it is a regression",
    )  # fmt: skip
    parser.add_argument(
        "--via-gateway", metavar="GATEWAY",
        help="load each model through this gateway's frontend: one run per model, the fleet's "
             "figure (memory and metrics from the serving host the load runs from)",
    )  # fmt: skip
    parser.add_argument(
        "--via-url", metavar="URL",
        help="load one --service through this endpoint (a router of yours, in front of the "
             f"--limit hosts serving it; its key, if any, in ${via.KEY_VARIABLE}): the fleet's "
             "figures as with --via-gateway",
    )  # fmt: skip
    parser.add_argument("--restart", action="store_true", help="restart each service first")
    parser.add_argument("--serial", action="store_true", help="one host at a time")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="runs go here")
    parser.add_argument("--timeout", type=bounded(float, 0, 3600, above=True), default=60.0)
    return parser


def select(args: argparse.Namespace) -> list[Target]:
    """Every (host, service) to bench, with its profile: all input checked, no host contacted."""
    base = Path(args.inventory).resolve().parent

    def picked(hv: Mapping[str, Any]) -> profiles.Profile:
        return profiles.pick(hv.get(profiles.VAR), args.profile, base)

    if args.via_url:
        if args.via_gateway or args.restart or len(args.service) != 1:
            raise AcceldeployError(
                "--via-url loads one model through your endpoint: give exactly one --service, "
                "and neither --via-gateway nor --restart"
            )
        every = selection.limited(args.inventory, args.limit)
        return via.url_targets(every, args.via_url, args.service[0], picked)
    if args.via_gateway:
        if args.limit != "all":
            raise AcceldeployError(
                "--limit picks hosts; --via-gateway loads every host the gateway sends to: "
                "drop one of them"
            )
        if args.restart:
            raise AcceldeployError(
                "--restart restarts one host's service; through a gateway the load goes to "
                "every host: drop --restart (or bench the hosts without --via-gateway)"
            )
        every = selection.every_host(args.inventory)
        return via.targets(every, args.via_gateway, args.service, picked)
    # the gateways and monitors run no vLLM: the hosts benched are the serving ones
    found = {h: hv for h, hv in selection.limited(args.inventory, args.limit).items()
             if groups.serves(hv)}  # fmt: skip
    targets, names, workers = [], set(), []
    for host, hv in found.items():
        profile = profiles.pick(hv.get(profiles.VAR), args.profile, base)
        plan = selection.checked_plan(hv)
        workers += [(host, s, head) for s, head in selection.heads(plan).items()]
        for unit, launch in zip(plan.units(), plan.launches(), strict=True):
            names.add(unit.name)
            if not args.service or unit.name in args.service:
                targets.append(Target(host, hv, plan, unit, launch, profile))
    for host, service, head in workers:
        if head not in found and (not args.service or service in args.service):
            raise selection.worker_error("--limit", args.limit, host, service, head)
    unknown = sorted(set(args.service) - names)
    if unknown:
        raise AcceldeployError(
            f"--service {unknown[0]}: no such service on the selected hosts "
            f"(known: {', '.join(sorted(names)) or 'none'})"
        )
    if not targets:
        raise AcceldeployError("no services to bench on the selected hosts (acceldeploy_services)")
    return targets


def live_table(targets: list[Target]) -> Any:
    from rich.table import Table

    table = Table(title="bench")
    for column in ("host", "service", "phase", "round", "req/s", "p99 TTFT ms", "state"):
        table.add_column(column)
    for t in targets:
        s = t.state
        table.add_row(
            t.where + (f" (from {t.host})" if t.via else ""), t.service, str(s.get("phase", "")),
            f"{s.get('round', '')}" + (f" @ {s.get('rate')}" if s.get("rate") else ""),
            significant(s.get("throughput")), significant(s.get("p99_ttft_ms")),
            str(s.get("verdict") or s.get("error") or s.get("event", "starting"))[:80],
        )  # fmt: skip
    return table


def run_document(
    run_id: str, args: argparse.Namespace, targets: list[Target], services: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "run": run_id,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "inventory": str(args.inventory),
        "profile": targets[0].profile.to_dict(),
        "services": services,
        "errors": [
            {"host": t.where, "service": t.service, "error": t.state["error"]}
            for t in targets
            if t.state.get("event") == "error"
        ],
        "baseline": None if args.baseline is None else str(args.baseline),
        "comparisons": [],
        "regressions": [],
        "outliers": baseline.outliers({"services": services}),
    }


def sla_line(service: dict[str, Any]) -> str:
    sla = service["sla"]
    limits = ", ".join(f"{k} <= {v:g} ms" for k, v in sla["limits_ms"].items())
    tried = ", ".join(f"{rate}{'' if met else ' (missed)'}" for rate, met in sla["tried"])
    best = sla["best_rate"]
    found = "none of the rates tried" if best is None else f"{best} req/s"
    where = f"{service['host']}/{service['service']}"
    return f"{where}: highest rate meeting {limits}: {found} (tried {tried})"


def run(args: argparse.Namespace) -> int:
    prog = getattr(args, PROG)
    targets = select(args)
    then = baseline.load(args.baseline) if args.baseline else None
    read_all_deployed(targets, args.timeout)
    if then is not None and not args.force:
        baseline.check_keys(then, {(t.where, t.service): run_key(t) for t in targets})
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{args.profile}"
    out = args.out / run_id
    out.mkdir(parents=True, exist_ok=True)
    from rich.live import Live

    lock = threading.Lock()
    with Live(live_table(targets), refresh_per_second=2, transient=False) as live:

        def changed() -> None:
            with lock:
                live.update(live_table(targets))

        try:
            services = run_all(
                targets, run_id, out, args.restart, args.serial, changed, args.timeout
            )
        except KeyboardInterrupt:
            live.stop()
            print(f"{prog}: interrupted; the drivers on the hosts are stopped. {out} has the "
                  "services that finished.", file=sys.stderr)  # fmt: skip
            return 130
    print()
    run = run_document(run_id, args, targets, services)
    if then is not None:
        run["comparisons"] = baseline.compare(run, then, args.tolerance)
        run["regressions"] = baseline.regressions(run["comparisons"])
    jsonschema.validate(run, json.loads(SCHEMA.read_text()))
    (out / "summary.json").write_text(json.dumps(run, indent=1))
    report.write_html(run, out)
    for error in run["errors"]:
        where = f"{error['host']}/{error['service']}"
        print(f"{prog}: {where}: {mask(error['error'])}", file=sys.stderr)
    for service in services:
        for device in service["verdict"]["devices"]:
            print(f"{service['host']}/{service['service']}: {device['state']}: {device['reason']}")
    lines = [line for line in map(report.figures_line, services) if line]
    if lines:
        print(f"figures: the median of the rounds [{interval.METHOD}]")
    for line in lines:
        print(f"  {line}")
    for service in services:
        if service["sla"]:
            print(sla_line(service))
    if run["comparisons"]:
        print(f"against {args.baseline} (median [{interval.METHOD} over the rounds]):")
    for comparison in run["comparisons"]:
        print(f"  {comparison['text']}")
    for outlier in run["outliers"]:
        where = f"{outlier['host']}/{outlier['service']}"
        print(
            f"outlier: {where}: {significant(outlier['request_throughput'])} req/s, "
            f"fleet median {significant(outlier['fleet_median'])}"
        )
    print(f"results: {out} (summary.json, report.html)")
    bad = (
        run["errors"]
        or run["regressions"]
        or any(s["verdict"]["state"] == "growing" for s in services)
    )
    return 1 if bad else 0
