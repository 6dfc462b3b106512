"""The lab's wheel server: the product's bundle server (acceldeploy.bundle.server) over the
controller's wheel cache, run detached with a pid file like the lab's mirrors.

    tools/lab.py wheels start|stop|status|served
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceldeploy.bundle import server as bundle_server
from acceldeploy.bundle.server import NO_TAG as NO_TAG
from acceldeploy.bundle.server import TAG
from acceldeploy_lab import daemon, ospackages

DEFAULT_PORT = bundle_server.DEFAULT_PORT
DEFAULT_CACHE = Path("/var/cache/acceldeploy")


class WheelServerError(Exception):
    pass


@dataclass(frozen=True)
class WheelServer:
    """Where one server keeps its pid file and logs, and what it serves."""

    root: Path
    directory: Path
    host: str = bundle_server.DEFAULT_HOST
    port: int = DEFAULT_PORT
    # The lab's apt repositories (acceldeploy_lab.ospackages), served at /os/<suite>/.
    packages: Path | None = None

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
    def served(self) -> bundle_server.Served:
        return bundle_server.Served(
            self.directory, self.request_log, None, self.host, self.port, "", self.packages
        )

    @property
    def url(self) -> str:
        return self.served.url

    def find_links(self, tag: str) -> str:
        if not TAG.fullmatch(tag):
            raise WheelServerError(f"tag {tag!r}: letters, digits, '.', '_' and '-' only")
        return f"{self.url}/{tag}/"


def default_server(port: int = DEFAULT_PORT) -> WheelServer:
    cache = Path(os.environ.get("ACCELDEPLOY_CACHE") or DEFAULT_CACHE)
    return WheelServer(
        root=cache / "wheelserver",
        directory=cache / "wheels",
        port=port,
        packages=ospackages.repo_root(cache),
    )


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
        not server.directory.is_dir() or not bundle_server.listing(server.directory)
    ):
        raise WheelServerError(f"{server.directory} holds no wheels to serve")
    argv = bundle_server.serve_argv(server.served)
    result = daemon.start(
        _daemon(server), argv, lambda: is_ready(server), WheelServerError, timeout
    )
    return {**result, "url": server.url}


def stop(server: WheelServer, timeout: float = 10.0) -> bool:
    """Stops the server of this pid file; True if one was running."""
    return daemon.stop(_daemon(server), timeout)


def log_lines(server: WheelServer) -> int:
    return bundle_server.log_lines(server.request_log)


def served(server: WheelServer, since_line: int = 0) -> dict[str, Any]:
    return bundle_server.served_counts(server.request_log, since_line)
