"""The host's TCP sockets as the kernel lists them (/proc/net/tcp and tcp6), and a dial of a
peer: the one reader and the one dial of everything acceldeploy runs on a host. The readiness
gate's module ships this file as module_utils; vllm_service installs it beside its helpers
(vllm-drain counts the connections still open on a service's port, vllm-dp-watch a rank's
connection to its head and whether its peers still answer).

Standard library only, Python 3.9, and it imports nothing of acceldeploy: a helper imports it
as a plain module from its own directory.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
LISTEN, ESTABLISHED = "0A", "01"
DIAL_TIMEOUT = 3.0  # seconds: a live peer's kernel answers at once, with a connection or a reset
# How a dial ended: a connection or a reset (nothing listens there) both prove the peer there.
ANSWERED = ("open", "refused", "reset")


@dataclass(frozen=True)
class Socket:
    local: str  # the address, as ipaddress prints it (an IPv4-mapped one as IPv4)
    local_port: int
    remote: str
    remote_port: int
    state: str  # the kernel's hex code: LISTEN, ESTABLISHED, ...
    inode: str


def endpoint(field: str) -> tuple[str, int]:
    """One address:port field of the table (hex, each 32-bit word in the host's byte order,
    little-endian on the racks' x86_64 and aarch64)."""
    address, port = field.split(":")
    raw = bytes.fromhex(address)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1])), int(port, 16)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    ip = ipaddress.IPv6Address(words)
    return str(ip.ipv4_mapped or ip), int(port, 16)


def parse(table: str) -> list[Socket]:
    """The rows of one /proc/net/tcp{,6} text (its header skipped, short rows too)."""
    found = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9:
            (local, local_port), (remote, remote_port) = endpoint(fields[1]), endpoint(fields[2])
            found.append(Socket(local, local_port, remote, remote_port, fields[3], fields[9]))
    return found


def sockets(tables: tuple[str, ...] = TABLES) -> list[Socket]:
    """Every TCP socket of the host's network namespace (a table that cannot be read: none)."""
    found = []
    for table in tables:
        try:
            with open(table, encoding="ascii", errors="replace") as text:
                found += parse(text.read())
        except OSError:
            continue
    return found


def dial(address: str, port: int, timeout: float = DIAL_TIMEOUT, bind: str = "") -> str:
    """A TCP connect to the peer: "open", "refused", "reset", "timeout" (no answer: a firewall
    drops it, or the peer is gone), or the error's name (no route, unreachable)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        if bind:
            sock.bind((bind, 0))
        try:
            sock.connect((address, port))
        except socket.timeout:  # Python 3.9 hosts: not yet TimeoutError
            return "timeout"
        except OSError as error:
            if error.errno == errno.ECONNREFUSED:
                return "refused"
            if error.errno == errno.ECONNRESET:
                return "reset"
            return errno.errorcode.get(error.errno or 0, str(error))
        return "open"
