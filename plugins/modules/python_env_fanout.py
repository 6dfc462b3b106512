#!/usr/bin/python
"""Thin Ansible adapter over acceldeploy.host.fetch.envcopy
(tools/acceldeploy/host/fetch/envcopy.py), which Ansible ships inside this module's payload as
module_utils."""

from __future__ import annotations

# Ansible modules keep their documentation above the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
---
module: python_env_fanout
short_description: Fan a built Python environment out from the host that built it
description:
  - python_env's fan-out. The first host of each host class builds the environment; the
    others pull the finished build from it instead of installing it themselves.
  - I(state=serving) on the builder starts a daemon (forked from this module, so it outlives
    the module's payload) that streams I(directory) as a tar to holders of I(token), and exits
    after I(idle_timeout) seconds without a request; I(state=stopped) stops it.
  - I(state=pulled) on a puller streams the builder's environment from I(url) into a
    directory beside I(directory), checks every file each distribution's RECORD lists with a
    hash, and only then renames it to I(directory). A failure leaves I(directory) as it was.
  - Check mode changes nothing.
options:
  state:
    description: What to do.
    type: str
    choices: [serving, stopped, pulled]
    required: true
  directory:
    description: The environment's build directory (the same path on builder and puller).
    type: path
    required: true
  run_dir:
    description: Where the daemon keeps its pid file and log.
    type: path
    default: /var/lib/acceldeploy/run
  listen:
    description: Address the builder's server binds.
    type: str
    default: 0.0.0.0
  port:
    description: Port of the builder's server.
    type: int
    default: 8782
  token:
    description: This run's bearer token.
    type: str
    default: ""
  idle_timeout:
    description: Seconds without a request after which the builder's server exits.
    type: int
    default: 900
  url:
    description: The builder's server (I(state=pulled)).
    type: str
    default: ""
author:
  - acceldeploy
"""

EXAMPLES = r"""
- name: Pull the environment lab1 built
  acceldeploy.fleet.python_env_fanout:
    state: pulled
    directory: /opt/acceldeploy/venv-4023175807e6
    url: http://10.213.0.11:8782
    token: "{{ python_env_fanout_token }}"
"""

RETURN = r"""
pull:
  description: bytes, files, record_files_checked, pull_seconds, seconds (I(state=pulled)).
  type: dict
  returned: state is pulled
"""

from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

# The host-side code: the collection's module_utils (tools/acceldeploy), zipped by AnsiballZ.
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.errors import (
    AcceldeployError,
)
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.fetch.envcopy import (  # noqa: E501
    SERVER,
    make_env_server,
    pull_env,
)
from ansible_collections.acceldeploy.fleet.plugins.module_utils.acceldeploy.host.fetch.seed import (
    start_daemon,
    stop_daemon,
)

ARGUMENT_SPEC: dict[str, Any] = {
    "state": {"type": "str", "choices": ["serving", "stopped", "pulled"], "required": True},
    "directory": {"type": "path", "required": True},
    "run_dir": {"type": "path", "default": "/var/lib/acceldeploy/run"},
    "listen": {"type": "str", "default": "0.0.0.0"},
    "port": {"type": "int", "default": 8782},
    "token": {"type": "str", "default": "", "no_log": True},
    "idle_timeout": {"type": "int", "default": 900},
    "url": {"type": "str", "default": ""},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    directory = Path(params["directory"])
    run = Path(params["run_dir"])
    try:
        if params["state"] == "stopped":
            stopped = False if module.check_mode else stop_daemon(run, SERVER)
            module.exit_json(changed=False, stopped=stopped)
        if module.check_mode:
            module.exit_json(changed=params["state"] == "pulled")
        if params["state"] == "serving":
            if not directory.is_dir():
                module.fail_json(msg=f"{directory}: nothing built here to serve")
            pid = start_daemon(
                run,
                SERVER,
                lambda: make_env_server(
                    directory, params["listen"], params["port"], params["token"]
                ),
                params["idle_timeout"],
                f"{params['listen']}:{params['port']}",
            )
            # A server for this run only, stopped by state=stopped: no lasting change.
            module.exit_json(changed=False, pid=pid)
        pulled = pull_env(params["url"], params["token"], directory)
    except (AcceldeployError, OSError) as exc:
        module.fail_json(msg=f"{type(exc).__name__}: {exc}")
    module.exit_json(changed=True, pull=pulled)


if __name__ == "__main__":
    main()
