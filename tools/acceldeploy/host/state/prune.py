"""Which old directories beside the current ones may go: Python env builds (python_env) and
model revisions (vllm_service, after the new one serves). The same rule for both: the
current ones stay, so does anything a running process, a launcher or a rollback copy names,
and the ``keep`` newest complete others; the rest is removed.

Runs on the host inside the ``acceldeploy_prune`` module (ansible.cfg's ``module_utils =
tools``), so it imports only the standard library and keeps to Python 3.9.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    path: str
    mtime: float
    complete: bool


def command_lines(own_pid: int) -> list[str]:
    """Every running process's command line (this process's own names every candidate)."""
    texts = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        if path.split("/")[2] == str(own_pid):
            continue
        try:
            with open(path, "rb") as handle:
                texts.append(handle.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended meanwhile
            pass
    return texts


def file_texts(patterns: Iterable[str]) -> list[str]:
    texts = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                with open(path, errors="replace") as handle:
                    texts.append(handle.read())
            except OSError:
                pass
    return texts


def named(path: str, texts: Iterable[str]) -> bool:
    """Whether a text names ``path`` itself or something under it (not ``path-2``)."""
    pattern = re.compile(re.escape(path.rstrip("/")) + r"(?=[/\s'\"]|$)")
    return any(pattern.search(text) for text in texts)


def entries(patterns: Iterable[str], marker: str) -> list[Entry]:
    """The directories the patterns match; complete when ``marker`` (a file inside) exists,
    or always when there is no marker."""
    found = []
    for path in sorted({p for pattern in patterns for p in glob.glob(pattern)}):
        if os.path.isdir(path) and not os.path.islink(path):
            complete = not marker or os.path.exists(os.path.join(path, marker))
            found.append(Entry(path, os.stat(path).st_mtime, complete))
    return found


def removable(
    found: Sequence[Entry], current: Iterable[str], keep: int, in_use: Iterable[str]
) -> list[str]:
    """The paths to remove. Kept: the current ones (and any directory holding one), the ones
    in use, and the ``keep`` newest complete others; an incomplete one is never kept."""
    if int(keep) < 0:
        # never "keep none": a negative count would remove every older complete directory
        raise ValueError(f"keep must be 0 or more, got {keep}; nothing was removed")
    current = [c.rstrip("/") for c in current]
    held = set(in_use) | {
        e.path for e in found if any(c == e.path or c.startswith(e.path + "/") for c in current)
    }
    others = sorted((e for e in found if e.path not in held and e.complete), key=lambda e: -e.mtime)
    kept = held | {e.path for e in others[: int(keep)]}
    return [e.path for e in found if e.path not in kept]


def revision_patterns(model_paths: Iterable[str]) -> list[str]:
    """``/models/org/name@rev`` -> ``/models/org/name@*``: every revision of the models a
    host serves (a path without ``@`` is the operator's own directory: never pruned)."""
    patterns = set()
    for path in model_paths:
        head, sep, revision = str(path).rstrip("/").rpartition("@")
        if sep and "/" in head and "/" not in revision and not set("*?[") & set(head):
            patterns.add(f"{head}@*")
    return sorted(patterns)
