"""What a host has to do for one model (``decide``), and whether it all fits (``check_space``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import GIB, Listing, ModelSpec, RemoteFile, WeightsError, staging_bytes
from .manifest import LocalCheck, manifest_listing


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
        action, reason = "restamp", "intact files with new stamps"
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
