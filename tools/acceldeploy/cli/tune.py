"""`acceldeploy tune` (tools/tune.py): seed 002's loop on one service, by itself. Each point of
a grid of service keys runs on the real service (a runtime drop-in, restart, the bench profile
with an SLA rate search, memory and metrics); the planner skips points that cannot start; the
best point that meets the SLA and a memory headroom is proposed as an inventory snippet. The
service is put back on its deployed flags at the end, on failure and on Ctrl-C."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from acceldeploy.bench import profiles
from acceldeploy.bench.profiles import Profile, Sweep
from acceldeploy.bench.runner import Target, read_deployed, run_target
from acceldeploy.cli.argtypes import bounded
from acceldeploy.cli.common import PROG, Parents
from acceldeploy.errors import AcceldeployError
from acceldeploy.secrets import mask
from acceldeploy.serving import selection
from acceldeploy.serving.hostplan import HostPlan
from acceldeploy.serving.unit import ServiceUnit
from acceldeploy.tune import apply, dropin, space
from acceldeploy.tune.search import Candidate, evaluate, load_state, save_state, search, winner
from acceldeploy.verify.runner import connection


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
    candidates = [plan_point(hv, specs, args.service, point) for point in space.points(axes)]
    if all(c.reason for c in candidates):
        first = candidates[0]
        raise AcceldeployError(
            f"--space: the planner refuses all {len(candidates)} point(s); "
            f"{first.label}: {first.reason}"
        )
    apply_to = None
    if args.apply:
        groups = [*hv.get("group_names", []), "all"]
        apply_to = apply.target(Path(args.inventory), args.host, groups, args.service)
    settings = {
        "host": args.host, "service": args.service, "profile": profile.to_dict(),
        "space": args.space, "sla_ms": sla, "headroom_mib": args.headroom_mib,
    }  # fmt: skip
    return Setup(args.host, hv, spec, profile, candidates, settings, plan, unit, apply_to)


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
    note = refused_note(config.candidates)
    if note:
        print(f"{getattr(args, PROG)}: {mask(note)}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    state = state or {"settings": config.settings, "points": []}
    return tune(args, config, out, state)


def tune(args: argparse.Namespace, config: Setup, out: Path, state: dict[str, Any]) -> int:
    """The search on the host, the service restored at the end whatever happens."""
    prog = getattr(args, PROG)
    conn = connection(config.host, config.hostvars, args.timeout)
    try:
        conn.open()
    except Exception as exc:
        raise AcceldeployError(f"cannot reach {config.host}: {exc}") from None
    deployed_unit = config.unit
    before = dropin.fingerprint(conn, deployed_unit)
    total = total_memory_mib(conn, config.plan.platform)

    def measure(candidate: Candidate) -> dict[str, Any]:
        started = dropin.apply(conn, candidate.unit, candidate.label)
        if not started.ok:
            reason = " | ".join(started.journal[-6:])
            return {"status": "failed to start", "ready_seconds": started.seconds,
                    "reason": reason, "journal": started.journal}  # fmt: skip
        target = Target(config.host, candidate.hostvars, candidate.plan, candidate.unit,
                        candidate.launch, config.profile)  # fmt: skip
        read_deployed(target, args.timeout)
        summary = run_target(target, out.name, out / "points" / slug(candidate.label),
                             False, lambda: None, args.timeout)  # fmt: skip
        return {"status": "measured", "ready_seconds": started.seconds,
                **evaluate(summary, args.headroom_mib, total)}  # fmt: skip

    interrupted = False
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill restores too
    try:
        search(config.candidates, state, out, measure, args.max_minutes, print)
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
    best = winner(state["points"])
    state["winner"] = best and best["label"]
    save_state(out, state)
    report(state, out, config, best)
    if config.apply_to and best and not interrupted:
        write_winner(config.apply_to, args.service, best)
    if interrupted:
        print(f"{prog}: interrupted; {args.service} is back on its deployed flags. "
              f"--resume {out} continues.", file=sys.stderr)  # fmt: skip
        return 130
    if not (state["restored"]["healthy"] and state["restored"]["identical"]):
        print(f"{prog}: {args.service} was not restored as it was: {mask(str(state['restored']))}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0 if best else 1


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
    from rich.console import Console
    from rich.table import Table

    rows = state["points"]
    where = f"{config.host}/{config.settings['service']}"
    table = Table(title=f"tune {where} (SLA {config.settings['sla_ms']} ms)")
    columns = ("point", "status", "ready s", "ready MiB", "peak MiB", "kept MiB", "best rate",
               "req/s", "p99 TTFT", "p99 TPOT", "verdict", "passes")  # fmt: skip
    for column in columns:
        table.add_column(column)
    for r in rows:
        table.add_row(
            r["label"], r["status"] + (f": {r['reason'][:60]}" if r.get("reason") else ""),
            *(_fmt(r.get(k)) for k in ("ready_seconds", "memory_ready_mib", "peak_mib",
                                       "kept_mib", "best_rate", "throughput", "p99_ttft_ms",
                                       "p99_tpot_ms")),
            str(r.get("verdict", "")), "yes" if r.get("passes") else "no",
        )  # fmt: skip
    Console(width=200).print(table)
    measured = [r for r in rows if r["status"] == "measured"]
    if any(r.get("throughput") is not None or r.get("lowest") for r in measured):
        plot_pareto(measured, best, config.settings["sla_ms"].get("p99_ttft"), out / "pareto.png")
    if best:
        text = snippet(config, best)
        (out / "winner.yml").write_text(text)
        print(f"winner: {best['label']} ({_fmt(best['throughput'])} req/s at rate "
              f"{best['best_rate']}, peak {_fmt(best['peak_mib'])} MiB)\n{text}")  # fmt: skip
    else:
        print("winner: none of the points met the SLA within the headroom")
    print(f"results: {out} (tune.json, pareto.png, winner.yml)")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def plot_pareto(
    rows: list[dict[str, Any]], best: dict[str, Any] | None, sla_ttft: float | None, path: Path
) -> None:
    """Throughput against p99 TTFT at each point's best SLA rate, peak memory as colour, the
    winner ringed; a point that missed the SLA at every rate is a grey cross at the lowest rate
    tried; the SLA's p99 TTFT as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    met = [r for r in rows if r.get("throughput") is not None]
    missed = [r for r in rows if r.get("throughput") is None and r.get("lowest")]
    fig, ax = plt.subplots(figsize=(8, 5))
    if met:
        points = ax.scatter(
            [r["throughput"] for r in met], [r["p99_ttft_ms"] or 0.0 for r in met],
            c=[r["peak_mib"] or 0.0 for r in met], cmap="viridis", s=80,
        )  # fmt: skip
        fig.colorbar(points, ax=ax, label="peak memory MiB")
    for r in met:
        ax.annotate(r["label"], (r["throughput"], r["p99_ttft_ms"] or 0.0), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")  # fmt: skip
    for r in missed:
        at = (r["lowest"]["throughput"] or 0.0, r["lowest"]["p99_ttft_ms"] or 0.0)
        ax.scatter(*at, marker="x", s=80, color="grey", label="missed the SLA (lowest rate)")
        ax.annotate(f"{r['label']} @ {r['lowest']['rate']} req/s", at, fontsize=7,
                    xytext=(4, 4), textcoords="offset points")  # fmt: skip
    if sla_ttft:
        ax.axhline(sla_ttft, color="grey", linestyle="--", linewidth=1,
                   label=f"SLA p99 TTFT {sla_ttft:g} ms")  # fmt: skip
    if best:
        ax.scatter([best["throughput"]], [best["p99_ttft_ms"]], s=260, facecolors="none",
                   edgecolors="red", linewidths=2, label="winner")  # fmt: skip
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=8)
    ax.margins(x=0.3, y=0.1)  # room for the labels
    ax.set_xlabel("requests/s at the highest rate meeting the SLA (crosses: the lowest rate tried)")
    ax.set_ylabel("p99 TTFT ms")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
