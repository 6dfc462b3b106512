"""Staging, verification and the atomic publish, one model at a time under its lock."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .common import (
    CLIENT_DEBRIS,
    Layout,
    Listing,
    ModelSpec,
    RemoteFile,
    WeightsError,
    fsync_dir,
    hash_file,
)
from .plan import ModelPlan


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
    fsync_dir(staging)
    if not published.exists():
        os.rename(staging, published)
        fsync_dir(published.parent)
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
    fsync_dir(published.parent)
    shutil.rmtree(trash, ignore_errors=True)
    return how
