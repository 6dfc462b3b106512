"""What the checks reach a host with: an SSH connection (fabric) as the inventory describes
it, and local ports forwarded through it to what the host listens on."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from acceldeploy.serving.service import on_host
from acceldeploy.serving.values import Launch
from acceldeploy.verify.model import Check


def connection(hostname: str, hv: dict[str, Any], timeout: float) -> Any:
    from fabric import Connection

    key = hv.get("ansible_ssh_private_key_file")
    args: dict[str, Any] = {"banner_timeout": timeout, "auth_timeout": timeout}
    if key:
        args["key_filename"] = str(key)
    conn = Connection(
        host=str(hv.get("ansible_host", hostname)),
        port=int(hv.get("ansible_port", 22)),
        user=str(hv.get("ansible_user", "root")),
        connect_kwargs=args,
        connect_timeout=timeout,
    )
    _host_key_policy(conn.client, str(hv.get("ansible_ssh_common_args", "")))
    return conn


def _host_key_policy(client: Any, ssh_args: str) -> None:
    """The inventory's choice: known_hosts checked unless it turns StrictHostKeyChecking off
    (the lab's throwaway hosts do); verify never writes known_hosts."""
    import paramiko

    if "StrictHostKeyChecking=no" in ssh_args.replace(" ", ""):
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    else:
        client.load_system_host_keys()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def forward(conn: Any, remote_host: str, remote_port: int) -> Iterator[str]:
    """A base URL on this machine for remote_host:remote_port as the host reaches it."""
    local = free_port()
    with conn.forward_local(local_port=local, remote_port=remote_port, remote_host=remote_host):
        _wait_listening(local)
        yield f"http://127.0.0.1:{local}"


def tunnel(conn: Any, launch: Launch) -> contextlib.AbstractContextManager[str]:
    return forward(conn, on_host(launch.host), launch.port)


def _wait_listening(port: int, timeout: float = 5.0) -> None:
    """fabric starts the tunnel's listener in a thread: wait until it accepts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)


def reach(hostname: str, hv: dict[str, Any], timeout: float) -> tuple[Any, Check]:
    """An open connection to the host and the passing ssh check, or None and the failing one
    (what it said, and what to look at)."""
    try:
        conn = connection(hostname, hv, timeout)
        conn.open()
    except Exception as exc:
        fix = "check the host is up and the inventory's ansible_host/port/user/key"
        said = f"unreachable: {type(exc).__name__}: {exc}"
        return None, Check(hostname, "ssh", "fail", said, fix)
    return conn, Check(hostname, "ssh", "pass", f"{conn.user}@{conn.host}:{conn.port}")
