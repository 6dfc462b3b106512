#!/usr/bin/env python3
"""`acceldeploy bench`: load and memory on a fleet's services: vLLM's benchmark, phases, verdict."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceldeploy.cli import main

sys.exit(main(["bench", *sys.argv[1:]], prog="bench.py"))
