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


def test_site_is_compared_with_the_recorded_figure_and_warns_above_20_percent() -> None:
    row = BENCH["Row"](2, "site", [9.0, 10.0, 30.0], [])
    recorded = {"seconds": 9.0, "date": "2026-11-28", "page": "x.md"}
    lines = BENCH["compare_with_recorded"](row, recorded)
    assert lines[0] == "no-op site.yml on 2 hosts: median 10.0 s (runs: 9.0, 10.0, 30.0)"
    assert "recorded: 9.0 s on 2026-11-28 (x.md); now +11%" in lines[1]
    assert not any(line.startswith("WARNING") for line in lines)
    grown = BENCH["compare_with_recorded"](BENCH["Row"](2, "site", [11.0], []), recorded)
    assert grown[-1].startswith("WARNING: the no-op site.yml grew 22% over its recorded 9.0 s")
    unknown = BENCH["compare_with_recorded"](row, None)
    assert "no figure recorded for 2 hosts" in unknown[-1]


def test_the_recorded_site_figures_are_read_per_host_count(tmp_path: Path) -> None:
    recorded = tmp_path / "noop.yml"
    recorded.write_text("site:\n  2: {seconds: 9.5, date: 2026-11-28, page: p.md}\n")
    assert BENCH["recorded_site"](2, recorded)["seconds"] == 9.5
    assert BENCH["recorded_site"](4, recorded) is None
    assert BENCH["recorded_site"](2, tmp_path / "absent.yml") is None
    assert BENCH["recorded_site"](2)  # the repository records the 2-host lab's figure
