"""The order tune measures in. Runs of one point back to back share one stretch of the host's
noise (another job's load comes and goes over minutes), so points measured one after another
can be ranked by the load rather than by their flags. Tune goes through every point once per
cycle, the deployed flags first, and pairs each point's run with the deployed flags' run of
the same cycle: the load a cycle shares falls out of their difference. The other points run
forwards in odd cycles and backwards in even ones, so over the cycles every point sits on
average as far from its deployed run as the others (a drift weighs on all of them alike), and
no point is ever measured twice in a row. A search cut short by --max-minutes leaves every
point with as many runs as the others, give or take one."""

from __future__ import annotations


def order(labels: list[str], runs: int) -> list[tuple[str, int]]:
    """(label, cycle from 1) in measuring order; labels[0] is the deployed flags."""
    deployed, others = labels[0], labels[1:]
    plan: list[tuple[str, int]] = []
    for cycle in range(1, runs + 1):
        ring = [deployed, *(others if cycle % 2 else others[::-1])]
        plan += [(label, cycle) for label in ring]
    return plan


def describe(labels: list[str], runs: int) -> str:
    """'cycle 1: a, b, c; cycle 2: a, c, b; and so on, alternating'."""
    shown = [
        f"cycle {cycle}: " + ", ".join(label for label, c in order(labels, runs) if c == cycle)
        for cycle in range(1, min(runs, 2) + 1)
    ]
    return "; ".join(shown) + ("; and so on, alternating" if runs > 2 else "")
