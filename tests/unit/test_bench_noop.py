"""tools/bench_noop.py's own logic: the recap it reads and the table it prints."""

from __future__ import annotations

import runpy
from pathlib import Path

from rich.console import Console

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "tools" / "bench_noop.py"))

RECAP = """PLAY RECAP *********************************************************************
lab1                       : ok=17   changed=0    unreachable=0    failed=0    skipped=2
lab2                       : ok=16   changed=3    unreachable=0    failed=0    skipped=2
"""


def test_the_recap_gives_each_hosts_changed_count() -> None:
    found = {host: int(changed) for host, changed, _, _ in BENCH["RECAP"].findall(RECAP)}
    assert found == {"lab1": 0, "lab2": 3}


def test_the_table_shows_medians_speedup_and_scaling() -> None:
    row = BENCH["Row"]
    rows = [
        row(1, "host", [4.0, 5.0, 6.0], [15.0, 16.0, 30.0]),
        row(8, "host", [6.0, 7.5, 9], [40, 41, 42]),
    ]
    console = Console(width=200, record=True)
    console.print(BENCH["table"](rows))
    text = console.export_text()
    cells = [
        [c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if "│" in line
    ]
    assert cells == [["1", "host", "5.0", "16.0", "3.20x", "1.00x"],
                     ["8", "host", "7.5", "41.0", "5.47x", "1.50x"]]  # fmt: skip


def test_the_stock_copy_gathers_every_fact_and_keeps_everything_else() -> None:
    import yaml

    root = Path(__file__).resolve().parents[2]
    with BENCH["stock_copy"]() as stock:
        for original in [root / "site.yml", *sorted((root / "playbooks").glob("*.yml"))]:
            before = yaml.safe_load(original.read_text())
            after = yaml.safe_load((stock / original.relative_to(root)).read_text())
            assert len(after) == len(before)
            for was, now in zip(before, after, strict=True):
                assert "gather_facts" not in now and "gather_subset" not in now
                left = {k: v for k, v in was.items() if k not in ("gather_facts", "gather_subset")}
                assert now == left
        assert (stock / "playbooks/../tools/verify.py").is_file()
    assert not stock.exists()
