"""`acceldeploy tune` (tools/tune.py): seed 002's loop on one service, by itself. Each point of
a grid of service keys runs on the real service (a runtime drop-in, restart, the bench profile
with an SLA rate search, memory and metrics) --runs times, interleaved with the deployed
flags (point 0); the planner skips points that cannot start. A point that meets the SLA and a
memory headroom in every run, and beats the deployed flags beyond the noise (a 90% Student-t
interval of the paired gain), is proposed as an inventory snippet. The service is put back on
its deployed flags at the end, on failure and on Ctrl-C."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from acceldeploy import tables
from acceldeploy.bench import profiles
from acceldeploy.bench.formatting import significant
from acceldeploy.bench.interval import METHOD
from acceldeploy.bench.profiles import Profile, Sweep
from acceldeploy.bench.runner import Target, read_deployed, run_target
from acceldeploy.cli.argtypes import bounded
from acceldeploy.cli.common import PROG, Parents
from acceldeploy.errors import AcceldeployError
from acceldeploy.secrets import mask
from acceldeploy.serving import selection
from acceldeploy.serving.hostplan import HostPlan
from acceldeploy.serving.unit import ServiceUnit
from acceldeploy.tune import apply, decision, dropin, estimate, rotation, space
from acceldeploy.tune import report as shown
from acceldeploy.tune.search import Budget, Candidate, evaluate, load_state, save_state, search
from acceldeploy.verify.remote import connection

MAX_RUNS = 20


def add_parser(subparsers: Any, parents: Parents) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tune",
        parents=[parents.inventory],
        help="tune one service's flags under a latency SLA and a memory headroom",
        description=__doc__,
    )
    parser.add_argument("--host", required=True)
    parser.add_argument("--service", required=True)
    parser.add_argument("--profile", required=True, help="a bench profile (acceldeploy bench)")
    parser.add_argument("--space", required=True, help="'max_num_seqs=4,8 kv_cache_space_gib=1,2'")
    parser.add_argument(
        "--sla", required=True, help="'p99_ttft<=2s,p99_tpot<=100ms' (replaces the profile's)"
    )
    parser.add_argument("--headroom-mib", type=bounded(float, 0), default=2048.0)
    parser.add_argument(
        "--runs", type=bounded(int, 2, MAX_RUNS), default=3,
        help=f"runs of every point and of the deployed flags, 2..{MAX_RUNS} (one has no interval)",
    )  # fmt: skip
    parser.add_argument("--max-minutes", type=bounded(float, 0, above=True), default=60.0)
    parser.add_argument("--out", type=Path, default=Path("tune-results"))
    parser.add_argument("--resume", type=Path, help="continue the search in this directory")
    parser.add_argument(
        "--apply", action="store_true", help="write the winner into the vars file (diff shown)"
    )
    parser.add_argument("--timeout", type=bounded(float, 0, 3600, above=True), default=60.0)
    return parser


@dataclasses.dataclass
class Setup:
    host: str
    hostvars: dict[str, Any]
    spec: dict[str, Any]
    profile: Profile
    candidates: list[Candidate]
    settings: dict[str, Any]
    plan: HostPlan  # as deployed
    unit: ServiceUnit  # the service's, as deployed
    apply_to: Path | None = None  # --apply's vars file
    # where the gateways send this service's requests to this host: drained for the tune
    rotation: list[dict[str, str]] = dataclasses.field(default_factory=list)
    every: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def setup(args: argparse.Namespace) -> Setup:
    """Everything checked and planned; no host contacted."""
    every = selection.every_host(args.inventory)
    hv = every.get(args.host)
    if hv is None:
        known = ", ".join(every) or "none"
        raise AcceldeployError(f"--host {args.host}: not a host of {args.inventory} ({known})")
    specs = hv.get("acceldeploy_services") or []
    spec = next((s for s in specs if s.get("name") == args.service), None)
    if spec is None:
        names = ", ".join(str(s.get("name")) for s in specs) or "none"
        raise AcceldeployError(f"--service {args.service}: not on {args.host} (has {names})")
    plan = selection.checked_plan(hv)
    head = selection.heads(plan).get(args.service)
    if head:
        raise selection.worker_error("--host", args.host, args.host, args.service, head)
    unit = next((u for u in plan.units() if u.name == args.service), None)
    if unit is None:
        raise AcceldeployError(f"--service {args.service}: {args.host} does not run it")
    axes = space.parse_space(args.space, plan.platform.name)
    sla = space.parse_sla(args.sla)
    base = Path(args.inventory).resolve().parent
    # --sla takes the place of the profile's own (its sweep settings, when set, are kept)
    given = dict(hv.get(profiles.VAR) or {})
    given[args.profile] = {**given.get(args.profile, {}), "sla": sla}
    profile = profiles.pick(given, args.profile, base)
    profile = dataclasses.replace(profile, sweep=profile.sweep or Sweep())
    grid = [plan_point(hv, specs, args.service, point) for point in space.points(axes)]
    if all(c.reason for c in grid):
        first = grid[0]
        raise AcceldeployError(
            f"--space: the planner refuses all {len(grid)} point(s); {first.label}: {first.reason}"
        )
    deployed = dataclasses.replace(plan_point(hv, specs, args.service, {}), deployed=True)
    if deployed.reason:
        raise AcceldeployError(f"{args.service} as deployed: {deployed.reason}")
    apply_to = None
    if args.apply:
        groups = [*hv.get("group_names", []), "all"]
        apply_to = apply.target(Path(args.inventory), args.host, groups, args.service)
    settings = {
        "host": args.host, "service": args.service, "profile": profile.to_dict(),
        "space": args.space, "sla_ms": sla, "headroom_mib": args.headroom_mib,
        "runs": args.runs,
    }  # fmt: skip
    candidates = [deployed, *grid]
    return Setup(args.host, hv, spec, profile, candidates, settings, plan, unit, apply_to,
                 rotation.where(every, args.host, args.service), every)  # fmt: skip


def refused_note(candidates: list[Candidate]) -> str | None:
    """One line on the points the planner refuses (skipped, not run), when some are."""
    refused = [c for c in candidates if c.reason]
    if not refused:
        return None
    first = refused[0]
    return (
        f"--space: {len(refused)} of {len(candidates)} points skipped, the planner refuses "
        f"them ({first.label}: {first.reason})"
    )


def plan_point(
    hv: dict[str, Any], specs: list[dict[str, Any]], name: str, point: dict[str, Any]
) -> Candidate:
    """The planner's answer for one point: its unit, or why it cannot start (every unit the
    role would install with it rendered, the service's and its Ray node's)."""
    changed = [space.apply(s, point) if s.get("name") == name else s for s in specs]
    point_hv = {**hv, "acceldeploy_services": changed}
    candidate = Candidate(point, hostvars=point_hv)
    try:
        plan = selection.checked_plan(point_hv)
        for unit, launch in zip(plan.units(), plan.launches(), strict=True):
            if unit.name == name:
                candidate.unit, candidate.launch, candidate.plan = unit, launch, plan
    except AcceldeployError as exc:
        candidate.reason = str(exc)
    return candidate


def total_memory_mib(conn: Any, platform: Any) -> float | None:
    """The memory the headroom is kept from: a device's on accelerators, the host's on cpu."""
    if platform.device_memory_bytes:
        return float(platform.device_memory_bytes) / 2**20
    out = conn.run("awk '/^MemTotal:/ {print $2}' /proc/meminfo", hide=True, warn=True).stdout
    return float(out) / 1024 if out.strip() else None


def run(args: argparse.Namespace) -> int:
    config = setup(args)
    out = args.resume or args.out / f"{time.strftime('%Y%m%d-%H%M%S')}-{args.service}"
    state = load_state(out) if args.resume else None
    if args.resume and state is None:
        raise AcceldeployError(f"--resume {args.resume}: no tune.json there")
    if state is not None and state["settings"] != config.settings:
        changed = sorted(
            k for k in config.settings if state["settings"].get(k) != config.settings[k]
        )
        raise AcceldeployError(
            f"--resume {out}: the search was started with other {', '.join(changed)}"
        )
    note = refused_note(config.candidates[1:])
    if note:
        print(f"{getattr(args, PROG)}: {mask(note)}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    state = state or {"settings": config.settings, "runs": [], "skipped": {}, "points": []}
    return tune(args, config, out, state)


def drained_in(config: Setup) -> list[str]:
    """The gateways that send this service's requests to this host."""
    return sorted({entry["gateway"] for entry in config.rotation})


