"""Model weights: which models a host needs, where they land, and how they get there intact.

One file, standard library only at import time, because it runs in two places:

- on the controller (roles/model_weights/filter_plugins): ``model_specs`` and ``fanout`` check
  the inventory and decide, per host, what to download from the hub, what to pull from a seed
  host and what to only verify; bad input fails there, naming the variable, before any host
  changes;
- on each host, copied next to the fetch venv as ``acceldeploy_weights.py`` and driven by
  library/model_weights_fetch.py (and ``python3 acceldeploy_weights.py serve`` for the seed's
  HTTP server): plan, free-space check, download through the real hub clients
  (``huggingface_hub.snapshot_download``, ``modelscope.snapshot_download``), verify against the
  hub's sizes and hashes, publish atomically, write the manifest.

On a host, for a models root R and a model ``org/name`` at revision ``rev``:

    R/org/name@rev/                          the published model (what vLLM reads)
    R/org/name@rev/.acceldeploy-manifest.json  size, mtime, hub hash of every file
    R/.acceldeploy/staging/org/name@rev/     downloads in progress (kept for resume)
    R/.acceldeploy/progress/org/name@rev.json  progress of the running download
    R/.acceldeploy/locks/                    one flock per model

A later run re-hashes nothing whose size and mtime match the manifest (``verify: fast``);
``verify: full`` re-hashes every file.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import fnmatch
import hashlib
import hmac
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SOURCES = ("hf", "modelscope")
DEFAULT_REVISION = {"hf": "main", "modelscope": "master"}
STRATEGIES = ("each", "seed")
VERIFY_MODES = ("fast", "full")
MANIFEST = ".acceldeploy-manifest.json"
STATE_DIR = ".acceldeploy"
MANIFEST_FORMAT = 1
MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,254}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
GIB = 1024**3
MIB = 1024**2
CHUNK = 8 * MIB
# What the hub clients leave in a local_dir besides the model's files.
CLIENT_DEBRIS = (".cache", "._____temp", ".msc", ".mdl", ".mv")


class WeightsError(Exception):
    """Bad input or a failed check; the message names what to change."""


# ----------------------------------------------------------------------------------------------
# Inputs (controller side)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    model: str
    source: str
    revision: str | None
    allow_patterns: tuple[str, ...] | None = None
    services: tuple[str, ...] = ()

    @property
    def repo_revision(self) -> str:
        """The revision asked of the hub: the pinned one, else the hub's default branch."""
        return self.revision or DEFAULT_REVISION[self.source]

    @property
    def dirname(self) -> str:
        """``org/name@revision`` under the models root; acceldeploy.render.model_path's rule."""
        return f"{self.model}@{self.revision or 'main'}"

    @property
    def pinned(self) -> bool:
        return bool(self.revision and COMMIT_RE.match(self.revision))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["allow_patterns"] = list(self.allow_patterns) if self.allow_patterns else None
        data["services"] = list(self.services)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSpec:
        patterns = data.get("allow_patterns")
        return cls(
            model=str(data["model"]),
            source=str(data["source"]),
            revision=None if data.get("revision") in (None, "") else str(data["revision"]),
            allow_patterns=tuple(str(p) for p in patterns) if patterns else None,
            services=tuple(str(s) for s in data.get("services") or ()),
        )


def _patterns(value: Any, var: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(p, str) and p for p in value):
        raise WeightsError(
            f"{var}.allow_patterns must be a non-empty list of glob patterns such as "
            f"['*.safetensors', '*.json'], got {value!r}"
        )
    return tuple(value)


def model_specs(
    services: Any, require_revision: bool, var: str = "acceldeploy_services"
) -> list[ModelSpec]:
    """The models one host's services need, one per published directory, checked.

    Two services of a host may share a model: they share its directory, and their
    allow_patterns are joined (no patterns on either means every file).
    """
    if services is None:
        return []
    if not isinstance(services, list):
        raise WeightsError(f"{var} must be a list of services, got {type(services).__name__}")
    by_dir: dict[str, ModelSpec] = {}
    for index, raw in enumerate(services):
        where = f"{var}[{index}]"
        if not isinstance(raw, Mapping):
            raise WeightsError(f"{where} must be a mapping, got {raw!r}")
        name = raw.get("name")
        if isinstance(name, str) and name:
            where = f"{where} ({name})"
        model = raw.get("model")
        if not isinstance(model, str) or not MODEL_RE.match(model):
            raise WeightsError(f"{where}.model must look like 'org/name', got {model!r}")
        source = raw.get("source", "hf")
        if source not in SOURCES:
            raise WeightsError(
                f"{where}.source must be one of {', '.join(SOURCES)}, got {source!r}"
            )
        revision = raw.get("revision")
        if revision in (None, ""):
            if require_revision:
                raise WeightsError(
                    f"{where}.revision is not set and model_weights_require_revision is true: "
                    f"pin the commit id to deploy (or set model_weights_require_revision: false "
                    f"to follow {DEFAULT_REVISION[source]!r})"
                )
            revision = None
        else:
            revision = str(revision)
            if not REVISION_RE.match(revision) or ".." in revision:
                raise WeightsError(
                    f"{where}.revision must be a commit id, branch or tag, got {revision!r}"
                )
        spec = ModelSpec(
            model=model,
            source=str(source),
            revision=revision,
            allow_patterns=_patterns(raw.get("allow_patterns"), where),
            services=(str(name),) if name else (),
        )
        previous = by_dir.get(spec.dirname)
        if previous is None:
            by_dir[spec.dirname] = spec
            continue
        if previous.source != spec.source:
            raise WeightsError(
                f"{where}: {spec.dirname} is already taken from {previous.source} by "
                f"{', '.join(previous.services)}; one directory has one source"
            )
        joined: tuple[str, ...] | None = None
        if previous.allow_patterns and spec.allow_patterns:
            joined = tuple(dict.fromkeys(previous.allow_patterns + spec.allow_patterns))
        by_dir[spec.dirname] = ModelSpec(
            model=spec.model,
            source=spec.source,
            revision=spec.revision,
            allow_patterns=joined,
            services=previous.services + spec.services,
        )
    return list(by_dir.values())


