"""Report formats: a table for people, JSON (schemas/verify-report.schema.json), JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from typing import Any

from acceldeploy import tables
from acceldeploy.verify.model import Check, passed

SCHEMA_VERSION = 1
STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


def to_json(checks: list[Check], inventory: str) -> dict[str, Any]:
    counts = Counter(c.status for c in checks)
    return {
        "schema_version": SCHEMA_VERSION,
        "inventory": inventory,
        "passed": passed(checks),
        "summary": {s: counts.get(s, 0) for s in ("pass", "fail", "warn", "skip")},
        "hosts": sorted({c.host for c in checks}),
        "checks": [c.to_dict() for c in checks],
    }


def to_junit(checks: list[Check]) -> str:
    suites = ET.Element("testsuites", name="acceldeploy verify")
    for host in sorted({c.host for c in checks}):
        mine = [c for c in checks if c.host == host]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=host,
            tests=str(len(mine)),
            failures=str(sum(c.status == "fail" for c in mine)),
            skipped=str(sum(c.status == "skip" for c in mine)),
        )
        for c in mine:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=host,
                name=f"{c.service}.{c.name}" if c.service else c.name,
            )
            if c.status == "fail":
                ET.SubElement(case, "failure", message=c.detail).text = c.fix
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=c.detail)
            else:
                ET.SubElement(case, "system-out").text = f"{c.status}: {c.detail}"
    return ET.tostring(suites, encoding="unicode")


def print_table(checks: list[Check], out: Any = None) -> None:
    """The checks as one table on `out` (tables.console(): a terminal's width, else $COLUMNS or
    100 characters), a long cell folded within its column, then the verdict."""
    from rich.table import Table

    console = out or tables.console()
    table = Table(title="acceldeploy verify", box=tables.box(console))
    for column in ("host", "service", "check", "status", "detail", "fix"):
        table.add_column(column, overflow="fold")
    for c in checks:
        table.add_row(
            c.host, c.service or "", c.name, f"[{STYLE[c.status]}]{c.status}[/]", c.detail, c.fix
        )
    console.print(table)
    counts = Counter(c.status for c in checks)
    verdict = "[green]PASS[/]" if passed(checks) else "[bold red]FAIL[/]"
    console.print(
        f"{verdict}  "
        + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("pass", "fail", "warn", "skip"))
    )


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2)
