"""Prometheus's HTTP API (instant and range queries, alerts, targets), from wherever its base URL
reaches it: an SSH tunnel to the monitor host, or a URL given directly. A range query's
series are its labels and its (unix seconds, value) points, in time order."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError

# Steps a range query takes, seconds: each at most twice the one before, so the smallest one
# giving a window at most MAX_POINTS points gives it more than half as many.
STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 180, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
         43200, 86400)  # fmt: skip
MAX_POINTS = 600

Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    points: list[Point]


def step_for(span: float) -> int:
    """The step that gives `span` seconds between 300 and 600 points (fewer when it is
    shorter than 300 s)."""
    return next((s for s in STEPS if span / s <= MAX_POINTS), STEPS[-1])


def _value(text: str) -> float:
    value = float(text)  # "NaN" too: a quantile of no requests
    return value if math.isfinite(value) else math.nan


def _said(error: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        return dict(json.loads(error.read()))
    except ValueError:
        return {"error": f"HTTP {error.code} {error.reason}"}


@dataclass(frozen=True)
class Api:
    base: str
    timeout: float = 10.0

    def call(self, path: str, **params: Any) -> Any:
        """The `data` of an API answer; a query goes as a form (POST): no URL length limit."""
        url = f"{self.base.rstrip('/')}{path}"
        body = urllib.parse.urlencode(params).encode() if params else None
        request = urllib.request.Request(url, data=body, method="POST" if body else "GET")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                data: dict[str, Any] = json.loads(answer.read())
        except urllib.error.HTTPError as exc:  # a bad query: Prometheus says why in the body
            data = _said(exc)
        except OSError as exc:
            raise AcceldeployError(f"Prometheus at {self.base} does not answer: {exc}") from exc
        if data.get("status") != "success":
            what = params.get("query", path)
            raise AcceldeployError(f"Prometheus {what}: {data.get('error', data)}")
        return data["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list(self.call("/api/v1/query", query=promql)["result"])

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        data = self.call("/api/v1/query_range", query=promql, start=f"{start:.3f}",
                         end=f"{end:.3f}", step=f"{step:g}")  # fmt: skip
        return [
            Series(dict(found["metric"]), [(float(t), _value(v)) for t, v in found["values"]])
            for found in data["result"]
        ]

    def now(self) -> float:
        """Prometheus's own clock, unix seconds (the monitor host's, not this one's)."""
        at, _ = self.call("/api/v1/query", query="time()")["result"]
        return float(at)

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.call("/api/v1/alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.call("/api/v1/targets?state=active")["activeTargets"])
