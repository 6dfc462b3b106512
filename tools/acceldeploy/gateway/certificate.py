"""gateway_tls_certificate on each gateway host, read in preflight's read-only first contact
(before the gateway's packages or any other change): the PEM HAProxy loads is there, readable,
and holds a certificate and its private key (in the PEM, or in ``<path>.key`` beside it, which
HAProxy loads too); where the host has openssl, the certificate is current."""

from __future__ import annotations

import shlex

VARIABLE = "gateway_tls_certificate"
_KEY = "'-----BEGIN [A-Z ]*PRIVATE KEY-----'"


def probe(path: str) -> str:
    """The read-only shell the first contact runs on the gateway host (raw: no Python)."""
    f = shlex.quote(path)
    return (
        f"f={f}; "
        'if [ ! -e "$f" ]; then echo state=missing; '
        'elif [ ! -f "$f" ]; then echo state=notfile; '
        'elif [ ! -r "$f" ]; then echo state=unreadable; '
        "else echo state=ok; "
        "echo certs=$(grep -c -- '-----BEGIN CERTIFICATE-----' \"$f\"); "
        f'echo keys=$(grep -c -- {_KEY} "$f"); '
        f'if [ -r "$f.key" ]; then echo sidekeys=$(grep -c -- {_KEY} "$f.key"); fi; '
        "if command -v openssl >/dev/null 2>&1; then "
        'if openssl x509 -noout -checkend 0 -in "$f" >/dev/null 2>&1; '
        "then echo current=yes; else echo current=no; fi; fi; "
        "fi"
    )


def errors(stdout: str, path: str, host: str) -> list[str]:
    """What is wrong with the certificate the probe read, each naming the variable and the fix."""
    seen = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    where = f"{VARIABLE} {path} on {host}"
    state = seen.get("state")
    fix = "put the PEM (certificate, chain and key) there before the run, or leave " \
        f"{VARIABLE} empty for no TLS"  # fmt: skip
    if state == "missing":
        return [f"{where}: no such file; {fix}"]
    if state == "notfile":
        return [f"{where}: not a regular file; {fix}"]
    if state == "unreadable":
        return [f"{where}: not readable by the run's user (HAProxy reads it as root); run with "
                "become, or make it readable by root"]  # fmt: skip
    if state != "ok":
        return [f"{where}: could not be read ({' '.join(stdout.split())[:200]!r})"]
    found = []
    if seen.get("certs", "0") == "0":
        found.append(f"{where}: holds no certificate (no -----BEGIN CERTIFICATE-----); {fix}")
    if seen.get("keys", "0") == "0" and seen.get("sidekeys", "0") == "0":
        found.append(
            f"{where}: holds no private key, and there is none in {path}.key beside it; "
            "HAProxy needs the key: append it to the PEM"
        )
    if not found and seen.get("current") == "no":
        found.append(
            f"{where}: openssl reads no current certificate from it (expired or malformed: "
            f"`openssl x509 -noout -enddate -in {path}` says which); renew it"
        )
    return found
