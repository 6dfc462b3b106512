"""The lab's Hugging Face-compatible mirror: olah serving local git repositories offline.

A model directory is published as a bare git repository at
``<root>/mirrors/models/<org>/<name>`` on branch ``main``: one root commit with a fixed
author and date, so the same files always give the same revision. Files are plain git
blobs; olah only needs LFS for pointer files, which it then reads from a working tree's
``.git/lfs/objects``.

olah 0.5.4 needs a newer huggingface_hub than transformers allows, so it runs from its own
venv (``$ACCELDEPLOY_CACHE/olahenv``), started by this module's ``serve`` command, which
adds a request log (method, path, status, body bytes) in front of olah's unchanged app.

    python3 -m acceldeploy_lab.mirror publish MODEL_DIR acceldeploy/tiny-qwen3-vl
    python3 -m acceldeploy_lab.mirror start|stop|status|served
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceldeploy_lab import daemon

OLAH_REQUIREMENT = "olah==0.5.4"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090
DEFAULT_CACHE = Path("/var/cache/acceldeploy")
BRANCH = "main"
COMMIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "acceldeploy lab",
    "GIT_AUTHOR_EMAIL": "lab@acceldeploy.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "acceldeploy lab",
    "GIT_COMMITTER_EMAIL": "lab@acceldeploy.invalid",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000",
}
REPO_TYPES = ("models", "datasets", "spaces")


class MirrorError(Exception):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("ACCELDEPLOY_CACHE") or DEFAULT_CACHE)


@dataclass(frozen=True)
class Mirror:
    """Where one mirror keeps its repositories, config, pid and logs."""

    root: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT

    @property
    def mirrors_path(self) -> Path:
        return self.root / "mirrors"

    @property
    def repos_path(self) -> Path:
        # olah's own cache of upstream files; stays empty offline.
        return self.root / "olah-cache"

    @property
    def config_path(self) -> Path:
        return self.root / "olah.toml"

    @property
    def pid_file(self) -> Path:
        return self.root / "olah.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "logs" / "olah.out"

    @property
    def request_log(self) -> Path:
        return self.root / "logs" / "requests.jsonl"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def repo_path(self, repo_id: str, repo_type: str = "models") -> Path:
        org, name = split_repo_id(repo_id)
        if repo_type not in REPO_TYPES:
            raise MirrorError(f"repo type must be one of {REPO_TYPES}, not {repo_type!r}")
        return self.mirrors_path / repo_type / org / name


def default_mirror(port: int = DEFAULT_PORT) -> Mirror:
    return Mirror(root=cache_dir() / "mirror", port=port)


def split_repo_id(repo_id: str) -> tuple[str, str]:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9][\w.-]*", p) for p in parts):
        raise MirrorError(f"repo id must be <org>/<name>, not {repo_id!r}")
    return parts[0], parts[1]


def _git(args: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise MirrorError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def publish(
    model_dir: Path, mirror: Mirror, repo_id: str, repo_type: str = "models"
) -> dict[str, Any]:
    """Makes ``model_dir``'s files the one commit on ``main`` of the mirror's bare repo;
    returns the commit (the revision clients can pin) and whether it changed."""
    if not model_dir.is_dir():
        raise MirrorError(f"{model_dir} is not a directory")
    repo = mirror.repo_path(repo_id, repo_type)
    if not (repo / "HEAD").exists():
        repo.mkdir(parents=True, exist_ok=True)
        _git(["init", "--quiet", "--bare", f"--initial-branch={BRANCH}", str(repo)])
        _git(["--git-dir", str(repo), "config", "gc.auto", "0"])
    index = repo / "acceldeploy-publish.index"
    index.unlink(missing_ok=True)
    env = {
        **os.environ,
        **COMMIT_IDENTITY,
        "GIT_INDEX_FILE": str(index),
        "GIT_DIR": str(repo),
        "GIT_WORK_TREE": str(model_dir.resolve()),
    }
    try:
        # -f: a model directory's own .gitignore (or a global one) must not drop files.
        _git(["add", "--all", "--force", "."], env)
        tree = _git(["write-tree"], env)
    finally:
        index.unlink(missing_ok=True)
    message = f"{repo_id}: published by acceldeploy\n"
    commit = _git(["commit-tree", tree, "-m", message], env)
    try:
        previous = _git(["--git-dir", str(repo), "rev-parse", "--verify", f"refs/heads/{BRANCH}"])
    except MirrorError:
        previous = ""
    if previous != commit:
        _git(["--git-dir", str(repo), "update-ref", f"refs/heads/{BRANCH}", commit])
    files = _git(["--git-dir", str(repo), "ls-tree", "-r", "--name-only", commit]).splitlines()
    return {
        "repo": str(repo),
        "repo_id": repo_id,
        "revision": commit,
        "changed": previous != commit,
        "files": files,
    }


def render_config(mirror: Mirror) -> str:
    return (
        "[basic]\n"
        f'host = "{mirror.host}"\n'
        f"port = {mirror.port}\n"
        f'repos-path = "{mirror.repos_path}"\n'
        f'mirrors-path = ["{mirror.mirrors_path}"]\n'
        'mirror-scheme = "http"\n'
        f'mirror-netloc = "{mirror.host}:{mirror.port}"\n'
        f'mirror-lfs-netloc = "{mirror.host}:{mirror.port}"\n'
        "\n"
        "[accessibility]\n"
        "offline = true\n"
    )


def write_config(mirror: Mirror) -> Path:
    mirror.root.mkdir(parents=True, exist_ok=True)
    mirror.config_path.write_text(render_config(mirror))
    return mirror.config_path


def olahenv_dir(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "olahenv"


def ensure_olahenv(cache: Path | None = None, python: str = sys.executable) -> Path:
    """Creates the olah venv from PyPI once; returns its interpreter."""
    venv = olahenv_dir(cache)
    vpython = venv / "bin" / "python"
    stamp = venv / "acceldeploy-olahenv.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("requirement") == OLAH_REQUIREMENT:
        return vpython
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(
        [str(vpython), "-m", "pip", "install", "--quiet", OLAH_REQUIREMENT],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise MirrorError(f"pip install {OLAH_REQUIREMENT} failed:\n{proc.stderr[-3000:]}")
    freeze = subprocess.run(
        [str(vpython), "-m", "pip", "freeze"], capture_output=True, text=True, env=env
    ).stdout.split()
    stamp.write_text(
        json.dumps({"requirement": OLAH_REQUIREMENT, "freeze": freeze}, indent=2) + "\n"
    )
    return vpython


def _daemon(mirror: Mirror) -> daemon.Daemon:
    return daemon.Daemon("olah", mirror.pid_file, mirror.log_file, str(mirror.config_path))


def running_pid(mirror: Mirror) -> int | None:
    return daemon.running_pid(_daemon(mirror))


READY_PROBE_REPO = "acceldeploy/ready-probe"


def is_ready(mirror: Mirror, repo_id: str | None = None, timeout: float = 2.0) -> bool:
    """With ``repo_id``: True when its ``main`` resolves (200). Without: True once olah
    answers at all; offline, an unknown repo's revision is answered locally (401) without
    going upstream, unlike ``/`` (its index page fails under Starlette 1.x) or
    ``/api/whoami-v2`` (always proxied to the Hub)."""
    probe = repo_id or READY_PROBE_REPO
    url = f"{mirror.endpoint}/api/models/{probe}/revision/{BRANCH}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError:
        return repo_id is None
    except (urllib.error.URLError, OSError):
        return False


def start(mirror: Mirror, olah_python: Path | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """Starts olah detached (its own session, output to ``log_file``) unless it already
    runs; waits until it answers."""
    pid = running_pid(mirror)
    if pid is not None:
        return {"pid": pid, "started": False, "endpoint": mirror.endpoint}
    python = olah_python or ensure_olahenv()
    write_config(mirror)
    mirror.mirrors_path.mkdir(parents=True, exist_ok=True)
    mirror.repos_path.mkdir(parents=True, exist_ok=True)
    argv = [
        str(python),
        "-m",
        "acceldeploy_lab.mirror",
        "serve",
        "--config",
        str(mirror.config_path),
        "--request-log",
        str(mirror.request_log),
    ]
    result = daemon.start(
        _daemon(mirror), argv, lambda: is_ready(mirror), MirrorError, timeout, cwd=mirror.root
    )
    return {**result, "endpoint": mirror.endpoint}


def stop(mirror: Mirror, timeout: float = 10.0) -> bool:
    """Stops the olah started for this mirror (by its pid file); True if one was running."""
    return daemon.stop(_daemon(mirror), timeout)


_RESOLVE = re.compile(r"^/(?:(datasets|spaces)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


def count_requests(
    log: Path, since_line: int, file_key: Callable[[dict[str, Any]], str | None]
) -> dict[str, Any]:
    """Counts a request log (from line ``since_line``): all requests and body bytes, and per
    file ``file_key`` names (None: not a file download) its GETs, HEADs and body bytes."""
    totals: dict[str, Any] = {"requests": 0, "bytes": 0, "errors": 0, "lines": 0, "files": {}}
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return totals
    totals["lines"] = len(lines)
    files: dict[str, dict[str, int]] = totals["files"]
    for line in lines[since_line:]:
        entry = json.loads(line)
        totals["requests"] += 1
        totals["bytes"] += entry["bytes"]
        if entry["status"] >= 400:
            totals["errors"] += 1
        key = file_key(entry)
        if key is None:
            continue
        stats = files.setdefault(key, {"get": 0, "head": 0, "bytes": 0})
        stats["head" if entry["method"] == "HEAD" else "get"] += 1
        stats["bytes"] += entry["bytes"]
    return totals


def _resolve_key(entry: dict[str, Any]) -> str | None:
    match = _RESOLVE.match(urllib.parse.unquote(entry["path"]))
    if not match:
        return None
    repo_type, repo_id, _revision, filename = match.groups()
    return f"{repo_type + '/' if repo_type else ''}{repo_id}/{filename}"


def served(mirror: Mirror, since_line: int = 0) -> dict[str, Any]:
    """Counts the request log (from line ``since_line``): all requests and body bytes, and
    per file downloaded through ``/resolve/`` its GETs, HEADs and body bytes."""
    return count_requests(mirror.request_log, since_line, _resolve_key)


ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


class RequestLog:
    """ASGI middleware: one JSON line per HTTP request with the body bytes actually sent."""

    def __init__(self, app: ASGIApp, path: Path) -> None:
        self.app = app
        self.path = path

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 0
        sent = 0

        async def counting_send(message: Any) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            entry = {
                "time": round(time.time(), 3),
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "bytes": sent,
                "seconds": round(time.monotonic() - started, 4),
            }
            with self.path.open("a") as fh:
                fh.write(json.dumps(entry) + "\n")


def serve(config: Path, request_log: Path) -> None:
    """Runs inside the olah venv: olah's own CLI start-up, with ``RequestLog`` added."""
    import olah.server

    request_log.parent.mkdir(parents=True, exist_ok=True)
    log_dir = request_log.parent / "olah"
    sys.argv = ["olah-cli", "--config", str(config), "--log-path", str(log_dir)]
    args = olah.server.init()
    olah.server.app.add_middleware(RequestLog, path=request_log)
    olah.server.run_server(args)