@dataclass(frozen=True)
class Settings:
    strategy: str
    seed_host: str
    shared_storage: bool
    root: str
    verify: str

    @classmethod
    def check(cls, raw: Mapping[str, Any]) -> Settings:
        strategy = raw.get("strategy", "each")
        if strategy not in STRATEGIES:
            raise WeightsError(
                f"model_weights_strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
            )
        verify = raw.get("verify", "fast")
        if verify not in VERIFY_MODES:
            raise WeightsError(
                f"model_weights_verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}"
            )
        root = raw.get("root", "/models")
        if not isinstance(root, str) or not root.startswith("/") or root.rstrip("/") == "":
            raise WeightsError(
                f"model_weights_root (acceldeploy_models_root) must be an absolute directory "
                f"other than /, got {root!r}"
            )
        shared = raw.get("shared_storage", False)
        if not isinstance(shared, bool):
            raise WeightsError(
                f"model_weights_shared_storage must be true or false, got {shared!r}"
            )
        seed = raw.get("seed_host") or ""
        return cls(
            strategy=str(strategy),
            seed_host=str(seed),
            shared_storage=shared,
            root=root.rstrip("/"),
            verify=str(verify),
        )


def fanout(hosts: Mapping[str, Mapping[str, Any]], play_hosts: Sequence[str]) -> dict[str, Any]:
    """Who does what, for every host of the play, from each host's specs and settings.

    ``hosts[h]`` has ``specs`` (ModelSpec dicts) and ``settings`` (see Settings.check). Per host:

    - ``hub``: models it downloads from the hub itself (``each``, or it is a seed);
    - ``pull``: models it pulls from its seed over HTTP (``seed``, not shared storage);
    - ``verify``: models on shared storage that its seed downloads; it only checks them;
    - ``serve``: as a seed, the models its pullers need from it;
    - ``seed``: its seed host ('' for ``each``).

    A seed may serve models it does not run itself (a storage node, or the controller as an
    inventory host with ansible_connection: local): it downloads the union of its pullers'.
    """
    plan: dict[str, dict[str, Any]] = {
        h: {"hub": {}, "pull": {}, "verify": {}, "serve": {}, "seed": ""} for h in play_hosts
    }
    for host in play_hosts:
        info = hosts[host]
        settings = Settings.check(info["settings"])
        specs = [ModelSpec.from_dict(s) for s in info.get("specs") or []]
        if settings.strategy == "each" or not specs:
            for spec in specs:
                plan[host]["hub"][spec.dirname] = spec
            continue
        seed = settings.seed_host or play_hosts[0]
        if seed not in plan:
            raise WeightsError(
                f"model_weights_seed_host {seed!r} (for {host}) is not a host of this play "
                f"({', '.join(play_hosts)}); add it to the play or pick another"
            )
        seed_settings = Settings.check(hosts[seed]["settings"])
        if seed_settings.root != settings.root and settings.shared_storage:
            raise WeightsError(
                f"{host} has model_weights_shared_storage: true but its models root "
                f"{settings.root} differs from its seed {seed}'s {seed_settings.root}"
            )
        plan[host]["seed"] = seed
        for spec in specs:
            merged = _merge(plan[seed]["hub"].get(spec.dirname), spec)
            plan[seed]["hub"][spec.dirname] = merged
            if host == seed:
                continue
            plan[seed]["serve"][spec.dirname] = _merge(plan[seed]["serve"].get(spec.dirname), spec)
            bucket = "verify" if settings.shared_storage else "pull"
            plan[host][bucket][spec.dirname] = spec
    return {
        host: {
            key: (value if key == "seed" else [s.to_dict() for _, s in sorted(value.items())])
            for key, value in entry.items()
        }
        for host, entry in plan.items()
    }


def _merge(previous: ModelSpec | None, spec: ModelSpec) -> ModelSpec:
    if previous is None:
        return spec
    if previous.source != spec.source:
        raise WeightsError(
            f"{spec.dirname} is asked from {previous.source} ({', '.join(previous.services)}) "
            f"and from {spec.source} ({', '.join(spec.services)}); one directory has one source"
        )
    patterns: tuple[str, ...] | None = None
    if previous.allow_patterns and spec.allow_patterns:
        patterns = tuple(dict.fromkeys(previous.allow_patterns + spec.allow_patterns))
    services = tuple(dict.fromkeys(previous.services + spec.services))
    return ModelSpec(spec.model, spec.source, spec.revision, patterns, services)


# ----------------------------------------------------------------------------------------------
# Hub listings and hashes
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None = None
    sha1_git: str | None = None
    xet: bool = False

    @property
    def check(self) -> str:
        """How the file is verified: 'sha256', 'sha1_git' (a plain git blob's id, what
        huggingface_hub gets as ETag for non-LFS files) or 'size'."""
        if self.sha256:
            return "sha256"
        if self.sha1_git:
            return "sha1_git"
        return "size"

    @property
    def expected(self) -> str:
        return self.sha256 or self.sha1_git or str(self.size)


