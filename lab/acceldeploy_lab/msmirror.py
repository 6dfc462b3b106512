"""The lab's ModelScope-compatible mirror: the smallest server ``modelscope.snapshot_download``
needs, over the same bare git repositories the olah mirror serves.

No maintained local ModelScope server exists on PyPI (olah and its kin speak only the Hugging
Face protocol), so this one answers the handful of ``/api/v1`` calls the real client
(modelscope 1.40.2 through modelscope-hub 0.5.1) makes for a download:

    GET /api/v1/models/{owner}/{name}                           repository info
    GET /api/v1/models/{owner}/{name}/revisions                 branches and tags
    GET /api/v1/models/{owner}/{name}/repo/files?Revision=R&Recursive=True
        -> {"Code": 200, "Success": true, "Data": {"Files": [{Path, Name, Type, Size, Sha256}]}}
    GET /api/v1/models/{owner}/{name}/repo?Revision=R&FilePath=P  the file, with Range
    GET /api/v1/repos/internalAccelerationInfo                   404 (the client tolerates it)

Repositories live where ``acceldeploy_lab.mirror.publish`` puts them
(``<root>/mirrors/models/<org>/<name>``, branch ``main``); ``master`` (ModelScope's default
revision) resolves to ``main`` when the repository has no ``master``. Blobs are written once
to ``<root>/msmirror-blobs/<git sha1>`` so ranges can be served with ``sendfile``. Every
request is appended to ``<root>/logs/msmirror-requests.jsonl`` (method, path, query, status,
body bytes), which ``served`` counts per file, like ``mirror.served``.

Standard library only: it runs with the controller's ``python3``.

    python3 -m acceldeploy_lab.msmirror start|stop|status|served [--root DIR] [--port P]
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceldeploy_lab import daemon
from acceldeploy_lab.mirror import BRANCH, MirrorError, cache_dir, count_requests

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8095
DEFAULT_BRANCH_ALIAS = "master"
_REPO = r"(?P<owner>[A-Za-z0-9][\w.-]*)/(?P<name>[A-Za-z0-9][\w.-]*)"
_ROUTES = {
    "info": re.compile(rf"^/api/v1/models/{_REPO}$"),
    "revisions": re.compile(rf"^/api/v1/models/{_REPO}/revisions$"),
    "files": re.compile(rf"^/api/v1/models/{_REPO}/repo/files$"),
    "file": re.compile(rf"^/api/v1/models/{_REPO}/repo$"),
}
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass(frozen=True)
class MsMirror:
    root: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT

    @property
    def mirrors_path(self) -> Path:
        return self.root / "mirrors"

    @property
    def blobs_path(self) -> Path:
        return self.root / "msmirror-blobs"

    @property
    def pid_file(self) -> Path:
        return self.root / "msmirror.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "logs" / "msmirror.out"

    @property
    def request_log(self) -> Path:
        return self.root / "logs" / "msmirror-requests.jsonl"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def repo_path(self, owner: str, name: str) -> Path:
        return self.mirrors_path / "models" / owner / name


def default_msmirror(port: int = DEFAULT_PORT) -> MsMirror:
    return MsMirror(root=cache_dir() / "mirror", port=port)


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "--git-dir", str(repo), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise MirrorError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def resolve_revision(repo: Path, revision: str) -> str | None:
    """A branch, tag or commit of the repository as a commit id; ``master`` falls back to
    ``main``, the branch the lab publishes."""
    candidates = [revision]
    if revision == DEFAULT_BRANCH_ALIAS:
        candidates.append(BRANCH)
    for candidate in candidates:
        try:
            return _git(repo, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}").strip()
        except MirrorError:
            continue
    return None


@dataclass(frozen=True)
class Blob:
    path: str
    sha1: str
    size: int


def list_blobs(repo: Path, commit: str) -> list[Blob]:
    blobs = []
    for line in _git(repo, "ls-tree", "-r", "-l", "-z", commit).split("\0"):
        if not line:
            continue
        meta, path = line.split("\t", 1)
        _mode, kind, sha1, size = meta.split()
        if kind == "blob":
            blobs.append(Blob(path=path, sha1=sha1, size=int(size)))
    return blobs


class BlobStore:
    """Blobs as plain files (for ranges and sendfile) and their sha256, computed once."""

    def __init__(self, mirror: MsMirror) -> None:
        self.mirror = mirror
        self.lock = threading.Lock()
        self.sha256: dict[str, str] = {}
        self.index = mirror.blobs_path / "sha256.json"
        try:
            self.sha256 = json.loads(self.index.read_text())
        except (OSError, ValueError):
            self.sha256 = {}

    def file(self, repo: Path, blob: Blob) -> Path:
        target = self.mirror.blobs_path / blob.sha1
        with self.lock:
            if target.exists() and blob.sha1 in self.sha256:
                return target
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            digest = hashlib.sha256()
            with tmp.open("wb") as out:
                proc = subprocess.Popen(
                    ["git", "--git-dir", str(repo), "cat-file", "blob", blob.sha1],
                    stdout=subprocess.PIPE,
                )
                assert proc.stdout is not None
                while chunk := proc.stdout.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                if proc.wait() != 0:
                    raise MirrorError(f"git cat-file blob {blob.sha1} failed")
            tmp.rename(target)
            self.sha256[blob.sha1] = digest.hexdigest()
            self.index.write_text(json.dumps(self.sha256, indent=1, sort_keys=True) + "\n")
            return target

    def digest(self, repo: Path, blob: Blob) -> str:
        self.file(repo, blob)
        return self.sha256[blob.sha1]


def _json_body(data: Any, code: int = 200) -> bytes:
    return json.dumps(
        {"Code": code, "Success": code == 200, "Message": "", "RequestId": "lab", "Data": data}
    ).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "acceldeploy-msmirror/1"
    protocol_version = "HTTP/1.1"
    mirror: MsMirror
    store: BlobStore

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _log(self, status: int, sent: int, started: float) -> None:
        url = urllib.parse.urlsplit(self.path)
        entry = {
            "time": round(time.time(), 3),
            "method": self.command,
            "path": url.path,
            "query": url.query,
            "status": status,
            "bytes": sent,
            "seconds": round(time.monotonic() - started, 4),
        }
        with self.mirror.request_log.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def _send_json(self, data: Any, status: int = 200) -> int:
        body = _json_body(data, status)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
            return len(body)
        return 0

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        started = time.monotonic()
        status, sent = 500, 0
        try:
            status, sent = self._route()
        except (BrokenPipeError, ConnectionResetError):
            status = 499
        except MirrorError as exc:
            status, sent = 500, self._send_json({"error": str(exc)}, 500)
        finally:
            self._log(status, sent, started)

    def _route(self) -> tuple[int, int]:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        for route, pattern in _ROUTES.items():  # noqa: B007 - route is used after the loop
            match = pattern.match(url.path)
            if match:
                break
        else:
            return 404, self._send_json({"error": f"no route {url.path}"}, 404)
        owner, name = match["owner"], match["name"]
        repo = self.mirror.repo_path(owner, name)
        if not (repo / "HEAD").exists():
            return 404, self._send_json({"error": f"model {owner}/{name} not found"}, 404)
        if route == "info":
            commit = resolve_revision(repo, BRANCH)
            data = {"Id": 1, "Name": name, "Path": owner, "ChineseName": name, "Revision": commit}
            return 200, self._send_json(data)
        if route == "revisions":
            branches = [
                {"Revision": ref.rsplit("/", 1)[-1], "CommitId": sha, "CreatedAt": 1735689600}
                for sha, ref in (
                    line.split() for line in _git(repo, "show-ref", "--heads").splitlines()
                )
            ]
            return 200, self._send_json({"RevisionMap": {"Branches": branches, "Tags": []}})
        revision = query.get("Revision") or DEFAULT_BRANCH_ALIAS
        commit = resolve_revision(repo, revision)
        if commit is None:
            return 404, self._send_json({"error": f"revision {revision} not found"}, 404)
        blobs = list_blobs(repo, commit)
        if route == "files":
            files = [
                {
                    "Path": b.path,
                    "Name": b.path.rsplit("/", 1)[-1],
                    "Type": "blob",
                    "Size": b.size,
                    "Sha256": self.store.digest(repo, b),
                    "Revision": commit,
                }
                for b in blobs
            ]
            return 200, self._send_json({"Files": files})
        wanted = query.get("FilePath", "")
        blob = next((b for b in blobs if b.path == wanted), None)
        if blob is None:
            return 404, self._send_json({"error": f"file {wanted} not found"}, 404)
        return self._send_file(self.store.file(repo, blob), blob, commit)

    def _send_file(self, path: Path, blob: Blob, commit: str) -> tuple[int, int]:
        start, end = 0, blob.size - 1
        status = 200
        header = self.headers.get("Range")
        if header:
            match = _RANGE.match(header.strip())
            if match and (match[1] or match[2]):
                if match[1]:
                    start = int(match[1])
                    end = min(int(match[2]), blob.size - 1) if match[2] else blob.size - 1
                else:
                    start = max(blob.size - int(match[2]), 0)
                if start >= blob.size or start > end:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{blob.size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return 416, 0
                status = 206
        length = end - start + 1 if blob.size else 0
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{blob.sha1}"')
        self.send_header("X-Repo-Commit", commit)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{blob.size}")
        self.end_headers()
        if self.command == "HEAD" or length == 0:
            return status, 0
        sent = 0
        with path.open("rb") as fh:
            while sent < length:
                n = self.connection.sendfile(fh, start + sent, min(length - sent, 1 << 22))
                if n == 0:
                    break
                sent += n
        return status, sent


def serve(mirror: MsMirror) -> None:
    mirror.request_log.parent.mkdir(parents=True, exist_ok=True)
    handler = type("BoundHandler", (Handler,), {"mirror": mirror, "store": BlobStore(mirror)})
    server = http.server.ThreadingHTTPServer((mirror.host, mirror.port), handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


def _daemon(mirror: MsMirror) -> daemon.Daemon:
    return daemon.Daemon("msmirror", mirror.pid_file, mirror.log_file, str(mirror.root))


def running_pid(mirror: MsMirror) -> int | None:
    return daemon.running_pid(_daemon(mirror))


def is_ready(mirror: MsMirror, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((mirror.host, mirror.port), timeout=timeout):
            return True
    except OSError:
        return False


def start(mirror: MsMirror, timeout: float = 30.0) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-m",
        "acceldeploy_lab.msmirror",
        "serve",
        "--root",
        str(mirror.root),
        "--host",
        mirror.host,
        "--port",
        str(mirror.port),
    ]
    result = daemon.start(
        _daemon(mirror), argv, lambda: is_ready(mirror), MirrorError, timeout, cwd=mirror.root
    )
    return {**result, "endpoint": mirror.endpoint}


def stop(mirror: MsMirror, timeout: float = 10.0) -> bool:
    return daemon.stop(_daemon(mirror), timeout)


def _file_key(entry: dict[str, Any]) -> str | None:
    match = _ROUTES["file"].match(entry["path"])
    if not match:
        return None
    query = dict(urllib.parse.parse_qsl(entry.get("query", "")))
    return f"{match['owner']}/{match['name']}/{query.get('FilePath', '')}"


def served(mirror: MsMirror, since_line: int = 0) -> dict[str, Any]:
    """Counts the request log (from line ``since_line``): all requests and body bytes, and per
    file downloaded through ``/repo?FilePath=`` its GETs, HEADs and body bytes."""
    return count_requests(mirror.request_log, since_line, _file_key)


def main(argv: list[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", type=Path, default=None, help="default $ACCELDEPLOY_CACHE/mirror")
    common.add_argument("--host", default=DEFAULT_HOST)
    common.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser = argparse.ArgumentParser(prog="python3 -m acceldeploy_lab.msmirror")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, text in (
        ("start", "start detached, wait until it answers"),
        ("stop", "stop the server of the pid file"),
        ("status", "pid and readiness"),
        ("served", "count the request log"),
        ("serve", "(internal) run in the foreground"),
    ):
        sub.add_parser(command, parents=[common], help=text)
    args = parser.parse_args(argv)
    root = args.root or default_msmirror().root
    mirror = MsMirror(root=root, host=args.host, port=args.port)
    if args.command == "serve":
        serve(mirror)
        return 0
    result: object
    try:
        if args.command == "start":
            result = start(mirror)
        elif args.command == "stop":
            result = {"stopped": stop(mirror)}
        elif args.command == "status":
            pid = running_pid(mirror)
            result = {"pid": pid, "ready": pid is not None and is_ready(mirror)}
        else:
            result = served(mirror)
    except (MirrorError, urllib.error.URLError) as exc:
        print(f"msmirror: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
