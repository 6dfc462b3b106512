"""Opt-in memory probe (seed 000): memory before, after N image requests, after
/reset_mm_cache. On cpu the service's cgroup memory; on Ascend / Gaudi the used device
memory of its devices."""

from __future__ import annotations

import json
import shlex
from typing import Any

from acceldeploy.platforms import for_name
from acceldeploy.verify import api
from acceldeploy.verify.model import Check

MIB = 1 << 20


def memory_mib(conn: Any, launch: Any) -> float:
    platform = for_name(launch.platform)
    if platform.smi_command:
        out = conn.run(shlex.join(platform.smi_command), hide=True, warn=False).stdout
        readings = platform.read_devices(out)
        return float(sum(r.used_mib or 0 for r in readings if r.index in launch.devices))
    raw = conn.run(f"python3 -c {shlex.quote(CGROUP_MEMORY)} {launch.name}.service", hide=True)
    return int(raw.stdout.strip()) / MIB


# The unit's memory: its cgroup's memory.current, or where the memory controller is not
# delegated (containers), the summed proportional set size of its processes.
CGROUP_MEMORY = """
import subprocess, sys
cg = subprocess.run(["systemctl", "show", "-p", "ControlGroup", "--value", sys.argv[1]],
                    capture_output=True, text=True).stdout.strip()
base = "/sys/fs/cgroup" + cg
try:
    print(int(open(base + "/memory.current").read()))
except OSError:
    total = 0
    for pid in open(base + "/cgroup.procs").read().split():
        try:
            for line in open("/proc/%s/smaps_rollup" % pid):
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    print(total)
"""


def probe(conn: Any, target: api.Target, launch: Any, options: Any) -> Check:
    before = memory_mib(conn, launch)
    failures = 0
    for seed in range(options.mm_leak_probe):
        status, _ = api.request(
            target, "/v1/chat/completions", api.chat_body(target, api.image_content(seed + 1))
        )
        failures += status != 200
    after = memory_mib(conn, launch)
    reset = None
    if target.dev_mode:
        api.request(target, "/reset_mm_cache", method="POST")
        reset = memory_mib(conn, launch)
    kept = (reset if reset is not None else after) - before
    data = {
        "before_mib": round(before, 1),
        "after_mib": round(after, 1),
        "after_reset_mib": None if reset is None else round(reset, 1),
        "growth_mib": round(after - before, 1),
        "kept_mib": round(kept, 1),
        "requests": options.mm_leak_probe,
        "failed_requests": failures,
    }
    ok = kept <= options.mm_leak_threshold_mib and failures == 0
    return Check(
        target.host,
        "mm_leak_probe",
        "pass" if ok else "fail",
        json.dumps(data),
        ""
        if ok
        else "memory kept after /reset_mm_cache: lower --mm-processor-cache-gb (0 disables), "
        "or gpu_memory_utilization (seed 000/002)",
        target.service,
        data,
    )
