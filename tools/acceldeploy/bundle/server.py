"""The controller's read-only HTTP server for a bundle (and the lab's wheel cache): pip
``--find-links`` pages of a wheel directory, and the published models in the hosts' own seed
protocol (``GET /m/<org>/<name>@<rev>/<file>``, Bearer token, Range; acceldeploy.host.fetch.seed),
and flat apt repositories of a distribution's packages (``GET /os/<release>/<file>``: Packages,
Release and the .debs), each request logged with its client, tag and body bytes.

``<tag>`` is any name (the roles use ``inventory_hostname``): the same wheels are listed under
every tag and the log says which tag fetched what, so bytes served per host are measurable even
when all hosts share one address (the lab). Models are served only to a client holding the
run's token, and only files a published model's manifest lists.

It binds one address (never all interfaces: the controller's address on the hosts' network),
and with ``--exit-with PID`` it exits within a second of that process (the ansible-playbook
run that started it): an interrupted play leaves no server behind.

    acceldeploy bundle serve DIR --listen ADDR [--port 8093] [--token-file F]
    python3 -m acceldeploy.bundle.server serve --dir WHEELS [--models ROOT] --host ADDR ...

stdlib only; one JSON line per request in the request log.
"""

from __future__ import annotations

import argparse
import hmac
import html
import ipaddress
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from acceldeploy.host.fetch.common import MANIFEST as MODEL_MANIFEST
from acceldeploy.host.fetch.manifest import read_manifest

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8091
SUFFIXES = (".whl", ".tar.gz", ".zip")
TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NO_TAG = "-"
MODELS_TAG = "m"
OS_TAG = "os"
CHUNK = 1 << 20


class ServerError(Exception):
    pass