@dataclass(frozen=True)
class Listing:
    model: str
    source: str
    revision: str
    commit: str | None
    files: tuple[RemoteFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "source": self.source,
            "revision": self.revision,
            "commit": self.commit,
            "files": [asdict(f) for f in self.files],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Listing:
        return cls(
            model=str(data["model"]),
            source=str(data["source"]),
            revision=str(data["revision"]),
            commit=data.get("commit"),
            files=tuple(RemoteFile(**f) for f in data["files"]),
        )


def matches(path: str, patterns: Iterable[str] | None) -> bool:
    """huggingface_hub's allow_patterns rule: fnmatch, and 'dir/' means 'dir/*'."""
    if not patterns:
        return True
    return any(fnmatch.fnmatch(path, p + "*" if p.endswith("/") else p) for p in patterns)


def exact_pattern(path: str) -> str:
    """A glob matching only ``path`` (both clients match allow_patterns with fnmatch)."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def _client_env(root: Path, endpoint: str, source: str) -> None:
    """Set before the client is imported: both read their endpoint and cache dirs at import."""
    state = root / STATE_DIR
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    os.environ.pop("HF_HUB_OFFLINE", None)
    os.environ["HF_HOME"] = str(state / "hf-home")
    os.environ["MODELSCOPE_CACHE"] = str(state / "modelscope-cache")
    os.environ["DISABLE_TQDM"] = "1"
    if source == "hf":
        os.environ["HF_ENDPOINT"] = endpoint.rstrip("/")
    else:
        os.environ["MODELSCOPE_ENDPOINT"] = endpoint.rstrip("/")


def hub_listing(
    spec: ModelSpec, root: Path, endpoint: str, token: str | None
) -> Listing:  # pragma: no cover - needs a hub; exercised by tests/lab
    """The files of the revision (allow_patterns applied) with their sizes and hashes."""
    _client_env(root, endpoint, spec.source)
    files: list[RemoteFile] = []
    if spec.source == "hf":
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        api = HfApi(endpoint=endpoint.rstrip("/"), token=token or False)
        commit = api.model_info(spec.model, revision=spec.repo_revision).sha
        for item in api.list_repo_tree(spec.model, revision=commit, recursive=True):
            if not isinstance(item, RepoFile):
                continue
            lfs = item.lfs
            files.append(
                RemoteFile(
                    path=item.path,
                    size=int(item.size),
                    sha256=(lfs.sha256 if lfs else None),
                    sha1_git=None if lfs else item.blob_id,
                    xet=bool(getattr(item, "xet_hash", None)),
                )
            )
    else:
        from modelscope_hub.api import HubApi as MsHubApi

        ms_api = MsHubApi(token=token or None, endpoint=endpoint.rstrip("/"))
        commit = spec.revision if spec.pinned else None
        for info in ms_api.list_repo_files(
            spec.model, "model", revision=spec.repo_revision, recursive=True
        ):
            if info.type == "tree" or not info.path:
                continue
            files.append(RemoteFile(path=info.path, size=int(info.size), sha256=info.sha256))
    chosen = tuple(sorted((f for f in files if matches(f.path, spec.allow_patterns)), key=_key))
    if not chosen:
        raise WeightsError(
            f"{spec.model}@{spec.repo_revision} on {endpoint}: no file matches allow_patterns "
            f"{list(spec.allow_patterns or [])}"
        )
    return Listing(spec.model, spec.source, spec.repo_revision, commit, chosen)


def _key(f: RemoteFile) -> str:
    return f.path


def git_blob_sha1_header(size: int) -> bytes:
    return b"blob %d\0" % size


def hash_file(path: Path, check: str, progress: Callable[[int], None] | None = None) -> str:
    """The file's digest of the kind ``check`` names ('sha256', 'sha1_git', 'size')."""
    if check == "size":
        return str(path.stat().st_size)
    digest = hashlib.sha256() if check == "sha256" else hashlib.sha1(usedforsecurity=False)
    if check == "sha1_git":
        digest.update(git_blob_sha1_header(path.stat().st_size))
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            if progress:
                progress(len(chunk))
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------------
# Manifest and the published directory
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    def published(self, spec: ModelSpec) -> Path:
        return self.root / spec.dirname

    def staging(self, spec: ModelSpec) -> Path:
        return self.state / "staging" / spec.dirname

    def progress(self, spec: ModelSpec) -> Path:
        return self.state / "progress" / f"{spec.dirname}.json"

    def lock(self, spec: ModelSpec) -> Path:
        return self.state / "locks" / (spec.dirname.replace("/", "__") + ".lock")

    def trash(self) -> Path:
        return self.state / "trash"


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
        entry: dict[str, Any] = {"size": f.size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
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
    _fsync_dir(directory)
    return manifest


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    """Size, mtime and inode as the manifest recorded them: a rewritten or replaced file has
    moved at least one of them (a byte flipped in place with the mtime put back has not:
    ``verify: full`` finds that)."""
    return (
        st.st_size == entry.get("size")
        and st.st_mtime_ns == entry.get("mtime_ns")
        and st.st_ino == entry.get("ino", st.st_ino)
    )


def check_published(
    directory: Path,
    verify: str,
    expected: Listing | None = None,
    progress: Callable[[int], None] | None = None,
) -> LocalCheck:
    """Which files of the published copy can be trusted.

    ``fast``: a file whose size and mtime match the manifest is trusted without reading it; one
    that differs is re-hashed (a touched but intact file is kept and its mtime re-recorded).
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


# ----------------------------------------------------------------------------------------------
# Plan: what a host has to do for one model, and whether it fits
# ----------------------------------------------------------------------------------------------


@dataclass
class ModelPlan:
    spec: ModelSpec
    action: str  # none | fetch | repair | update | restamp
    reason: str
    listing: Listing | None
    fetch: list[RemoteFile]
    reuse: list[str]
    bad: dict[str, str]
    fetch_bytes: int
    partial_bytes: int
    rehashed_bytes: int

    @property
    def needed_bytes(self) -> int:
        return max(self.fetch_bytes - self.partial_bytes, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.spec.model,
            "dir": self.spec.dirname,
            "source": self.spec.source,
            "revision": self.spec.repo_revision,
            "commit": self.listing.commit if self.listing else None,
            "action": self.action,
            "reason": self.reason,
            "files_to_fetch": [f.path for f in self.fetch],
            "reuse": self.reuse,
            "bad": self.bad,
            "fetch_bytes": self.fetch_bytes,
            "partial_bytes": self.partial_bytes,
            "needed_bytes": self.needed_bytes,
            "rehashed_bytes": self.rehashed_bytes,
            "listing": self.listing.to_dict() if self.listing else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], spec: ModelSpec) -> ModelPlan:
        listing = Listing.from_dict(data["listing"]) if data.get("listing") else None
        by_path = {f.path: f for f in listing.files} if listing else {}
        fetch = [by_path[p] for p in data.get("files_to_fetch") or []]
        return cls(
            spec=spec,
            action=str(data["action"]),
            reason=str(data.get("reason") or ""),
            listing=listing,
            fetch=fetch,
            reuse=list(data.get("reuse") or []),
            bad=dict(data.get("bad") or {}),
            fetch_bytes=int(data.get("fetch_bytes") or 0),
            partial_bytes=int(data.get("partial_bytes") or 0),
            rehashed_bytes=int(data.get("rehashed_bytes") or 0),
        )


def needs_listing(spec: ModelSpec, local: LocalCheck) -> bool:
    """A pinned commit whose intact copy is published needs no hub call at all; a branch or tag
    is asked (one small metadata call) so that a moved branch is noticed."""
    if local.manifest is None or local.bad:
        return True
    return not (spec.pinned and local.manifest.get("commit") == spec.revision)


def staging_bytes(directory: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


def decide(spec: ModelSpec, local: LocalCheck, listing: Listing | None, staging: Path) -> ModelPlan:
    if listing is None:
        if local.manifest is None:
            raise WeightsError(f"{spec.dirname}: no listing and nothing published")
        listing = manifest_listing(local.manifest)
    fetch = [f for f in listing.files if f.path not in local.good]
    reuse = sorted(local.good)
    if local.manifest is None:
        action, reason = "fetch", "not published yet" if not local.exists else "no manifest"
    elif local.manifest.get("commit") != listing.commit and listing.commit:
        action, reason = "update", f"{spec.repo_revision} is now {listing.commit}"
    elif fetch:
        action, reason = "repair", f"{len(fetch)} file(s) bad or missing"
    elif local.restamp:
        action, reason = "restamp", "intact files with new mtimes"
    else:
        action, reason = "none", "published and verified"
    if action in ("none", "restamp"):
        fetch = []
    partial = staging_bytes(staging) if fetch and staging.exists() else 0
    return ModelPlan(
        spec=spec,
        action=action,
        reason=reason,
        listing=listing,
        fetch=fetch,
        reuse=reuse,
        bad=dict(local.bad),
        fetch_bytes=sum(f.size for f in fetch),
        partial_bytes=min(partial, sum(f.size for f in fetch)),
        rehashed_bytes=local.rehashed_bytes,
    )


def free_bytes(path: Path) -> int:
    probe = path
    while not probe.exists():
        probe = probe.parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def check_space(plans: Sequence[ModelPlan], root: Path, reserve_bytes: int) -> dict[str, int]:
    """Fails, with the numbers, when the models to fetch do not fit on the root's filesystem."""
    needed = sum(p.needed_bytes for p in plans)
    free = free_bytes(root)
    if needed and needed + reserve_bytes > free:
        detail = ", ".join(
            f"{p.spec.dirname} {p.needed_bytes / GIB:.2f} GiB" for p in plans if p.needed_bytes
        )
        raise WeightsError(
            f"not enough disk under {root}: the models to download need "
            f"{needed / GIB:.2f} GiB ({detail}) plus model_weights_free_space_reserve_gib "
            f"{reserve_bytes / GIB:.2f} GiB, but only {free / GIB:.2f} GiB is free; free space "
            "there, set acceldeploy_models_root (model_weights_root) to a larger filesystem, "
            "or lower the reserve"
        )
    return {"needed_bytes": needed, "free_bytes": free, "reserve_bytes": reserve_bytes}


# ----------------------------------------------------------------------------------------------
# Progress an operator can watch
# ----------------------------------------------------------------------------------------------


class Progress:
    """Writes ``R/.acceldeploy/progress/<model>.json`` and appends a line to the log every
    ``interval`` seconds while a model is fetched: bytes in staging, rate, ETA."""

    def __init__(
        self,
        spec: ModelSpec,
        layout: Layout,
        total: int,
        log: Path | None,
        interval: float,
        phase: str,
    ) -> None:
        self.spec = spec
        self.path = layout.progress(spec)
        self.staging = layout.staging(spec)
        self.total = total
        self.log = log
        self.interval = interval
        self.phase = phase
        self.started = time.monotonic()
        self.baseline = staging_bytes(self.staging) if self.staging.exists() else 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.last = (self.started, self.baseline)

    def __enter__(self) -> Progress:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.write("running")
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)
        self.write("failed" if exc[0] else "done")

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.write("running")

    def write(self, state: str) -> None:
        now = time.monotonic()
        present = staging_bytes(self.staging) if self.staging.exists() else 0
        rate = max(present - self.last[1], 0) / max(now - self.last[0], 1e-6)
        self.last = (now, present)
        left = max(self.total - present, 0)
        data = {
            "model": self.spec.dirname,
            "phase": self.phase,
            "state": state,
            "pid": os.getpid(),
            "bytes_present": present,
            "bytes_total": self.total,
            "bytes_this_run": max(present - self.baseline, 0),
            "percent": round(100.0 * present / self.total, 1) if self.total else 100.0,
            "rate_mib_s": round(rate / MIB, 1),
            "eta_seconds": round(left / rate) if rate > 0 and state == "running" else None,
            "elapsed_seconds": round(now - self.started, 1),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(self.path)
        if self.log is not None:
            eta = data["eta_seconds"]
            line = (
                f"{data['updated']} {socket.gethostname()} {self.spec.dirname} {self.phase} "
                f"{state} {data['percent']}% {present / MIB:.1f}/{self.total / MIB:.1f} MiB "
                f"{data['rate_mib_s']} MiB/s eta {eta if eta is not None else '-'}s\n"
            )
            with contextlib.suppress(OSError):
                self.log.parent.mkdir(parents=True, exist_ok=True)
                with self.log.open("a") as fh:
                    fh.write(line)


# ----------------------------------------------------------------------------------------------
# Staging, verification, atomic publish
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def model_lock(layout: Layout, spec: ModelSpec) -> Iterator[None]:
    path = layout.lock(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise WeightsError(
                f"{spec.dirname}: another acceldeploy download holds {path} (pid {holder}); "
                "wait for it or stop it, then run again"
            ) from exc
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


def prepare_staging(plan: ModelPlan, layout: Layout) -> Path:
    """Staging holds every file of the listing when done: intact published files are
    hard-linked in (same filesystem, no copy), the rest is fetched."""
    staging = layout.staging(plan.spec)
    staging.mkdir(parents=True, exist_ok=True)
    published = layout.published(plan.spec)
    for path in plan.reuse:
        target = staging / path
        source = published / path
        if target.exists() and os.path.samefile(source, target):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        os.link(source, target)
    return staging


def finished_in_staging(
    staging: Path, files: Sequence[RemoteFile], progress: Callable[[int], None] | None = None
) -> tuple[list[RemoteFile], list[RemoteFile]]:
    """Splits ``files`` into (verified in staging, still to fetch); a wrong file is removed."""
    done, todo = [], []
    for f in files:
        path = staging / f.path
        if (
            path.is_file()
            and path.stat().st_size == f.size
            and hash_file(path, f.check, progress) == f.expected
        ):
            done.append(f)
            continue
        if path.exists() or path.is_symlink():
            path.unlink()
        todo.append(f)
    return done, todo


def verify_fetched(staging: Path, files: Sequence[RemoteFile]) -> dict[str, str]:
    """Hashes what was just fetched against the hub; fsyncs it. Returns {path: problem}."""
    problems: dict[str, str] = {}
    for f in files:
        path = staging / f.path
        if not path.is_file():
            problems[f.path] = "not downloaded"
            continue
        size = path.stat().st_size
        if size != f.size:
            problems[f.path] = f"size {size} != {f.size}"
            path.unlink()
            continue
        digest = hash_file(path, f.check)
        if digest != f.expected:
            problems[f.path] = f"{f.check} {digest[:12]}... != hub {f.expected[:12]}..."
            path.unlink()
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return problems


def clean_staging(staging: Path, listing: Listing) -> None:
    """Removes the clients' bookkeeping and anything not in the listing."""
    for name in CLIENT_DEBRIS:
        target = staging / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    keep = {f.path for f in listing.files}
    for base, dirs, files in os.walk(staging, topdown=False):
        for name in files:
            full = Path(base) / name
            if full.relative_to(staging).as_posix() not in keep:
                full.unlink()
        for name in dirs:
            with contextlib.suppress(OSError):
                (Path(base) / name).rmdir()


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """renameat2(RENAME_EXCHANGE): swaps two paths atomically. False where unsupported."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is None:
        return False
    rc = func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish(staging: Path, published: Path, layout: Layout) -> str:
    """Makes ``staging`` the published directory in one step: rename(2) when nothing is
    published yet, an atomic exchange when something is. Returns how."""
    published.parent.mkdir(parents=True, exist_ok=True)
    _fsync_dir(staging)
    if not published.exists():
        os.rename(staging, published)
        _fsync_dir(published.parent)
        return "rename"
    trash = layout.trash() / f"{published.name}.{os.getpid()}.{time.time_ns()}"
    trash.parent.mkdir(parents=True, exist_ok=True)
    if _exchange(staging, published):
        how = "exchange"
        os.rename(staging, trash)
    else:  # NFS and older kernels: two renames, a moment without the directory
        how = "two-renames"
        os.rename(published, trash)
        os.rename(staging, published)
    _fsync_dir(published.parent)
    shutil.rmtree(trash, ignore_errors=True)
    return how


# ----------------------------------------------------------------------------------------------
# Downloads: from the hub with the real clients, and from a seed host over HTTP
# ----------------------------------------------------------------------------------------------


def _hf_adopt_partials(
    staging: Path, listing: Listing, files: Sequence[RemoteFile], endpoint: str, token: str | None
) -> list[str]:  # pragma: no cover - needs huggingface_hub; exercised by tests/lab
    """Resumes files a killed run left half-downloaded.

    huggingface_hub (1.x, 2.x) downloads each file to a process-unique
    ``<hash>.<etag>.<uuid>.incomplete`` and deletes it on error, so a new run cannot resume
    it. A SIGKILLed or SIGTERMed run leaves it behind; this finds it with the client's own
    path helper and completes it with the client's ``http_get(resume_size=...)`` (a Range
    request; a server that ignores Range gets the whole file, which http_get handles).
    Xet-stored files are skipped: hf_xet writes out of order.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub._local_folder import get_local_download_paths
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    resumed = []
    for f in files:
        if f.xet:
            continue
        etag = f.sha256 or f.sha1_git
        if not etag:
            continue
        paths = get_local_download_paths(staging, f.path)
        stem = paths.incomplete_path(etag).name[: -len(".incomplete")]
        orphans = sorted(
            paths.incomplete_path(etag).parent.glob(f"{stem}.*.incomplete"),
            key=lambda p: p.stat().st_size,
        )
        if not orphans:
            continue
        keep = orphans[-1]
        for extra in orphans[:-1]:
            extra.unlink(missing_ok=True)
        done = keep.stat().st_size
        if done == 0 or done > f.size:
            keep.unlink()
            continue
        url = hf_hub_url(f"{listing.model}", f.path, revision=listing.commit, endpoint=endpoint)
        headers = build_hf_headers(token=token or False)
        meta = get_hf_file_metadata(url, token=token or False, endpoint=endpoint)
        with keep.open("r+b") as fh:
            fh.seek(0, os.SEEK_END)
            http_get(
                meta.location or url, fh, resume_size=done, headers=headers, expected_size=f.size
            )
        target = staging / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        keep.replace(target)
        resumed.append(f.path)
    return resumed


def hub_download(
    spec: ModelSpec,
    listing: Listing,
    files: Sequence[RemoteFile],
    staging: Path,
    root: Path,
    endpoint: str,
    token: str | None,
    max_workers: int,
) -> dict[str, Any]:  # pragma: no cover - needs a hub; exercised by tests/lab
    """Downloads ``files`` into ``staging`` with the hub's own client, at the listed commit."""
    _client_env(root, endpoint, spec.source)
    revision = listing.commit or listing.revision
    resumed: list[str] = []
    todo = list(files)
    if spec.source == "hf":
        resumed = _hf_adopt_partials(staging, listing, todo, endpoint, token)
        todo = [f for f in todo if f.path not in resumed]
    patterns = [exact_pattern(f.path) for f in todo]
    if todo and spec.source == "hf":
        from huggingface_hub import snapshot_download as hf_snapshot_download

        hf_snapshot_download(
            spec.model,
            revision=revision,
            local_dir=str(staging),
            allow_patterns=patterns,
            token=token or False,
            endpoint=endpoint.rstrip("/"),
            max_workers=max_workers,
        )
    elif todo:
        from modelscope import snapshot_download as ms_snapshot_download

        ms_snapshot_download(
            model_id=spec.model,
            revision=revision,
            local_dir=str(staging),
            allow_patterns=patterns,
            token=token or None,
            endpoint=endpoint.rstrip("/"),
            max_workers=max_workers,
        )
    return {"resumed": resumed, "client_files": [f.path for f in todo]}


def _http_request(url: str, token: str, headers: Mapping[str, str] | None = None) -> Any:
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {token}", **(headers or {})}
    )
    return urllib.request.urlopen(request, timeout=60)


def seed_manifest(seed_url: str, token: str, spec: ModelSpec) -> dict[str, Any]:
    url = f"{seed_url.rstrip('/')}/m/{urllib.parse.quote(spec.dirname)}/{MANIFEST}"
    try:
        with _http_request(url, token) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise WeightsError(
            f"{spec.dirname}: the seed at {seed_url} did not give its manifest: {exc}"
        ) from exc


def pull_file(seed_url: str, token: str, spec: ModelSpec, f: RemoteFile, staging: Path) -> int:
    """One file from the seed into staging, resuming ``<file>.part`` with a Range request."""
    target = staging / f.path
    part = target.with_name(target.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if have > f.size:
        part.unlink()
        have = 0
    got = 0
    if have < f.size or f.size == 0:
        quoted = urllib.parse.quote(f"{spec.dirname}/{f.path}")
        url = f"{seed_url.rstrip('/')}/m/{quoted}"
        headers = {"Range": f"bytes={have}-"} if have else {}
        with _http_request(url, token, headers) as resp, part.open("r+b" if have else "wb") as out:
            if have and resp.status != 206:
                out.truncate(0)
                have = 0
            out.seek(have)
            while chunk := resp.read(CHUNK):
                out.write(chunk)
                got += len(chunk)
    part.replace(target)
    return got


def seed_pull(
    spec: ModelSpec,
    listing: Listing,
    files: Sequence[RemoteFile],
    staging: Path,
    seed_url: str,
    token: str,
    workers: int,
) -> dict[str, Any]:
    """Pulls ``files`` from the seed host in parallel; the seed must have published exactly
    the listing the hub gave it."""
    manifest = seed_manifest(seed_url, token, spec)
    theirs = {f.path: f.expected for f in manifest_listing(manifest).files}
    differ = [f.path for f in files if theirs.get(f.path) != f.expected]
    if differ:
        raise WeightsError(
            f"{spec.dirname}: the seed's published copy differs from the hub listing for "
            f"{differ[:5]}; run the seed again"
        )
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        got = sum(pool.map(lambda f: pull_file(seed_url, token, spec, f, staging), files))
    return {"pulled_bytes": got}


# ----------------------------------------------------------------------------------------------
# The seed host's HTTP server
# ----------------------------------------------------------------------------------------------


class SeedHandler(http.server.BaseHTTPRequestHandler):
    """GET /m/<org>/<name>@<rev>/<file> with Bearer auth and Range, from published, verified
    models only (files listed in their manifest)."""

    protocol_version = "HTTP/1.1"
    server_version = "acceldeploy-seed/1"
    root: Path
    token: str
    allowed: frozenset[str]
    touched: list[float]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _fail(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.touched[0] = time.monotonic()
        auth = self.headers.get("Authorization", "")
        if not hmac.compare_digest(auth.encode(), f"Bearer {self.token}".encode()):
            self._fail(401, "unauthorized")
            return
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        if not path.startswith("/m/"):
            self._fail(404, "not found")
            return
        rest = path[3:]
        dirname = next((d for d in self.allowed if rest.startswith(d + "/")), None)
        if dirname is None:
            self._fail(404, "model not served")
            return
        relative = rest[len(dirname) + 1 :]
        directory = self.root / dirname
        manifest = read_manifest(directory)
        if manifest is None:
            self._fail(404, "not published")
            return
        if relative != MANIFEST and relative not in manifest["files"]:
            self._fail(404, "file not in the manifest")
            return
        self._send(directory / relative)
        self.touched[0] = time.monotonic()

    def _send(self, path: Path) -> None:
        size = path.stat().st_size
        start, status = 0, 200
        match = re.match(r"^bytes=(\d+)-$", self.headers.get("Range", ""))
        if match:
            start = int(match[1])
            if start > size:
                self._fail(416, "range")
                return
            status = 206
        length = size - start
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        with path.open("rb") as fh:
            sent = 0
            while sent < length:
                n = self.connection.sendfile(fh, start + sent, min(length - sent, 1 << 24))
                if n == 0:
                    break
                sent += n


def run_seed_server(
    root: Path, listen: str, port: int, token: str, models: Sequence[str], idle_timeout: float
) -> None:
    touched = [time.monotonic()]
    handler = type(
        "BoundSeedHandler",
        (SeedHandler,),
        {"root": root, "token": token, "allowed": frozenset(models), "touched": touched},
    )
    server = http.server.ThreadingHTTPServer((listen, port), handler)
    server.daemon_threads = True

    def watchdog() -> None:
        while time.monotonic() - touched[0] < idle_timeout:
            time.sleep(1)
        server.shutdown()

    threading.Thread(target=watchdog, daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


def seed_pid_file(layout: Layout) -> Path:
    return layout.state / "run" / "seed-server.pid"


def start_seed_server(
    layout: Layout,
    listen: str,
    port: int,
    token: str,
    models: Sequence[str],
    idle_timeout: float,
    python: str,
) -> dict[str, Any]:
    """Starts the seed server detached; the token reaches it through a 0600 file that it
    reads and deletes, never through argv or the environment."""
    stop_seed_server(layout)
    run = layout.state / "run"
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    token_file = run / f"seed-token.{os.getpid()}"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token)
    argv = [
        python,
        str(Path(__file__).resolve()),
        "serve",
        "--root",
        str(layout.root),
        "--listen",
        listen,
        "--port",
        str(port),
        "--token-file",
        str(token_file),
        "--idle-timeout",
        str(idle_timeout),
        *[arg for m in models for arg in ("--model", m)],
    ]
    log = (run / "seed-server.log").open("ab")
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    seed_pid_file(layout).write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise WeightsError(
                f"the seed server exited {proc.returncode}; see {run}/seed-server.log"
            )
        try:
            with socket.create_connection(
                (listen if listen != "0.0.0.0" else "127.0.0.1", port), 1
            ):
                return {"pid": proc.pid, "port": port, "models": list(models)}
        except OSError:
            time.sleep(0.1)
    raise WeightsError(f"the seed server did not listen on {listen}:{port} within 30s")


def stop_seed_server(layout: Layout) -> bool:
    pid_file = seed_pid_file(layout)
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        pid_file.unlink(missing_ok=True)
        return False
    pid_file.unlink(missing_ok=True)
    if b"serve" not in cmdline or b"--token-file" not in cmdline:
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True


# ----------------------------------------------------------------------------------------------
# What the Ansible module calls
# ----------------------------------------------------------------------------------------------


@dataclass
class HostRequest:
    """One module call: the models of one host and how to get them."""

    root: Path
    models: list[ModelSpec]
    mode: str  # hub | pull | verify
    verify: str = "fast"
    endpoints: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    listings: dict[str, Listing] = field(default_factory=dict)
    seed_url: str = ""
    seed_token: str = ""
    reserve_bytes: int = GIB
    max_workers: int = 8
    log: Path | None = None
    progress_interval: float = 5.0
    plans: list[dict[str, Any]] = field(default_factory=list)


def plan_host(
    request: HostRequest, lister: Callable[[ModelSpec], Listing] | None = None
) -> list[ModelPlan]:
    """Read-only: what each model needs on this host, and the free-space check for all."""
    layout = Layout(request.root)
    plans = []
    for spec in request.models:
        local = check_published(layout.published(spec), request.verify)
        listing: Listing | None = request.listings.get(spec.dirname)
        if listing is None and request.mode == "hub" and needs_listing(spec, local):
            listing = (lister or _default_lister(request))(spec)
        if listing is None and request.mode != "hub" and local.manifest is None:
            raise WeightsError(
                f"{spec.dirname}: no listing from the seed and nothing published here"
            )
        if listing is not None and local.manifest is not None:
            local = check_published(layout.published(spec), request.verify, listing)
        plans.append(decide(spec, local, listing, layout.staging(spec)))
    return plans


def _default_lister(request: HostRequest) -> Callable[[ModelSpec], Listing]:
    def lister(spec: ModelSpec) -> Listing:
        endpoint = request.endpoints.get(spec.source, "")
        if not endpoint:
            raise WeightsError(f"no endpoint for source {spec.source}")
        try:
            return hub_listing(spec, request.root, endpoint, request.tokens.get(spec.source))
        except WeightsError:
            raise
        except Exception as exc:
            raise WeightsError(
                f"{spec.model}@{spec.repo_revision}: the {spec.source} hub at {endpoint} did "
                f"not list it: {type(exc).__name__}: {_scrub(str(exc), request)}"
            ) from exc

    return lister


def _scrub(text: str, request: HostRequest) -> str:
    for secret in (*request.tokens.values(), request.seed_token):
        if secret:
            text = text.replace(secret, "********")
    return text[:2000]


Downloader = Callable[[ModelPlan, list[RemoteFile], Path], dict[str, Any]]


def converge_model(
    plan: ModelPlan, request: HostRequest, downloader: Downloader | None = None
) -> dict[str, Any]:
    """Makes one model published and verified per ``plan``; returns what happened."""
    layout = Layout(request.root)
    spec, listing = plan.spec, plan.listing
    assert listing is not None
    result: dict[str, Any] = {"dir": spec.dirname, "action": plan.action, "reason": plan.reason}
    published = layout.published(spec)
    started = time.monotonic()
    with model_lock(layout, spec):
        if plan.action == "restamp":
            write_manifest(published, listing, spec)
            result.update(changed=True, seconds=round(time.monotonic() - started, 2))
            return result
        if plan.action == "none":
            result.update(changed=False, seconds=0.0)
            return result
        staging = prepare_staging(plan, layout)
        done, todo = finished_in_staging(staging, plan.fetch)
        result["already_in_staging"] = [f.path for f in done]
        downloaded: dict[str, Any] = {}
        before = staging_bytes(staging)
        with Progress(
            spec, layout, listing.total_bytes, request.log, request.progress_interval, request.mode
        ):
            for attempt in (1, 2):
                if not todo:
                    break
                fetcher = downloader or _default_downloader(request)
                downloaded = fetcher(plan, todo, staging)
                problems = verify_fetched(staging, todo)
                if not problems:
                    break
                if attempt == 2:
                    raise WeightsError(
                        f"{spec.dirname}: files failed verification twice: "
                        + "; ".join(f"{p}: {why}" for p, why in sorted(problems.items())[:5])
                    )
                todo = [f for f in todo if f.path in problems]
        clean_staging(staging, listing)
        missing = [f.path for f in listing.files if not (staging / f.path).is_file()]
        if missing:
            raise WeightsError(f"{spec.dirname}: staging lacks {missing[:5]} after the download")
        fetched_bytes = max(staging_bytes(staging) - before, 0)
        write_manifest(staging, listing, spec)
        how = publish(staging, published, layout)
        result.update(
            changed=True,
            published=str(published),
            publish=how,
            files_fetched=[f.path for f in plan.fetch],
            bytes_written=fetched_bytes,
            seconds=round(time.monotonic() - started, 2),
            **downloaded,
        )
        return result


def _default_downloader(request: HostRequest) -> Downloader:
    def download(plan: ModelPlan, files: list[RemoteFile], staging: Path) -> dict[str, Any]:
        assert plan.listing is not None
        spec = plan.spec
        if request.mode == "pull":
            return seed_pull(
                spec,
                plan.listing,
                files,
                staging,
                request.seed_url,
                request.seed_token,
                request.max_workers,
            )
        endpoint = request.endpoints.get(spec.source, "")
        try:
            return hub_download(
                spec,
                plan.listing,
                files,
                staging,
                request.root,
                endpoint,
                request.tokens.get(spec.source),
                request.max_workers,
            )
        except WeightsError:
            raise
        except Exception as exc:
            raise WeightsError(
                f"{spec.dirname}: download from {endpoint} failed ({type(exc).__name__}: "
                f"{_scrub(str(exc), request)}); run again to resume"
            ) from exc

    return download


def keep_partials_on_signals() -> None:
    """SIGTERM / SIGINT end the process at once, so the hub client's ``finally`` does not
    delete the partial file this module resumes next run."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: os._exit(128 + signum))


def run(request: HostRequest, check_mode: bool) -> dict[str, Any]:
    """The module's whole job for one host: plan, check space, converge (unless check mode)."""
    specs = {s.dirname: s for s in request.models}
    if request.plans and request.mode != "verify":
        # The plan this run already made (and checked for space on every host) before any
        # host started downloading; the published copies have not changed since.
        plans = [ModelPlan.from_dict(p, specs[p["dir"]]) for p in request.plans]
    else:
        plans = plan_host(request)
    space = check_space(plans, request.root, request.reserve_bytes)
    summary = [p.to_dict() for p in plans]
    would_change = [p.spec.dirname for p in plans if p.action != "none"]
    if request.mode == "verify":
        broken = {p.spec.dirname: p.bad or p.reason for p in plans if p.action != "none"}
        if broken:
            raise WeightsError(
                f"shared storage: the seed's copy is not complete or not intact here: {broken}"
            )
    if check_mode or request.mode == "verify":
        return {
            "changed": bool(would_change) and request.mode != "verify",
            "plans": summary,
            "space": space,
            "results": [],
        }
    keep_partials_on_signals()
    results = [converge_model(p, request) for p in plans if p.action != "none"]
    return {
        "changed": any(r.get("changed") for r in results),
        "plans": summary,
        "space": space,
        "results": results,
    }


def request_from_params(params: Mapping[str, Any]) -> HostRequest:
    listings = {
        key: Listing.from_dict(value) for key, value in (params.get("listings") or {}).items()
    }
    return HostRequest(
        root=Path(params["root"]),
        models=[ModelSpec.from_dict(m) for m in params.get("models") or []],
        mode=str(params.get("mode") or "hub"),
        verify=str(params.get("verify") or "fast"),
        endpoints={k: str(v) for k, v in (params.get("endpoints") or {}).items() if v},
        tokens={k: str(v) for k, v in (params.get("tokens") or {}).items() if v},
        listings=listings,
        seed_url=str(params.get("seed_url") or ""),
        seed_token=str(params.get("seed_token") or ""),
        reserve_bytes=int(float(params.get("reserve_gib", 1)) * GIB),
        max_workers=int(params.get("max_workers") or 8),
        log=Path(params["log"]) if params.get("log") else None,
        progress_interval=float(params.get("progress_interval") or 5),
        plans=list(params.get("plans") or []),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="acceldeploy model weights (host side)")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="the seed host's HTTP server (foreground)")
    serve.add_argument("--root", type=Path, required=True)
    serve.add_argument("--listen", default="0.0.0.0")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--token-file", type=Path, required=True)
    serve.add_argument("--idle-timeout", type=float, default=900)
    serve.add_argument("--model", action="append", default=[])
    check = sub.add_parser("check", help="verify published models against their manifests")
    check.add_argument("--root", type=Path, required=True)
    check.add_argument("--full", action="store_true", help="re-hash every file")
    check.add_argument("dirs", nargs="+", help="org/name@revision")
    args = parser.parse_args(argv)
    if args.command == "serve":
        token = args.token_file.read_text().strip()
        args.token_file.unlink(missing_ok=True)
        run_seed_server(args.root, args.listen, args.port, token, args.model, args.idle_timeout)
        return 0
    status = 0
    for dirname in args.dirs:
        local = check_published(args.root / dirname, "full" if args.full else "fast")
        ok = local.manifest is not None and not local.bad
        status |= 0 if ok else 1
        print(json.dumps({"dir": dirname, "ok": ok, "bad": local.bad, "files": len(local.good)}))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
