"""The fast no-op path: what a role left on a host, observed right after it converged, and the
cheap comparison that lets a rerun with nothing to change skip the role's tasks.

A record (``/var/lib/acceldeploy/state/<role>.json``, 0600) holds the key of the inputs the
role converged from (``state_key``: the role's input variables and a digest of acceldeploy's
own code), what to observe (``Spec``: small files by content, directory trees by size,
mtime and ctime, systemd units by state) and what was observed. A rerun observes the same things and
compares: any difference, or another key, is drift and the role runs in full (and records
again when it is done). Runs on the host inside the ``acceldeploy_state`` module (Python
3.9+), and on the controller for the key.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

RECORD_FORMAT = 1
RECORD_DIR = "/var/lib/acceldeploy/state"
MAX_REASONS = 10
# acceldeploy's code that decides what a role does, the pinned stacks among its data
# (versions/ is a symlink into it); the lab's tooling is its own distribution, in lab/.
CODE_DIRS = ("tools/acceldeploy", "plugins", "playbooks")


@dataclass(frozen=True)
class Spec:
    """What to observe. ``files`` may hold glob patterns (sysfs, one file per CPU policy)."""

    files: tuple[str, ...] = ()
    trees: tuple[str, ...] = ()
    units: tuple[str, ...] = ()

    @classmethod
    def of(cls, data: Mapping[str, Iterable[str]]) -> Spec:
        return cls(
            files=tuple(sorted(set(data.get("files") or ()))),
            trees=tuple(sorted(set(data.get("trees") or ()))),
            units=tuple(sorted(set(data.get("units") or ()))),
        )

    def as_dict(self) -> dict[str, list[str]]:
        return {"files": list(self.files), "trees": list(self.trees), "units": list(self.units)}


@dataclass
class Observation:
    files: dict[str, str | None] = field(default_factory=dict)
    trees: dict[str, dict[str, list[int]] | None] = field(default_factory=dict)
    units: dict[str, dict[str, str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"files": self.files, "trees": self.trees, "units": self.units}


def _file_state(path: str) -> str | None:
    """sha256 of the content; ``link:<target>`` for a symlink; None when absent."""
    if os.path.islink(path):
        return "link:" + os.readlink(path)
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except FileNotFoundError:
        return None
    except OSError as error:  # unreadable (EACCES, EINVAL on some sysfs files): say so
        return f"error:{error.errno}"


def _tree_state(root: str) -> dict[str, list[int]] | None:
    """Every regular file and symlink under ``root``: [size, mtime_ns, ctime_ns] by relative
    path (the fast weights check's stamp, so that a write whose mtime was put back is seen)."""
    if not os.path.isdir(root):
        return None
    found: dict[str, list[int]] = {}
    for parent, dirs, names in os.walk(root):
        dirs.sort()
        for name in names:
            path = os.path.join(parent, name)
            info = os.lstat(path)
            found[os.path.relpath(path, root)] = [info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    return found


def show_blocks(text: str) -> list[dict[str, str]]:
    """`systemctl show` of several units -> each unit's {property: value}, in the order the
    units were named (systemctl separates their blocks with a blank line)."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    return [dict(line.split("=", 1) for line in b.splitlines() if "=" in line) for b in blocks]


def _unit_states(units: Iterable[str]) -> dict[str, dict[str, str]]:
    names = list(units)
    if not names:
        return {}
    argv = ["systemctl", "show", "-p", "Id", "-p", "ActiveState", "-p", "UnitFileState", *names]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    blocks = show_blocks(proc.stdout)
    states: dict[str, dict[str, str]] = {}
    for index, props in enumerate(blocks[: len(names)]):
        name = names[index]
        states[name] = {k: props.get(k, "") for k in ("ActiveState", "UnitFileState")}
    for name in names[len(blocks) :]:
        states[name] = {"ActiveState": "unknown", "UnitFileState": "unknown"}
    return states


def observe(spec: Spec) -> Observation:
    seen = Observation()
    for pattern in spec.files:
        paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for path in paths:
            seen.files[path] = _file_state(path)
    for root in spec.trees:
        seen.trees[root] = _tree_state(root)
    seen.units = _unit_states(spec.units)
    return seen


def record(key: str, spec: Spec, seen: Observation, data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "format": RECORD_FORMAT,
        "key": key,
        "spec": spec.as_dict(),
        "observed": seen.as_dict(),
        "data": dict(data),
    }


def _differences(kind: str, was: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    reasons = []
    for name in sorted(set(was) | set(now)):
        before, after = was.get(name, "missing"), now.get(name, "missing")
        if before == after:
            continue
        if kind == "unit":
            reasons.append(f"unit {name} is {_unit_words(after)} (was {_unit_words(before)})")
        elif after is None or after == "missing":
            reasons.append(f"{name} is gone")
        elif before is None or before == "missing":
            reasons.append(f"{name} appeared")
        elif kind == "tree":
            changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
            reasons.append(f"{name}: {', '.join(changed[:3])} changed")
        else:
            reasons.append(f"{name} changed")
    return reasons


def _unit_words(state: Any) -> str:
    if not isinstance(state, Mapping):
        return "not watched"
    return f"{state.get('ActiveState')}/{state.get('UnitFileState')}"


def drift(recorded: Mapping[str, Any] | None, key: str) -> list[str]:
    """Why the role must run in full ([] when the host is as the last converge left it)."""
    if not recorded:
        return ["no record of a converged run"]
    if recorded.get("format") != RECORD_FORMAT:
        return [f"record format {recorded.get('format')} (this acceldeploy writes {RECORD_FORMAT})"]
    if recorded.get("key") != key:
        return ["the inputs or acceldeploy changed since the last converge"]
    now = observe(Spec.of(recorded.get("spec") or {}))
    was = recorded.get("observed") or {}
    reasons = (
        _differences("file", was.get("files") or {}, now.files)
        + _differences("tree", was.get("trees") or {}, now.trees)
        + _differences("unit", was.get("units") or {}, now.units)
    )
    return reasons[:MAX_REASONS]


def read_record(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(path: str, content: Mapping[str, Any]) -> bool:
    """Atomically, 0600 in a 0700 directory; False when the file already says this."""
    text = json.dumps(content, indent=1, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    temp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    return True


def code_digest(root: str, package: str = "") -> str:
    """sha256 over acceldeploy's deciding code and data under ``root`` (the collection), and
    the controller's installed ``package`` (the acceldeploy wheel, upgraded on its own)."""
    digest = hashlib.sha256()
    for top in ("roles", *CODE_DIRS):
        _digest_tree(digest, root, top)
    if package:
        digest.update(b"package\0")
        _digest_tree(digest, os.path.dirname(package), os.path.basename(package))
    return digest.hexdigest()


def _digest_tree(digest: Any, root: str, top: str) -> None:
    for parent, dirs, names in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(parent, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())


def whole_run(run_tags: Iterable[str], skip_tags: Iterable[str], check_mode: bool) -> bool:
    """Only a real run with no --tags or --skip-tags converged everything a record speaks for."""
    return list(run_tags) == ["all"] and not list(skip_tags) and not check_mode


def play_runs(play_tags: Iterable[str], run_tags: Iterable[str], skip_tags: Iterable[str]) -> bool:
    """Whether a play tagged play_tags runs under --tags run_tags --skip-tags skip_tags (every
    task in it untagged, as verify's are)."""
    tags, run, skip = set(play_tags), set(run_tags), set(skip_tags)
    return ("all" in run or bool(tags & run)) and not (tags & skip or "all" in skip)


def state_key(inputs: Any, code: str) -> str:
    text = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(f"{code}\n{text}".encode()).hexdigest()
