"""Fan-out inside the LAN: the seed host's HTTP server and the pulls from it.

The server serves published, verified models only (files in their manifest), with a bearer
token for this run and Range requests, and exits after ``idle_timeout`` seconds without a
request. ``start_seed_server`` forks it off the module's own process: the code it runs is
already in memory, so it outlives the module's payload (Ansible deletes that when the module
exits), and the token never leaves memory (no argv, no environment, no file).
"""

from __future__ import annotations

import contextlib
import hmac
import http.server
import json
import os
import re
import select
import signal
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import CHUNK, MANIFEST, Layout, Listing, ModelSpec, RemoteFile, WeightsError
from .manifest import manifest_listing, read_manifest

START_TIMEOUT = 30.0


def _http_request(url: str, token: str, headers: Mapping[str, str] | None = None) -> Any:
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {token}", **(headers or {})}
    )
    return urllib.request.urlopen(request, timeout=60)


def seed_manifest(seed_url: str, token: str, spec: ModelSpec) -> dict[str, Any]:
    url = f"{seed_url.rstrip('/')}/m/{urllib.parse.quote(spec.dirname)}/{MANIFEST}"
    try:
        with _http_request(url, token) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise WeightsError(
            f"{spec.dirname}: the seed at {seed_url} did not give its manifest: {exc}"
        ) from exc


