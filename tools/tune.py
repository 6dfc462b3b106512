#!/usr/bin/env python3
"""`acceldeploy tune`: tune one service's flags under a latency SLA and a memory headroom."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceldeploy.cli import main

sys.exit(main(["tune", *sys.argv[1:]], prog="tune.py"))
