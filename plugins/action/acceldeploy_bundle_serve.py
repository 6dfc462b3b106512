"""Check an offline bundle (acceldeploy_bundle) against the hosts of the run, then serve it to
them for this ansible-playbook run. The check (acceldeploy.bundle.check, given `hosts` and the
`inventory` they come from) fails naming what the bundle lacks for them or what in it is
damaged, each with the fix, and re-hashes only what changed. The server is the controller's
read-only one (acceldeploy.bundle.server) bound to one address, with a
fresh token for the models (passed on stdin, never in argv), and tied to this run's
ansible-playbook process: it exits within a second of it, whether the play ends, fails or is
interrupted. Returns the URL and the path of a 0600 file holding the token, which the server
removes when it exits (read it with a lookup in a no_log task)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase

from acceldeploy.bundle import check, manifest, server
from acceldeploy.downloads import wheelhouse
from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory.hostvars import hosts_vars

START_TIMEOUT = 20.0


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/{server.NO_TAG}/", timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def bundle_errors(bundle: str, hosts: list[str], inventory: str) -> list[str]:
    """What the bundle lacks for these hosts of the inventory, or what in it is damaged."""
    directory = Path(bundle)
    if not directory.is_absolute():
        return [f"acceldeploy_bundle {bundle!r}: give the bundle directory's absolute path"]
    try:
        views = hosts_vars(inventory, ",".join(hosts))
        return check.errors(directory, views, inventory, wheelhouse.cache_dir() / manifest.HASHES)
    except AcceldeployError as exc:
        return [f"acceldeploy_bundle: {exc}"]


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        errors = bundle_errors(str(args["bundle"]), [str(h) for h in args.get("hosts") or []],
                               str(args.get("inventory") or ""))  # fmt: skip
        if errors:
            return {**result, "failed": True, "msg": "; ".join(errors)}
        bundle = Path(str(args["bundle"]))
        try:
            listen = server.check_listen(str(args.get("listen") or ""))
        except server.ServerError as exc:
            return {**result, "failed": True, "msg": f"acceldeploy_bundle_listen: {exc}"}
        port = int(args.get("port") or 8093)
        log = Path(str(args.get("request_log") or bundle.parent / f"{bundle.name}-requests.jsonl"))
        token = secrets.token_urlsafe(30)
        packages = bundle / "os"
        served = server.Served(bundle / "wheels", log, bundle / "models", listen, port, token,
                               packages if packages.is_dir() else None)  # fmt: skip
        token_file = log.with_name(f".{bundle.name}-{os.getppid()}.token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out_token:
            out_token.write(token)
        # This task runs in a worker forked from ansible-playbook: its parent is the run.
        argv = server.serve_argv(
            served, sys.executable, exit_with=os.getppid(), remove_at_exit=token_file
        )
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        err = log.with_suffix(".out")
        log.parent.mkdir(parents=True, exist_ok=True)
        with err.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        assert proc.stdin is not None
        proc.stdin.write(f"{token}\n".encode())
        proc.stdin.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                token_file.unlink(missing_ok=True)
                tail = err.read_text(errors="replace").splitlines()[-5:]
                return {
                    **result,
                    "failed": True,
                    "msg": f"the bundle server exited {proc.returncode}: {' / '.join(tail)}",
                }
            if _answers(served.url):
                result.update(
                    changed=False,
                    url=served.url,
                    token_file=str(token_file),
                    pid=proc.pid,
                    request_log=str(log),
                    lines_before=server.log_lines(log),
                )
                return result
            time.sleep(0.1)
        proc.kill()
        token_file.unlink(missing_ok=True)
        return {
            **result,
            "failed": True,
            "msg": f"the bundle server did not answer at {served.url}",
        }
