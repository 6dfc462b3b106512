"""ascend_runtime's contract: the host's stack and the runtime's checked options."""

from __future__ import annotations

from typing import Any

from acceldeploy import runtimes
from acceldeploy.inventory.ansible_adapter import plain
from acceldeploy.inventory.scope import Scope
from acceldeploy.planner import stacks
from acceldeploy.roles.contract import Contract

ROLE = "ascend_runtime"
# Each read as ascend_runtime_<name>.
INPUTS = (
    "driver_info", "firmware_info", "toolkit_info", "devices", "device_nodes",
    "device_node_pattern", "env_scripts", "group", "cann_checksums", "cann_download_dir",
    "cann_install_args", "manager", "image_tarball", "image_tarball_checksum", "image_registry",
)  # fmt: skip
FLAGS = ("check_driver", "check_firmware", "cann_install")


def plan(scope: Scope) -> dict[str, Any]:
    stack = stacks.host_stack(
        "ascend", str(scope["ascend_runtime_stack_name"] or ""),
        scope["ascend_runtime_stacks_file"] or None,
    )  # fmt: skip
    inputs = {
        **scope.fields(ROLE, INPUTS),
        "devices": runtimes.chosen_devices(
            scope[f"{ROLE}_devices"], plain(scope.get("acceldeploy_services") or [])
        ),
        **{name: scope.flag(f"{ROLE}_{name}") for name in FLAGS},
        "ascend_home": scope["ascend_runtime_home"],
        "download_dir": scope["ascend_runtime_image_download_dir"],
        "cann_packages": {
            part: scope[f"{ROLE}_cann_{part}_package"] for part in ("toolkit", "kernels", "nnal")
        },
    }
    return {
        "ascend_runtime_stack": stack,
        "ascend_runtime_options": runtimes.ascend_options(inputs, stack),
    }


CONTRACT = Contract(ROLE, plan)
