#!/usr/bin/python
"""Remove old directories beside the current ones, except what is in use or kept by count
(tools/acceldeploy/host/state/prune.py decides)."""

from __future__ import annotations

# Ansible modules keep their documentation above the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
---
module: acceldeploy_prune
short_description: Remove old builds or model revisions that nothing uses, beyond a keep count
description:
  - Finds the directories I(patterns) match. Keeps the I(current) ones (and any directory
    holding one), every one a running process's command line or one of the I(in_use_files)
    names, and the I(keep) newest complete others (complete when I(marker) exists inside, or
    always without a marker). Removes the rest.
  - In check mode nothing is removed; C(removed) says what would be, and C(changed) is true
    when anything would.
options:
  patterns:
    description: Glob patterns of the candidate directories.
    type: list
    elements: str
    required: true
  current:
    description: Paths always kept (the build or revision in use from now on).
    type: list
    elements: str
    default: []
  keep:
    description: How many complete candidates are kept beside the current ones.
    type: int
    default: 1
  marker:
    description: A file inside a candidate that marks it complete (a half-built one never counts).
    type: str
    default: ""
  in_use_files:
    description: Files (glob patterns) whose text, when it names a candidate, keeps it.
    type: list
    elements: str
    default: []
author:
  - acceldeploy
"""

EXAMPLES = r"""
- name: Model revisions beyond the keep count that nothing serves from
  acceldeploy.fleet.acceldeploy_prune:
    patterns: [/models/Qwen/Qwen3-VL-8B-Instruct@*]
    current: [/models/Qwen/Qwen3-VL-8B-Instruct@0c351dd]
    keep: 1
    in_use_files: [/usr/local/libexec/acceldeploy/*.launch]
"""

RETURN = r"""
removed:
  description: The directories removed (in check mode, the ones that would be).
  type: list
  elements: str
  returned: always
in_use:
  description: Candidates kept because a process or one of in_use_files names them.
  type: list
  elements: str
  returned: always
kept:
  description: Every candidate that stays.
  type: list
  elements: str
  returned: always
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

# The host-side code: the collection's module_utils (tools/acceldeploy), zipped by AnsiballZ.
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.state import prune


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "patterns": {"type": "list", "elements": "str", "required": True},
            "current": {"type": "list", "elements": "str", "default": []},
            "keep": {"type": "int", "default": 1},
            "marker": {"type": "str", "default": ""},
            "in_use_files": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    found = prune.entries(params["patterns"], params["marker"])
    texts = prune.command_lines(os.getpid()) + prune.file_texts(params["in_use_files"])
    in_use = [e.path for e in found if prune.named(e.path, texts)]
    try:
        removed = prune.removable(found, params["current"], params["keep"], in_use)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if not module.check_mode:
        for path in removed:
            shutil.rmtree(path)
    module.exit_json(
        changed=bool(removed),
        removed=removed,
        in_use=in_use,
        kept=[e.path for e in found if e.path not in removed],
        diff={"before": "".join(f"{e.path}\n" for e in found),
              "after": "".join(f"{e.path}\n" for e in found if e.path not in removed)},
    )  # fmt: skip


if __name__ == "__main__":
    main()
