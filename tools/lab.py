#!/usr/bin/env python3
"""`acceldeploy lab`: local Debian lab hosts (systemd-nspawn), reachable over ssh (needs root)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceldeploy.cli import main

sys.exit(main(["lab", *sys.argv[1:]], prog="lab.py"))
