"""API checks of one service, through a base URL (an SSH tunnel to the host's loopback)."""

from __future__ import annotations

import base64
import functools
import json
import re
import ssl
import struct
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acceldeploy.verify.model import Check

KV_USAGE = re.compile(r"^vllm:(?:kv|gpu)_cache_usage_perc\{[^}]*\}\s+([0-9.eE+-]+)$", re.M)


@dataclass(frozen=True)
class Target:
    host: str
    service: str
    base: str
    expect_version: str
    multimodal: bool
    dev_mode: bool
    api_key: str | None
    timeout: float = 60.0
    # https through verify's SSH tunnel: the peer is the host's own port, so the certificate's
    # chain and name (a client's trust store is the site's) are not what this checks.
    tls: bool = False


def png(width: int, height: int, seed: int = 0) -> bytes:
    """An RGB gradient PNG made locally; `seed` shifts the colours, and its bytes are written
    into the first pixels, so images of different seeds always differ."""
    tag = seed.to_bytes(12, "big").ljust(3 * width, b"\x80")[: 3 * width]
    rows = b"".join(
        b"\x00"
        + (tag if y == 0 and width >= 4 else b"".join(
            bytes(((x * 255 // width + seed) % 256, (y * 255 // height + 3 * seed) % 256, 128))
            for x in range(width)
        ))
        for y in range(height)
    )  # fmt: skip

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def image_data_url(seed: int = 0, size: tuple[int, int] = (128, 96)) -> str:
    return "data:image/png;base64," + base64.b64encode(png(*size, seed=seed)).decode()


def request(
    target: Target,
    path: str,
    body: dict[str, Any] | None = None,
    key: str | None = "default",
    method: str | None = None,
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    token = target.api_key if key == "default" else key
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(target.base + path, data=data, headers=headers, method=method)
    context = None
    if target.tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(req, timeout=target.timeout, context=context) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def chat_body(target: Target, content: Any) -> dict[str, Any]:
    return {
        "model": target.service,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 16,
        "temperature": 0,
    }


def image_content(seed: int = 0) -> list[dict[str, Any]]:
    return [
        {"type": "image_url", "image_url": {"url": image_data_url(seed)}},
        {"type": "text", "text": "What is in this picture?"},
    ]


def _check(target: Target, name: str, ok: bool, detail: str, fix: str = "") -> Check:
    return Check(
        target.host, name, "pass" if ok else "fail", detail, "" if ok else fix, target.service
    )


def _safe(target: Target, name: str, fix: str, probe: Any) -> Check:
    try:
        result: Check = probe()
        return result
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        return _check(target, name, False, f"{type(exc).__name__}: {exc}", fix)


def _logs(target: Target) -> str:
    return f"journalctl -u {target.service}"


def _health(target: Target) -> Check:
    status, raw = request(target, "/health")
    detail = f"HTTP {status} {raw[:80]!r}"
    return _check(target, "health", status == 200, detail, _logs(target))


def _models(target: Target) -> Check:
    status, raw = request(target, "/v1/models")
    names = [m["id"] for m in json.loads(raw)["data"]] if status == 200 else []
    fix = (
        "the api_key in the inventory does not match the service's VLLM_API_KEY"
        if status == 401
        else f"--served-model-name {target.service}"
    )
    return _check(target, "models", target.service in names, f"HTTP {status}, serves {names}", fix)


def _version(target: Target) -> Check:
    status, raw = request(target, "/version")
    found = json.loads(raw).get("version", "") if status == 200 else ""
    ok = found.split("+")[0] == target.expect_version
    detail = f"vLLM {found or status}, pinned {target.expect_version}"
    return _check(target, "version", ok, detail, "re-run playbooks/runtime.yml")


def chat(target: Target, name: str, content: Any) -> Check:
    """One real chat completion; it passes when the model answered with tokens."""
    started = time.monotonic()
    status, raw = request(target, "/v1/chat/completions", chat_body(target, content))
    if status != 200:
        return _check(target, name, False, f"HTTP {status}: {raw[:300]!r}", _logs(target))
    answer = json.loads(raw)
    text = answer["choices"][0]["message"]["content"] or ""
    usage = answer.get("usage", {})
    took = time.monotonic() - started
    return _check(
        target,
        name,
        usage.get("completion_tokens", 0) > 0,
        f"{usage.get('prompt_tokens')} prompt / {usage.get('completion_tokens')} "
        f"completion tokens in {took:.2f}s: {text[:60]!r}",
        _logs(target),
    )


def _metrics(target: Target) -> Check:
    status, raw = request(target, "/metrics")
    usage = KV_USAGE.findall(raw.decode(errors="replace")) if status == 200 else []
    detail = f"KV cache usage {float(usage[0]):.1%}" if usage else f"HTTP {status}"
    return _check(target, "metrics", status == 200 and bool(usage), detail, _logs(target))


def _dev_endpoint(target: Target, path: str) -> Check:
    status, _ = request(target, path, method="GET" if path == "/server_info" else "POST")
    return _check(target, path.strip("/"), status == 200, f"HTTP {status}", _logs(target))


def _key_enforced(target: Target) -> Check:
    status, _ = request(target, "/v1/models", key=None)
    return _check(
        target,
        "api_key",
        status == 401,
        f"request without a key got HTTP {status} (401 expected)",
        "set the service's api_key; vLLM reads VLLM_API_KEY",
    )


def check_api(target: Target) -> list[Check]:
    """/health first (nothing else can pass without it), then every check that applies."""
    logs = _logs(target)
    checks = [_safe(target, "health", logs, lambda: _health(target))]
    if checks[0].status == "fail":
        return checks
    steps: list[tuple[str, Callable[[], Check]]] = [
        ("models", lambda: _models(target)),
        ("version", lambda: _version(target)),
        ("chat_text", lambda: chat(target, "chat_text", "Say hello.")),
    ]
    if target.multimodal:
        steps.append(("chat_image", lambda: chat(target, "chat_image", image_content())))
    steps.append(("metrics", lambda: _metrics(target)))
    if target.dev_mode:
        steps += [
            (path.strip("/"), functools.partial(_dev_endpoint, target, path))
            for path in ("/server_info", "/reset_prefix_cache", "/reset_mm_cache")
        ]
    if target.api_key:
        steps.append(("api_key", lambda: _key_enforced(target)))
    return checks + [_safe(target, name, logs, step) for name, step in steps]
