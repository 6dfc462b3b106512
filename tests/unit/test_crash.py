"""acceldeploy.serving.crash: the signal a service's process died of, from its journal, as the
gate's report names it; the journal is what CPython's faulthandler writes (made here by a real
interpreter killed with SIGILL) amid vLLM's own lines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from acceldeploy.serving import crash

DIES = """
import threading, time, os, signal
def idle():
    time.sleep(30)
threading.Thread(target=idle, daemon=True).start()
def forward():
    os.kill(os.getpid(), signal.SIGILL)
forward()
"""


def test_a_worker_killed_by_sigill_is_named_with_the_frame_that_died() -> None:
    done = subprocess.run([sys.executable, "-c", DIES], capture_output=True, text=True,
                          env={**os.environ, "PYTHONFAULTHANDLER": "1"}, check=False)  # fmt: skip
    assert done.returncode == -signal.SIGILL
    journal = [
        "INFO 11-29 13:00:00 [api_server.py:1] Started server process",
        *done.stderr.splitlines(),
        "ERROR 11-29 13:00:02 [multiproc_executor.py:1] Worker proc VllmWorker-0 died "
        "unexpectedly (exit code: None), shutting down executor.",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]
    assert crash.fatal_error(journal) == (
        "a process of the service died of SIGILL (Illegal instruction) in forward (<string>:7)"
        + crash.HINTS["SIGILL"]
    )


def test_a_segfault_without_frames_and_a_clean_journal() -> None:
    assert crash.fatal_error(["Fatal Python error: Segmentation fault", ""]) == (
        "a process of the service died of SIGSEGV (Segmentation fault)"
    )
    assert crash.fatal_error(["INFO ... Application startup complete."]) == ""


def test_the_units_start_python_with_the_fault_handler() -> None:
    from acceldeploy.serving.hostplan import host_launches

    hostvars = {
        "inventory_hostname": "lab1",
        "acceldeploy_platform": "cpu",
        "acceldeploy_services": [{"name": "m", "model": "acceldeploy/tiny-qwen3-vl",
                                  "revision": "main", "port": 8001}],
    }  # fmt: skip
    (launch,) = host_launches(hostvars)
    assert launch.env["PYTHONFAULTHANDLER"] == "1"


def test_the_gate_report_says_what_the_process_died_of() -> None:
    import runpy
    from pathlib import Path

    plugin = Path(__file__).resolve().parents[2] / "plugins/filter/vllm_service_filters.py"
    report = runpy.run_path(str(plugin))["vllm_service_failure_report"]
    failure = {
        "cause": "lab2 failed the serving gate (Gate | One real completion: Status code was 500)",
        "journal": ["Fatal Python error: Illegal instruction", "",
                    "Current thread 0x00007f (most recent call first):",
                    '  File "/opt/venv/vllm/_custom_ops.py", line 210 in cpu_attention',
                    "EngineDeadError: EngineCore encountered an issue."],
    }  # fmt: skip
    text = report("lab2", failure, {"qwen3-vl": 200}, [], ["lab2"], True)
    assert text.startswith(
        "lab2 failed the serving gate (Gate | One real completion: Status code was 500); a "
        "process of the service died of SIGILL (Illegal instruction) in cpu_attention "
        f"(/opt/venv/vllm/_custom_ops.py:210){crash.HINTS['SIGILL']}. The rollout stops here"
    ), text


def test_a_real_engine_killed_by_sigill_names_the_engines_frame() -> None:
    from pathlib import Path

    recorded = Path(__file__).resolve().parents[1] / "data/recorded"
    journal = (recorded / "vllm-0.12.0-cpu-engine-sigill.log").read_text().splitlines()
    assert crash.fatal_error(journal) == (
        "a process of the service died of SIGILL (Illegal instruction) in _process_input_queue "
        "(/opt/acceldeploy/venv-5c0faa6f2e5a/lib/python3.11/site-packages/vllm/v1/engine/"
        "core.py:877)" + crash.HINTS["SIGILL"]
    )