def drain(config: Setup, timeout: float, conn: Any) -> None:
    """Out of every gateway's rotation before the first restart, or nothing changes."""
    if not config.rotation:
        return
    failed = rotation.set_state(config.every, config.rotation, config.host, "drain", timeout)
    if failed:
        rotation.set_state(config.every, config.rotation, config.host, "ready", timeout)
        conn.close()
        raise AcceldeployError(
            f"cannot take {config.unit.name} on {config.host} out of the gateways' rotation "
            f"({'; '.join(failed)}): a tune there would measure client requests too; nothing "
            "was changed"
        )
    gateways = ", ".join(drained_in(config))
    print(f"{config.unit.name} on {config.host} drained in {gateways} for the tune", flush=True)


def ready(config: Setup, healthy: bool, timeout: float) -> dict[str, Any]:
    """Back into rotation once restored and healthy; else left drained, and said so."""
    if not config.rotation:
        return {}
    gateways = drained_in(config)
    if not healthy:
        print(f"{config.unit.name} on {config.host} stays drained in {', '.join(gateways)}: it "
              "did not come back healthy on its deployed flags", file=sys.stderr)  # fmt: skip
        return {"gateways": gateways, "state": "drain"}
    failed = rotation.set_state(config.every, config.rotation, config.host, "ready", timeout)
    for line in failed:
        print(f"not back in rotation: {mask(line)}", file=sys.stderr)
    return {"gateways": gateways, "state": "ready" if not failed else "drain", "failed": failed}


