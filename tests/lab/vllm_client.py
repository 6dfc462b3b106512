"""Small stdlib clients the lab tests share: an inline PNG and JSON over HTTP."""

from __future__ import annotations

import base64
import json
import struct
import time
import urllib.error
import urllib.request
import zlib
from typing import Any


def png(width: int, height: int) -> bytes:
    """A gradient RGB PNG, stdlib only."""
    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 255 // width, y * 255 // height, 128)) for x in range(width))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def image_url(width: int, height: int) -> str:
    return "data:image/png;base64," + base64.b64encode(png(width, height)).decode()


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 60) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_healthy(base: str, timeout: float, alive: Any = None) -> None:
    """Polls /health until 200; `alive()` may raise to stop early (the server died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            if http(f"{base}/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"{base}/health not ready in {timeout:.0f}s")


def chat(base: str, model: str, content: Any, max_tokens: int = 8) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    status, raw = http(f"{base}/v1/chat/completions", body)
    assert status == 200, raw[:2000]
    result: dict[str, Any] = json.loads(raw)
    return result
