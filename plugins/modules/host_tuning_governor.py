#!/usr/bin/python
"""Set the CPU frequency governor of every cpufreq policy, live (sysfs)."""

from __future__ import annotations

# Ansible modules keep their documentation above the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
---
module: host_tuning_governor
short_description: Set the cpufreq governor of every CPU policy, live
description:
  - Writes the governor to /sys/devices/system/cpu/cpufreq/policy*/scaling_governor where it
    differs. Only the running kernel is changed; the role keeps it across reboots with the
    kernel argument cpufreq.default_governor.
  - Fails when a policy does not offer the governor or the kernel refuses the write; the role
    does not call it where /sys is read-only (containers).
options:
  governor:
    description: Governor name, like performance.
    type: str
    required: true
author:
  - acceldeploy
"""

EXAMPLES = r"""
- name: Performance governor, live
  acceldeploy.fleet.host_tuning_governor:
    governor: performance
"""

RETURN = r"""
changed_policies:
  description: policies whose governor was (or would be) changed
  type: list
  returned: always
policies:
  description: policy -> governor after the change
  type: dict
  returned: always
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule

POLICIES = "/sys/devices/system/cpu/cpufreq/policy*"


def read_line(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def main() -> None:
    module = AnsibleModule(
        argument_spec={"governor": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    wanted = module.params["governor"]
    before, after, changed = {}, {}, []
    for path in sorted(glob.glob(POLICIES)):
        name = os.path.basename(path)
        current = read_line(path + "/scaling_governor")
        before[name] = current
        after[name] = wanted
        if current == wanted:
            continue
        offered = read_line(path + "/scaling_available_governors").split()
        if wanted not in offered:
            module.fail_json(msg=f"{name} does not offer governor {wanted} (offers {offered})")
        changed.append(name)
        if module.check_mode:
            continue
        try:
            with open(path + "/scaling_governor", "w") as handle:
                handle.write(wanted)
        except OSError as exc:
            module.fail_json(msg=f"{name}: cannot set governor {wanted}: {exc}")
        after[name] = read_line(path + "/scaling_governor")
        if after[name] != wanted:
            module.fail_json(msg=f"{name}: governor is {after[name]} after writing {wanted}")
    diff = {
        "before": "".join(f"{k}: {v}\n" for k, v in before.items()),
        "after": "".join(f"{k}: {v}\n" for k, v in after.items()),
    }
    module.exit_json(changed=bool(changed), changed_policies=changed, policies=after, diff=diff)


if __name__ == "__main__":
    main()
