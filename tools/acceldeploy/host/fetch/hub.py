"""Listings and downloads through the hubs' own clients (huggingface_hub, modelscope),
imported here, lazily: only the fetch venv on a host has them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import STATE_DIR, Listing, ModelSpec, RemoteFile, WeightsError, exact_pattern, matches


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
