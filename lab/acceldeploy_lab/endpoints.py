"""`make demo`'s last words: each lab service's endpoint and a request to try."""

from __future__ import annotations

import json
import shlex
import sys

from acceldeploy.inventory.hostvars import hosts_vars
from acceldeploy.serving.hostplan import host_launches


def main(inventory: str = "inventory/lab/hosts.yml") -> int:
    for host, variables in hosts_vars(inventory).items():
        for launch in host_launches(variables):
            url = f"http://127.0.0.1:{launch.port}"
            body = {"model": launch.name, "messages": [{"role": "user", "content": "Hello"}]}
            print(f"{launch.name} on {host}: {url}   (systemctl status {launch.name})")
            print(
                f"  curl {url}/v1/chat/completions -H 'Content-Type: application/json' "
                f"-d {shlex.quote(json.dumps(body))}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