@dataclass(frozen=True)
class Served:
    """What one server serves, where, and where it logs."""

    wheels: Path
    request_log: Path
    models: Path | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str = ""
    packages: Path | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def check_listen(host: str) -> str:
    """One address, not all of them: the controller's address on the hosts' network."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise ServerError(
            f"listen address {host!r} is not an IP address; give the controller's address on "
            "the hosts' network (acceldeploy_bundle_listen)"
        ) from exc
    if address.is_unspecified:
        raise ServerError(
            f"listen address {host} is every interface; give the controller's address on the "
            "hosts' network (acceldeploy_bundle_listen), so the bundle is not served beyond it"
        )
    return host


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))


def index_page(directory: Path) -> bytes:
    links = "\n".join(
        f'<a href="{urllib.parse.quote(name)}">{html.escape(name)}</a><br>'
        for name in listing(directory)
    )
    return f"<!DOCTYPE html>\n<html><body>\n{links}\n</body></html>\n".encode()


def model_file(models: Path, relative: str) -> Path | None:
    """``<org>/<name>@<rev>/<file>`` of a published model, if its manifest lists the file."""
    parts = relative.split("/")
    if len(parts) < 3 or any(p in ("", ".", "..") for p in parts):
        return None
    directory = models.joinpath(*parts[:2])
    manifest = read_manifest(directory)
    rest = "/".join(parts[2:])
    if manifest is None or (rest != MODEL_MANIFEST and rest not in manifest["files"]):
        return None
    return directory / rest


def package_file(packages: Path, relative: str) -> Path | None:
    """``<release>/<file>`` of a flat apt repository: its index files and its .debs."""
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if len(parts) != 2 or ".." in parts or not TAG.fullmatch(parts[0]):
        return None
    name = parts[1]
    if name not in ("Packages", "Release") and not name.endswith(".deb"):
        return None
    return packages / parts[0] / name


def make_handler(served: Served) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        server_version = "acceldeploy-bundle"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _log(self, tag: str, status: int, sent: int, started: float) -> None:
            entry = {
                "time": round(time.time(), 3),
                "client": self.client_address[0],
                "tag": tag,
                "method": self.command,
                "path": self.path,
                "status": status,
                "bytes": sent,
                "seconds": round(time.monotonic() - started, 4),
            }
            with lock, served.request_log.open("a") as fh:
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

        def _route(self, path: str) -> tuple[str, str | None]:
            """(tag, file name or None for the index page); raises on a bad path."""
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
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            if path.startswith(f"/{MODELS_TAG}/"):
                self._model(path[len(MODELS_TAG) + 2 :], started)
                return
            if path.startswith(f"/{OS_TAG}/"):
                self._package(path[len(OS_TAG) + 2 :], started)
                return
            tag = NO_TAG
            try:
                tag, name = self._route(path)
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
                sent = self._send(200, index_page(served.wheels), "text/html; charset=utf-8")
                self._log(tag, 200, sent, started)
                return
            file = served.wheels / name
            if name != Path(name).name or not name.endswith(SUFFIXES) or not file.is_file():
                self._log(tag, 404, self._send(404, b"not found\n"), started)
                return
            status, sent = self._file(file)
            self._log(tag, status, sent, started)

        def _model(self, relative: str, started: float) -> None:
            auth = self.headers.get("Authorization", "")
            if not served.token or not hmac.compare_digest(
                auth.encode(), f"Bearer {served.token}".encode()
            ):
                self._log(MODELS_TAG, 401, self._send(401, b"unauthorized\n"), started)
                return
            file = model_file(served.models, relative) if served.models else None
            self._logged_file(MODELS_TAG, file, started)

        def _package(self, relative: str, started: float) -> None:
            file = package_file(served.packages, relative) if served.packages else None
            self._logged_file(OS_TAG, file, started)

        def _logged_file(self, tag: str, file: Path | None, started: float) -> None:
            if file is None or not file.is_file():
                self._log(tag, 404, self._send(404, b"not found\n"), started)
                return
            status, sent = self._file(file)
            self._log(tag, status, sent, started)

        def _file(self, file: Path) -> tuple[int, int]:
            """Sends the file (from a Range start if asked): (status, body bytes sent)."""
            size = file.stat().st_size
            start, status = 0, 200
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            if match:
                start = int(match[1])
                if start > size:
                    return 416, self._send(416, b"range\n")
                status = 206
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size - start))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.end_headers()
            sent = 0
            if self.command == "GET":
                try:
                    with file.open("rb") as fh:
                        fh.seek(start)
                        for block in iter(lambda: fh.read(CHUNK), b""):
                            self.wfile.write(block)
                            sent += len(block)
                except (BrokenPipeError, ConnectionResetError):
                    status = 499
            return status, sent

    return Handler


def _exit_with(pid: int, httpd: ThreadingHTTPServer) -> None:
    """Shuts the server down within a second of process ``pid`` ending."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        time.sleep(0.5)
    httpd.shutdown()


def serve(served: Served, exit_with: int = 0, remove_at_exit: Path | None = None) -> None:
    """The server in the foreground, until SIGTERM / SIGINT or the end of ``exit_with``;
    ``remove_at_exit`` (the run's token file) goes with it."""
    if not served.wheels.is_dir():
        raise ServerError(f"{served.wheels} is not a directory")
    check_listen(served.host)
    served.request_log.parent.mkdir(parents=True, exist_ok=True)
    httpd = ThreadingHTTPServer((served.host, served.port), make_handler(served))
    httpd.daemon_threads = True

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    if exit_with:
        threading.Thread(target=_exit_with, args=(exit_with, httpd), daemon=True).start()
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()
        if remove_at_exit is not None:
            remove_at_exit.unlink(missing_ok=True)


