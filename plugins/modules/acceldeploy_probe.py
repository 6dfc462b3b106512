#!/usr/bin/python
"""Read-only host probe for the runtime roles: raw text only; decisions live in
tools/acceldeploy (runtimes.py)."""

from __future__ import annotations

# Ansible modules keep their documentation above the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
---
module: acceldeploy_probe
short_description: Read what a runtime check depends on, change nothing
description:
  - Reads files (exact paths or the first match of glob patterns), runs read-only commands
    (the binary is looked up on PATH and in I(search_dirs)), stats paths (globs allowed) and
    looks up groups. Returns raw text; tools/acceldeploy/platforms/probe.py parses it and the
    gates decide.
  - Never changes the host; safe in check mode.
options:
  files:
    description: name -> a path, or a list of glob patterns (the first existing match is read).
    type: dict
    default: {}
  commands:
    description: name -> argv. A missing binary is reported (found false), not an error.
    type: dict
    default: {}
  paths:
    description: Paths (globs allowed) whose existence and type are reported.
    type: list
    elements: str
    default: []
  groups:
    description: Group names whose existence is reported.
    type: list
    elements: str
    default: []
  search_dirs:
    description: Directories searched for command binaries after PATH.
    type: list
    elements: str
    default: [/usr/local/bin, /usr/local/sbin, /usr/sbin, /sbin]
  timeout:
    description: Seconds each command may take.
    type: int
    default: 60
author:
  - acceldeploy
"""

EXAMPLES = r"""
- name: Probe the Ascend runtime
  acceldeploy.fleet.acceldeploy_probe:
    files:
      driver: /usr/local/Ascend/driver/version.info
      toolkit: [/usr/local/Ascend/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info]
    commands:
      npu_smi: [npu-smi, info]
    paths: [/dev/davinci*, /dev/davinci_manager]
    groups: [HwHiAiUser]
  register: ascend_runtime_probe
"""

RETURN = r"""
arch:
  description: machine architecture (platform.machine())
  type: str
  returned: always
files:
  description: name -> {path, exists, content}
  type: dict
  returned: always
commands:
  description: name -> {argv, found, path, rc, stdout, stderr}
  type: dict
  returned: always
paths:
  description: path -> {exists, chr, dir}
  type: dict
  returned: always
groups:
  description: group -> exists
  type: dict
  returned: always
"""

import glob
import grp
import os
import platform
import shutil
import stat
import subprocess
from typing import Any

from ansible.module_utils.basic import AnsibleModule

MAX_BYTES = 1 << 20


def read_file(spec: str | list[str]) -> dict[str, Any]:
    patterns = spec if isinstance(spec, list) else [spec]
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]:
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    content = fh.read(MAX_BYTES).decode("utf-8", "replace")
                return {"path": path, "exists": True, "content": content}
    return {"path": patterns[0] if patterns else "", "exists": False, "content": None}


def which(name: str, search_dirs: list[str]) -> str | None:
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    for directory in search_dirs:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def run(argv: list[Any], search_dirs: list[str], timeout: int) -> dict[str, Any]:
    binary = which(str(argv[0]), search_dirs) if argv else None
    result: dict[str, Any] = {
        "argv": argv,
        "found": binary is not None,
        "path": binary or "",
        "rc": None,
        "stdout": "",
        "stderr": "",
    }
    if binary is None:
        return result
    try:
        proc = subprocess.run(
            [binary, *(str(a) for a in argv[1:])], capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        result.update(rc=124, stderr=f"timed out after {timeout}s")
        return result
    except OSError as exc:
        result.update(rc=126, stderr=str(exc))
        return result
    result.update(
        rc=proc.returncode,
        stdout=proc.stdout.decode("utf-8", "replace"),
        stderr=proc.stderr.decode("utf-8", "replace"),
    )
    return result


def stat_paths(patterns: list[str]) -> dict[str, dict[str, bool]]:
    found: dict[str, dict[str, bool]] = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for path in matches:
            try:
                mode = os.stat(path).st_mode
            except OSError:
                found[path] = {"exists": False, "chr": False, "dir": False}
                continue
            found[path] = {"exists": True, "chr": stat.S_ISCHR(mode), "dir": stat.S_ISDIR(mode)}
    return found


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "dict", "default": {}},
            "commands": {"type": "dict", "default": {}},
            "paths": {"type": "list", "elements": "str", "default": []},
            "groups": {"type": "list", "elements": "str", "default": []},
            "search_dirs": {
                "type": "list",
                "elements": "str",
                "default": ["/usr/local/bin", "/usr/local/sbin", "/usr/sbin", "/sbin"],
            },
            "timeout": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    params = module.params
    module.exit_json(
        changed=False,
        arch=platform.machine(),
        files={name: read_file(spec) for name, spec in params["files"].items()},
        commands={
            name: run(list(argv), params["search_dirs"], params["timeout"])
            for name, argv in params["commands"].items()
        },
        paths=stat_paths(params["paths"]),
        groups={name: group_exists(name) for name in params["groups"]},
    )


if __name__ == "__main__":
    main()
