"""Issue 3's proof on a real lab host: the mirror serves the tiny model byte-identical to
`snapshot_download` run on the host, and real vLLM 0.12.0 serves it there, with the argv and
environment `acceldeploy.render` produces from the lab inventory, answering an image chat.

Needs `make lab` (tools/lab.py prepare, mirror start, up with the wheel cache bound at
/srv/acceldeploy/wheels).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_client import chat, http, image_url, wait_healthy

from acceldeploy.inventory import host_vars
from acceldeploy.lab import stack, tinymodel, wheelhouse
from acceldeploy.lab.mirror import default_mirror, served
from acceldeploy.render import Launch, render_host

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = Path(os.environ.get("ACCELDEPLOY_TEST_INVENTORY", ROOT / "inventory/lab/hosts.yml"))
HOST = "lab1"
WHEELS_IN_HOST = "/srv/acceldeploy/wheels"
VENV = "/opt/acceldeploy/venv"
UNIT = "acceldeploy-labtest-vllm"
READY_TIMEOUT = 240.0
IMAGE_SIZE = (128, 96)


def on_host(command: str, timeout: float = 600) -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/lab.py"), "ssh", HOST, command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def launch() -> Launch:
    if not INVENTORY.exists():
        pytest.fail(f"{INVENTORY} missing: bring the lab up with `make lab`")
    (service,) = render_host(host_vars(str(INVENTORY), HOST))
    return service


@pytest.fixture(scope="module")
def venv() -> str:
    """The vLLM stack from the bind-mounted wheel cache only (--no-index, the lock's pins)."""
    pins = sorted(
        f"{name}=={version}"
        for name, version in wheelhouse.read_lock(wheelhouse.DEFAULT_LOCK).items()
    )
    plugin = "acceldeploy-vllm-cpu-platform"
    on_host(
        f"test -x {VENV}/bin/python || python3 -m venv {VENV} && "
        f"{VENV}/bin/pip install --quiet --no-index --find-links {WHEELS_IN_HOST} --no-deps "
        + " ".join(shlex.quote(p) for p in [*pins, plugin]),
        timeout=900,
    )
    return f"{VENV}/bin/python"


@pytest.fixture(scope="module")
def snapshot(venv: str, launch: Launch) -> str:
    mirror = default_mirror()
    before = served(mirror)["lines"]
    script = (
        "import huggingface_hub, sys; print(huggingface_hub.snapshot_download("
        "sys.argv[1], revision='main', local_dir=sys.argv[2]))"
    )
    on_host(
        f"rm -rf {shlex.quote(launch.model_path)} && "
        f"HF_ENDPOINT={mirror.endpoint} HF_HUB_DISABLE_TELEMETRY=1 {venv} -c "
        f"{shlex.quote(script)} {tinymodel.MODEL_ID} {shlex.quote(launch.model_path)}"
    )
    counts = served(mirror, since_line=before)
    weights = counts["files"][f"{tinymodel.MODEL_ID}/model.safetensors"]
    assert weights["get"] == 1
    return launch.model_path


def test_snapshot_download_on_a_host_is_byte_identical(snapshot: str) -> None:
    local = stack.model_dir(wheelhouse.cache_dir())
    listing = on_host(
        f"cd {shlex.quote(snapshot)} && find . -path ./.cache -prune -o -type f -print0 "
        "| xargs -0 sha256sum"
    )
    remote = {
        line.split(None, 1)[1].removeprefix("./"): line.split()[0] for line in listing.splitlines()
    }
    assert remote == tinymodel.file_digests(local)


@pytest.fixture(scope="module")
def server(launch: Launch, snapshot: str) -> Iterator[str]:
    setenv = " ".join(f"--setenv={shlex.quote(f'{k}={v}')}" for k, v in launch.env.items())
    on_host(
        f"systemctl reset-failed {UNIT} 2>/dev/null; systemd-run --unit={UNIT} "
        f"--property=WorkingDirectory=/tmp {setenv} {launch.command_line()}"
    )
    base = f"http://127.0.0.1:{launch.port}"

    def alive() -> None:
        state = on_host(f"systemctl show -p ActiveState --value {UNIT} || true").strip()
        if state not in ("active", "activating"):
            log = on_host(f"journalctl -u {UNIT} --no-pager -n 60 || true")
            pytest.fail(f"vLLM unit is {state}:\n{log}")

    try:
        wait_healthy(base, READY_TIMEOUT, alive)
        yield base
    finally:
        on_host(f"systemctl stop {UNIT} || true")


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