def serve_argv(
    served: Served,
    python: str = sys.executable,
    exit_with: int = 0,
    remove_at_exit: Path | None = None,
) -> list[str]:
    """The command line of ``serve`` (the token is not in it: it is read from stdin)."""
    argv = [
        python,
        "-m",
        "acceldeploy.bundle.server",
        "serve",
        "--dir",
        str(served.wheels),
        "--host",
        served.host,
        "--port",
        str(served.port),
        "--request-log",
        str(served.request_log),
    ]
    if served.packages is not None:
        argv += ["--packages", str(served.packages)]
    if served.models is not None:
        argv += ["--models", str(served.models), "--token-stdin"]
    if exit_with:
        argv += ["--exit-with", str(exit_with)]
    if remove_at_exit is not None:
        argv += ["--remove-at-exit", str(remove_at_exit)]
    return argv


def log_lines(request_log: Path) -> int:
    try:
        return len(request_log.read_text().splitlines())
    except FileNotFoundError:
        return 0


def served_counts(request_log: Path, since_line: int = 0) -> dict[str, Any]:
    """Counts the request log (from line ``since_line``) per tag: requests, body bytes, files
    fetched (200/206 GETs), the most times any one file was fetched, errors; and bytes per
    client address."""
    tags: dict[str, dict[str, Any]] = {}
    clients: dict[str, int] = {}
    try:
        lines = request_log.read_text().splitlines()
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
        clients[entry.get("client", "")] = clients.get(entry.get("client", ""), 0) + entry["bytes"]
        if entry["status"] >= 400:
            stats["errors"] += 1
        name = urllib.parse.unquote(urllib.parse.urlsplit(entry["path"]).path)
        if (
            entry["method"] == "GET"
            and entry["status"] in (200, 206)
            and (name.endswith(SUFFIXES) or entry["tag"] == MODELS_TAG)
        ):
            stats["wheel_bytes"] += entry["bytes"]
            stats["files"][name] = stats["files"].get(name, 0) + 1
    for stats in tags.values():
        fetched = stats.pop("files")
        stats["wheels"] = len(fetched)
        stats["max_fetches_per_wheel"] = max(fetched.values(), default=0)
    return {"lines": len(lines), "since": since_line, "tags": tags, "clients": clients}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m acceldeploy.bundle.server")
    sub = parser.add_subparsers(dest="command", required=True)
    srv = sub.add_parser("serve", help="serve in the foreground")
    srv.add_argument("--dir", type=Path, required=True, help="the wheel directory")
    srv.add_argument("--models", type=Path, default=None, help="published models' root")
    srv.add_argument("--packages", type=Path, default=None, help="flat apt repositories' root")
    srv.add_argument("--host", default=DEFAULT_HOST)
    srv.add_argument("--port", type=int, default=DEFAULT_PORT)
    srv.add_argument("--request-log", type=Path, required=True)
    srv.add_argument("--token-stdin", action="store_true", help="the models' token on stdin")
    srv.add_argument("--token-file", type=Path, default=None, help="the models' token (0600)")
    srv.add_argument("--exit-with", type=int, default=0, metavar="PID")
    srv.add_argument("--remove-at-exit", type=Path, default=None, metavar="FILE")
    count = sub.add_parser("served", help="count a request log per tag")
    count.add_argument("--request-log", type=Path, required=True)
    count.add_argument("--since", type=int, default=0, metavar="LINE")
    args = parser.parse_args(argv)
    try:
        if args.command == "served":
            print(json.dumps(served_counts(args.request_log, args.since), indent=2))
            return 0
        token = ""
        if args.token_stdin:
            token = sys.stdin.readline().strip()
        elif args.token_file:
            token = read_token_file(args.token_file)
        serve(
            Served(
                args.dir, args.request_log, args.models, args.host, args.port, token, args.packages
            ),
            args.exit_with,
            args.remove_at_exit,
        )
    except ServerError as exc:
        print(f"bundle server: {exc}", file=sys.stderr)
        return 1
    return 0


def read_token_file(path: Path) -> str:
    """A token file readable by its owner only (0600), else refused."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ServerError(f"{path} is mode {mode:o}; a token file must be 0600 (chmod 600 {path})")
    return path.read_text().strip()


if __name__ == "__main__":
    raise SystemExit(main())
