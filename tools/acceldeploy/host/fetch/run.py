"""What the model_weights_fetch module calls: one host's models, planned and converged.

``request_from_params`` turns the module's parameters into a ``HostRequest``; ``plan_host``
is read-only (manifest, hub listing, staging); ``run`` plans (or takes this run's plans),
checks free space and, unless in check mode, makes each model published and verified.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import GIB, Layout, Listing, ModelSpec, RemoteFile, WeightsError, staging_bytes
from .hub import hub_download, hub_listing
from .manifest import check_published, write_manifest
from .plan import ModelPlan, check_space, decide, needs_listing
from .progress import Progress
from .publish import (
    clean_staging,
    finished_in_staging,
    model_lock,
    prepare_staging,
    publish,
    verify_fetched,
)
from .seed import seed_pull

if TYPE_CHECKING:
    Downloader = Callable[[ModelPlan, list[RemoteFile], Path], dict[str, Any]]


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
        before = staging_bytes(staging)
        with Progress(
            spec, layout, listing.total_bytes, request.log, request.progress_interval, request.mode
        ):
            downloaded = _fetch_verified(
                plan, todo, staging, downloader or _default_downloader(request)
            )
        clean_staging(staging, listing)
        missing = [f.path for f in listing.files if not (staging / f.path).is_file()]
        if missing:
            raise WeightsError(f"{spec.dirname}: staging lacks {missing[:5]} after the download")
        fetched_bytes = max(staging_bytes(staging) - before, 0)
        write_manifest(staging, listing, spec)
        how = publish(staging, published, layout)
        # The old copy's names are gone now, and with them a link of every reused file: their
        # ctime moved after the stamp in staging.
        write_manifest(published, listing, spec)
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


def _fetch_verified(
    plan: ModelPlan, todo: list[RemoteFile], staging: Path, fetcher: Downloader
) -> dict[str, Any]:
    """Downloads ``todo`` into staging and verifies it; what failed is fetched once more."""
    downloaded: dict[str, Any] = {}
    for attempt in (1, 2):
        if not todo:
            break
        downloaded = fetcher(plan, todo, staging)
        problems = verify_fetched(staging, todo)
        if not problems:
            break
        if attempt == 2:
            raise WeightsError(
                f"{plan.spec.dirname}: files failed verification twice: "
                + "; ".join(f"{p}: {why}" for p, why in sorted(problems.items())[:5])
            )
        todo = [f for f in todo if f.path in problems]
    return downloaded


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
