"""gaudi_runtime's contract: the host's stack, the runtime's checked options, its image and
its HCCL check's command."""

from __future__ import annotations

from typing import Any

from acceldeploy import runtimes
from acceldeploy.inventory.ansible_adapter import plain
from acceldeploy.inventory.scope import Scope
from acceldeploy.planner import stacks
from acceldeploy.roles.contract import Contract

ROLE = "gaudi_runtime"
# Each read as gaudi_runtime_<name>.
INPUTS = (
    "image", "software", "driver_match", "hl_smi", "image_tarball", "image_tarball_checksum",
    "download_dir", "image_registry", "devices", "device_node_pattern", "container_runtime",
    "hccl_demo_dir", "hccl_args", "hccl_comm_id", "hccl_libfabric_root", "hccl_min_nw_gbps",
)  # fmt: skip


def plan(scope: Scope) -> dict[str, Any]:
    stack = stacks.host_stack(
        "gaudi", str(scope["gaudi_runtime_stack_name"] or ""),
        scope["gaudi_runtime_stacks_file"] or None,
    )  # fmt: skip
    inputs = {
        **scope.fields(ROLE, INPUTS),
        "devices": runtimes.chosen_devices(
            scope[f"{ROLE}_devices"], plain(scope.get("acceldeploy_services") or [])
        ),
        "services": scope.get("acceldeploy_services", []),
    }
    options = runtimes.gaudi_options(inputs, stack)
    return {
        "gaudi_runtime_stack": stack,
        "gaudi_runtime_options": options,
        "gaudi_runtime_image_ref": options["image"],
        "gaudi_runtime_hccl_argv": runtimes.gaudi_hccl_argv(stack, options),
    }


CONTRACT = Contract(ROLE, plan)
