#!/usr/bin/env python3
"""`acceldeploy lab`: local Debian lab hosts (systemd-nspawn), reachable over ssh (needs root).
The lab is its own distribution, acceldeploy-lab (lab/): installed (`make venv`), it adds the
`lab` subcommand; this checkout's tools/ and lab/ come first on the path."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceldeploy.cli import commands, main

if "lab" not in commands():  # acceldeploy alone: say what is missing, the one-line error style
    print("lab.py: error: acceldeploy-lab is not installed: pip install -e ./lab", file=sys.stderr)
    sys.exit(2)
sys.exit(main(["lab", *sys.argv[1:]], prog="lab.py"))