def pull_file(seed_url: str, token: str, spec: ModelSpec, f: RemoteFile, staging: Path) -> int:
    """One file from the seed into staging, resuming ``<file>.part`` with a Range request."""
    target = staging / f.path
    part = target.with_name(target.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if have > f.size:
        part.unlink()
        have = 0
    got = 0
    if have < f.size or f.size == 0:
        quoted = urllib.parse.quote(f"{spec.dirname}/{f.path}")
        url = f"{seed_url.rstrip('/')}/m/{quoted}"
        headers = {"Range": f"bytes={have}-"} if have else {}
        with _http_request(url, token, headers) as resp, part.open("r+b" if have else "wb") as out:
            if have and resp.status != 206:
                out.truncate(0)
                have = 0
            out.seek(have)
            while chunk := resp.read(CHUNK):
                out.write(chunk)
                got += len(chunk)
    part.replace(target)
    return got


def seed_pull(
    spec: ModelSpec,
    listing: Listing,
    files: Sequence[RemoteFile],
    staging: Path,
    seed_url: str,
    token: str,
    workers: int,
) -> dict[str, Any]:
    """Pulls ``files`` from the seed host in parallel; the seed must have published exactly
    the listing the hub gave it."""
    manifest = seed_manifest(seed_url, token, spec)
    theirs = {f.path: f.expected for f in manifest_listing(manifest).files}
    differ = [f.path for f in files if theirs.get(f.path) != f.expected]
    if differ:
        raise WeightsError(
            f"{spec.dirname}: the seed's published copy differs from the hub listing for "
            f"{differ[:5]}; run the seed again"
        )
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        got = sum(pool.map(lambda f: pull_file(seed_url, token, spec, f, staging), files))
    return {"pulled_bytes": got}


class SeedHandler(http.server.BaseHTTPRequestHandler):
    """GET /m/<org>/<name>@<rev>/<file> with Bearer auth and Range, from published, verified
    models only (files listed in their manifest)."""

    protocol_version = "HTTP/1.1"
    server_version = "acceldeploy-seed/1"
    root: Path
    token: str
    allowed: frozenset[str]
    touched: list[float]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _fail(self, status: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.touched[0] = time.monotonic()
        auth = self.headers.get("Authorization", "")
        if not hmac.compare_digest(auth.encode(), f"Bearer {self.token}".encode()):
            self._fail(401, "unauthorized")
            return
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        if not path.startswith("/m/"):
            self._fail(404, "not found")
            return
        rest = path[3:]
        dirname = next((d for d in self.allowed if rest.startswith(d + "/")), None)
        if dirname is None:
            self._fail(404, "model not served")
            return
        relative = rest[len(dirname) + 1 :]
        directory = self.root / dirname
        manifest = read_manifest(directory)
        if manifest is None:
            self._fail(404, "not published")
            return
        if relative != MANIFEST and relative not in manifest["files"]:
            self._fail(404, "file not in the manifest")
            return
        self._send(directory / relative)
        self.touched[0] = time.monotonic()

    def _send(self, path: Path) -> None:
        size = path.stat().st_size
        start, status = 0, 200
        match = re.match(r"^bytes=(\d+)-$", self.headers.get("Range", ""))
        if match:
            start = int(match[1])
            if start > size:
                self._fail(416, "range")
                return
            status = 206
        length = size - start
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        with path.open("rb") as fh:
            sent = 0
            while sent < length:
                n = self.connection.sendfile(fh, start + sent, min(length - sent, 1 << 24))
                if n == 0:
                    break
                sent += n


def make_seed_server(
    root: Path, listen: str, port: int, token: str, models: Sequence[str]
) -> tuple[http.server.ThreadingHTTPServer, list[float]]:
    """The server, bound (port 0 picks a free one), and its last-request time."""
    touched = [time.monotonic()]
    handler = type(
        "BoundSeedHandler",
        (SeedHandler,),
        {"root": root, "token": token, "allowed": frozenset(models), "touched": touched},
    )
    server = http.server.ThreadingHTTPServer((listen, port), handler)
    server.daemon_threads = True
    return server, touched


def serve_until_idle(
    server: http.server.ThreadingHTTPServer, touched: list[float], idle_timeout: float
) -> None:
    """Serves until ``idle_timeout`` seconds pass without a request, or SIGTERM."""

    def watchdog() -> None:
        while time.monotonic() - touched[0] < idle_timeout:
            time.sleep(1)
        server.shutdown()

    threading.Thread(target=watchdog, daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever()
    finally:
        server.server_close()


def run_seed_server(
    root: Path, listen: str, port: int, token: str, models: Sequence[str], idle_timeout: float
) -> None:
    """The seed server in the foreground."""
    server, touched = make_seed_server(root, listen, port, token, models)
    serve_until_idle(server, touched, idle_timeout)


def seed_pid_file(layout: Layout) -> Path:
    return layout.run_dir() / "seed-server.pid"


SEED = "seed-server"
if TYPE_CHECKING:
    MakeServer = Callable[[], tuple[http.server.ThreadingHTTPServer, list[float]]]


def _proc_stat(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (state) on; [] if there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks (field 22), '' if it is gone: with the pid, it
    names one process even after the pid is reused."""
    fields = _proc_stat(pid)
    return fields[19] if len(fields) > 19 else ""


def _running(pid: int) -> bool:
    fields = _proc_stat(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def start_seed_server(
    layout: Layout,
    listen: str,
    port: int,
    token: str,
    models: Sequence[str],
    idle_timeout: float,
) -> dict[str, Any]:
    """Starts the seed server as a daemon (double fork, its own session, output to
    ``R/.acceldeploy/run/seed-server.log``); returns once it listens, or fails saying why."""
    pid = start_daemon(
        layout.run_dir(),
        SEED,
        lambda: make_seed_server(layout.root, listen, port, token, models),
        idle_timeout,
        f"{listen}:{port}",
    )
    return {"pid": pid, "port": port, "models": list(models)}


def start_daemon(run: Path, name: str, make: MakeServer, idle_timeout: float, where: str) -> int:
    """Starts ``make()``'s server as a daemon (double fork, its own session, output to
    ``<run>/<name>.log``, pid in ``<run>/<name>.pid``), stopping the previous one of that name;
    returns its pid once it listens, or fails saying why."""
    stop_daemon(run, name)
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child (its exit ends it)
        os.close(read_end)
        _daemon(run / f"{name}.log", make, idle_timeout, write_end)
    os.close(write_end)
    os.waitpid(child, 0)
    status = _read_status(read_end, START_TIMEOUT)
    if not status.startswith("ready "):
        raise WeightsError(
            f"the {name} did not listen on {where}: "
            f"{status or f'no answer within {START_TIMEOUT:.0f}s'}; see {run}/{name}.log"
        )
    pid = int(status.split()[1])
    (run / f"{name}.pid").write_text(f"{pid} {_start_time(pid)}\n")
    return pid


def _read_status(fd: int, timeout: float) -> str:
    """What the daemon wrote to its status pipe before closing it (or the timeout)."""
    deadline = time.monotonic() + timeout
    data = b""
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return data.decode(errors="replace").strip()


def _daemon(  # pragma: no cover - runs in the forked child; tests see its effects
    log_path: Path, make: MakeServer, idle_timeout: float, status_fd: int
) -> None:
    """The forked child: never returns into the caller (the Ansible module)."""
    code = 1
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        os.chdir("/")
        devnull = os.open(os.devnull, os.O_RDWR)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(devnull)
        os.close(log)
        try:
            server, touched = make()
        except OSError as exc:
            os.write(status_fd, f"{exc}\n".encode())
            raise
        os.write(status_fd, f"ready {os.getpid()}\n".encode())
        os.close(status_fd)
        serve_until_idle(server, touched, idle_timeout)
        code = 0
    except BaseException:
        os.write(2, traceback.format_exc().encode(errors="replace"))
    finally:
        os._exit(code)


def stop_seed_server(layout: Layout) -> bool:
    """Stops the server ``start_seed_server`` started here, if it still runs."""
    return stop_daemon(layout.run_dir(), SEED)


def stop_daemon(run: Path, name: str) -> bool:
    """Stops the daemon ``start_daemon`` started under that name, if it still runs."""
    pid_file = run / f"{name}.pid"
    try:
        fields = pid_file.read_text().split()
        pid = int(fields[0])
    except (OSError, ValueError, IndexError):
        pid_file.unlink(missing_ok=True)
        return False
    pid_file.unlink(missing_ok=True)
    if len(fields) > 1:
        if _start_time(pid) != fields[1]:
            return False
    elif name != SEED or not _legacy_server(pid):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    for _ in range(100):
        if not _running(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def _legacy_server(pid: int) -> bool:
    """A server an older acceldeploy started (``acceldeploy_weights.py serve --token-file``),
    whose pid file holds the pid only."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"serve" in cmdline and b"--token-file" in cmdline
