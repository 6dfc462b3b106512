"""``python -m acceldeploy.host.fetch check --root R org/name@rev ...``: published models against
their manifests, one JSON line each (exit 1 if any is missing or damaged). Where the repository
is installed (the controller, or a host that mounts the models' shared storage); on the hosts
themselves, ``model_weights_verify: full`` does the same through the role."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .manifest import check_published


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acceldeploy.host.fetch")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="verify published models against their manifests")
    check.add_argument("--root", type=Path, required=True)
    check.add_argument("--full", action="store_true", help="re-hash every file")
    check.add_argument("dirs", nargs="+", help="org/name@revision")
    args = parser.parse_args(argv)
    status = 0
    for dirname in args.dirs:
        local = check_published(args.root / dirname, "full" if args.full else "fast")
        ok = local.manifest is not None and not local.bad
        status |= 0 if ok else 1
        print(json.dumps({"dir": dirname, "ok": ok, "bad": local.bad, "files": len(local.good)}))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
