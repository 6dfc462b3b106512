"""What the monitor role's no-op path watches on a host (the state module's files and units):
every file the role writes there and every unit it starts. A rerun whose inputs, files and
units are as the last converge recorded them skips the role (tools/acceldeploy/state/drift.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acceldeploy.monitor import device_exporters
from acceldeploy.serving.layout import UNIT_DIR

NODE_UNIT = "prometheus-node-exporter.service"
MEMORY_UNIT = "acceldeploy-service-memory.service"
PROMETHEUS_UNIT = "prometheus.service"
# What the role puts on every host beside the distribution's node exporter (roles/monitor/
# tasks/node.yml): its units, and the unit files it writes; remove.yml takes them off a host.
NODE_UNITS = (NODE_UNIT, MEMORY_UNIT)
NODE_DROPIN, MEMORY_UNIT_FILE = (
    f"{UNIT_DIR}/{NODE_UNIT}.d/acceldeploy.conf",
    f"{UNIT_DIR}/{MEMORY_UNIT}",
)
NODE_UNIT_FILES = (MEMORY_UNIT_FILE, NODE_DROPIN)


def spec(
    device_exporter: Mapping[str, Any], is_monitor: bool, paths: Mapping[str, str]
) -> dict[str, list[str]]:
    """paths: config_dir, libexec_dir and grafana_dir (the role's variables)."""
    files = [
        "/etc/default/prometheus-node-exporter",
        NODE_DROPIN,
        f"{paths['libexec_dir']}/unitmemory.py",
        MEMORY_UNIT_FILE,
    ]
    units = list(NODE_UNITS)
    exporter_files, exporter_units = device_exporters.owned(device_exporter)
    files += exporter_files
    units += exporter_units
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
