"""A built Python environment, fanned out host to host (python_env's fan-out): the host that
built it serves it as one uncompressed tar stream (bearer token, this run only, gone after an
idle timeout: seed.start_daemon), and each other host of its class pulls it into a directory
beside the final one, checks every installed file against its distribution's RECORD
(``verify_records``), and only then renames it into place. The environment's path is the same
on every host of the class, so what was built there runs here unchanged.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import hmac
import http.server
import os
import shutil
import tarfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .common import CHUNK, WeightsError

PATH = "/env.tar"
# _safe has checked each entry: Python 3.12+'s extraction filters would only repeat it (and warn
# when none is named).
TRUSTED: dict[str, Any] = (
    {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
)
SERVER = "env-server"


class EnvHandler(http.server.BaseHTTPRequestHandler):
    """GET /env.tar: the directory as a tar stream, for the run's token only."""

    protocol_version = "HTTP/1.0"
    server_version = "acceldeploy-env/1"
    directory: Path
    token: str
    touched: list[float]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.touched[0] = time.monotonic()
        auth = self.headers.get("Authorization", "")
        if not hmac.compare_digest(auth.encode(), f"Bearer {self.token}".encode()):
            self.send_error(401, "unauthorized")
            return
        if self.path != PATH:
            self.send_error(404, "not found")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-tar")
        self.end_headers()
        with tarfile.open(fileobj=self.wfile, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            tar.add(str(self.directory), arcname=".", recursive=True)
        self.touched[0] = time.monotonic()


def make_env_server(
    directory: Path, listen: str, port: int, token: str
) -> tuple[http.server.ThreadingHTTPServer, list[float]]:
    touched = [time.monotonic()]
    handler = type(
        "BoundEnvHandler",
        (EnvHandler,),
        {"directory": directory, "token": token, "touched": touched},
    )
    server = http.server.ThreadingHTTPServer((listen, port), handler)
    server.daemon_threads = True
    return server, touched


def _safe(member: tarfile.TarInfo) -> bool:
    name = member.name
    if name.startswith("/") or ".." in Path(name).parts:
        return False
    if member.islnk() and (member.linkname.startswith("/") or ".." in Path(member.linkname).parts):
        return False
    return member.isfile() or member.isdir() or member.issym() or member.islnk()


def _record_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def verify_records(env: Path) -> tuple[int, list[str]]:
    """Every file each installed distribution's RECORD lists with a hash, re-hashed (bytecode
    aside; on every core: hashing and reading release the GIL): (files checked, problems)."""
    expected: list[tuple[str, Path, str]] = []
    problems: list[str] = []
    for record in sorted(env.glob("lib*/python3*/site-packages/*.dist-info/RECORD")):
        site = record.parent.parent
        with record.open(newline="", errors="replace") as fh:
            rows = list(csv.reader(fh))
        for fields in rows:
            if len(fields) != 3 or not fields[1].startswith("sha256="):
                continue
            path = fields[0]
            # Bytecode is a cache Python rewrites from the (checked) sources when it is stale.
            if path.endswith(".pyc"):
                continue
            target = site / path
            if not target.is_file():
                problems.append(f"{record.parent.name}: {path} missing")
                continue
            expected.append((f"{record.parent.name}: {path}", target, fields[1]))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        digests = pool.map(_record_digest, (target for _, target, _ in expected), chunksize=64)
        for (name, _, want), got in zip(expected, digests):
            if got != want:
                problems.append(f"{name} differs from its RECORD")
    return len(expected), problems


def pull_env(url: str, token: str, staging: Path, timeout: float = 3600.0) -> dict[str, Any]:
    """The builder's environment into ``staging``: streamed into a sibling directory, checked
    (RECORD hashes), then renamed into place. Nothing is left half-pulled."""
    started = time.monotonic()
    tmp = staging.with_name(staging.name + ".pulling")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    request = urllib.request.Request(
        url.rstrip("/") + PATH, headers={"Authorization": f"Bearer {token}"}
    )
    files = 0
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            counted = _Counting(resp)
            with tarfile.open(fileobj=counted, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    if not _safe(member):
                        raise WeightsError(f"the builder's tar holds an unsafe entry {member.name}")
                    tar.extract(member, str(tmp), set_attrs=True, **TRUSTED)
                    files += member.isfile()
                    if time.monotonic() - started > timeout:
                        raise WeightsError(f"the pull took longer than {timeout:.0f}s")
        received = counted.count
        pulled = time.monotonic() - started
        checked, problems = verify_records(tmp)
        if problems:
            raise WeightsError(
                f"the pulled environment differs from its RECORDs: {'; '.join(problems[:5])}"
            )
        if checked == 0:
            raise WeightsError("the pulled environment has no RECORD-listed file to check")
        shutil.rmtree(staging, ignore_errors=True)
        os.replace(tmp, staging)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "bytes": received,
        "files": files,
        "record_files_checked": checked,
        "pull_seconds": round(pulled, 1),
        "seconds": round(time.monotonic() - started, 1),
    }


class _Counting:
    """A read-only stream that counts the bytes read from it."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.stream.read(size)
        self.count += len(data)
        return data