def main(argv: list[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", type=Path, default=None, help="default $ACCELDEPLOY_CACHE/mirror")
    common.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser = argparse.ArgumentParser(prog="python3 -m acceldeploy_lab.mirror")
    sub = parser.add_subparsers(dest="command", required=True)
    pub = sub.add_parser("publish", parents=[common], help="publish a model dir as a repo")
    pub.add_argument("model_dir", type=Path)
    pub.add_argument("repo_id")
    sub.add_parser("start", parents=[common], help="start olah detached, wait until ready")
    sub.add_parser("stop", parents=[common], help="stop the olah of the pid file")
    sub.add_parser("status", parents=[common])
    sub.add_parser("served", parents=[common], help="count the request log")
    srv = sub.add_parser("serve", help="(internal, olah venv) run olah in the foreground")
    srv.add_argument("--config", type=Path, required=True)
    srv.add_argument("--request-log", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.config, args.request_log)
        return 0
    mirror = Mirror(root=args.root, port=args.port) if args.root else default_mirror(args.port)
    result: object
    try:
        if args.command == "publish":
            result = publish(args.model_dir, mirror, args.repo_id)
        elif args.command == "start":
            result = start(mirror)
        elif args.command == "stop":
            result = {"stopped": stop(mirror)}
        elif args.command == "status":
            pid = running_pid(mirror)
            result = {"pid": pid, "ready": pid is not None and is_ready(mirror)}
        else:
            result = served(mirror)
    except MirrorError as exc:
        print(f"mirror: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
