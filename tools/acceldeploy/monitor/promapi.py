"""Prometheus's HTTP API (instant and range queries, alerts, targets), from wherever its base URL
reaches it: an SSH tunnel to the monitor host, or a URL given directly."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError


@dataclass(frozen=True)
class Api:
    base: str
    timeout: float = 10.0

    def get(self, path: str, **params: Any) -> Any:
        url = self.base + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=self.timeout) as answer:
            data = json.loads(answer.read())
        if data.get("status") != "success":
            raise AcceldeployError(f"Prometheus {path}: {data.get('error', data)}")
        return data["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/query", query=promql)["result"])

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Any]:
        return list(
            self.get("/api/v1/query_range", query=promql, start=start, end=end, step=step)["result"]
        )

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/targets", state="active")["activeTargets"])
