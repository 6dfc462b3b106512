"""What every step shares: the model spec, the hub's file listing, hashes and the layout
of a models root on a host."""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...errors import AcceldeployError
from ...modelref import ModelRef, model_dir

MANIFEST = ".acceldeploy-manifest.json"
STATE_DIR = ".acceldeploy"
MANIFEST_FORMAT = 1
GIB = 1024**3
MIB = 1024**2
CHUNK = 8 * MIB
# What the hub clients leave in a local_dir besides the model's files.
CLIENT_DEBRIS = (".cache", "._____temp", ".msc", ".mdl", ".mv")


class WeightsError(AcceldeployError):
    """Bad input or a failed check; the message names what to change."""


@dataclass(frozen=True)
class ModelSpec(ModelRef):
    """One published directory of a host: a model reference (acceldeploy.modelref) and the
    services that use it."""

    services: tuple[str, ...] = ()

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


def staging_bytes(directory: Path) -> int:
    """Bytes under ``directory`` (what a download has written so far)."""
    total = 0
    for base, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Layout:
    """Where everything lives under one models root (see the package's docstring)."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    def published(self, spec: ModelRef) -> Path:
        return Path(model_dir(str(self.root), spec.model, spec.revision))

    def staging(self, spec: ModelRef) -> Path:
        return self.state / "staging" / spec.dirname

    def progress(self, spec: ModelRef) -> Path:
        return self.state / "progress" / f"{spec.dirname}.json"

    def lock(self, spec: ModelRef) -> Path:
        return self.state / "locks" / (spec.dirname.replace("/", "__") + ".lock")

    def trash(self) -> Path:
        return self.state / "trash"

    def run_dir(self) -> Path:
        return self.state / "run"
