"""How a gateway frontend picks the server for a request: each routing mode's HAProxy lines,
decided here and printed by the role's template.

- ``leastconn``: the least busy server. It knows nothing of the engines' prefix caches: with
  N servers, a conversation's next turn finds its history cached about 1/N of the time.
- ``affinity``: a conversation sticks to one server, so each turn's prompt, which extends the
  last, finds the turns before it in that engine's prefix cache. The key is the client's
  session header when it sends one, else the conversation's first user message (after a system
  prompt, which every conversation may share). HAProxy hashes it onto a ring of the servers that
  are up and not draining (``hash-type consistent``), so a host leaving for a restart moves only
  its own conversations; no server takes more than ``balance_factor`` percent of the average
  load (``hash-balance-factor``), the next one on the ring takes the rest. A request with no key
  (a completion's prompt, a body beyond the buffer) is sent round robin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from acceldeploy.errors import AcceldeployError

LEASTCONN = "leastconn"
AFFINITY = "affinity"
MODES = (LEASTCONN, AFFINITY)
VAR = "gateway_routing"
HEADER_VAR = "gateway_affinity_header"
# RFC 9110's token: the characters a header's name may have.
TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
KEY = "txn.affinity"
# Where a chat's first user message can hold its text: the message's content as a string, or
# one of its first parts when the content is a list (an image part first, its question next).
TEXT_PATHS = ("content", "content[0].text", "content[1].text", "content[2].text")


@dataclass(frozen=True)
class Affinity:
    """The affinity mode's settings (the gateway role's variables, checked by the plan)."""

    header: str = "x-session-id"
    balance_factor: int = 300


def mode(value: object, where: str = VAR) -> str:
    if value not in MODES:
        raise AcceldeployError(
            f"{where} must be one of {', '.join(MODES)} (affinity keeps a conversation on the "
            f"server that holds its prefix cache), got {value!r}"
        )
    return str(value)


def check_header(name: str) -> str:
    if not TOKEN.fullmatch(name):
        raise AcceldeployError(
            f"{HEADER_VAR} must be an HTTP header's name such as x-session-id, got {name!r}"
        )
    return name.lower()


def haproxy_since(routing: str) -> str:
    """The oldest HAProxy that parses the mode's lines, "" for any: affinity's `balance hash`
    came in 2.6 (`json_query` in 2.4). Debian 11 ships 2.2."""
    return "2.6" if routing == AFFINITY else ""


def reads_body(routing: str) -> bool:
    """The mode reads the request's body, so HAProxy buffers it (tune.bufsize bounds it)."""
    return routing == AFFINITY


def lines(routing: str, affinity: Affinity) -> tuple[str, ...]:
    """The backend's balance lines for a routing mode."""
    if routing == LEASTCONN:
        return ("balance leastconn",)
    keyed = f"{{ var({KEY}) -m found }}"
    system_first = "{ req.body,json_query('$.messages[0].role') -m str system }"
    found = [
        "option http-buffer-request",
        f"http-request set-var({KEY}) req.hdr({affinity.header})",
    ]
    for index, condition in ((1, system_first), (0, f"!{system_first}")):
        for path in TEXT_PATHS:
            query = f"req.body,json_query('$.messages[{index}].{path}')"
            found.append(f"http-request set-var({KEY}) {query} if {condition} !{keyed}")
    found.append(f"http-request set-var({KEY}) req.body,json_query('$.prompt') unless {keyed}")
    return (
        *found,
        f"balance hash var({KEY})",
        "hash-type consistent sdbm avalanche",
        f"hash-balance-factor {affinity.balance_factor}",
    )
