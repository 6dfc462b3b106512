#!/usr/bin/python
"""The fast no-op path's one call per role and host: compare the host with what the role's
last converge recorded, or record it (tools/acceldeploy/host/state/drift.py decides)."""

from __future__ import annotations

# Ansible modules keep their documentation above the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
---
module: acceldeploy_state
short_description: Detect drift since a role's last converge, or record its result
description:
  - C(state=check) reads the record at I(path) and re-observes what it lists (small files by
    content, directory trees by size and mtime, systemd units by state). It returns C(drift),
    the reasons the role must run in full ([] when nothing changed, no record, or another
    I(key)), and the C(data) the role recorded. Read-only, also in check mode.
  - C(state=record) observes I(files), I(trees) and I(units) and writes the record (0600,
    atomic). C(state=absent) removes it (a run that changes the host forgets the old record
    first, so a run that fails halfway never leaves one behind). Neither writes in check mode.
  - Bookkeeping only; it never reports changed.
options:
  path:
    description: The record file.
    type: path
    required: true
  state:
    description: check, record or absent.
    type: str
    choices: [check, record, absent]
    default: check
  key:
    description: Digest of the inputs (drift.state_key); another key is drift.
    type: str
    default: ""
  files:
    description: Files (glob patterns allowed) compared by content.
    type: list
    elements: str
    default: []
  trees:
    description: Directories whose files are compared by size and mtime.
    type: list
    elements: str
    default: []
  units:
    description: systemd units compared by ActiveState and UnitFileState.
    type: list
    elements: str
    default: []
  data:
    description: What the role wants back on a no-op run (a summary, a decision).
    type: dict
    default: {}
  role:
    description:
      - The role whose contract (tools/acceldeploy/roles/) gives I(key) and, with
        C(state=record), I(files), I(trees) and I(units). The collection's action plugin of the
        same name fills them on the controller; the module ignores it.
    type: str
    default: ""
author:
  - acceldeploy
"""

EXAMPLES = r"""
- name: Anything changed since the last converge?
  acceldeploy.fleet.acceldeploy_state:
    path: /var/lib/acceldeploy/state/host_tuning.json
    role: host_tuning
  register: host_tuning_state
"""

RETURN = r"""
drift:
  description: Why the role must run in full; empty when the host is as recorded.
  type: list
  elements: str
  returned: state=check
data:
  description: The data recorded with the last converge (empty when there is drift).
  type: dict
  returned: state=check
written:
  description: Whether the record file was written or removed.
  type: bool
  returned: state=record, state=absent
"""

import os

from ansible.module_utils.basic import AnsibleModule

# The host-side code: the collection's module_utils (tools/acceldeploy), zipped by AnsiballZ.
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.state import drift


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["check", "record", "absent"], "default": "check"},
            "key": {"type": "str", "default": "", "no_log": False},
            "files": {"type": "list", "elements": "str", "default": []},
            "trees": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "data": {"type": "dict", "default": {}},
            "role": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]
    if params["state"] == "check":
        recorded = drift.read_record(path)
        reasons = drift.drift(recorded, params["key"])
        data = (recorded or {}).get("data", {}) if not reasons else {}
        module.exit_json(changed=False, drift=reasons, data=data)
    if module.check_mode:
        module.exit_json(changed=False, written=False)
    if params["state"] == "absent":
        existed = os.path.exists(path)
        if existed:
            os.remove(path)
        module.exit_json(changed=False, written=existed)
    spec = drift.Spec.of(params)
    content = drift.record(params["key"], spec, drift.observe(spec), params["data"])
    module.exit_json(changed=False, written=drift.write_record(path, content))


if __name__ == "__main__":
    main()
