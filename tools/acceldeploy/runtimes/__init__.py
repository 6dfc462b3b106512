"""Accelerator runtimes and the Python environment: parse what the hosts report, decide.

Everything the roles ascend_runtime, gaudi_runtime and python_env decide is here, typed and
unit-tested against recorded real tool output (tests/data/recorded); Ansible only collects
raw text on the hosts (the roles' probe modules) and calls these functions through
plugins/filter/runtime_filters.py. Templates and tasks only print what comes back.

- ``acceldeploy.planner.stacks``: the pinned stack of each platform (versions/stacks.yml).
- Each accelerator's runtime check lives with its platform: ``acceldeploy.platforms.ascend.runtime``
  (driver / firmware / CANN version files, options and ``ascend_check``: CANN == the pinned
  vllm-ascend's CANN, driver and firmware compatible, NPUs healthy, device nodes present,
  optional CANN ``.run`` install plan) and ``acceldeploy.platforms.gaudi.runtime`` (options,
  hccl_demo, the Docker daemon's runtimes and ``gaudi_check``: driver matches the image's Intel
  Gaudi software, habana runtime registered, module ids, NUMA nodes, image present or
  loadable). What they share (the verdict, reading a probe, versions, the image) is in
  ``acceldeploy.platforms`` (``probe``, ``versions``, ``image``).
- ``stacklock``: preflight's first contact runs the runtime checks' version rules (driver,
  firmware, CANN, habanalabs driver) on what its read-only probe read, before any host changes.
- ``python_env``: ``env_prefix``, ``python_env_plan`` (the exact commands for venv / conda /
  container, and the key that decides whether the environment is rebuilt) and
  ``python_env_verify``.

This package re-exports what the roles' filters, ``acceldeploy.verify`` and the lab tests use.
"""

from __future__ import annotations

from acceldeploy.planner.stacks import stack
from acceldeploy.platforms.ascend.runtime import ascend_check, ascend_fact, ascend_options
from acceldeploy.platforms.ascend.smi import parse_npu_smi_info
from acceldeploy.platforms.gaudi.runtime import (
    docker_daemon_with_runtime,
    gaudi_check,
    gaudi_fact,
    gaudi_hccl_argv,
    gaudi_options,
)
from acceldeploy.platforms.gaudi.smi import parse_hccl_demo, parse_hl_smi
from acceldeploy.platforms.probe import chosen_devices, service_devices
from acceldeploy.runtimes.python_env import (
    RECORD_NAME,
    env_prefix,
    python_env_fact,
    python_env_plan,
    python_env_state_spec,
    python_env_verify,
    record_key,
    wheelhouse_only,
)

__all__ = [
    "RECORD_NAME",
    "ascend_check",
    "ascend_fact",
    "ascend_options",
    "chosen_devices",
    "docker_daemon_with_runtime",
    "env_prefix",
    "gaudi_check",
    "gaudi_fact",
    "gaudi_hccl_argv",
    "gaudi_options",
    "parse_hccl_demo",
    "parse_hl_smi",
    "parse_npu_smi_info",
    "python_env_fact",
    "python_env_plan",
    "python_env_state_spec",
    "python_env_verify",
    "record_key",
    "service_devices",
    "stack",
    "wheelhouse_only",
]
