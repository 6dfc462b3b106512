"""Progress an operator can watch: a JSON file per model and lines in a log."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path

from .common import MIB, Layout, ModelSpec, staging_bytes


class Progress:
    """Writes ``R/.acceldeploy/progress/<model>.json`` and appends a line to the log every
    ``interval`` seconds while a model is fetched: bytes in staging, rate, ETA."""

    def __init__(
        self,
        spec: ModelSpec,
        layout: Layout,
        total: int,
        log: Path | None,
        interval: float,
        phase: str,
    ) -> None:
        self.spec = spec
        self.path = layout.progress(spec)
        self.staging = layout.staging(spec)
        self.total = total
        self.log = log
        self.interval = interval
        self.phase = phase
        self.started = time.monotonic()
        self.baseline = staging_bytes(self.staging) if self.staging.exists() else 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.last = (self.started, self.baseline)

    def __enter__(self) -> Progress:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.write("running")
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=5)
        self.write("failed" if exc[0] else "done")

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self.write("running")

    def write(self, state: str) -> None:
        now = time.monotonic()
        present = staging_bytes(self.staging) if self.staging.exists() else 0
        rate = max(present - self.last[1], 0) / max(now - self.last[0], 1e-6)
        self.last = (now, present)
        left = max(self.total - present, 0)
        data = {
            "model": self.spec.dirname,
            "phase": self.phase,
            "state": state,
            "pid": os.getpid(),
            "bytes_present": present,
            "bytes_total": self.total,
            "bytes_this_run": max(present - self.baseline, 0),
            "percent": round(100.0 * present / self.total, 1) if self.total else 100.0,
            "rate_mib_s": round(rate / MIB, 1),
            "eta_seconds": round(left / rate) if rate > 0 and state == "running" else None,
            "elapsed_seconds": round(now - self.started, 1),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(self.path)
        if self.log is not None:
            eta = data["eta_seconds"]
            line = (
                f"{data['updated']} {socket.gethostname()} {self.spec.dirname} {self.phase} "
                f"{state} {data['percent']}% {present / MIB:.1f}/{self.total / MIB:.1f} MiB "
                f"{data['rate_mib_s']} MiB/s eta {eta if eta is not None else '-'}s\n"
            )
            with contextlib.suppress(OSError):
                self.log.parent.mkdir(parents=True, exist_ok=True)
                with self.log.open("a") as fh:
                    fh.write(line)
