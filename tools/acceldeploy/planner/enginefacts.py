"""What each recorded engine reads and exports (data/engine-facts/vllm-<version>.json, written by
acceldeploy_lab.enginefacts): the environment variables its ``envs.py`` declares (and its
plugin's, where recorded), and the metric families a started engine exposed. Absent when
nobody recorded that engine: the upgrade advisor then says what it could not check."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from acceldeploy.data_files import DATA_DIR

FACTS_DIR = DATA_DIR / "engine-facts"


@dataclass(frozen=True)
class EngineFacts:
    version: str
    env: frozenset[str]  # the engine's own
    plugin_env: frozenset[str] | None  # its plugin's, None when not recorded
    env_source: str
    metrics: dict[str, str] | None  # family -> type; None when no start was recorded
    metrics_source: str


@cache
def engine_facts(version: str) -> EngineFacts | None:
    path = FACTS_DIR / f"vllm-{version}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    env, metrics = data["env"], data.get("metrics")
    plugin = env.get("plugin_names")
    return EngineFacts(
        version=str(data["version"]),
        env=frozenset(env["names"]),
        plugin_env=frozenset(plugin) if plugin is not None else None,
        env_source=str(env.get("source", "")),
        metrics=dict(metrics["families"]) if metrics else None,
        metrics_source=str(metrics.get("source", "")) if metrics else "",
    )