def tune(args: argparse.Namespace, config: Setup, out: Path, state: dict[str, Any]) -> int:
    """The search on the host, the service restored at the end whatever happens."""
    prog = getattr(args, PROG)
    conn = connection(config.host, config.hostvars, args.timeout)
    try:
        conn.open()
    except Exception as exc:
        raise AcceldeployError(f"cannot reach {config.host}: {exc}") from None
    drain(config, args.timeout, conn)
    deployed_unit = config.unit
    before = dropin.fingerprint(conn, deployed_unit)
    total = total_memory_mib(conn, config.plan.platform)

    def measure(candidate: Candidate, cycle: int) -> dict[str, Any]:
        if candidate.deployed:
            started = dropin.remove(conn, args.service)
        else:
            started = dropin.apply(conn, candidate.unit, candidate.label)
        if not started.ok:
            reason = " | ".join(started.journal[-6:])
            return {"status": "failed to start", "ready_seconds": started.seconds,
                    "reason": reason, "journal": started.journal}  # fmt: skip
        target = Target(config.host, candidate.hostvars, candidate.plan, candidate.unit,
                        candidate.launch, config.profile)  # fmt: skip
        read_deployed(target, args.timeout)
        where = out / "points" / slug(candidate.label) / f"run-{cycle}"
        summary = run_target(target, out.name, where, False, lambda: None, args.timeout)
        return {"status": "measured", "ready_seconds": started.seconds,
                **evaluate(summary, args.headroom_mib, total)}  # fmt: skip

    interrupted = False
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill restores too
    try:
        prior, prior_from = estimate.earlier(out.parent, config.settings)
        budget = Budget(args.runs, args.max_minutes, prior, prior_from)
        search(config.candidates, state, out, measure, budget, lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        # a second Ctrl-C must not cut the restore short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"restoring {args.service} on its deployed flags", flush=True)
        restored = dropin.remove(conn, args.service)
        after = dropin.fingerprint(conn, deployed_unit)
        state["restored"] = {"healthy": restored.ok, "identical": after == before,
                             "before": before, "after": after}  # fmt: skip
        conn.close()
        state["rotation"] = ready(config, restored.ok, args.timeout)
    best = decision.winner(state["points"])
    state["winner"] = best and best["label"]
    state["decision"] = shown.decision_line(best)
    save_state(out, state)
    report(state, out, config, best)
    if config.apply_to and not interrupted:
        apply_winner(config.apply_to, args.service, best, args.runs, prog)
    if interrupted:
        print(f"{prog}: interrupted; {args.service} is back on its deployed flags. "
              f"--resume {out} continues.", file=sys.stderr)  # fmt: skip
        return 130
    if state["rotation"].get("state") == "drain":
        return 1
    if not (state["restored"]["healthy"] and state["restored"]["identical"]):
        print(f"{prog}: {args.service} was not restored as it was: {mask(str(state['restored']))}",
              file=sys.stderr)  # fmt: skip
        return 1
    # No winner is a finding (exit 0); an --apply it refused is a failure of the command.
    return 1 if config.apply_to and not best else 0


def apply_winner(
    path: Path, service: str, best: dict[str, Any] | None, runs: int, prog: str
) -> None:
    """--apply: the winner's keys into the vars file, or a refusal saying why."""
    if best:
        write_winner(path, service, best)
        return
    why = f"{METHOD} of the gain over {runs} paired runs"
    print(f"{prog}: --apply refused: {decision.NO_WINNER} ({why}); {path} is unchanged",
          file=sys.stderr)  # fmt: skip


def write_winner(path: Path, service: str, best: dict[str, Any]) -> None:
    before = path.read_text()
    after = apply.apply_point(before, service, best["point"])
    print(apply.diff(before, after, path) or f"{path}: already the winner's keys")
    path.write_text(after)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "=._-" else "_" for c in text)


def snippet(config: Setup, best: dict[str, Any]) -> str:
    """The winner as the service's inventory entry (the keys the axes set)."""
    entry = space.apply(config.spec, best["point"])
    return yaml.safe_dump({"acceldeploy_services": [entry]}, sort_keys=False)


def report(state: dict[str, Any], out: Path, config: Setup, best: dict[str, Any] | None) -> None:
    rows = state["points"]
    where = f"{config.host}/{config.settings['service']}"
    limits = ", ".join(f"{k} <= {significant(v)} ms" for k, v in config.settings["sla_ms"].items())
    runs = config.settings["runs"]
    shown.print_table(tables.console(), rows, f"tune {where} (SLA {limits})", runs)
    if any(r.get("runs") for r in rows):
        sla_ttft = config.settings["sla_ms"].get("p99_ttft")
        shown.plot_pareto(rows, best, sla_ttft, out / "pareto.png", where=where, sla=limits)
    if state.get("stopped"):
        print(f"stopped: {state['stopped']}")
    print(state["decision"])
    if best:
        text = snippet(config, best)
        (out / "winner.yml").write_text(text)
        print(text)
    print(f"results: {out} (tune.json, pareto.png{', winner.yml' if best else ''})")
