#!/usr/bin/env python3
"""`acceldeploy verify`: check a deployed fleet: host state, every service's API, a memory probe."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceldeploy.cli import main

sys.exit(main(["verify", *sys.argv[1:]], prog="verify.py"))
