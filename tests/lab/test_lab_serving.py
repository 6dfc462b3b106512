"""Issue 3's proof on a real lab host: the mirror serves the tiny model byte-identical to
`snapshot_download` run on the host, and real vLLM 0.12.0 serves it there, with the argv and
environment `acceldeploy.serving.render` produces from the lab inventory, answering an image chat.

Needs `make lab` (tools/lab.py prepare, mirror start, up with the wheel cache bound at
/srv/acceldeploy/wheels).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator

import pytest
from labhost import (
    INVENTORY,
    download_model,
    install_venv,
    launch_of,
    on_host,
    start_unit,
    unit_alive,
)
from vllm_client import chat, http, image_url, wait_healthy

from acceldeploy.downloads import wheelhouse
from acceldeploy.serving.values import Launch
from acceldeploy_lab import stack, tinymodel
from acceldeploy_lab.mirror import default_mirror, served

pytestmark = pytest.mark.lab

HOST = "lab1"
UNIT = "acceldeploy-labtest-vllm"
READY_TIMEOUT = 240.0
IMAGE_SIZE = (128, 96)


@pytest.fixture(scope="module")
def launch() -> Launch:
    if not INVENTORY.exists():
        pytest.fail(f"{INVENTORY} missing: bring the lab up with `make lab`")
    return launch_of(HOST)


@pytest.fixture(scope="module")
def snapshot(launch: Launch) -> str:
    python = install_venv(HOST)
    mirror = default_mirror()
    before = served(mirror)["lines"]
    download_model(HOST, python, launch.model_path)
    counts = served(mirror, since_line=before)
    weights = counts["files"][f"{tinymodel.MODEL_ID}/model.safetensors"]
    assert weights["get"] == 1
    return launch.model_path


def test_snapshot_download_on_a_host_is_byte_identical(snapshot: str) -> None:
    local = stack.model_dir(wheelhouse.cache_dir())
    listing = on_host(
        HOST,
        f"cd {shlex.quote(snapshot)} && find . -path ./.cache -prune -o -type f -print0 "
        "| xargs -0 sha256sum",
    )
    remote = {
        line.split(None, 1)[1].removeprefix("./"): line.split()[0] for line in listing.splitlines()
    }
    assert remote == tinymodel.file_digests(local)


@pytest.fixture(scope="module")
def server(launch: Launch, snapshot: str) -> Iterator[str]:
    start_unit(HOST, UNIT, launch)
    base = f"http://127.0.0.1:{launch.port}"
    try:
        wait_healthy(base, READY_TIMEOUT, lambda: unit_alive(HOST, UNIT))
        yield base
    finally:
        on_host(HOST, f"systemctl stop {UNIT}", check=False)


def test_image_chat_on_a_lab_host(server: str, launch: Launch) -> None:
    prompt = "Describe the picture."
    content = [
        {"type": "image_url", "image_url": {"url": image_url(*IMAGE_SIZE)}},
        {"type": "text", "text": prompt},
    ]
    with_image = chat(server, launch.name, content)
    text_only = chat(server, launch.name, prompt)
    assert with_image["choices"][0]["message"]["content"]
    assert with_image["usage"]["completion_tokens"] > 0
    added = with_image["usage"]["prompt_tokens"] - text_only["usage"]["prompt_tokens"]
    # <|vision_start|> + one <|image_pad|> per 32x32 pixels + <|vision_end|>
    assert added == tinymodel.image_tokens(*IMAGE_SIZE) + 2


def test_service_endpoints_on_a_lab_host(server: str, launch: Launch) -> None:
    status, raw = http(f"{server}/v1/models")
    assert status == 200
    (model,) = json.loads(raw)["data"]
    assert model["id"] == launch.name and model["max_model_len"] == launch.max_model_len
    status, raw = http(f"{server}/metrics")
    assert status == 200 and b"vllm:prompt_tokens_total" in raw
    for path in ("/reset_prefix_cache", "/reset_mm_cache"):
        status, raw = http(f"{server}{path}", body={})
        assert status == 200, (path, raw[:500])
