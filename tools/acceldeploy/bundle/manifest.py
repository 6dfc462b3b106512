"""``bundle.json``: what a bundle holds and who needs it; re-hashing it (verify) and comparing
two of them (diff).

Format 1::

    {"format": 1, "acceldeploy": "0.1.0", "built": "...", "build_seconds": 12.3,
     "inventory": "inventory/site",
     "classes": {"cpu-cp311-x86_64-glibc2.36": {"platform": ..., "hosts": [...]}},
     "models": {"org/name@rev": {"source": "hf", "revision": "...", "hosts": [...]}},
     "files": {"wheels/x.whl": {"size": 1, "sha256": "...",
                                "kind": "stack|hub|controller|model|built",
                                "source": "...", "classes": [...]}},
     "references": [{"name": ..., "variable": ..., "path": ..., "sha256": ..., "hosts": [...]}]}

Hashing remembers each file's (size, mtime, inode) beside its digest in a file of the
controller's cache, so a second check of an unchanged bundle reads no file twice; a file
written since (a flipped byte included) is hashed again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from acceldeploy.downloads.fetchlock import replacing
from acceldeploy.errors import AcceldeployError
from acceldeploy.host.fetch.common import hash_file

MANIFEST = "bundle.json"
# In the controller's cache: the digests HashCache remembers, for build and preflight alike.
HASHES = "bundle-hashes.json"
FORMAT = 1
# What a manifest lists besides its files ("os": the apt repositories, from their first bundle).
DIFF_FIELDS = ("classes", "models", "references", "os")
KINDS = ("stack", "hub", "controller", "model")

Progress = Callable[[int], None]


def sha256_file(path: Path, progress: Progress | None = None) -> str:
    return hash_file(path, "sha256", progress)


class HashCache:
    """Digests of files already read, keyed by path and invalidated by size, mtime or inode."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, list[Any]] = {}
        if path is not None:
            try:
                self.entries = json.loads(path.read_text())
            except (OSError, ValueError):
                self.entries = {}

    def sha256(self, file: Path, progress: Progress | None = None) -> str:
        st = file.stat()
        key = str(file.resolve())
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        cached = self.entries.get(key)
        if cached and cached[:3] == stamp:
            if progress:
                progress(st.st_size)
            return str(cached[3])
        digest = sha256_file(file, progress)
        self.entries[key] = [*stamp, digest]
        return digest

    def save(self) -> None:
        if self.path is not None:
            write_json(self.path, self.entries)


def write_json(path: Path, data: Any) -> None:
    """Atomically: the file is the old one or the new one, never half of either."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def load(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise AcceldeployError(
            f"{directory} is not a bundle (no {MANIFEST}); build one with "
            f"`acceldeploy bundle build -i INVENTORY --out {directory}`"
        ) from exc
    except (OSError, ValueError) as exc:
        raise AcceldeployError(f"{path}: unreadable ({exc}); build the bundle again") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise AcceldeployError(f"{path}: not a bundle manifest of format {FORMAT}")
    return data


def problems(
    directory: Path,
    files: Mapping[str, Mapping[str, Any]],
    cache: HashCache,
    progress: Progress | None = None,
) -> list[str]:
    """Each listed file that is missing or differs from the manifest, one line each."""
    found = []
    for name, entry in sorted(files.items()):
        path = directory / name
        if not path.is_file():
            found.append(f"{name}: missing")
            continue
        size = path.stat().st_size
        if size != entry["size"]:
            found.append(f"{name}: {size} bytes, the manifest says {entry['size']}")
            if progress:
                progress(int(entry["size"]))
            continue
        digest = cache.sha256(path, progress)
        if digest != entry["sha256"]:
            found.append(
                f"{name}: sha256 {digest[:12]}..., the manifest says {entry['sha256'][:12]}..."
            )
    return found


def unlisted(directory: Path, files: Mapping[str, Any]) -> list[str]:
    """Files in the bundle the manifest does not name (work directories excluded)."""
    present = {
        str(p.relative_to(directory))
        for top in ("wheels", "controller", "models")
        if (directory / top).is_dir()
        for p in (directory / top).rglob("*")
        if p.is_file() and "/.acceldeploy/" not in f"/{p.relative_to(directory)}"
    }
    return sorted(present - set(files))


def _by_kind(files: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for _, entry in files:
        kind = totals.setdefault(str(entry["kind"]), {"files": 0, "bytes": 0})
        kind["files"] += 1
        kind["bytes"] += int(entry["size"])
    return totals


def totals(manifest: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    return _by_kind(manifest["files"].items())


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What going from ``old`` to ``new`` adds, drops and changes: files (by path and digest),
    host classes, models, references and apt repositories."""
    before, after = old["files"], new["files"]
    added = sorted(set(after) - set(before))
    dropped = sorted(set(before) - set(after))
    changed = sorted(
        n for n in set(before) & set(after) if before[n]["sha256"] != after[n]["sha256"]
    )

    def keys(field: str, data: Mapping[str, Any]) -> set[str]:
        value = data.get(field) or {}
        if isinstance(value, list):
            return {str(v.get("name")) for v in value}
        return set(value)

    return {
        "files": {
            "added": added,
            "dropped": dropped,
            "changed": changed,
            "added_bytes": sum(int(after[n]["size"]) for n in added + changed),
            "dropped_bytes": sum(int(before[n]["size"]) for n in dropped),
        },
        **{
            field: {
                "added": sorted(keys(field, new) - keys(field, old)),
                "dropped": sorted(keys(field, old) - keys(field, new)),
            }
            for field in DIFF_FIELDS
        },
    }
