"""Serve a wheelhouse over HTTP as a pip ``--find-links`` page, counting bytes per host.

The controller (or any internal box) downloads the wheels once; every host then installs with
``pip install --no-index --find-links http://CONTROLLER:PORT/<tag>/``. ``<tag>`` is any
name (the roles use ``inventory_hostname``): the same files are listed under every tag, and
the request log says which tag fetched what, so bytes served per host are measurable even
when all hosts share one address (the lab).

    python3 -m acceldeploy.lab.wheelserver start [--dir DIR] [--port 8091]
    python3 -m acceldeploy.lab.wheelserver served [--since LINE]   # per tag: files, bytes
    python3 -m acceldeploy.lab.wheelserver stop|status

stdlib only; one JSON line per request in ``<root>/logs/requests.jsonl``.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from acceldeploy.lab import daemon

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8091
DEFAULT_CACHE = Path("/var/cache/acceldeploy")
SUFFIXES = (".whl", ".tar.gz", ".zip")
TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NO_TAG = "-"
CHUNK = 1 << 20


class WheelServerError(Exception):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("ACCELDEPLOY_CACHE") or DEFAULT_CACHE)


@dataclass(frozen=True)
class WheelServer:
    """Where one server keeps its pid file and logs, and what it serves."""

    root: Path
    directory: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT

    @property
    def pid_file(self) -> Path:
        return self.root / "wheelserver.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "logs" / "wheelserver.out"

    @property
    def request_log(self) -> Path:
        return self.root / "logs" / "requests.jsonl"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def find_links(self, tag: str) -> str:
        if not TAG.fullmatch(tag):
            raise WheelServerError(f"tag {tag!r}: letters, digits, '.', '_' and '-' only")
        return f"{self.url}/{tag}/"


def default_server(port: int = DEFAULT_PORT) -> WheelServer:
    cache = cache_dir()
    return WheelServer(root=cache / "wheelserver", directory=cache / "wheels", port=port)


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))


def index_page(directory: Path) -> bytes:
    links = "\n".join(
        f'<a href="{urllib.parse.quote(name)}">{html.escape(name)}</a><br>'
        for name in listing(directory)
    )
    return f"<!DOCTYPE html>\n<html><body>\n{links}\n</body></html>\n".encode()


def make_handler(directory: Path, request_log: Path) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        server_version = "acceldeploy-wheelserver"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _log(self, tag: str, status: int, sent: int, started: float) -> None:
            entry = {
                "time": round(time.time(), 3),
                "tag": tag,
                "method": self.command,
                "path": self.path,
                "status": status,
                "bytes": sent,
                "seconds": round(time.monotonic() - started, 4),
            }
            with lock, request_log.open("a") as fh:
                fh.write(json.dumps(entry) + "\n")

        def _send(self, status: int, body: bytes, kind: str = "text/plain") -> int:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(body)
                return len(body)
            return 0

        def _route(self) -> tuple[str, str | None]:
            """(tag, file name or None for the index page); raises on a bad path."""
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            parts = [p for p in path.split("/") if p]
            if len(parts) > 2 or any(p in (".", "..") for p in parts):
                raise LookupError(path)
            if not parts:
                return NO_TAG, None
            if len(parts) == 1:
                if parts[0].endswith(SUFFIXES):
                    return NO_TAG, parts[0]
                if not path.endswith("/"):
                    raise IsADirectoryError(parts[0])
                return parts[0], None
            return parts[0], parts[1]

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            started = time.monotonic()
            tag = NO_TAG
            try:
                tag, name = self._route()
                if not TAG.fullmatch(tag) and tag != NO_TAG:
                    raise LookupError(tag)
            except IsADirectoryError as exc:
                self.send_response(301)
                self.send_header("Location", f"/{exc.args[0]}/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                self._log(str(exc.args[0]), 301, 0, started)
                return
            except LookupError:
                self._log(tag, 404, self._send(404, b"not found\n"), started)
                return
            if name is None:
                sent = self._send(200, index_page(directory), "text/html; charset=utf-8")
                self._log(tag, 200, sent, started)
                return
            file = directory / name
            if name != Path(name).name or not name.endswith(SUFFIXES) or not file.is_file():
                self._log(tag, 404, self._send(404, b"not found\n"), started)
                return
            size = file.stat().st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            sent = 0
            status = 200
            if self.command == "GET":
                try:
                    with file.open("rb") as fh:
                        for block in iter(lambda: fh.read(CHUNK), b""):
                            self.wfile.write(block)
                            sent += len(block)
                except (BrokenPipeError, ConnectionResetError):
                    status = 499
            self._log(tag, status, sent, started)

    return Handler


def serve(directory: Path, host: str, port: int, request_log: Path) -> None:
    """Foreground server (what ``start`` runs detached)."""
    if not directory.is_dir():
        raise WheelServerError(f"{directory} is not a directory")
    request_log.parent.mkdir(parents=True, exist_ok=True)
    httpd = ThreadingHTTPServer((host, port), make_handler(directory, request_log))
    httpd.daemon_threads = True

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()


def _daemon(server: WheelServer) -> daemon.Daemon:
    return daemon.Daemon("wheelserver", server.pid_file, server.log_file, str(server.request_log))


def running_pid(server: WheelServer) -> int | None:
    return daemon.running_pid(_daemon(server))


def is_ready(server: WheelServer, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{server.url}/{NO_TAG}/", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start(server: WheelServer, timeout: float = 30.0) -> dict[str, Any]:
    """Starts the server detached unless it already runs; waits until it answers."""
    if running_pid(server) is None and (
        not server.directory.is_dir() or not listing(server.directory)
    ):
        raise WheelServerError(f"{server.directory} holds no wheels to serve")
    argv = [
        sys.executable,
        "-m",
        "acceldeploy.lab.wheelserver",
        "serve",
        "--dir",
        str(server.directory),
        "--host",
        server.host,
        "--port",
        str(server.port),
        "--request-log",
        str(server.request_log),
    ]
    result = daemon.start(
        _daemon(server), argv, lambda: is_ready(server), WheelServerError, timeout
    )
    return {**result, "url": server.url}


def stop(server: WheelServer, timeout: float = 10.0) -> bool:
    """Stops the server of this pid file; True if one was running."""
    return daemon.stop(_daemon(server), timeout)


def log_lines(server: WheelServer) -> int:
    try:
        return len(server.request_log.read_text().splitlines())
    except FileNotFoundError:
        return 0


def served(server: WheelServer, since_line: int = 0) -> dict[str, Any]:
    """Counts the request log (from line ``since_line``) per tag: requests, body bytes,
    wheel files fetched (200 GETs), the most times any one file was fetched, errors."""
    tags: dict[str, dict[str, Any]] = {}
    try:
        lines = server.request_log.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines[since_line:]:
        entry = json.loads(line)
        stats = tags.setdefault(
            entry["tag"],
            {"requests": 0, "bytes": 0, "wheel_bytes": 0, "errors": 0, "files": {}},
        )
        stats["requests"] += 1
        stats["bytes"] += entry["bytes"]
        if entry["status"] >= 400:
            stats["errors"] += 1
        name = Path(urllib.parse.unquote(urllib.parse.urlsplit(entry["path"]).path)).name
        if entry["method"] == "GET" and entry["status"] == 200 and name.endswith(SUFFIXES):
            stats["wheel_bytes"] += entry["bytes"]
            stats["files"][name] = stats["files"].get(name, 0) + 1
    for stats in tags.values():
        fetched = stats.pop("files")
        stats["wheels"] = len(fetched)
        stats["max_fetches_per_wheel"] = max(fetched.values(), default=0)
    return {"lines": len(lines), "since": since_line, "tags": tags}


def main(argv: list[str] | None = None) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--root", type=Path, default=None, help="default $ACCELDEPLOY_CACHE/wheelserver"
    )
    common.add_argument("--dir", type=Path, default=None, help="default $ACCELDEPLOY_CACHE/wheels")
    common.add_argument("--host", default=DEFAULT_HOST)
    common.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser = argparse.ArgumentParser(prog="python3 -m acceldeploy.lab.wheelserver")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("start", parents=[common], help="serve the wheelhouse detached")
    sub.add_parser("stop", parents=[common], help="stop the server of the pid file")
    sub.add_parser("status", parents=[common])
    count = sub.add_parser("served", parents=[common], help="count the request log per tag")
    count.add_argument("--since", type=int, default=0, metavar="LINE")
    srv = sub.add_parser("serve", parents=[common], help="(internal) serve in the foreground")
    srv.add_argument("--request-log", type=Path, required=True)
    args = parser.parse_args(argv)
    base = default_server(args.port)
    server = WheelServer(
        root=args.root or base.root,
        directory=args.dir or base.directory,
        host=args.host,
        port=args.port,
    )
    result: object
    try:
        if args.command == "serve":
            serve(server.directory, server.host, server.port, args.request_log)
            return 0
        if args.command == "start":
            result = start(server)
        elif args.command == "stop":
            result = {"stopped": stop(server)}
        elif args.command == "status":
            pid = running_pid(server)
            result = {"pid": pid, "url": server.url, "ready": pid is not None and is_ready(server)}
        else:
            result = served(server, args.since)
    except WheelServerError as exc:
        print(f"wheelserver: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
