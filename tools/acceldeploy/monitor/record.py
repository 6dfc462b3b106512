"""What the monitor role's no-op path watches on a host (the state module's files and units):
every file the role writes there and every unit it starts. A rerun whose inputs, files and
units are as the last converge recorded them skips the role (acceldeploy.host.state.drift)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.monitor import device_exporters
from acceldeploy.serving.layout import UNIT_DIR

NODE_UNIT = "prometheus-node-exporter.service"
MEMORY_UNIT = "acceldeploy-service-memory.service"
PROMETHEUS_UNIT = "prometheus.service"
NODE_UNITS = (NODE_UNIT, MEMORY_UNIT)
NODE_DROPIN = f"{UNIT_DIR}/{NODE_UNIT}.d/acceldeploy.conf"
# The distribution's file the role rewrites: watched, and left to its package by a removal.
NODE_DEFAULTS = "/etc/default/prometheus-node-exporter"


def node_owned(device_exporter: Mapping[str, Any], libexec_dir: str) -> dict[str, list[str]]:
    """What the role runs and writes on every serving host (roles/monitor/tasks/node.yml and
    the device exporter's tasks): the node exporter's drop-in, the memory reader and its unit,
    the device exporter; a whole host's removal takes them."""
    exporter_files, exporter_units = device_exporters.owned(device_exporter)
    return {
        "files": [NODE_DROPIN, f"{libexec_dir}/unitmemory.py", f"{UNIT_DIR}/{MEMORY_UNIT}",
                  *exporter_files],
        "units": [*NODE_UNITS, *exporter_units],
    }  # fmt: skip


def spec(
    device_exporter: Mapping[str, Any], is_monitor: bool, paths: Mapping[str, str]
) -> dict[str, list[str]]:
    """paths: config_dir, libexec_dir and grafana_dir (the role's variables)."""
    node = node_owned(device_exporter, paths["libexec_dir"])
    files = [NODE_DEFAULTS, *node["files"]]
    units = node["units"]
    trees: list[str] = []
    if is_monitor:
        config = paths["config_dir"]
        files += [
            f"{config}/acceldeploy/*.json",
            f"{config}/acceldeploy-rules.yml",
            f"{config}/prometheus.yml",
            "/etc/default/prometheus",
        ]
        units.append(PROMETHEUS_UNIT)
        if paths.get("grafana_dir"):
            trees.append(paths["grafana_dir"])
    return {"files": files, "trees": trees, "units": units}
