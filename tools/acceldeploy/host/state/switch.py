"""What a service would switch to, read from its launcher as deployed and the planned exec
argv: the env build, the model revision, the image, the flags. `site.yml --check --diff`
prints one line per changed service with it."""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from typing import Any


def launcher_argv(text: str) -> list[str] | None:
    """The argv a launcher execs (its `exec` line and the continuation lines after it)."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("exec "):
            joined = line[len("exec ") :]
            for more in lines[index + 1 :]:
                if not joined.endswith("\\"):
                    break
                joined = joined[:-1] + " " + more.strip()
            return shlex.split(joined.rstrip("\\"))
    return None


def _parts(argv: Sequence[str]) -> dict[str, Any]:
    """The env (the directory holding bin/vllm), the model (after `serve`), the image (a
    container's), and the remaining flags, each flag with its value."""
    parts: dict[str, Any] = {"env": None, "model": None, "image": None, "flags": []}
    if "serve" in argv:
        at = list(argv).index("serve")
        head, tail = argv[:at], argv[at + 1 :]
        if head and head[-1].endswith("/bin/vllm"):
            parts["env"] = posixpath.dirname(posixpath.dirname(head[-1]))
        images = [a for a in head if ":" in a and "/" in a and not a.startswith("-")]
        parts["image"] = images[-1] if images else None
        if tail and not tail[0].startswith("-"):
            parts["model"], tail = tail[0], tail[1:]
    else:
        tail = list(argv)
    flags: list[str] = []
    for arg in tail:
        if flags and not arg.startswith("--") and not flags[-1].count(" "):
            flags[-1] += f" {arg}"
        else:
            flags.append(arg)
    parts["flags"] = flags
    return parts


def switch_line(name: str, deployed: str | None, planned: Sequence[str]) -> str:
    """One service's line: `qwen3-vl: env A -> B; model X -> Y; flags -[..] +[..]`."""
    old_argv = launcher_argv(deployed) if deployed else None
    if old_argv is None:
        return f"{name}: new service (no launcher yet)"
    old, new = _parts(old_argv), _parts(list(planned))
    said = [
        f"{what} {old[what]} -> {new[what]}"
        for what in ("env", "model", "image")
        if old[what] != new[what]
    ]
    gone = [f for f in old["flags"] if f not in new["flags"]]
    added = [f for f in new["flags"] if f not in old["flags"]]
    if gone or added:
        said.append(f"flags -{gone} +{added}")
    return f"{name}: " + ("; ".join(said) if said else "same argv (unit, env file or secrets)")
