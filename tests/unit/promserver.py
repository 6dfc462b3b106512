"""The distribution's own Prometheus, run on loopback for a test: optionally with a history
backfilled by `promtool tsdb create-blocks-from openmetrics` (series a test writes, for
example a day of a service's memory with a kill and a recovery), and scraping what it is
told to."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

needs_prometheus = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")),
    reason="no prometheus (make host-deps: Debian's prometheus)",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def openmetrics(samples: Iterable[tuple[str, Mapping[str, str], float, float]]) -> str:
    """(metric, labels, unix seconds, value) rows as an OpenMetrics text for the backfill, each
    metric's rows together and in time order (as promtool requires)."""
    rows = sorted(samples, key=lambda s: (s[0], sorted(s[1].items()), s[2]))
    lines, typed = [], set()
    for metric, labels, at, value in rows:
        if metric not in typed:
            lines.append(f"# TYPE {metric} gauge")
            typed.add(metric)
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{metric}{{{text}}} {value} {at:.3f}")
    return "\n".join([*lines, "# EOF", ""])


@contextmanager
def prometheus(
    tmp: Path,
    history: str = "",
    scrape: Mapping[str, Mapping[str, str]] | None = None,
    interval: str = "5s",
    addresses: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """A running Prometheus (its base URL): `history` (OpenMetrics) backfilled into its data
    directory before it starts; `scrape` = {job: labels} scrapes, every `interval`, the
    Prometheus itself under each job name with those target labels, or the job's address in
    `addresses` (host:port)."""
    data = tmp / "prometheus-data"
    data.mkdir(parents=True, exist_ok=True)
    if history:
        (tmp / "history.om").write_text(history)
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                        str(tmp / "history.om"), str(data)],
                       check=True, capture_output=True, text=True)  # fmt: skip
    port = free_port()
    jobs = [
        {"job_name": job,
         "static_configs": [{"targets": [(addresses or {}).get(job, f"127.0.0.1:{port}")],
                             "labels": dict(labels)}]}
        for job, labels in (scrape or {}).items()
    ]  # fmt: skip
    config = tmp / "prometheus.yml"
    config.write_text(json.dumps({"global": {"scrape_interval": interval}, "scrape_configs": jobs}))
    argv = ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=30d", f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def query(base: str, promql: str, at: float | None = None) -> list[dict[str, Any]]:
    """An instant query's result, now or `at` (unix seconds: within a backfilled history)."""
    params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
    url = f"{base}/api/v1/query?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        data = json.loads(answer.read())
    assert data["status"] == "success", data
    return list(data["data"]["result"])
