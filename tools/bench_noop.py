#!/usr/bin/env python3
"""How long a rerun with nothing to change takes, as hosts are added: the drift check
operators run all day. Brings up N lab hosts (1, 2, 4, 8 by default: Debian 12 containers
whose root is an overlay on one cached rootfs, so each costs only its own writes, ~150 MB),
converges the stages that need no vLLM venv (host tuning, models), then times a no-op rerun
of each and of preflight (the inventory's checks, the first contact, the controller's
downloads checked), and of the floor under any drift check (one ping per host, no facts:
what Ansible itself costs on this machine as hosts are added), with the project's Ansible settings
(ansible.cfg: forks 20, pipelining, SSH ControlPersist, lean fact gathering and a fact cache)
and with stock ones (forks 5, no pipelining, the default SSH arguments, no fact cache, and
every play gathering every fact, as a play without gather_facts does: the bench runs a copy
of the playbooks without those keys).
`--site` times the whole site.yml on the running lab as it is instead (run it after `make
demo`: its two hosts serve vLLM), with the project's settings only unless `--stock`, and prints
its median beside the last figure recorded for that many hosts in docs/benchmarks/noop.yml,
with a warning line when it grew by more than 20 % (a benchmark, not an assertion: `make test`
prints it at the end of its e2e block).

    python3 tools/bench_noop.py [--hosts 1,2,4,8] [--runs 3] [--site [--stock]] [--json FILE]
                                [--mitogen DIR]

``--mitogen DIR`` adds a column with Mitogen's strategy (DIR holds the ansible_mitogen
package, e.g. ``pip install --target DIR mitogen``): the evaluation the README reports.

Every timed run must report changed=0 on every host, or the bench stops: a rerun that
changes something is not a no-op. Prints a table; the README quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))  # acceldeploy_lab
sys.path.insert(0, str(Path(__file__).resolve().parent))  # acceldeploy
from acceldeploy_lab.inventory import read_inventory

ROOT = Path(__file__).resolve().parents[1]
LAB = [sys.executable, str(ROOT / "tools" / "lab.py")]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
INVENTORY = ROOT / "inventory" / "lab"
STAGES = {
    "preflight": "playbooks/preflight.yml",
    "host": "playbooks/host.yml",
    "models": "playbooks/models.yml",
}
# The floor any drift check stands on: one module call per host, no facts. Its "vs 1 host"
# is what this machine's cores allow Ansible when hosts are added, whatever the playbook.
FLOOR = "floor.yml"
FLOOR_PLAY = [
    {
        "name": "Floor - one module call per host",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [{"name": "Ping", "ansible.builtin.ping": None}],
    }
]
# Ansible's own defaults for what ansible.cfg tunes (the plays' fact gathering: stock_copy).
STOCK = {
    "ANSIBLE_FORKS": "5",
    "ANSIBLE_PIPELINING": "False",
    "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=60s",
    "ANSIBLE_GATHERING": "implicit",
    "ANSIBLE_CACHE_PLUGIN": "memory",
}
# The last recorded no-op site.yml per host count, which --site compares with.
RECORDED = ROOT / "docs" / "benchmarks" / "noop.yml"
GROWTH_WARNING = 0.20
RECAP = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


class BenchError(Exception):
    pass


@dataclass
class Row:
    hosts: int
    stage: str
    tuned: list[float]
    stock: list[float]
    mitogen: list[float] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return statistics.median(self.stock) / statistics.median(self.tuned)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def lab(*args: str) -> None:
    proc = subprocess.run([*LAB, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(f"tools/lab.py {' '.join(args)}: {proc.stderr[-2000:]}")


def play(playbook: str, env: dict[str, str] | None = None, noop: bool = True) -> float:
    """Seconds the playbook took; with ``noop`` it must change nothing on any host."""
    started = time.monotonic()
    proc = subprocess.run(
        [PLAYBOOK, playbook, "-i", str(INVENTORY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    elapsed = time.monotonic() - started
    recap = RECAP.findall(proc.stdout)
    if proc.returncode != 0 or not recap:
        raise BenchError(
            f"{playbook} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
        )
    changed = {host: int(n) for host, n, _, _ in recap if int(n)}
    if noop and changed:
        raise BenchError(f"{playbook} rerun changed something: {changed}")
    return elapsed


def stock_play(play: object) -> object:
    """A play as written without fact-gathering keys (Ansible then gathers every fact)."""
    if isinstance(play, dict) and "hosts" in play:
        return {k: v for k, v in play.items() if k not in ("gather_facts", "gather_subset")}
    return play


@contextmanager
def stock_copy() -> Iterator[Path]:
    """site.yml and playbooks/*.yml with stock fact gathering, in a directory of the
    repository (the roles and plugins they use resolve as from the originals)."""
    top = Path(tempfile.mkdtemp(prefix=".bench-stock-", dir=ROOT))
    try:
        (top / "playbooks").mkdir()
        for source in [ROOT / "site.yml", *sorted((ROOT / "playbooks").glob("*.yml"))]:
            plays = [stock_play(p) for p in yaml.safe_load(source.read_text()) or []]
            target = top / source.relative_to(ROOT)
            target.write_text(yaml.safe_dump(plays, sort_keys=False, width=100))
        (top / FLOOR).write_text(yaml.safe_dump([stock_play(p) for p in FLOOR_PLAY]))
        (top / "tools").symlink_to(ROOT / "tools")  # verify.yml: {{ playbook_dir }}/../tools
        (top / "playbooks" / "tasks").symlink_to(ROOT / "playbooks" / "tasks")
        yield top
    finally:
        shutil.rmtree(top)


def mitogen_env(directory: Path | None) -> dict[str, str] | None:
    if directory is None:
        return None
    strategies = directory / "ansible_mitogen" / "plugins" / "strategy"
    if not strategies.is_dir():
        raise BenchError(f"--mitogen {directory}: no ansible_mitogen/plugins/strategy there")
    # Mitogen's SSH ignores StrictHostKeyChecking in ansible_ssh_common_args (the lab's hosts).
    return {
        "ANSIBLE_STRATEGY_PLUGINS": str(strategies),
        "ANSIBLE_STRATEGY": "mitogen_linear",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
    }


@contextmanager
def floor_playbook() -> Iterator[str]:
    top = Path(tempfile.mkdtemp(prefix=".bench-floor-", dir=ROOT))
    try:
        (top / FLOOR).write_text(yaml.safe_dump(FLOOR_PLAY, sort_keys=False))
        yield str(top / FLOOR)
    finally:
        shutil.rmtree(top)


def bench_stage(
    hosts: int,
    stage: str,
    playbook: str,
    runs: int,
    mitogen: dict[str, str] | None = None,
    stock_too: bool = True,
) -> Row:
    row = Row(hosts, stage, [], [])
    with stock_copy() as stock, floor_playbook() as floor:
        tuned = floor if playbook == FLOOR else playbook
        for _ in range(runs):
            row.tuned.append(play(tuned))
            if stock_too:
                row.stock.append(play(str(stock / playbook), STOCK))
            if mitogen:
                row.mitogen.append(play(tuned, mitogen))
    stock_figure = f", {statistics.median(row.stock):.1f} s stock" if row.stock else ""
    say(f"    {hosts} hosts, {stage}: {statistics.median(row.tuned):.1f} s tuned{stock_figure}")
    return row


def recorded_site(hosts: int, path: Path = RECORDED) -> dict[str, object] | None:
    """The last no-op site.yml figure recorded for this many hosts, if any."""
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    found = ((data or {}).get("site") or {}).get(hosts)
    return dict(found) if isinstance(found, dict) else None


def compare_with_recorded(row: Row, recorded: dict[str, object] | None) -> list[str]:
    """The median beside the recorded figure; a warning line when it grew by over 20 %."""
    median = statistics.median(row.tuned)
    runs = ", ".join(f"{t:.1f}" for t in row.tuned)
    lines = [f"no-op site.yml on {row.hosts} hosts: median {median:.1f} s (runs: {runs})"]
    if recorded is None:
        return [*lines, f"  no figure recorded for {row.hosts} hosts in {RECORDED.name}"]
    seconds = float(str(recorded["seconds"]))
    growth = median / seconds - 1
    lines.append(
        f"  recorded: {seconds:.1f} s on {recorded.get('date')} ({recorded.get('page')}); "
        f"now {growth:+.0%}"
    )
    if growth > GROWTH_WARNING:
        lines.append(
            f"WARNING: the no-op site.yml grew {growth:.0%} over its recorded {seconds:.1f} s "
            f"(more than {GROWTH_WARNING:.0%}): find the task that grew with the task profile"
        )
    return lines


def bench_hosts(count: int, runs: int, mitogen: dict[str, str] | None) -> list[Row]:
    say(f"==> {count} lab hosts: up, converge preflight, host tuning and models, then time reruns")
    lab("down")
    lab("up", "--hosts", str(count))
    for playbook in STAGES.values():
        play(playbook, noop=False)
    stages = {**STAGES, "floor": FLOOR}
    return [
        bench_stage(count, stage, playbook, runs, mitogen) for stage, playbook in stages.items()
    ]


def table(rows: list[Row]) -> Table:
    """Medians per host count and stage; "vs N hosts" is tuned time over the first count's."""
    mitogen = any(r.mitogen for r in rows)
    out = Table(title="No-op rerun, median seconds (tools/bench_noop.py)")
    columns = ["hosts", "stage", "tuned", "stock", "stock / tuned", f"vs {rows[0].hosts} host"]
    for column in columns + (["mitogen"] if mitogen else []):
        out.add_column(column, justify="right")
    first = {r.stage: statistics.median(r.tuned) for r in rows if r.hosts == rows[0].hosts}
    for r in rows:
        tuned = statistics.median(r.tuned)
        stock = f"{statistics.median(r.stock):.1f}" if r.stock else ""
        cells = [str(r.hosts), r.stage, f"{tuned:.1f}", stock]
        cells += [f"{r.speedup:.2f}x" if r.stock else "", f"{tuned / first[r.stage]:.2f}x"]
        if mitogen:
            cells.append(f"{statistics.median(r.mitogen):.1f}" if r.mitogen else "")
        out.add_row(*cells)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/bench_noop.py", description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="1,2,4,8", help="host counts (default %(default)s)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per cell (median)")
    parser.add_argument("--site", action="store_true", help="only site.yml on the running lab")
    parser.add_argument("--stock", action="store_true", help="--site: also with stock settings")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--mitogen", type=Path, help="also time Mitogen's strategy (its dir)")
    args = parser.parse_args(argv)
    try:
        mitogen = mitogen_env(args.mitogen)
        if args.site:
            hosts = len(read_inventory(INVENTORY / "hosts.yml"))
            say(f"==> site.yml on the running lab ({hosts} hosts): one run to settle, then no-ops")
            play("site.yml", noop=False)
            rows = [bench_stage(hosts, "site", "site.yml", args.runs, mitogen, args.stock)]
        else:
            counts = [int(n) for n in args.hosts.split(",")]
            rows = [r for n in counts for r in bench_hosts(n, args.runs, mitogen)]
            lab("down")
    except BenchError as exc:
        print(f"bench_noop: {exc}", file=sys.stderr)
        return 1
    Console().print(table(rows))
    if args.site:
        print("\n".join(compare_with_recorded(rows[0], recorded_site(rows[0].hosts))))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
