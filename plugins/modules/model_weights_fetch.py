#!/usr/bin/python
"""Thin Ansible adapter over acceldeploy.host.fetch (tools/acceldeploy/host/fetch/), which
Ansible ships inside this module's payload from the collection's module_utils."""

from __future__ import annotations

# Ansible modules keep their documentation above the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
---
module: model_weights_fetch
short_description: Download, verify and atomically publish model weights on a host
description:
  - Runs with the fetch venv's interpreter (huggingface_hub and modelscope installed). All
    decisions live in tools/acceldeploy/host/fetch/ (unit-tested on the controller), which Ansible
    zips into this module's payload from the collection's C(plugins/module_utils/acceldeploy);
    nothing is installed on the host for it.
  - I(state=present) plans every model (manifest, hub listing, staging), checks free space
    for all of them before any byte is downloaded, then downloads into a staging directory,
    verifies sizes and hub hashes, and publishes with an atomic rename or exchange.
  - I(state=planned) only plans and checks free space (read-only, also in check mode).
  - I(state=serving) starts the seed host's HTTP server for I(serve), a daemon forked from
    this module (it outlives the module's payload); I(state=stopped) stops it.
  - Check mode changes nothing and reports what I(state=present) would change.
options:
  state:
    description: What to do.
    type: str
    choices: [present, planned, serving, stopped]
    default: present
  mode:
    description:
      - Where the bytes come from, C(hub), a seed host (C(pull)), or nowhere (C(verify),
        shared storage).
    type: str
    choices: [hub, pull, verify]
    default: hub
  root:
    description: The models root.
    type: path
    required: true
  models:
    description: Model specs (model, source, revision, allow_patterns, services).
    type: list
    elements: dict
    default: []
  verify:
    description:
      - C(fast) trusts files whose size and mtime match the manifest; C(full) re-hashes all.
    type: str
    choices: [fast, full]
    default: fast
  endpoints:
    description: Hub endpoint per source (C(hf), C(modelscope)).
    type: dict
    default: {}
  hf_token:
    description: Hugging Face token.
    type: str
    default: ""
  modelscope_token:
    description: ModelScope token.
    type: str
    default: ""
  plans:
    description:
      - The plans a previous I(state=planned) call returned this run; used instead of planning
        again, so every host's free-space check happens before any host downloads.
    type: list
    elements: dict
    default: []
  listings:
    description: The seed's hub listings, by directory (C(pull) and C(verify)).
    type: dict
    default: {}
  seed_url:
    description: The seed server's URL (C(pull)).
    type: str
    default: ""
  seed_token:
    description: The seed server's bearer token for this run.
    type: str
    default: ""
  serve:
    description: Directories (org/name@revision) the seed server may serve.
    type: list
    elements: str
    default: []
  listen:
    description: Address the seed server binds.
    type: str
    default: 0.0.0.0
  port:
    description: Port of the seed server.
    type: int
    default: 8781
  idle_timeout:
    description: The seed server exits after this many seconds without a request.
    type: int
    default: 900
  reserve_gib:
    description: Space to leave free on the models filesystem, in GiB.
    type: float
    default: 1.0
  max_workers:
    description: Parallel file downloads per model.
    type: int
    default: 8
  log:
    description: Progress log to append to.
    type: path
  progress_interval:
    description: Seconds between progress updates.
    type: float
    default: 5
author:
  - acceldeploy
"""

EXAMPLES = r"""
- name: Download, verify and publish this host's models
  acceldeploy.fleet.model_weights_fetch:
    root: /models
    models: [{model: Qwen/Qwen3-VL-8B-Instruct, source: modelscope, revision: master}]
    endpoints: {modelscope: https://www.modelscope.cn}
  vars:
    ansible_python_interpreter: /opt/acceldeploy/fetch-venv/bin/python
"""

RETURN = r"""
plans:
  description:
    - Per model, the action (none, fetch, repair, update, restamp), why, files to fetch,
      bytes and the listing.
  type: list
  returned: always
space:
  description: needed_bytes, free_bytes, reserve_bytes on the models filesystem.
  type: dict
  returned: state is present or planned
results:
  description: Per converged model, what was done (publish method, bytes written, seconds).
  type: list
  returned: state is present
"""

from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# The host-side code: the collection's module_utils (tools/acceldeploy), zipped by AnsiballZ.
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.errors import (
    AcceldeployError,
)
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.fetch.common import (  # noqa: E501
    Layout,
)
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.fetch.plan import (
    check_space,
)
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.fetch.run import (
    plan_host,
    request_from_params,
    run,
)
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.fetch.seed import (
    start_seed_server,
    stop_seed_server,
)

ARGUMENT_SPEC: dict[str, Any] = {
    "state": {
        "type": "str",
        "choices": ["present", "planned", "serving", "stopped"],
        "default": "present",
    },
    "mode": {"type": "str", "choices": ["hub", "pull", "verify"], "default": "hub"},
    "root": {"type": "path", "required": True},
    "models": {"type": "list", "elements": "dict", "default": []},
    "verify": {"type": "str", "choices": ["fast", "full"], "default": "fast"},
    "endpoints": {"type": "dict", "default": {}},
    "hf_token": {"type": "str", "default": "", "no_log": True},
    "modelscope_token": {"type": "str", "default": "", "no_log": True},
    "plans": {"type": "list", "elements": "dict", "default": []},
    "listings": {"type": "dict", "default": {}},
    "seed_url": {"type": "str", "default": ""},
    "seed_token": {"type": "str", "default": "", "no_log": True},
    "serve": {"type": "list", "elements": "str", "default": []},
    "listen": {"type": "str", "default": "0.0.0.0"},
    "port": {"type": "int", "default": 8781},
    "idle_timeout": {"type": "int", "default": 900},
    "reserve_gib": {"type": "float", "default": 1.0},
    "max_workers": {"type": "int", "default": 8},
    "log": {"type": "path"},
    "progress_interval": {"type": "float", "default": 5},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    layout = Layout(Path(params["root"]))
    try:
        if params["state"] == "serving":
            if module.check_mode:
                module.exit_json(changed=False, serving=params["serve"])
            server = start_seed_server(
                layout,
                params["listen"],
                params["port"],
                params["seed_token"],
                params["serve"],
                params["idle_timeout"],
            )
            # A server for this run only, stopped by state=stopped: no lasting change.
            module.exit_json(changed=False, server=server)
        if params["state"] == "stopped":
            stopped = False if module.check_mode else stop_seed_server(layout)
            module.exit_json(changed=False, stopped=stopped)
        request = request_from_params(
            {
                **params,
                "tokens": {"hf": params["hf_token"], "modelscope": params["modelscope_token"]},
            }
        )
        if params["state"] == "planned":
            plans = plan_host(request)
            space = check_space(plans, request.root, request.reserve_bytes)
            module.exit_json(changed=False, plans=[p.to_dict() for p in plans], space=space)
        result = run(request, module.check_mode)
    except AcceldeployError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
