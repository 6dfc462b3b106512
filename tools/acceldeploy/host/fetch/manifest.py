"""The manifest of a published model, and the published copy checked against it."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import (
    MANIFEST,
    MANIFEST_FORMAT,
    Listing,
    ModelSpec,
    RemoteFile,
    fsync_dir,
    hash_file,
)


def read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        return None
    return data


def manifest_listing(manifest: Mapping[str, Any]) -> Listing:
    files = tuple(
        RemoteFile(
            path=path,
            size=int(entry["size"]),
            sha256=entry.get("sha256"),
            sha1_git=entry.get("sha1_git"),
        )
        for path, entry in sorted(manifest["files"].items())
    )
    return Listing(
        model=str(manifest["model"]),
        source=str(manifest["source"]),
        revision=str(manifest["revision"]),
        commit=manifest.get("commit"),
        files=files,
    )


def write_manifest(directory: Path, listing: Listing, spec: ModelSpec) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for f in listing.files:
        st = (directory / f.path).stat()
        entry: dict[str, Any] = {
            "size": f.size,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino,
        }
        if f.sha256:
            entry["sha256"] = f.sha256
        if f.sha1_git:
            entry["sha1_git"] = f.sha1_git
        files[f.path] = entry
    manifest = {
        "format": MANIFEST_FORMAT,
        "model": spec.model,
        "source": spec.source,
        "revision": listing.revision,
        "commit": listing.commit,
        "allow_patterns": list(spec.allow_patterns) if spec.allow_patterns else None,
        "bytes": listing.total_bytes,
        "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": files,
    }
    tmp = directory / (MANIFEST + ".tmp")
    with tmp.open("w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(directory / MANIFEST)
    fsync_dir(directory)
    return manifest


@dataclass
class LocalCheck:
    """The published directory against its manifest (and, if given, the hub's listing)."""

    exists: bool
    manifest: dict[str, Any] | None
    good: dict[str, RemoteFile] = field(default_factory=dict)
    bad: dict[str, str] = field(default_factory=dict)
    rehashed_bytes: int = 0
    restamp: bool = False


def _same_stat(st: os.stat_result, entry: Mapping[str, Any]) -> bool:
    """Size, mtime, ctime and inode as the manifest recorded them. A rewritten or replaced file
    has moved at least one of them, and so has a write whose mtime was put back (``cp -p``,
    ``rsync -t``, ``touch -r``): utime(2) cannot set the ctime. What keeps all four is a write
    within the same tick of the kernel's coarse clock as the stamp, or a change made below the
    filesystem (the disk, a restored block device): ``verify: full`` finds those. Manifests
    written before the ctime was recorded are read without it."""
    return (
        st.st_size == entry.get("size")
        and st.st_mtime_ns == entry.get("mtime_ns")
        and st.st_ctime_ns == entry.get("ctime_ns", st.st_ctime_ns)
        and st.st_ino == entry.get("ino", st.st_ino)
    )


def check_published(
    directory: Path,
    verify: str,
    expected: Listing | None = None,
    progress: Callable[[int], None] | None = None,
) -> LocalCheck:
    """Which files of the published copy can be trusted.

    ``fast``: a file whose stamp (size, mtime, ctime, inode) matches the manifest is trusted
    without reading it; one that differs is re-hashed (a touched but intact file is kept and its
    stamp re-recorded).
    ``full``: every file is re-hashed. Against ``expected`` (the hub's listing), only files whose
    hub hash equals the manifest's count.
    """
    manifest = read_manifest(directory)
    result = LocalCheck(exists=directory.is_dir(), manifest=manifest)
    if manifest is None:
        return result
    recorded = manifest_listing(manifest)
    wanted = {f.path: f for f in (expected.files if expected else recorded.files)}
    entries = manifest["files"]
    for f in recorded.files:
        target = wanted.get(f.path)
        if target is None:
            continue
        if target.expected != f.expected and target.check == f.check:
            result.bad[f.path] = "the hub has another version"
            continue
        path = directory / f.path
        try:
            st = path.lstat()
        except OSError:
            result.bad[f.path] = "missing"
            continue
        if not path.is_file() or st.st_size != f.size:
            result.bad[f.path] = f"size {st.st_size} != {f.size}"
            continue
        if verify == "fast" and _same_stat(st, entries[f.path]):
            result.good[f.path] = f
            continue
        digest = hash_file(path, f.check, progress)
        result.rehashed_bytes += f.size
        if digest != f.expected:
            result.bad[f.path] = f"{f.check} {digest[:12]}... != {f.expected[:12]}..."
            continue
        result.good[f.path] = f
        if not _same_stat(st, entries[f.path]):
            result.restamp = True
    for name in wanted:
        if name not in result.good and name not in result.bad:
            result.bad[name] = "not in the published copy"
    return result
